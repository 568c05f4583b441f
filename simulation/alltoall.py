"""All-to-all in the phase model: the emulation's a2a-direct and a2a-hier (hosts/alltoall.py) as flows.

Same names, same semantics and wire format as the hosts layer: a job of n ranks, every rank holding S bytes
cut into n blocks, block d for rank d, moved over hosts.reliable's MTU-sized datagrams.

- a2a-direct: one pipelined phase of n(n-1) flows, every ordered pair at once, S/n each. On a server with
  an NVSwitch, the pairs inside it go over NVLink (the fabric routes them there).
- a2a-hier: one pipelined phase of two stages that run at once, chunk by chunk (as the hosts layer sends a
  phase-2 frame as soon as its phase-1 data is in): inside the group (the server over NVLink, or else the
  edge switch), every ordered pair, S/g each (the G blocks for the peer's rail); then along the rails,
  rank (a, j) to (b, j) for every other group b, S/G each (the g blocks of its group for that rank).

`phases` turns a method into those phases (simulation.methods.plan_method calls it); the rest of the model
(rates from SimGrid, the pipelined phase's timing on the busiest link, link loads) is the all-reduces'.
`link_loads` and `summarise_loads` say where the bytes go on a fabric (the busiest link, and per tier),
which is how docs/simulation.md answers whether Dragonfly+ suits all-to-all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hosts.methods import METHODS as EMULATED
from simulation.fabric import GPU_TIER, NVSWITCH_TIER, Fabric

A2A_METHODS = tuple(name for name, m in EMULATED.items() if m.alltoall)
# flow set -> the emulation's method whose UDP port it uses (the ECMP hash's salt; hosts.agent.HOST_METHOD_PORTS)
FLOWSET_METHOD = {"a2a-direct": "a2a-direct", "a2a-group": "a2a-hier", "a2a-rail": "a2a-hier"}


def rails(groups: Sequence[Sequence[int]]) -> list[list[int]]:
    """rails[j] = the j-th rank of every group (groups of unequal size leave some rails short)."""
    width = max(len(x) for x in groups)
    return [[grp[j] for grp in groups if len(grp) > j] for j in range(width)]


def phases(
    method: str,
    ranks: Sequence[int],
    groups: Sequence[Sequence[int]],
    nvlink: bool,
    add: Callable[[str, str, list[tuple[int, int]]], tuple[int, int]],
    phase: Callable[..., Any],
    error: type[Exception],
) -> list[Any]:
    """The phases of an all-to-all: `add(flowset, tag, pairs)` registers flows and returns their span,
    `phase(**fields)` makes a simulation.methods.Phase (passed in: this module sits below methods.py)."""
    n = len(ranks)
    if method == "a2a-direct":
        pairs = [(a, b) for a in ranks for b in ranks if a != b]
        stage = ("a2a-direct", add("a2a-direct", "direct", pairs), 1.0 / n, 1, False, False)
        return [phase(kind="pipe", flowset="a2a-direct", flows=(0, 0), steps=0, share=1.0, stages=(stage,))]
    if method != "a2a-hier":
        raise error(f"unknown all-to-all {method!r}; choose from {', '.join(A2A_METHODS)}")
    sizes = sorted({len(x) for x in groups})
    if len(sizes) > 1:
        raise error(f"a2a-hier needs groups of one size (every rail a rank in every group), got sizes {sizes}")
    g, big = sizes[0], len(groups)
    stages = []
    if g > 1:
        inside = [(a, b) for grp in groups for a in grp for b in grp if a != b]
        stages.append(("a2a-group", add("a2a-group", "group", inside), 1.0 / g, 1, nvlink, False))
    if big > 1:
        along = [(a, b) for rail in rails(groups) for a in rail for b in rail if a != b]
        stages.append(("a2a-rail", add("a2a-rail", "rail", along), 1.0 / big, 1, False, False))
    return [phase(kind="pipe", flowset="a2a-hier", flows=(0, 0), steps=0, share=1.0, stages=tuple(stages))]


# -- timing ------------------------------------------------------------------------------------------------------
def a2a_phase_time(
    p: Any,
    stages: Sequence[Any],
    busiest_s: float,
    busiest_bytes: float,
    busiest_rate: float,
    cpu_s: float,
    first_phase: bool = False,
) -> float:
    """An all-to-all's one pipelined phase (simulation.model's `_pipe_time` gives the loads, as for hier).

    Every flow starts at once and no flow waits on another's steps (unlike a ring's stages): the bytes on the
    busiest link at its rate set the pace, and no flow ends before its own data passed at its max-min rate
    (a flow sharing a busier link than its neighbours'). A frame of a later stage (a2a-hier's rails) leaves as
    soon as its earlier stage's frame is in, so the pipeline fills with one frame per stage: each stage's
    per-step latency (software, path, switches) and a frame's serialization. `cpu_s`: the busiest host's (or
    the emulator's) per-packet work. On shaped links the busiest link's credit passes at once."""
    from simulation.methods import _burst_credit, _Cost

    if not stages or busiest_s <= 0:
        return 0.0
    fill = 0.0
    slowest = 0.0
    for st in stages:
        if st.data <= 0 or len(st.edges.rate) == 0:
            continue
        c = _Cost(p, st.edges, st.nvlink, st.reduce, 1)
        frame = min(float(p.mtu_payload), st.data)
        link = st.edges.link_rate if st.edges.link_rate is not None else c.rate  # a frame goes at the link's rate
        # on a shaped link with a full bucket a lone frame passes at once (as simulation.methods._Cost.first)
        serial = max(float(p.wire_bytes(frame)) - p.credit_bytes(p.host_frame), 0.0)
        fill += float((c.alpha + serial / link).max())
        slowest = max(slowest, float((np.asarray(p.wire_bytes(st.data, c.rate), dtype=np.float64) / c.rate).max()))
    credit = _burst_credit(p, busiest_bytes, busiest_rate) if first_phase else 0.0
    return max(busiest_s, slowest, cpu_s) - credit + fill


# -- where the bytes go ------------------------------------------------------------------------------------------
def link_kind(fabric: Fabric, link: int) -> str:
    """What a directed link joins: 'nvlink', 'nic' (GPU <-> first switch), 'global' (Dragonfly+: spines of two
    groups), or 'tier a-b' between switch tiers (0 = leaves)."""
    a, b = int(fabric.link_src[link]), int(fabric.link_dst[link])
    ta, tb = int(fabric.tiers[a]), int(fabric.tiers[b])
    if NVSWITCH_TIER in (ta, tb):
        return "nvlink"
    if GPU_TIER in (ta, tb):
        return "nic"
    if fabric.kind == "dragonfly+" and ta == tb == 1:
        return "global"
    lo, hi = sorted((ta, tb))
    return f"tier {lo}-{hi}"


def summarise_loads(fabric: Fabric, load: np.ndarray, per_gpu_bytes: float) -> dict[str, Any]:
    """The busiest link (its bytes over S, its kind) and, per kind of link, the max and mean of the links that
    carry anything, over S; `per_gpu_bytes` = S. The time a link needs is its bytes over its rate, so the
    busiest link is also reported in S per link rate (`busiest_over_rate_s`: seconds per byte of S)."""
    kinds = np.array([link_kind(fabric, i) for i in range(len(load))])
    rate = fabric.link_bw
    busy = load / rate
    k = int(np.argmax(busy))
    out: dict[str, Any] = {
        "busiest_kind": str(kinds[k]),
        "busiest_bytes_over_S": float(load[k] / per_gpu_bytes),
        "busiest_s": float(busy[k]),
        "kinds": {},
    }
    for kind in sorted(set(kinds.tolist())):
        sel = (kinds == kind) & (load > 0)
        allk = kinds == kind
        out["kinds"][kind] = {
            "links": int(allk.sum()),
            "used": int(sel.sum()),
            "max_over_S": float(load[allk].max() / per_gpu_bytes) if allk.any() else 0.0,
            "mean_used_over_S": float(load[sel].mean() / per_gpu_bytes) if sel.any() else 0.0,
        }
    return out
