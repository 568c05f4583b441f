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

Methods (bytes S of float32 gradient per GPU).  The emulation's methods are hosts.methods.METHODS, taken from
there with their semantics and lanes (not a copy): inc-int32, inc-int16, inc-int8, hier under their names, and
the emulation's ring, ring-bf16 and tree as ring-1nic, ring-1nic-bf16 and tree-1nic (EMULATION_NAMES): one ring or
tree threaded through every GPU, which on a multi-GPU server drives one NIC at a time (exact on the emulation,
one NIC a host; NCCL on DGX-class servers is nccl-ring / nccl-tree below).  The old names are still read, with a
deprecation line (canonical_method).  The emulation's all-to-alls a2a-direct and a2a-hier are planned by
simulation/alltoall.py (S is then the bytes each rank sends in all, S/N to each rank; they are never an
all-reduce's `adaptive` choice).
- ring-1nic: reduce-scatter + all-gather over the ranks in topology order, 2(N-1) steps of S/N, pipelined by chunk;
- ring-1nic-bf16: the same ring moving bfloat16 (S/2 on the wire), as NCCL all-reduces bf16 gradients;
- hier: the emulation's hierarchy (hosts/hier.py): every member sends its whole tensor to its group's leader
  (the group is the server, over NVLink, or else the edge switch), the leaders run the ring, each leader
  sends the result back to its members; the three stages are pipelined chunk by chunk, so they overlap (the
  tensor in pieces, each member at most a window of chunks ahead of its results: no link waits on another);
- tree-1nic: NCCL's double binary tree as hosts/tree.py builds it (the second tree the first shifted by one
  position), each tree carrying S/2, reduce and broadcast pipelined in chunks;
- inc-int32 / inc-int16 / inc-int8: in-network aggregation on the planner's tree with wire format v2.1
  (params.IncFrames): hosts send int32/int16/int8 lanes, the switches sum in int32, every level shifts its
  sums right by the bits its additions gained (rounding ties to even) so the partial sums sent up stay as
  narrow as the lanes, the root sends the method's lanes down, and every slot opens with one exponent round
  (header-only frames up and down) before its data rounds; switches aggregate at line rate unless the preset
  gives them a per-packet cost, and the window is the job's aggregation slots.
Simulation-only methods (no emulation counterpart):
- ring-addr: the ring in address order (the order the scheduler gave the GPUs): what reordering buys;
- hier-rail: reduce-scatter inside the group, one ring per GPU index (rail) among the groups, all-gather
  (NCCL on rail-optimised clusters);
