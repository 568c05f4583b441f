"""Rates of concurrent flows on a fabric, computed by SimGrid (the network layer of the phase model).

A `FlowSet` is one phase of an algorithm: flows that are active at the same
time (a ring's N sends of one step, a tree's edges, several jobs at once,
background traffic), each on the path the fabric's router gives it, each
with an optional rate cap (a host that cannot send faster, a background
load).  `solve` returns every flow's rate under max-min fair sharing.

Before SimGrid sees a flow set it is reduced exactly: a link that carries a
single flow of the set only bounds that flow, so it becomes part of the
flow's cap; a link whose flows' caps add up to no more than its bandwidth
can never be a bottleneck and is dropped; flows left without links get
their cap.  What remains, the links that are really shared, goes to
SimGrid (simulation/sgworker.py, one process per batch, in parallel).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simulation.fabric import Fabric

LOG = logging.getLogger(__name__)

BATCH_FLOWS = 20_000  # flows per SimGrid process; bigger sets get a process of their own
WORKER_TIMEOUT_S = 1800.0


class EngineError(RuntimeError):
    """SimGrid is missing or a SimGrid process failed."""


@dataclass
class FlowSet:
    """Flows active at the same time: their link paths (fabric link ids) and rate caps (bytes/s, inf = none)."""

    name: str
    paths: list[list[int]]
    caps: np.ndarray | None = None
    rates: np.ndarray | None = None  # filled by solve()
    stats: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.paths)


@dataclass
class Reduced:
    """A flow set after folding: which flows SimGrid must see, on which links, with which caps."""

    rates: np.ndarray  # final for flows that need no SimGrid
    todo: np.ndarray  # indexes of the flows SimGrid must rate
    offsets: np.ndarray
    links: np.ndarray  # compact link numbers
    caps: np.ndarray
    link_bw: np.ndarray  # fabric bandwidth of each compact link
    link_ids: np.ndarray  # fabric link id of each compact link


@functools.cache
def simgrid_available() -> str | None:
    """None when SimGrid's Python module can be imported (in a child, it starts threads), else why not."""
    probe = subprocess.run([sys.executable, "-c", "import simgrid"], capture_output=True, text=True)
    if probe.returncode:
        return (
            "SimGrid's Python bindings are not installed "
            "(Debian: apt-get install python3-simgrid; `make setup` does it)"
        )
    return None


def reduce_flowset(fs: FlowSet, link_bw: np.ndarray) -> Reduced:
    """Fold single-flow and never-saturated links into caps (exact under max-min fairness)."""
    n = len(fs.paths)
    caps = np.full(n, np.inf) if fs.caps is None else np.asarray(fs.caps, dtype=np.float64).copy()
    lengths = np.fromiter((len(p) for p in fs.paths), dtype=np.int64, count=n)
    flat = np.fromiter((x for p in fs.paths for x in p), dtype=np.int64, count=int(lengths.sum()))
    owner = np.repeat(np.arange(n), lengths)
    active = np.ones(len(flat), dtype=bool)
    size = int(flat.max()) + 1 if len(flat) else 0
    while True:
        changed = False
        uses = np.bincount(flat[active], minlength=size)
        single = active & (uses[flat] == 1)
        if single.any():
            np.minimum.at(caps, owner[single], link_bw[flat[single]])
            active &= ~single
            changed = True
        load = np.bincount(flat[active], weights=caps[owner[active]], minlength=size)
        idle = active & (load[flat] <= link_bw[flat] * (1 + 1e-12))
        if idle.any():
            active &= ~idle
            changed = True
        if not changed:
            break
    keep = np.bincount(owner[active], minlength=n) > 0
    rates = np.where(keep, np.nan, caps)
    todo = np.nonzero(keep)[0]
    used = np.unique(flat[active])
    compact = np.full(size, -1, dtype=np.int64)
    compact[used] = np.arange(len(used))
    sel = active & keep[owner]
    per = np.bincount(owner[sel], minlength=n)[todo]
    offsets = np.concatenate([[0], np.cumsum(per)])
    return Reduced(rates, todo, offsets, compact[flat[sel]], caps[todo], link_bw[used], used)


