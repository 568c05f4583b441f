"""The system layer: each all-reduce method, written once as phases of concurrent flows, plus its timing.

A method turns a job (its GPUs in rank order) into phases.  A phase names a
flow set (which GPU sends to which, all at the same time) and how the
algorithm repeats it: a ring's K identical steps of S/N bytes, a tree's
pipelined levels, an in-network round trip with P packets in flight.  The
network layer (SimGrid, simulation/engine.py) returns the rate of every flow
of a flow set; the functions at the bottom compose the method's time from
those rates, the paths' latencies and the preset's per-step, per-packet and
per-byte costs.  Nothing here depends on the topology: a method runs on any
fabric.

Methods (bytes S of float32 gradient per GPU):
- ring: reduce-scatter + all-gather over the ranks in topology order, 2(N-1) steps of S/N;
- ring-addr: the same in address order (the order the scheduler gave the GPUs): what reordering buys;
- ring-bf16: the ring on bf16 gradients (S/2 on the wire), as NCCL all-reduces bf16;
- hier: reduce inside each server (NVLink) or edge switch, a ring of one leader per group, broadcast back;
- hier-rail: reduce-scatter inside the group, one ring per GPU index (rail) among the groups, all-gather;
- dbtree: NCCL's double binary tree, each tree carrying S/2, reduce and broadcast pipelined in chunks;
- rd: recursive doubling (MPI's small-message all-reduce), log2 N exchanges of S (power-of-two jobs);
- inc-int32 / inc-int16 / inc-int8: in-network aggregation on the job's tree, int32 contributions,
  results narrowed by the switches to the named lanes; switches aggregate at line rate unless the preset
  gives them a per-packet cost, and the window is the job's aggregation slots;
- hier-inc: NVLink reduce-scatter, one in-network tree per GPU index carrying S/g, NVLink all-gather;
- adaptive: per message size, the fastest of the methods the model evaluated (an offload tuner).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from simulation.fabric import Fabric
from simulation.params import Preset, agg_elements, agg_frame
from simulation.placement import Job
from simulation.trees import AggTree

HOST_METHODS = ("ring", "ring-addr", "ring-bf16", "hier", "hier-rail", "dbtree", "rd")
INC_METHODS = ("inc-int32", "inc-int16", "inc-int8", "hier-inc")
METHODS = HOST_METHODS + INC_METHODS + ("adaptive",)
RESULT_LANES = {"inc-int32": "int32", "inc-int16": "int16", "inc-int8": "int8", "hier-inc": "int32"}
TREE_FLOWS_PER_HOST = 4  # a double-binary-tree rank sends (and receives) on up to 4 tree edges at once


class MethodError(ValueError):
    """A method that does not apply to a job (e.g. rd on a job that is not a power of two)."""


@dataclass
class FlowTable:
    """The flows of one flow set, for all jobs: sources, destinations, owner job, role ('up'/'down'/'')."""

    key: str
    src: list[int] = field(default_factory=list)
    dst: list[int] = field(default_factory=list)
    job: list[int] = field(default_factory=list)
    role: list[str] = field(default_factory=list)
    spans: dict[tuple[int, str], tuple[int, int]] = field(default_factory=dict)  # (job, tag) -> index range

    def add(self, job: int, tag: str, pairs: Sequence[tuple[int, int]], role: str = "") -> tuple[int, int]:
        span = self.spans.get((job, tag))
        if span is not None:
            return span  # the same job's flows for this set are already in (another method shares them)
        start = len(self.src)
        for a, b in pairs:
            self.src.append(a)
            self.dst.append(b)
            self.job.append(job)
            self.role.append(role)
        span = (start, len(self.src))
        self.spans[(job, tag)] = span
        return span


@dataclass
class Phase:
    """One phase of a method for one job; `flows` index its flow set."""

    kind: str  # "ring" | "tree" | "inc"
    flowset: str
    flows: tuple[int, int]
    steps: int  # ring: dependent steps; inc: unused (the tree knows its depth)
    share: float  # bytes per step (ring) or per tree (tree, inc) as a fraction of S
    nvlink: bool = False
    reduce: bool = False
    segments: tuple[int, ...] | None = None  # ring: sizes of the rings laid end to end in `flows` (None: one ring)
    levels: tuple[tuple[str, tuple[int, int], str, tuple[int, int]], ...] = ()  # tree: (up set, span, down set, span), deepest first
    down: tuple[int, int] | None = None  # inc: the down flows (flows = the up flows)
    tree: AggTree | None = None


@dataclass
class Plan:
    method: str
    job: Job
    phases: list[Phase]
    n: int  # ranks


# -- rank structures ----------------------------------------------------------------------------------------
def ring_pairs(ranks: Sequence[int]) -> list[tuple[int, int]]:
    n = len(ranks)
    return [(ranks[i], ranks[(i + 1) % n]) for i in range(n)] if n > 1 else []


def _top(lo: int, hi: int) -> int:
    """The number in [lo, hi] divisible by the largest power of two (the in-order tree's root of that range)."""
    for b in range(hi.bit_length(), -1, -1):
        v = (hi >> b) << b
        if v >= lo:
            return v
    return hi


def binary_tree(n: int) -> list[int]:
    """In-order binary tree over positions 0..n-1 (NCCL's layout): parent position of each, -1 at the root."""
    parent = [-1] * n
    todo = [(1, n, -1)]  # 1-based ranges
    while todo:
        lo, hi, up = todo.pop()
        if lo > hi:
            continue
        r = _top(lo, hi)
        parent[r - 1] = up - 1 if up > 0 else -1
        todo.append((lo, r - 1, r))
        todo.append((r + 1, hi, r))
    return parent


def double_binary_tree(n: int) -> tuple[list[int], list[int]]:
    """Two trees over positions 0..n-1, the second mirrored (even n) or shifted by one (odd n), so that the
    leaves of one are the inner nodes of the other (NCCL 2.4)."""
    t1 = binary_tree(n)
    if n % 2 == 0:
        m = [n - 1 - p for p in range(n)]
    else:
        m = [(p + 1) % n for p in range(n)]
    t2 = [-1] * n
    for p, q in enumerate(t1):
        t2[m[p]] = m[q] if q >= 0 else -1
    return t1, t2


def node_depths(parent: Sequence[int]) -> list[int]:
    """Links from the root to each position of a parent array (-1 marks the root)."""
    depth = [-1] * len(parent)
    for p in range(len(parent)):
        chain, x = [], p
        while depth[x] < 0 and parent[x] >= 0:
            chain.append(x)
            x = parent[x]
        if depth[x] < 0:
            depth[x] = 0
        d = depth[x]
        for y in reversed(chain):
            d += 1
            depth[y] = d
    return depth


def tree_depth(parent: Sequence[int]) -> int:
    return max(node_depths(parent))


def groups_of(fabric: Fabric, ranks: Sequence[int]) -> list[list[int]]:
    """The job's ranks grouped by server (several GPUs per server) or else by edge switch, in rank order."""
    by_server = bool((fabric.nvswitch >= 0).any())
    key = (lambda g: int(fabric.server[g])) if by_server else (lambda g: int(fabric.attach[g]))
    out: dict[int, list[int]] = {}
    for g in ranks:
        out.setdefault(key(g), []).append(g)
    return list(out.values())


# -- methods -> phases -----------------------------------------------------------------------------------------
def plan_method(method: str, fabric: Fabric, job: Job, tables: dict[str, FlowTable],
                trees: dict[str, list[AggTree]] | None = None) -> Plan:
    """The phases of `method` for `job`, its flows registered in `tables` (shared by jobs and methods)."""

    def table(key: str) -> FlowTable:
        return tables.setdefault(key, FlowTable(key))

    topo = job.topology_order(fabric)
    n = len(topo)
    j = job.index
    phases: list[Phase] = []
    if method in ("ring", "ring-addr", "ring-bf16"):
        ranks = list(job.gpus) if method == "ring-addr" else topo
        key = "ring-addr" if method == "ring-addr" else "ring"
        span = table(key).add(j, key, ring_pairs(ranks))
        share = 1.0 / n / (2 if method == "ring-bf16" else 1)
        phases = [Phase("ring", key, span, n - 1, share, reduce=True), Phase("ring", key, span, n - 1, share)]
    elif method in ("hier", "hier-rail"):
        groups = groups_of(fabric, topo)
        g = max(len(x) for x in groups)
        m = len(groups)
        nv = bool((fabric.nvswitch >= 0).any())
        intra = [p for grp in groups for p in ring_pairs(grp)]
        span_in = table("hier-intra").add(j, "intra", intra)
        seg_in = tuple(len(grp) for grp in groups if len(grp) > 1)
        if g > 1:
            phases.append(Phase("ring", "hier-intra", span_in, g - 1, 1.0 / g, nvlink=nv, reduce=True, segments=seg_in))
        if method == "hier-rail":
            members = [[grp[i] for grp in groups if len(grp) > i] for i in range(g)]
            span = table("hier-rail").add(j, "rail", [p for mem in members for p in ring_pairs(mem)])
            seg = tuple(len(mem) for mem in members if len(mem) > 1)
            if m > 1:
                phases.append(Phase("ring", "hier-rail", span, m - 1, 1.0 / (g * m), reduce=True, segments=seg))
                phases.append(Phase("ring", "hier-rail", span, m - 1, 1.0 / (g * m), segments=seg))
        else:
            gather = [(x, grp[0]) for grp in groups for x in grp[1:]]
            scatter = [(grp[0], x) for grp in groups for x in grp[1:]]
            if g > 1:
                phases.append(Phase("ring", "hier-gather", table("hier-gather").add(j, "gather", gather), 1, 1.0 / g, nvlink=nv,
                                    segments=(1,) * len(gather)))
            if m > 1:
                span = table("hier-leader").add(j, "leader", ring_pairs([grp[0] for grp in groups]))
                phases.append(Phase("ring", "hier-leader", span, m - 1, 1.0 / m, reduce=True))
                phases.append(Phase("ring", "hier-leader", span, m - 1, 1.0 / m))
            if g > 1:
                phases.append(Phase("ring", "hier-scatter", table("hier-scatter").add(j, "scatter", scatter), 1, 1.0 / g, nvlink=nv,
                                    segments=(1,) * len(scatter)))
        if g > 1:
            phases.append(Phase("ring", "hier-intra", span_in, g - 1, 1.0 / g, nvlink=nv, segments=seg_in))
    elif method == "dbtree":
        t1, t2 = double_binary_tree(n)
        pairs = []
        by_level: dict[int, list[tuple[int, int]]] = {}
        for t in (t1, t2):
            depth = node_depths(t)
            for a, b in enumerate(t):
                if b >= 0:
                    pairs.append((topo[a], topo[b]))
                    pairs.append((topo[b], topo[a]))
                    by_level.setdefault(depth[a], []).append((topo[a], topo[b]))
        span = table("dbtree").add(j, "dbtree", pairs)
        levels = []
        for lvl in sorted(by_level, reverse=True):  # the critical path: deepest level first, up, then back down
            up, dn = f"dbtree-u{lvl}", f"dbtree-d{lvl}"
            levels.append((up, table(up).add(j, up, by_level[lvl]), dn, table(dn).add(j, dn, [(b, a) for a, b in by_level[lvl]])))
        phases = [Phase("tree", "dbtree", span, len(levels), 0.5, reduce=True, levels=tuple(levels))]
    elif method == "rd":
        if n & (n - 1):
            raise MethodError(f"rd (recursive doubling) needs a power-of-two job, not {n} GPUs")
        for k in range(n.bit_length() - 1):
            key = f"rd{k}"
            pairs = [(topo[i], topo[i ^ (1 << k)]) for i in range(n)]
            phases.append(Phase("ring", key, table(key).add(j, key, pairs), 1, 1.0, reduce=True, segments=(1,) * n))
    elif method in ("inc-int32", "inc-int16", "inc-int8", "hier-inc"):
        if trees is None:
            raise MethodError(f"{method} needs aggregation trees")
        if method == "hier-inc":
            groups = groups_of(fabric, topo)
            g = max(len(x) for x in groups)
            if g == 1 or not (fabric.nvswitch >= 0).any():
                raise MethodError("hier-inc needs servers with several GPUs on NVLink (it is inc-int32 otherwise)")
            span_in = table("hier-intra").add(j, "intra", [p for grp in groups for p in ring_pairs(grp)])
            seg_in = tuple(len(grp) for grp in groups if len(grp) > 1)
            phases.append(Phase("ring", "hier-intra", span_in, g - 1, 1.0 / g, nvlink=True, reduce=True, segments=seg_in))
            for tree in trees["hier-inc"]:
                if tree.job // g == j:
                    phases.append(_inc_phase(table("hier-inc"), tree, 1.0 / g))
            phases.append(Phase("ring", "hier-intra", span_in, g - 1, 1.0 / g, nvlink=True, segments=seg_in))
        else:
            tree = next(t for t in trees["inc"] if t.job == j)
            phases = [_inc_phase(table("inc"), tree, 1.0)]
    else:
        raise MethodError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    return Plan(method, job, phases, n)


def _inc_phase(tab: FlowTable, tree: AggTree, share: float) -> Phase:
    edges = tree.edges()
    up = tab.add(tree.job, "up", edges, "up")
    down = tab.add(tree.job, "down", [(p, c) for c, p in edges], "down")
    return Phase("inc", tab.key, up, 0, share, down=down, tree=tree)


# -- timing ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Edges:
    """What the network layer says about one job's flows of one flow set: per flow, in flow order."""

    rate: np.ndarray  # bytes/s, max-min with every flow of the set active
    latency: np.ndarray  # s, the path's latency
    hops: np.ndarray  # switches on the path
    flows: int  # flows of the whole set (all jobs), for shared-CPU emulators


def _host_cap(p: Preset, flows_per_host: int) -> float:
    """Highest rate a host's per-packet cost allows one flow, in wire bytes/s."""
    if p.host_packet_cost <= 0:
        return math.inf
    return p.wire_bytes(p.mtu_payload) / (2 * flows_per_host * p.host_packet_cost)


def _emulator_cap(p: Preset, flows: int, hops: float) -> float:
    """On an emulator every host and switch shares `emulator_cores`: the CPU per frame bounds the pace."""
    if p.emulator_cores <= 0:
        return math.inf
    cpu = flows * (2 * p.host_packet_cost + hops * p.switch_forward_cost)
    return math.inf if cpu <= 0 else p.wire_bytes(p.mtu_payload) * p.emulator_cores / cpu


class _Cost:
    """Per-flow transfer costs of one phase: first(x) on a critical path, stream(x) back to back."""

    def __init__(self, p: Preset, e: Edges, nvlink: bool, reduce: bool, per_host: int) -> None:
        self.p = p
        cap = min(_host_cap(p, per_host), _emulator_cap(p, e.flows, float(e.hops.max())))
        self.rate = np.minimum(e.rate, cap)
        self.alpha = (p.nvlink_step_overhead if nvlink else p.step_overhead) + e.latency + e.hops * p.switch_forward_cost
        self.byte = p.host_byte_cost if reduce else 0.0

    def first(self, x: float) -> np.ndarray:  # the wire, then the host's pass over the data
        return self.p.wire_bytes(x) / self.rate + x * self.byte

    def stream(self, x: float, rate: float) -> float:  # many chunks back to back: wire and host overlap
        return max(self.p.wire_bytes(x) / rate, x * self.byte)


def ring_phase_time(p: Preset, steps: int, data: float, e: Edges, segments: Sequence[int] | None, nvlink: bool,
                    reduce: bool, first_phase: bool = False) -> float:
    """`steps` dependent steps of `data` bytes on every edge of one or more rings, chunks pipelined.

    A step of a rank waits for its left neighbour's previous step, so the latency chain runs around the
    ring: `steps` times the ring's mean step time (its slowest ring, if several).  The bandwidth bound is
    every step's data through the slowest edge, back to back.  The phase takes the larger of the two.
    """
    if steps <= 0 or data <= 0 or len(e.rate) == 0:
        return 0.0
    c = _Cost(p, e, nvlink, reduce, 1)
    chunk = min(float(p.pipeline_chunk), data)
    step = c.alpha + c.first(chunk)
    sizes = list(segments) if segments else [len(step)]
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    chain = max(float(step[a:b].mean()) for a, b in zip(bounds[:-1], bounds[1:]))
    slow = float(c.rate.min())
    latency_bound = steps * chain + c.stream(data, slow) - c.stream(chunk, slow)
    bandwidth_bound = steps * c.stream(data, slow) + float(c.alpha.max())
    credit = _burst_credit(p, steps * p.wire_bytes(data), slow) if first_phase else 0.0
    return max(latency_bound, bandwidth_bound) - credit


def _burst_credit(p: Preset, wire: float, rate: float) -> float:
    """Time a shaped link's full token bucket saves at the start of an all-reduce (0 on real links)."""
    return min(p.link_burst_bytes, wire) / rate if p.link_burst_bytes > 0 else 0.0


def tree_phase_time(p: Preset, data: float, all_active: Edges, levels: Sequence[tuple[Edges, Edges]], reduce: bool) -> float:
    """A pipelined tree: the first chunk climbs the levels and comes back down (each level at the rates its
    flows get on their own), then the remaining chunks follow at the pace of every flow active at once."""
    if data <= 0 or not levels:
        return 0.0
    chunk = min(float(p.pipeline_chunk), data)
    fill = 0.0
    for up, down in levels:
        for e, red in ((up, reduce), (down, False)):
            c = _Cost(p, e, False, red, TREE_FLOWS_PER_HOST)
            fill += float((c.alpha + c.first(chunk)).max())
    steady = _Cost(p, all_active, False, reduce, TREE_FLOWS_PER_HOST)
    slow = float(steady.rate.min())
    return fill + steady.stream(data, slow) - steady.stream(chunk, slow)


@dataclass(frozen=True)
class TreeMeasure:
    """An aggregation tree's flows: the slowest up and down rates, the deepest paths' latencies."""

    rate_up: float
    rate_down: float
    latency_up: float
    latency_down: float


def inc_phase_time(p: Preset, tree: AggTree, elements: float, result: str, m: TreeMeasure) -> float:
    """One in-network all-reduce: the first packet's round trip, then one packet per period.

    The period is the slowest of: the busiest up or down link, a host handling a contribution and a result,
    the busiest switch (fan-in contributions plus the result it forwards), and on an emulator all hosts and
    switches sharing the cores.  The window (`tree.window` slots) allows that many packets per round trip.
    """
    if elements <= 0:
        return 0.0
    lanes = agg_elements()
    packets = math.ceil(elements / lanes)
    f_up, f_dn = agg_frame("int32"), agg_frame(result)
    payload = min(lanes, elements) * 4  # float32 bytes of gradient a (full) packet carries: what a host converts
    host = 2 * (p.host_packet_cost + payload * p.host_byte_cost)
    per_switch = [(len(ch) + (0 if sw == tree.root else 1)) for sw, ch in tree.children.items()]
    switch = max(per_switch) * p.switch_packet_cost
    depth = tree.depth
    # a packet's round trip (what the window must cover): the hosts, the links, every switch on the way
    rtt = (host + m.latency_up + m.latency_down + (2 * depth - 1) * (p.switch_packet_cost + p.switch_agg_latency)
           + f_up / m.rate_up + f_dn / m.rate_down)
    emu = 0.0
    if p.emulator_cores > 0:
        emu = (len(tree.gpus) * 2 * p.host_packet_cost + sum(per_switch) * p.switch_packet_cost) / p.emulator_cores
    period = max(f_up / m.rate_up, f_dn / m.rate_down, host, switch, emu)
    w = max(1, tree.window)
    rounds = math.ceil(packets / w) - 1  # full windows that must come back before the last one can go
    last = packets - rounds * w
    credit = _burst_credit(p, (packets - 1) * f_up, m.rate_up)
    return p.step_overhead + rounds * max(rtt, w * period) + rtt + (last - 1) * period - credit
