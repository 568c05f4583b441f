"""One simulated situation (a Scenario) and its evaluation: fabric, jobs, trees, flows, SimGrid, times.

A Scenario is the workload and the cluster: a topology spec, how many jobs of
how many GPUs, their placement, background load, failures, the preset, the
methods and message sizes.  `evaluate` builds the fabric, places the jobs,
plans the aggregation trees, lets every method register its phases' flows,
routes them, has SimGrid rate every flow set once (all jobs at the same
time: jobs that share switches slow each other down), and composes each
method's time for every message size from those rates.  Rates do not depend
on the message size, so a sweep over sizes costs one network solve.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from simulation import nccl, topologies
from simulation.alltoall import a2a_phase_time
from simulation.engine import Engine, FlowSet
from simulation.fabric import Fabric, FabricError
from simulation.methods import (
    A2A_METHODS,
    LANES,
    METHODS,
    NCCL_METHODS,
    Edges,
    FlowTable,
    MethodError,
    Phase,
    Plan,
    Stage,
    TreeMeasure,
    canonical,
    flow_port,
    groups_of,
    inc_phase_time,
    pipe_phase_time,
    plan_method,
    ring_phase_time,
    tree_phase_time,
)
from simulation.params import IncFrames, Preset, agg_elements, get_preset
from simulation.placement import POLICIES, Job, place
from simulation.trees import AggTree, assign_windows, plan_trees

LOG = logging.getLogger(__name__)


# Methods that differ only in what they put on the wire: when two of them take the same time (within
# EQUAL_TIMES), something other than the bytes set it, and the report says what (Evaluation.equal_times).
WIRE_VARIANTS = (("inc-int32", "inc-int16", "inc-int8"), ("ring-1nic", "ring-1nic-bf16"))
EQUAL_TIMES = 0.01
ELEMENT = 4  # bytes of one float32: an all-reduce whose time is all fixed costs


class ScenarioError(ValueError):
    """A scenario that cannot be simulated; the message names the field."""


@dataclass(frozen=True)
class Scenario:
    topology: str = "fat-tree:4"
    gpus: int | None = None  # GPUs per job (default: the whole controller topology / required for scale builders)
    jobs: int = 1
    cluster_gpus: int | None = None  # size the fabric for this many GPUs (default: jobs x gpus)
    placement: str = "contiguous"
    background: float = 0.0  # every GPU also sends one flow to a random GPU at this share of its NIC rate
    fail: tuple[str, ...] = ()  # "switch:NAME", "link:A-B", "tree-root", "tree-link"
    preset: str = "emulation"
    overrides: tuple[tuple[str, float], ...] = ()  # preset parameters replaced, e.g. (("switch_latency", 1.3e-6),)
    methods: tuple[str, ...] = ("ring-1nic", "tree-1nic", "inc-int32")
    sizes: tuple[int, ...] = (4096, 65536, 1 << 20)  # bytes of float32 gradient per GPU
    seed: int = 0
    label: str = ""

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise ScenarioError(f"jobs must be >= 1, got {self.jobs}")
        if self.placement not in POLICIES:
            raise ScenarioError(f"placement {self.placement!r}: choose from {', '.join(POLICIES)}")
        if not 0 <= self.background < 1:
            raise ScenarioError(f"background load {self.background} must be in [0, 1)")
        object.__setattr__(self, "methods", tuple(canonical(m) for m in self.methods))
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ScenarioError(f"methods {bad or '(none)'}: choose from {', '.join(METHODS)}")
        if not self.sizes or any(s < 4 for s in self.sizes):
            raise ScenarioError(f"sizes {self.sizes}: each must be >= 4 bytes (one float32)")
        if self.gpus is not None and self.gpus < 2:
            raise ScenarioError(f"a job needs >= 2 GPUs, got {self.gpus}")
        for f in self.fail:
            kind = f.partition(":")[0]
            if kind not in ("switch", "link", "tree-root", "tree-link"):
                raise ScenarioError(f"failure {f!r}: use switch:NAME, link:A-B, tree-root or tree-link")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Row:
    """One method's time for one job and message size."""

    label: str
    topology: str
    fabric: str
    gpus: int
    jobs: int
    job: int
    placement: str
    background: float
    failures: str
    method: str
    size: int
    time_s: float
    algbw: float  # bytes/s: S / time
    busbw: float  # algbw x 2(N-1)/N (nccl-tests' bus bandwidth; an all-to-all's: x (N-1)/N)
    choice: str = ""  # adaptive: the method it picked

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Outcome:
    scenario: Scenario
    rows: list[Row]
    fabric: dict[str, Any]
    skipped: dict[str, str] = field(default_factory=dict)  # method -> why it did not apply
    trees: list[dict[str, Any]] = field(default_factory=list)
    flowsets: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds: float = 0.0
    # methods that move different bytes but take the same time (Evaluation.equal_times): what set it instead
    notes: list[dict[str, Any]] = field(default_factory=list)