def symmetric_classes(red: Reduced) -> tuple[np.ndarray, np.ndarray]:
    """Group the flows SimGrid must rate into independent components (no shared link between them) and
    components into classes of identical ones (same paths up to renaming links, same caps and bandwidths).

    Identical components get identical max-min rates, so one of each class is enough: a phase that repeats
    the same pattern in every server or pod is solved once.  Returns (representative flow of each flow,
    whether the flow is its class's representative); positions refer to red.todo.
    """
    n = len(red.todo)
    parent = list(range(len(red.link_ids)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    off = red.offsets.tolist()
    links = red.links.tolist()
    for i in range(n):
        a = find(links[off[i]])
        for x in links[off[i] + 1 : off[i + 1]]:
            b = find(x)
            if a != b:
                parent[b] = a
    members: dict[int, list[int]] = {}
    for i in range(n):
        members.setdefault(find(links[off[i]]), []).append(i)
    rep = np.arange(n)
    is_rep = np.ones(n, dtype=bool)
    seen: dict[tuple, list[int]] = {}
    caps, bw = red.caps.tolist(), red.link_bw.tolist()
    for flows in members.values():
        names: dict[int, int] = {}
        shape = []
        for i in flows:
            path = links[off[i] : off[i + 1]]
            shape.append((tuple(names.setdefault(x, len(names)) for x in path), caps[i]))
        key = (tuple(shape), tuple(bw[x] for x in sorted(names, key=names.__getitem__)))
        first = seen.setdefault(key, flows)
        if first is not flows:
            rep[flows] = first
            is_rep[flows] = False
    return rep, is_rep


def _representatives(red: Reduced) -> tuple[Reduced, np.ndarray]:
    """The reduced flow set cut down to one component per symmetry class; and each flow's row in it."""
    rep, is_rep = symmetric_classes(red)
    keep = np.nonzero(is_rep)[0]
    row = np.full(len(rep), -1, dtype=np.int64)
    row[keep] = np.arange(len(keep))
    lengths = np.diff(red.offsets)[keep]
    starts = red.offsets[keep]
    flat = (
        np.concatenate([red.links[a : a + m] for a, m in zip(starts.tolist(), lengths.tolist())])
        if len(keep)
        else red.links[:0]
    )
    used = np.unique(flat)
    compact = np.full(len(red.link_ids), -1, dtype=np.int64)
    compact[used] = np.arange(len(used))
    sub = Reduced(
        red.rates,
        red.todo[keep],
        np.concatenate([[0], np.cumsum(lengths)]),
        compact[flat],
        red.caps[keep],
        red.link_bw[used],
        red.link_ids[used],
    )
    return sub, row[rep]


def _raise_stack() -> None:  # runs in the child before exec: SimGrid's maestro recurses deeply on big flow sets
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    want = resource.RLIM_INFINITY if hard == resource.RLIM_INFINITY else hard
    resource.setrlimit(resource.RLIMIT_STACK, (want, hard))


def _run_worker(batch: list[Reduced], tmp: Path, tag: str) -> list[np.ndarray]:
    """One SimGrid process for a batch of reduced flow sets sharing one compact link numbering."""
    ids = np.unique(np.concatenate([r.link_ids for r in batch]))
    pos = {int(x): i for i, x in enumerate(ids)}
    bw = np.zeros(len(ids))
    arrays: dict[str, np.ndarray] = {"problems": np.array(len(batch))}
    for k, r in enumerate(batch):
        remap = np.array([pos[int(x)] for x in r.link_ids], dtype=np.int64)
        bw[remap] = r.link_bw
        arrays[f"off{k}"] = r.offsets
        arrays[f"links{k}"] = remap[r.links] if len(r.links) else r.links
        arrays[f"cap{k}"] = r.caps
    arrays["link_bw"] = bw
    src, dst = tmp / f"{tag}.in.npz", tmp / f"{tag}.out.npz"
    np.savez(src, **arrays)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "simulation.sgworker", str(src), str(dst)],
        capture_output=True,
        text=True,
        preexec_fn=_raise_stack,
        timeout=WORKER_TIMEOUT_S,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    if proc.returncode or not dst.exists():
        tail = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if "->" not in ln][-6:]
        raise EngineError(
            f"SimGrid process for {sum(len(r.todo) for r in batch)} flows failed (exit {proc.returncode}): "
            + " | ".join(tail)
        )
    LOG.debug(
        "SimGrid: %d flow sets, %d flows, %d links in %.2f s",
        len(batch),
        sum(len(r.todo) for r in batch),
        len(ids),
        time.perf_counter() - t0,
    )
    with np.load(dst) as out:
        return [out[f"rate{k}"] for k in range(len(batch))]