- rd: recursive doubling (MPI's small-message all-reduce), log2 N exchanges of S (power-of-two jobs);
- hier-inc: NVLink reduce-scatter, one in-network tree (int32 lanes) per GPU index carrying S/g, NVLink
  all-gather (SHARP with NVLink);
- nccl-ring, nccl-tree, nccl: NCCL as it runs on multi-GPU, multi-NIC servers (a ring or double binary tree
  per channel, one channel per NIC, NVLink inside the server, its protocols; nccl = its tuner's choice):
  simulation/nccl.py, in closed form on the preset's links (no phases: nothing for SimGrid to share);
- adaptive: per message size, the fastest of the methods the model evaluated (an offload tuner).
"dbtree" (this layer's earlier name for the tree), "ring", "ring-bf16" and "tree" are still accepted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hosts import tree as host_tree
from hosts.agent import HOST_METHOD_PORTS, RING_BASE_PORT
from hosts.methods import METHODS as EMULATED
from simulation.fabric import Fabric
from simulation.params import IncFrames, Preset, agg_elements
from simulation.placement import Job
from simulation.trees import AggTree
from wireformat.fixedpoint import LaneType

# the emulation's method -> its name here (the single-NIC variants say so; the others keep the emulation's name)
EMULATION_NAMES = {"ring": "ring-1nic", "ring-bf16": "ring-1nic-bf16", "tree": "tree-1nic"}
# the emulation's all-reduces, and its all-to-alls (simulation/alltoall.py)
EMULATION_METHODS = tuple(EMULATION_NAMES.get(m, m) for m, x in EMULATED.items() if not x.alltoall)
A2A_METHODS = tuple(name for name, m in EMULATED.items() if m.alltoall)
# The simulation's own methods (no emulation counterpart, see above): host-based ones, and in-network with NVLink
SIM_HOST_METHODS = ("ring-addr", "hier-rail", "rd")
SIM_INC_METHODS = ("hier-inc",)
NCCL_METHODS = ("nccl-ring", "nccl-tree", "nccl")  # simulation/nccl.py: closed form, no phases
HOST_METHODS = (
    tuple(EMULATION_NAMES.get(name, name) for name, m in EMULATED.items() if not (m.in_network or m.alltoall))
    + SIM_HOST_METHODS
)
INC_METHODS = tuple(name for name, m in EMULATED.items() if m.in_network) + SIM_INC_METHODS
METHODS = HOST_METHODS + INC_METHODS + NCCL_METHODS + ("adaptive",) + A2A_METHODS
ALIASES = {"dbtree": "tree-1nic"} | EMULATION_NAMES  # old names, still read (with a deprecation line in the CLI)
# every in-network method's lanes, the same both ways: the emulated ones' own, hier-inc's int32
LANES: dict[str, LaneType] = {name: m.lanes for name, m in EMULATED.items() if m.in_network} | {"hier-inc": "int32"}
TREE_FLOWS_PER_HOST = 4  # a double-binary-tree rank sends (and receives) on up to 4 tree edges at once


def flow_port(flowset: str) -> int:
    """The UDP port the emulation's host method behind a flow set uses (hosts.agent): the ECMP hash's salt."""
    from simulation.alltoall import FLOWSET_METHOD

    if flowset in FLOWSET_METHOD:
        return RING_BASE_PORT + HOST_METHOD_PORTS[(FLOWSET_METHOD[flowset], "float32")]
    family, wire = (
        ("ring", "bfloat16") if flowset == "ring-1nic-bf16" else (flowset.split("-")[0].rstrip("0123456789"), "float32")
    )
    offset = HOST_METHOD_PORTS.get((family if family in ("ring", "hier", "tree") else "ring", wire), 0)
    return RING_BASE_PORT + offset


def canonical(method: str) -> str:
    """The method's name in this layer ('ring' -> 'ring-1nic', 'dbtree' -> 'tree-1nic')."""
    return ALIASES.get(method, method)


def canonical_method(method: str) -> tuple[str, str | None]:
    """A method in its one spelling, and the deprecation line for an old one (None when it was canonical)."""
    new = canonical(method)
    if new == method:
        return new, None
    return new, (
        f"method {method!r} is now {new!r}: one ring or tree through every GPU drives one NIC of a server at a "
        "time; NCCL as it runs on multi-NIC servers is nccl-ring, nccl-tree and nccl"
    )


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

    kind: str  # "ring" | "tree" | "inc" | "pipe"
    flowset: str
    flows: tuple[int, int]
    steps: int  # ring: dependent steps; inc: unused (the tree knows its depth)
    share: float  # bytes per step (ring) or per tree (tree, inc) as a fraction of S
    nvlink: bool = False
    reduce: bool = False
    segments: tuple[int, ...] | None = None  # ring: sizes of the rings laid end to end in `flows` (None: one ring)
    levels: tuple[
        tuple[str, tuple[int, int], str, tuple[int, int]], ...
    ] = ()  # tree: (up set, span, down set, span), deepest first
    down: tuple[int, int] | None = None  # inc: the down flows (flows = the up flows)
    tree: AggTree | None = None
    # pipe: stages that run at once, chunk by chunk: (flow set, span, share of S per step, steps, nvlink, reduce),
    # in the order a chunk passes them (hier: members -> leader, the leaders' ring, leader -> members)
    stages: tuple[tuple[str, tuple[int, int], float, int, bool, bool], ...] = ()


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
    """The emulation's two trees over positions 0..n-1 (hosts.tree.double_binary_tree: the in-order tree and
    the same shifted by one position), so that the inner nodes of one are leaves of the other (NCCL 2.4);
    parent arrays with -1 at the root."""
    return tuple([int(q) for q in t.parent] for t in host_tree.double_binary_tree(n))  # type: ignore[return-value]


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
def plan_method(
    method: str, fabric: Fabric, job: Job, tables: dict[str, FlowTable], trees: dict[str, list[AggTree]] | None = None
) -> Plan:
    """The phases of `method` for `job`, its flows registered in `tables` (shared by jobs and methods)."""
    method = canonical(method)

    def table(key: str) -> FlowTable:
        return tables.setdefault(key, FlowTable(key))

    topo = job.topology_order(fabric)
    n = len(topo)
    j = job.index
    phases: list[Phase] = []
    if method in A2A_METHODS:
        from simulation import alltoall

        nv = bool((fabric.nvswitch >= 0).any())
        phases = alltoall.phases(
            method,
            topo,
            groups_of(fabric, topo),
            nv,
            lambda key, tag, pairs: table(key).add(j, tag, pairs),
            Phase,
            MethodError,
        )
    elif method in ("ring-1nic", "ring-addr", "ring-1nic-bf16"):
        ranks = list(job.gpus) if method == "ring-addr" else topo
        key = method  # ring and ring-bf16 use different UDP ports in the emulation: their ECMP paths may differ
        span = table(key).add(j, key, ring_pairs(ranks))
        share = 1.0 / n / (2 if method == "ring-1nic-bf16" else 1)
        phases = [Phase("ring", key, span, n - 1, share, reduce=True), Phase("ring", key, span, n - 1, share)]
    elif method == "hier":
        groups = groups_of(fabric, topo)
        nv = bool((fabric.nvswitch >= 0).any())
        leaders = [grp[0] for grp in groups]
        m = len(groups)
        stages: list[tuple[str, tuple[int, int], float, int, bool, bool]] = []
        gather = [(x, grp[0]) for grp in groups for x in grp[1:]]
        if gather:
            stages.append(("hier-gather", table("hier-gather").add(j, "gather", gather), 1.0, 1, nv, True))
        if m > 1:
            stages.append(
                (
                    "hier-leader",
                    table("hier-leader").add(j, "leader", ring_pairs(leaders)),
                    1.0 / m,
                    2 * (m - 1),
                    False,
                    True,
                )
            )
        if gather:
            stages.append(
                (
                    "hier-scatter",
                    table("hier-scatter").add(j, "scatter", [(b, a) for a, b in gather]),
                    1.0,
                    1,
                    nv,
                    False,
                )
            )
        phases = [Phase("pipe", "hier", (0, 0), 0, 1.0, stages=tuple(stages))]
    elif method == "hier-rail":
        groups = groups_of(fabric, topo)
        g = max(len(x) for x in groups)
        m = len(groups)
        nv = bool((fabric.nvswitch >= 0).any())
        intra = [p for grp in groups for p in ring_pairs(grp)]
        span_in = table("hier-intra").add(j, "intra", intra)
        seg_in = tuple(len(grp) for grp in groups if len(grp) > 1)
        if g > 1:
            phases.append(Phase("ring", "hier-intra", span_in, g - 1, 1.0 / g, nvlink=nv, reduce=True, segments=seg_in))
        members = [[grp[i] for grp in groups if len(grp) > i] for i in range(g)]
        span = table("hier-rail").add(j, "rail", [p for mem in members for p in ring_pairs(mem)])
        seg = tuple(len(mem) for mem in members if len(mem) > 1)
        if m > 1:
            phases.append(Phase("ring", "hier-rail", span, m - 1, 1.0 / (g * m), reduce=True, segments=seg))
            phases.append(Phase("ring", "hier-rail", span, m - 1, 1.0 / (g * m), segments=seg))
        if g > 1:
            phases.append(Phase("ring", "hier-intra", span_in, g - 1, 1.0 / g, nvlink=nv, segments=seg_in))
    elif method == "tree-1nic":
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
        span = table("tree").add(j, "tree", pairs)
        levels = []
        for lvl in sorted(by_level, reverse=True):  # the critical path: deepest level first, up, then back down
            up, dn = f"tree-u{lvl}", f"tree-d{lvl}"
            levels.append(
                (up, table(up).add(j, up, by_level[lvl]), dn, table(dn).add(j, dn, [(b, a) for a, b in by_level[lvl]]))
            )
        phases = [Phase("tree", "tree", span, len(levels), 0.5, reduce=True, levels=tuple(levels))]
    elif method == "rd":
        if n & (n - 1):
            raise MethodError(f"rd (recursive doubling) needs a power-of-two job, not {n} GPUs")
        for k in range(n.bit_length() - 1):
            key = f"rd{k}"
            pairs = [(topo[i], topo[i ^ (1 << k)]) for i in range(n)]
            phases.append(Phase("ring", key, table(key).add(j, key, pairs), 1, 1.0, reduce=True, segments=(1,) * n))
    elif method in INC_METHODS:
        if trees is None:
            raise MethodError(f"{method} needs aggregation trees")
        if method == "hier-inc":
            groups = groups_of(fabric, topo)
            g = max(len(x) for x in groups)
            if g == 1 or not (fabric.nvswitch >= 0).any():
                raise MethodError("hier-inc needs servers with several GPUs on NVLink (it is inc-int32 otherwise)")
            span_in = table("hier-intra").add(j, "intra", [p for grp in groups for p in ring_pairs(grp)])
            seg_in = tuple(len(grp) for grp in groups if len(grp) > 1)
            phases.append(
                Phase("ring", "hier-intra", span_in, g - 1, 1.0 / g, nvlink=True, reduce=True, segments=seg_in)
            )
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
    link_rate: np.ndarray | None = None  # bytes/s of the slowest link on the path (None: the flow's rate)


def _frame_cpu(p: Preset, flows: int, hops: float, flows_per_host: int) -> float:
    """Seconds of CPU that bound a flow's pace per frame: its host sending and receiving (for every flow the
    host runs at once) and, on an emulator, every host and switch of the flow set sharing the cores."""
    host = 2 * flows_per_host * p.host_packet_cost
    emu = (
        flows * (2 * p.host_packet_cost + hops * p.switch_forward_cost) / p.emulator_cores
        if p.emulator_cores > 0
        else 0.0
    )
    return max(host, emu)


class _Cost:
    """Per-flow transfer costs of one phase: first(x) on a critical path, stream(x) back to back."""

    def __init__(self, p: Preset, e: Edges, nvlink: bool, reduce: bool, per_host: int) -> None:
        self.p = p
        self.rate = e.rate
        self.cpu = _frame_cpu(p, e.flows, float(e.hops.max()) if len(e.hops) else 0.0, per_host)
        # a step's latency: the software on both ends, the path, the switches forwarding on the way
        self.alpha = (
            (p.nvlink_step_overhead if nvlink else p.step_overhead)
            + 2 * p.host_packet_cost
            + e.latency
            + e.hops * p.switch_forward_cost
        )
        self.byte = p.host_byte_cost if reduce else 0.0

    def first(self, x: float) -> np.ndarray:  # the wire (or the CPU's turn), then the host's pass over the data
        # on a shaped link whose token bucket is full (the first use of a link in the all-reduce), a chunk
        # within the bucket's credit passes at once; the bandwidth bounds charge the credit once per link
        wire = np.maximum(self.p.wire_bytes(x, self.rate) - self.p.credit_bytes(self.p.host_frame), 0.0)
        return np.maximum(wire / self.rate, self.p.frames(x) * self.cpu) + x * self.byte

    def stream(self, x: float, rate: float) -> float:  # many chunks back to back: wire, CPU and host overlap
        return max(float(self.p.wire_bytes(x, rate)) / rate, self.p.frames(x) * self.cpu, x * self.byte)


def ring_phase_time(
    p: Preset,
    steps: int,
    data: float,
    e: Edges,
    segments: Sequence[int] | None,
    nvlink: bool,
    reduce: bool,
    credit_bytes: float = 0.0,
) -> float:
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
    # a shaped link's credit left from earlier phases of the all-reduce (the ring's edges carry one flow each)
    credit = min(credit_bytes, steps * float(p.wire_bytes(data, slow))) / slow
    return max(latency_bound - credit, bandwidth_bound - credit, steps * float(c.alpha.mean()))


def _burst_credit(p: Preset, wire: float, rate: float) -> float:
    """Time a shaped link's full token bucket saves at the start of an all-reduce (0 on real links)."""
    return min(p.credit_bytes(p.host_frame), wire) / rate if p.link_burst_bytes > 0 else 0.0


@dataclass(frozen=True)
class Stage:
    """One stage of a pipelined phase: the job's flows of it as the network layer rates them, and its steps."""

    edges: Edges
    data: float  # bytes per step and flow
    steps: int
    nvlink: bool
    reduce: bool


def pipe_phase_time(
    p: Preset,
    stages: Sequence[Stage],
    busiest_s: float,
    busiest_bytes: float,
    busiest_rate: float,
    cpu_s: float,
    first_phase: bool = False,
) -> float:
    """Stages that run at once, chunk by chunk (hier: members -> leader, the leaders' ring, leader -> members).

    A chunk passes the stages one after the other (a stage of several steps is a chain around its ring, as in
    ring_phase_time), so the first chunk's trip fills the pipeline; after that the busiest link sets the pace:
    `busiest_s` is its bytes over its rate with every stage's flows on it (flows of one stage carry different
    amounts than another's, e.g. a leader's down-link carries its members' tensors and a ring's share, so the
    bound is the link's total, not a fair share of it).  `cpu_s` is the busiest host's (or the emulator's)
    per-packet work.  On shaped links the busiest link's credit passes at once.
    """
    if not stages or busiest_s <= 0:
        return 0.0
    fill = 0.0
    chunk_busiest = 0.0
    alpha = 0.0
    for st in stages:
        if st.data <= 0 or len(st.edges.rate) == 0:
            continue
        c = _Cost(p, st.edges, st.nvlink, st.reduce, 1)
        chunk = min(float(p.pipeline_chunk), st.data)
        step = c.alpha + c.first(chunk)
        fill += st.steps * float(step.mean()) if st.steps > 1 else float(step.max())
        chunk_busiest = max(chunk_busiest, float(p.wire_bytes(chunk, busiest_rate)) / busiest_rate)
        alpha = max(alpha, float(c.alpha.max()))
    latency_bound = fill + max(0.0, busiest_s - chunk_busiest)
    bandwidth_bound = busiest_s + alpha
    credit = _burst_credit(p, busiest_bytes, busiest_rate) if first_phase else 0.0
    return max(latency_bound, bandwidth_bound, cpu_s) - credit


def tree_phase_time(
    p: Preset, data: float, all_active: Edges, levels: Sequence[tuple[Edges, Edges]], reduce: bool
) -> float:
    """A pipelined tree: the first chunk climbs the levels and comes back down (each level at the rates its
    flows get on their own), then the remaining chunks follow at the pace of every flow active at once
    (on shaped links, less what the busiest link's credit passes at once)."""
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
    stream = steady.stream(data, slow)
    latency_bound = fill + stream - steady.stream(chunk, slow)
    # the slowest flow's link carries link_rate / slow such flows: its credit serves all of them
    link = float(all_active.link_rate[int(np.argmin(steady.rate))]) if all_active.link_rate is not None else slow
    credit = _burst_credit(p, float(p.wire_bytes(data, slow)) * link / slow, link)
    bandwidth_bound = stream + float(steady.alpha.max()) - credit
    return max(latency_bound, bandwidth_bound)


@dataclass(frozen=True)
class TreeMeasure:
    """An aggregation tree's flows: the slowest rates per kind of edge, the deepest paths' latencies."""

    rate_host_up: float  # host -> its switch (contributions)
    rate_switch_up: float  # switch -> parent switch (partial sums); inf when every member is under the root
    rate_down: float  # every edge down (results)
    latency_up: float
    latency_down: float

    @property
    def rate_up(self) -> float:
        return min(self.rate_host_up, self.rate_switch_up)


def inc_phase_time(
    p: Preset,
    tree: AggTree,
    elements: float,
    frames: IncFrames,
    m: TreeMeasure,
    why: dict[str, Any] | None = None,
) -> float:
    """One in-network all-reduce (wire format v2.1): every slot's exponent round, then its data rounds.

    The job's window (`tree.window` slots) holds that many packets in flight.  Each slot opens with one
    exponent round (header-only frames up and down), then carries data rounds, one chunk of `lanes`
    elements each, a round starting when the previous round's result is back.  The time is the longer of

    - the window: the busiest slot's rounds, each the longer of a packet's round trip and the window's
      packets at the period (the slowest of each kind of link with its own frames, a host handling a
      contribution and a result, the busiest switch, an emulator's shared cores), and
    - the busiest resource: every exponent and data packet's work on it (contributions on host links,
      partial sums between switches, results down; hosts; switches; an emulator's cores), then the rest
      of the last packet's round trip; or, as no data packet leaves before its slot's exponent round is
      back, the first exponent round trip and then the data packets' own work on the resource they bind
      (a few exponent rounds on an emulator's cores do not overlap the data's pacing on a shaped link).

    On shaped links the token bucket's credit (its burst and the frame that empties it) lets the first bytes of
    the bottleneck pass at once.

    `why`, when given, receives what set the time: `limit` ("window": the busiest slot's round trips;
    "link:host-up", "link:switch-up", "link:down": that kind of link's bytes; "hosts", "switch",
    "emulator": their per-packet work), the data `rounds` and the data round trip `rtt_s`.
    """
    if elements <= 0:
        return 0.0
    lanes = agg_elements()
    packets = math.ceil(elements / lanes)
    w = max(1, tree.window)
    slots = p.exponent_slots(packets, w, frames.lanes)
    inner = math.isfinite(m.rate_switch_up)
    payload = min(lanes, elements) * 4  # float32 bytes of gradient a (full) packet carries: what a host converts
    host_d = 2 * (p.host_packet_cost + payload * p.host_byte_cost)
    host_e = 2 * p.host_packet_cost
    per_switch = [(len(ch) + (0 if sw == tree.root else 1)) for sw, ch in tree.children.items()]
    switch_e = max(per_switch) * p.switch_packet_cost  # an exponent round: headers only
    lane_work = min(lanes, elements) * p.switch_lane_cost  # a data packet's lanes, read, added and written
    switch_d = max(per_switch) * (p.switch_packet_cost + lane_work)
    depth = tree.depth
    emu_e = emu_d = 0.0
    if p.emulator_cores > 0:
        hosts_cpu = len(tree.gpus) * 2 * p.host_packet_cost
        emu_e = (hosts_cpu + sum(per_switch) * p.switch_packet_cost) / p.emulator_cores
        emu_d = (hosts_cpu + sum(per_switch) * (p.switch_packet_cost + lane_work)) / p.emulator_cores
    links_d = {"host-up": frames.host_up / m.rate_host_up, "down": frames.down / m.rate_down}
    if inner:
        links_d["switch-up"] = frames.switch_up / m.rate_switch_up
    slowest = min(m.rate_host_up, m.rate_switch_up, m.rate_down)
    period_d = max(*links_d.values(), host_d, switch_d, emu_d)
    # a packet's round trip (what the window must cover): the hosts, the links, every switch on the way;
    # serialization paid once each way (cut-through; a shaped link passes a lone packet on its credit)
    hops_e = (2 * depth - 1) * (p.switch_packet_cost + p.switch_agg_latency)
    hops_d = hops_e + (2 * depth - 1) * lane_work

    def ser(frame: int, rate: float) -> float:  # a lone packet: within a full token bucket it passes at once
        return max(frame - p.credit_bytes(frame), 0.0) / rate

    rtt_d = (
        host_d
        + m.latency_up
        + m.latency_down
        + hops_d
        + ser(frames.host_up, m.rate_host_up)
        + ser(frames.down, m.rate_down)
    )
    rtt_e = host_e + m.latency_up + m.latency_down + hops_e + 2 * ser(frames.exponent, slowest)
    rounds = math.ceil(packets / w)  # data rounds of the busiest slot
    last = packets - (rounds - 1) * w  # packets of the last data round
    # the resources: every exponent and data packet passes each of them; the busiest sets the pace
    rate = {"host-up": m.rate_host_up, "down": m.rate_down, "switch-up": m.rate_switch_up}
    size = {"host-up": frames.host_up, "down": frames.down, "switch-up": frames.switch_up}
    busy = {k: slots * frames.exponent / rate[k] + packets * size[k] / rate[k] for k in links_d}
    cpu = {
        "hosts": slots * host_e + packets * host_d,
        "switch": slots * switch_e + packets * switch_d,
        "emulator": slots * emu_e + packets * emu_d,
    }
    busiest = max(busy, key=busy.__getitem__)
    # a transfer within the bucket passes at once, its last packet too (which ser() then counts as free)
    credit = min(p.credit_bytes(size[busiest]), slots * frames.exponent + packets * size[busiest]) / rate[busiest]
    # the busiest resource, and the part of the last packet's round trip it already counts
    work = {
        "link": (busy[busiest] - credit, ser(size[busiest], rate[busiest])),
        "hosts": (cpu["hosts"], host_d),
        "switch": (cpu["switch"], min(switch_d, hops_d)),
        "emulator": (cpu["emulator"], 0.0),
    }
    key = max(work, key=work.__getitem__)
    resources, counted = work[key]
    if slots:
        # no data packet leaves before its slot's exponent round is back: the data alone, on the resource
        # that binds it (the busiest link on what is left of its credit), after the first exponent round trip
        left = (
            max(0.0, min(p.credit_bytes(size[busiest]) - slots * frames.exponent, packets * size[busiest]))
            / rate[busiest]
        )
        data = {
            "link": (packets * size[busiest] / rate[busiest] - left, ser(size[busiest], rate[busiest])),
            "hosts": (packets * host_d, host_d),
            "switch": (packets * switch_d, min(switch_d, hops_d)),
            "emulator": (packets * emu_d, 0.0),
        }
        d_key = max(data, key=data.__getitem__)
        d_work, d_counted = data[d_key]
        if rtt_e + d_work - d_counted > resources - counted:
            resources, counted, key = rtt_e + d_work, d_counted, d_key
    # the window: every round of the busiest slot is a round trip (its packets at the period; the first
    # ones on the bottleneck's credit)
    lead = max((last - 1) * period_d - credit, (last - 1) * max(host_d, switch_d, emu_d), 0.0)
    chain = (rtt_e if slots else 0.0) + (rounds - 1) * max(rtt_d, w * period_d) + rtt_d + lead
    # the last packet, once through the bottleneck, still has the rest of its round trip to go
    paced = resources + rtt_d - counted
    if why is not None:
        # of link kinds that tie (int32 lanes: the same frames up from hosts and switches), the partial sums'
        def link_of(load: dict[str, float]) -> str:
            top = max(load.values())
            return "link:" + next(k for k in ("switch-up", "down", "host-up") if load.get(k, -1.0) >= top * 0.999)

        if chain < paced:
            limit = link_of(busy) if key == "link" else key
        elif rtt_d >= w * period_d:
            limit = "window"  # round trips: the window's packets leave faster than one comes back
        else:  # the window's packets at the period: its slowest part
            cpu_d = {"hosts": host_d, "switch": switch_d, "emulator": emu_d}
            top_cpu = max(cpu_d, key=cpu_d.__getitem__)
            limit = top_cpu if cpu_d[top_cpu] > max(links_d.values()) else link_of(links_d)
        why.update(limit=limit, rounds=rounds, rtt_s=rtt_d)
    return p.step_overhead + max(chain, paced)