def _fail(fabric: Fabric, specs: Sequence[str], jobs: Sequence[Job], preset: Preset) -> Fabric:
    links: list[tuple[int, int]] = []
    nodes: list[int] = []
    for spec in specs:
        kind, _, arg = spec.partition(":")
        if kind in ("tree-root", "tree-link"):
            tree = plan_trees(fabric, jobs[:1], slots=preset.inc_slots)[0]
            if kind == "tree-root":
                nodes.append(tree.root)
            else:
                child = min(c for c in tree.children[tree.root])
                links.append((child, tree.root))
            continue
        try:
            if kind == "switch":
                nodes.append(fabric.node(arg))
            else:
                a, sep, b = arg.partition("-")
                if not sep:
                    raise ScenarioError(f"failure {spec!r}: want link:A-B")
                links.append((fabric.node(a), fabric.node(b)))
        except FabricError as ex:
            raise ScenarioError(f"failure {spec!r}: {ex}") from ex
    return fabric.fail(links=links, nodes=nodes)


def _tree_measure(
    fabric: Fabric, tree: AggTree, up: np.ndarray, down: np.ndarray, edges: Sequence[tuple[int, int]]
) -> TreeMeasure:
    """The tree's slowest edges of each kind (`up`/`down`: rates of the up/down flows, in `edges` order)."""
    lat = fabric.link_lat
    up_lat: dict[int, float] = {tree.root: 0.0}
    dn_lat: dict[int, float] = {tree.root: 0.0}

    def walk(x: int) -> None:
        chain = []
        while x not in up_lat:
            chain.append(x)
            x = tree.parent[x]
        for y in reversed(chain):
            p = tree.parent[y]
            up_lat[y] = up_lat[p] + float(lat[fabric.link(y, p)])
            dn_lat[y] = dn_lat[p] + float(lat[fabric.link(p, y)])

    for g in tree.gpus:
        walk(g)
    members = set(tree.gpus)
    from_host = np.array([c in members for c, _p in edges], dtype=bool)
    host_up = float(up[from_host].min()) if from_host.any() else math.inf
    switch_up = float(up[~from_host].min()) if (~from_host).any() else math.inf
    return TreeMeasure(
        rate_host_up=host_up,
        rate_switch_up=switch_up,
        rate_down=float(down.min()),
        latency_up=max(up_lat[g] for g in tree.gpus),
        latency_down=max(dn_lat[g] for g in tree.gpus),
    )