class Engine:
    """Solves flow sets on one fabric; caches results by content, runs SimGrid processes in parallel."""

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = max(1, jobs or min(2, os.cpu_count() or 1))
        self._cache: dict[str, np.ndarray] = {}
        self.simgrid_flows = 0
        self.simgrid_processes = 0
        self.simgrid_seconds = 0.0

    @staticmethod
    def _key(fs: FlowSet, link_bw: np.ndarray) -> str:
        h = hashlib.sha1()
        for p in fs.paths:
            h.update(np.asarray(p, dtype=np.int64).tobytes())
            h.update(b"|")
        if fs.caps is not None:
            h.update(np.asarray(fs.caps, dtype=np.float64).tobytes())
        used = np.unique(np.fromiter((x for p in fs.paths for x in p), dtype=np.int64))
        h.update(link_bw[used].tobytes())
        return h.hexdigest()

    def solve(self, fabric: Fabric, flowsets: Sequence[FlowSet]) -> None:
        """Fill in `rates` of every flow set (bytes/s per flow)."""
        bw = fabric.link_bw.copy()
        if fabric.failed_links:
            bw[list(fabric.failed_links)] = 0.0  # routing avoids them; a zero here would show a bug as a zero rate
        pending: list[tuple[FlowSet, Reduced, str, np.ndarray, np.ndarray]] = []
        for fs in flowsets:
            if not fs.paths:
                fs.rates = np.zeros(0)
                continue
            key = self._key(fs, bw)
            if key in self._cache:
                fs.rates = self._cache[key].copy()
                continue
            red = reduce_flowset(fs, bw)
            if len(red.todo) == 0:
                fs.stats = {"flows": len(fs), "contended_flows": 0, "simgrid_flows": 0}
                fs.rates = red.rates
                self._cache[key] = red.rates
                continue
            sub, row = _representatives(red)
            fs.stats = {"flows": len(fs), "contended_flows": int(len(red.todo)), "simgrid_flows": int(len(sub.todo))}
            pending.append((fs, sub, key, red.todo, row))
        if not pending:
            return
        missing = simgrid_available()
        if missing:
            raise EngineError(missing)
        batches: list[list[int]] = []
        cur: list[int] = []
        load = 0
        for i, (_, red, _, _, _) in sorted(enumerate(pending), key=lambda t: len(t[1][1].todo)):
            n = len(red.todo)
            if cur and load + n > BATCH_FLOWS:
                batches.append(cur)
                cur, load = [], 0
            cur.append(i)
            load += n
        if cur:
            batches.append(cur)
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="p4ina-sim-") as tmp, ThreadPoolExecutor(self.jobs) as pool:
            futures = [
                pool.submit(_run_worker, [pending[i][1] for i in b], Path(tmp), f"b{j}") for j, b in enumerate(batches)
            ]
            for b, fut in zip(batches, futures):
                for i, rate in zip(b, fut.result()):
                    fs, red, key, todo, row = pending[i]
                    rates = red.rates.copy()
                    rates[todo] = rate[row]  # every flow gets its class representative's rate
                    fs.rates = rates
                    self._cache[key] = rates
                    self.simgrid_flows += len(red.todo)
        self.simgrid_processes += len(batches)
        self.simgrid_seconds += time.perf_counter() - t0