class Evaluation:
    """Everything evaluate() built, kept for inspection (notebook, tests)."""

    def __init__(
        self,
        scenario: Scenario,
        preset: Preset | None = None,
        engine: Engine | None = None,
        fabric: Fabric | None = None,
        jobs: Sequence[Job] | None = None,
    ) -> None:
        """`fabric` and `jobs`, when given, replace the scenario's topology and placement: the workload layer
        (simulation.workload) builds a cluster once and hands each parallel dimension's groups in as jobs."""
        self.scenario = scenario
        self.preset = preset or get_preset(scenario.preset)
        if scenario.overrides:
            self.preset = self.preset.with_(**dict(scenario.overrides))
        self.engine = engine or Engine()
        s = scenario
        self.base = fabric or topologies.build(
            s.topology, self.preset, s.cluster_gpus or (s.gpus * s.jobs if s.gpus else None)
        )
        if jobs is not None:
            self.jobs = list(jobs)
        else:
            per_job = s.gpus or self.base.n_gpus // s.jobs
            if per_job < 2:
                raise ScenarioError(f"{s.jobs} jobs on {self.base.n_gpus} GPUs leave fewer than 2 per job")
            try:
                self.jobs = place(self.base, [per_job] * s.jobs, s.placement, s.seed)
            except ValueError as ex:
                raise ScenarioError(str(ex)) from ex
        self.fabric = _fail(self.base, s.fail, self.jobs, self.preset) if s.fail else self.base
        self.trees: dict[str, list[AggTree]] = {}
        self.skipped: dict[str, str] = {}
        self.tables: dict[str, FlowTable] = {}
        self.plans: list[Plan] = []
        self.flowsets: dict[str, FlowSet] = {}
        self._edges: dict[tuple[str, tuple[int, int]], Edges] = {}
        self._measures: dict[tuple[str, tuple[int, int], tuple[int, int] | None], TreeMeasure] = {}
        self.nccl_server: nccl.Server | None = None

    def _plan_trees(self) -> None:
        s, p = self.scenario, self.preset
        if any(m in ("inc-int32", "inc-int16", "inc-int8") for m in s.methods):
            self.trees["inc"] = plan_trees(self.fabric, self.jobs, slots=p.inc_slots)
            assign_windows(self.trees["inc"], p.inc_slots, p.switch_slots)
        if "hier-inc" in s.methods and (self.fabric.nvswitch >= 0).any():
            subjobs = []
            for job in self.jobs:
                groups = groups_of(self.fabric, job.topology_order(self.fabric))
                g = max(len(x) for x in groups)
                subjobs += [Job(job.index * g + i, tuple(grp[i] for grp in groups if len(grp) > i)) for i in range(g)]
            self.trees["hier-inc"] = plan_trees(self.fabric, subjobs, slots=p.inc_slots)
            assign_windows(self.trees["hier-inc"], p.inc_slots, p.switch_slots)

    def build(self) -> None:
        self._plan_trees()
        for method in self.scenario.methods:
            if method in NCCL_METHODS:
                try:
                    self.nccl_server = nccl.Server.of_preset(self.preset)
                except nccl.NcclError as ex:
                    self.skipped[method] = str(ex)
                continue
            if method == "adaptive":
                continue
            try:
                for job in self.jobs:
                    self.plans.append(plan_method(method, self.fabric, job, self.tables, self.trees))
            except MethodError as ex:
                self.skipped[method] = str(ex)
                self.plans = [pl for pl in self.plans if pl.method != method]
        f = self.fabric
        bg_pairs: list[tuple[int, int]] = []
        caps_bg: list[float] = []
        if self.scenario.background > 0:
            perm = np.random.default_rng(self.scenario.seed + 1).permutation(f.n_gpus)
            bg_pairs = [(g, int(perm[g])) for g in range(f.n_gpus) if perm[g] != g and f.server[g] != f.server[perm[g]]]
            caps_bg = [self.scenario.background * self.preset.nic_bw] * len(bg_pairs)
        bg_paths = [f.links_of(f.path(a, b, 7)) for a, b in bg_pairs]
        for key, tab in self.tables.items():
            adjacent = key in ("inc", "hier-inc")  # tree edges join neighbours: no routing
            port = flow_port(key)
            paths = [
                f.links_of([a, b]) if adjacent else f.links_of(f.path(a, b, port)) for a, b in zip(tab.src, tab.dst)
            ]
            caps = np.concatenate([np.full(len(paths), np.inf), np.array(caps_bg)])
            self.flowsets[key] = FlowSet(key, paths + bg_paths, caps)

    def solve(self) -> None:
        self.engine.solve(self.fabric, list(self.flowsets.values()))

    def edges(self, flowset: str, span: tuple[int, int]) -> Edges:
        """Rates, latencies and switch hops of flows span[0]..span[1]-1 of a flow set."""
        key = (flowset, span)
        if key not in self._edges:
            fs = self.flowsets[flowset]
            assert fs.rates is not None
            a, b = span
            lat = self.fabric.link_lat
            paths = fs.paths[a:b]
            bw = self.fabric.link_bw
            self._edges[key] = Edges(
                rate=fs.rates[a:b],
                latency=np.array([float(lat[p].sum()) for p in paths]),
                hops=np.array([len(p) - 1 for p in paths]),
                flows=len(self.tables[flowset].src),
                link_rate=np.array([float(bw[p].min()) if len(p) else math.inf for p in paths]),
            )
        return self._edges[key]

    def _measure(self, ph: Phase) -> TreeMeasure:
        """An in-network phase's tree, measured once (it does not depend on the size)."""
        key = (ph.flowset, ph.flows, ph.down)
        if key not in self._measures:
            assert ph.down is not None and ph.tree is not None
            fs = self.flowsets[ph.flowset]
            assert fs.rates is not None
            self._measures[key] = _tree_measure(
                self.fabric,
                ph.tree,
                fs.rates[ph.flows[0] : ph.flows[1]],
                fs.rates[ph.down[0] : ph.down[1]],
                ph.tree.edges(),
            )
        return self._measures[key]

    def phase_time(
        self,
        method: str,
        ph: Phase,
        size: int,
        first: bool = False,
        credit: float = 0.0,
        why: dict[str, Any] | None = None,
    ) -> float:
        p = self.preset
        data = size * ph.share
        if ph.kind == "inc":
            assert ph.tree is not None
            frames = IncFrames.of(LANES[method], len(ph.tree.gpus), ph.tree.balanced)
            return inc_phase_time(p, ph.tree, data / 4, frames, self._measure(ph), why)
        if ph.kind == "pipe":
            return self._pipe_time(ph, size, first)
        if ph.kind == "tree":
            levels = [(self.edges(u, us), self.edges(d, ds)) for u, us, d, ds in ph.levels]
            return tree_phase_time(p, data, self.edges(ph.flowset, ph.flows), levels, ph.reduce)
        return ring_phase_time(
            p, ph.steps, data, self.edges(ph.flowset, ph.flows), ph.segments, ph.nvlink, ph.reduce, credit
        )

    def _pipe_time(self, ph: Phase, size: int, first: bool) -> float:
        """A pipelined phase: its stages' flows of every job at once; the busiest link's bytes set the pace."""
        p, f = self.preset, self.fabric
        load = np.zeros(len(f.link_bw))
        free = f.link_bw.astype(np.float64).copy()
        frames_at = np.zeros(f.n_nodes)
        stages: list[Stage] = []
        emu = 0.0
        seen: set[str] = set()
        for key, span, share, steps, nvlink, reduce in ph.stages:
            fs, tab = self.flowsets[key], self.tables[key]
            assert fs.rates is not None
            data = size * share
            stages.append(Stage(self.edges(key, span), data, steps, nvlink, reduce))
            if key in seen:
                continue
            seen.add(key)
            mine = len(tab.src)
            rates = fs.rates[:mine]
            wire = steps * np.asarray(p.wire_bytes(data, rates), dtype=np.float64) * np.ones(mine)
            for i, path in enumerate(fs.paths[:mine]):
                load[path] += wire[i]
            for i, path in enumerate(fs.paths[mine:]):  # background traffic takes its share first
                if key == ph.stages[0][0]:
                    free[path] -= fs.rates[mine + i]
            frames = steps * p.frames(data)
            np.add.at(frames_at, np.asarray(tab.src), frames)
            np.add.at(frames_at, np.asarray(tab.dst), frames)
            if p.emulator_cores > 0:
                hops = np.array([len(x) - 1 for x in fs.paths[:mine]], dtype=np.float64)
                emu += (
                    float((frames * (2 * p.host_packet_cost + hops * p.switch_forward_cost)).sum()) / p.emulator_cores
                )
        free = np.maximum(free, f.link_bw * 1e-6)
        busy = load / free
        k = int(np.argmax(busy))
        busiest = float(busy[k])
        cpu = max(float(frames_at.max()) * p.host_packet_cost, emu)
        timing = a2a_phase_time if ph.flowset in A2A_METHODS else pipe_phase_time  # an all-to-all's flows wait on none
        return timing(p, stages, busiest, float(load[k]), float(free[k]), cpu, first)

    def link_bytes(self, plan: Plan, size: int) -> np.ndarray:
        """Bytes every link carries in one all-reduce of `size` bytes by `plan` (its job's flows only): frames,
        headers, acks and exponent rounds, what the emulation's interface counters measure (T_wire)."""
        p, f = self.preset, self.fabric
        load = np.zeros(len(f.link_bw))

        def add(key: str, span: tuple[int, int], nbytes: Any) -> None:
            fs = self.flowsets[key]
            per = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), (span[1] - span[0],))
            for i, b in zip(range(*span), per):
                load[fs.paths[i]] += b

        for ph in plan.phases:
            if ph.kind == "inc":
                assert ph.tree is not None and ph.down is not None
                tree = ph.tree
                fr = IncFrames.of(LANES[plan.method], len(tree.gpus), tree.balanced)
                packets = math.ceil(size * ph.share / 4 / agg_elements())
                slots = p.exponent_slots(packets, tree.window, fr.lanes)
                members = set(tree.gpus)
                up = [
                    slots * fr.exponent + packets * (fr.host_up if c in members else fr.switch_up)
                    for c, _ in tree.edges()
                ]
                add(ph.flowset, ph.flows, up)
                add(ph.flowset, ph.down, slots * fr.exponent + packets * fr.down)
                continue
            stages = ph.stages or ((ph.flowset, ph.flows, ph.share, ph.steps, ph.nvlink, ph.reduce),)
            for key, span, share, steps, _nv, _red in stages:
                rates = self.flowsets[key].rates
                assert rates is not None
                steps = 1 if ph.kind == "tree" else steps
                add(
                    key,
                    span,
                    steps * np.asarray(p.wire_bytes(size * share, rates[span[0] : span[1]]), dtype=np.float64),
                )
        return load

    def times(self, plan: Plan, size: int) -> float:
        total = 0.0
        parallel: list[float] = []  # the trees of hier-inc run side by side and end together
        credit = self.preset.credit_bytes(self.preset.host_frame)  # a shaped link's token bucket, full at the start
        for i, ph in enumerate(plan.phases):
            t = self.phase_time(plan.method, ph, size, first=i == 0, credit=credit)
            if ph.kind == "ring" and credit > 0:  # the same edges in every ring phase: what is left carries over
                e = self.edges(ph.flowset, ph.flows)
                credit -= min(credit, ph.steps * float(self.preset.wire_bytes(size * ph.share, float(e.rate.min()))))
            if ph.kind == "inc":
                parallel.append(t)
                continue
            if parallel:
                total += max(parallel)
                parallel = []
            total += t
        p = self.preset
        ranks = max(0.0, plan.n - p.emulator_cores) if p.emulator_cores > 0 else plan.n  # those queueing for a core
        return total + (max(parallel) if parallel else 0.0) + ranks * p.barrier_cost + p.start_cost

    def rows(self) -> list[Row]:
        s = self.scenario
        out: list[Row] = []
        fails = ",".join(s.fail)
        best: dict[tuple[int, int], tuple[float, str]] = {}
        for plan in self.plans:
            n = plan.n
            for size in s.sizes:
                t = self.times(plan, size)
                out.append(self._row(plan.method, plan.job.index, n, size, t, fails))
                key = (plan.job.index, size)
                if plan.method not in ("ring-addr", *A2A_METHODS) and (key not in best or t < best[key][0]):
                    best[key] = (t, plan.method)
        for method in (m for m in s.methods if m in NCCL_METHODS and m not in self.skipped):
            for job in self.jobs:
                for size in s.sizes:
                    r = self.nccl_time(method, job, size)
                    row = self._row(method, job.index, job.size, size, r.time_s, fails)
                    row.choice = r.choice
                    out.append(row)
                    key = (job.index, size)
                    if key not in best or r.time_s < best[key][0]:
                        best[key] = (r.time_s, method)
        if "adaptive" in s.methods:
            for (job, size), (t, choice) in sorted(best.items()):
                row = self._row("adaptive", job, self.jobs[job].size, size, t, fails)
                row.choice = choice
                out.append(row)
        return out

    def nccl_time(self, method: str, job: Job, size: int) -> nccl.CollectiveTime:
        """NCCL's all-reduce of `size` bytes for a job: its servers and GPUs a server, the preset's links."""
        assert self.nccl_server is not None
        groups = groups_of(self.fabric, job.topology_order(self.fabric))
        g = max(len(x) for x in groups)
        return nccl.nccl_collective("all-reduce", self.nccl_server, len(groups), size, method, g)

    def equal_times(self, rows: Sequence[Row]) -> list[dict[str, Any]]:
        """Methods that put different bytes on the wire (inc-int32/16/8; ring and ring-bf16) but take the same time
        (within EQUAL_TIMES) for the first job: which they are, and what set their time instead of the bytes."""
        t = {(r.method, r.size): r.time_s for r in rows if r.job == 0}
        plans = {pl.method: pl for pl in self.plans if pl.job.index == 0}
        out: list[dict[str, Any]] = []
        for group in WIRE_VARIANTS:
            present = [m for m in group if m in plans]
            for size in self.scenario.sizes:
                timed = sorted((t[(m, size)], m) for m in present if (m, size) in t)
                clusters: list[list[tuple[float, str]]] = []
                for tm in timed:
                    if clusters and tm[0] <= clusters[-1][0][0] * (1 + EQUAL_TIMES):
                        clusters[-1].append(tm)
                    else:
                        clusters.append([tm])
                for c in clusters:
                    if len(c) > 1:
                        methods = [m for m in group if m in {x[1] for x in c}]
                        out.append(self._why_equal(methods, size, {m: tm for tm, m in c}, plans))
        return out

    def _why_equal(
        self, methods: Sequence[str], size: int, times: dict[str, float], plans: dict[str, Plan]
    ) -> dict[str, Any]:
        note: dict[str, Any] = {
            "label": self.scenario.label,
            "topology": self.scenario.topology,
            "gpus": plans[methods[0]].n,
            "size": size,
            "methods": list(methods),
            "times_s": [times[m] for m in methods],
        }
        if methods[0] in LANES:  # in-network: what inc_phase_time says bound each
            limits, frames = {}, {}
            for m in methods:
                ph = next(x for x in plans[m].phases if x.kind == "inc")
                assert ph.tree is not None
                why: dict[str, Any] = {}
                self.phase_time(m, ph, size, why=why)
                limits[m] = why
                frames[m] = IncFrames.of(LANES[m], len(ph.tree.gpus), ph.tree.balanced)
            note["host_frame_bytes"] = [frames[m].host_up for m in methods]
            kinds = {w["limit"] for w in limits.values()}
            limit = kinds.pop() if len(kinds) == 1 else "mixed"
            note["limit"] = limit
            first = frames[methods[0]]
            if limit == "link:switch-up" and len({frames[m].switch_up for m in methods}) == 1:
                tree = next(x for x in plans[methods[0]].phases if x.kind == "inc").tree
                assert tree is not None
                shape = (
                    "the job's tree is unbalanced (its members are not all at one depth), so its partial sums "
                    "cannot be shifted level by level and stay as wide as the sum of "
                    f"{len(tree.gpus)} contributions needs"
                    if not tree.balanced
                    else "their partial sums are as wide"
                )
                note["why"] = (
                    "the busiest links are between switches, where every one of them sends "
                    f"{first.partial} partial sums in {first.switch_up}-byte frames: {shape}"
                )
            elif limit in ("hosts", "switch", "emulator"):
                who = {"hosts": "the hosts'", "switch": "the busiest switch's", "emulator": "the emulator's shared"}
                note["why"] = (
                    f"{who[limit]} per-packet work sets the pace, and every lane width sends the same packets "
                    f"({agg_elements()} elements each)"
                )
            elif limit == "window":
                w = limits[methods[0]]
                note["why"] = (
                    f"the window's round trips set the time ({w['rounds']} data round(s) of "
                    f"{w['rtt_s'] * 1e6:.3g} us), not the bytes"
                )
            else:
                note["why"] = "the bytes are not what binds: " + ", ".join(
                    f"{m} is bound by {limits[m]['limit']}" for m in methods
                )
            return note
        # host methods: how much of the time does not depend on the bytes (the same all-reduce of one element)
        fixed = {m: self.times(plans[m], ELEMENT) for m in methods}
        share = min(fixed[m] / times[m] for m in methods)
        steps = sum(ph.steps for ph in plans[methods[0]].phases if ph.kind == "ring")
        note["host_frame_bytes"] = [None for _ in methods]
        note["limit"] = "latency" if share >= 0.9 else "other"
        note["why"] = (
            f"per-step latency sets the time: {steps} dependent steps take {fixed[methods[0]] * 1e3:.3g} ms for a "
            f"single element ({share * 100:.0f}% of it), the same for every data type"
            if share >= 0.9
            else f"the bytes are not what binds ({share * 100:.0f}% of the time is there for a single element)"
        )
        return note

    def _row(self, method: str, job: int, n: int, size: int, t: float, fails: str) -> Row:
        s = self.scenario
        algbw = size / t if t > 0 else math.inf
        return Row(
            s.label,
            s.topology,
            self.fabric.name,
            n,
            s.jobs,
            job,
            s.placement,
            s.background,
            fails,
            method,
            size,
            t,
            algbw,
            algbw * ((n - 1) / n if method in A2A_METHODS else 2 * (n - 1) / n),  # nccl-tests' alltoall: (n-1)/n
        )


def evaluate(scenario: Scenario, engine: Engine | None = None, preset: Preset | None = None) -> Outcome:
    t0 = time.perf_counter()
    ev = Evaluation(scenario, preset, engine)
    ev.build()
    ev.solve()
    rows = ev.rows()
    trees = [
        {
            "method": k,
            "job": t.job,
            "root": ev.fabric.name_of(t.root),
            "depth": t.depth,
            "switches": len(t.switches),
            "max_fan_in": t.max_fan_in,
            "window": t.window,
            "planner": t.planner,
        }
        for k, ts in ev.trees.items()
        for t in ts[:4]
    ]
    stats = {k: fs.stats for k, fs in ev.flowsets.items()}
    notes = ev.equal_times(rows)
    return Outcome(scenario, rows, ev.fabric.describe(), ev.skipped, trees, stats, time.perf_counter() - t0, notes)
