"""What the network allows: the two lower bounds every measured all-reduce is compared with.

- T_wire (measured): the bytes the busiest link direction actually carried
  during the all-reduce (every frame: headers, acks, retransmissions, read from
  the interfaces' counters), less what the shaper lets through on credit, over
  the link rate. HTB sends a frame whenever its token bucket is not negative
  and then charges it, so over any interval a link carries at most rate x T
  plus its burst plus one more frame (emulation.shaping: burst = one frame, so
  two frames in all). Nothing can finish sooner.
- T_path (computed): the method's chain of dependent hops. An in-network
  all-reduce needs 1 + ceil(chunks / window) rounds in its busiest slot (the
  exponent round, then its data rounds), each a trip up the tree and back
  (ceil(chunks / window) when the worker speculated its exponents); a
  pipelined ring passes its last chunk through 2(n-1) neighbour hops; hier
  passes a chunk from a member to its leader, through the leaders' ring (up to
  2(L-1) hops for L leaders) and down to a member again; a pipelined tree
  passes a chunk up from its deepest leaf and back down to it; a direct
  all-to-all passes each chunk once, between its farthest pair of ranks, and a
  hierarchical one from a rank to its group's rank on the destination's rail
  and on along the rail. Each link on
  the way costs its propagation delay (--delay): in this emulator a shaped link
  (HTB on a veth) releases a lone frame at once when its bucket has credit, so
  serialization shows in throughput (T_wire), not in a chain of single frames,
  and with no delay there is no path bound at all. Switch and host processing
  are not included (an ASIC's are negligible), so where T_path dominates and
  the measurement is close to it, the point is latency-bound; where it is far
  above both bounds, the emulator's software (switch or host CPU) is what was
  measured.

A point is `link`-bound when measured / T_wire <= 1.15, `latency`-bound when
measured / T_path <= 1.15, and otherwise `cpu` (a switch process, a host agent
or the machine was busy) or `unexplained`. Only link- and latency-bound points
are statements about the network; the report says which points were left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from controller.planner import JobPlan
from controller.routing import switch_distances
from controller.topology import Topology
from hosts.alltoall import rail_layout
from hosts.hier import hier_layout
from hosts.methods import Method
from hosts.ring import DATA_HDR, FRAME_OVERHEAD, WIRE_BYTES, elements_per_packet
from hosts.tree import NO_PARENT, BinaryTree, double_binary_tree
from wireformat import AGG

BOUND_SLACK = 1.15  # measured / bound at most this: the bound explains the measurement
CPU_BUSY = 0.6  # a switch process or host agent busy this share of the time ...
MACHINE_BUSY = 0.85  # ... or all cores together: the point measured the CPUs

ELEM_OF_LANES = {
    "int32": AGG.elem_types["ELEM_INT32"],
    "int16": AGG.elem_types["ELEM_INT16"],
    "int8": AGG.elem_types["ELEM_INT8"],
}


def wire_time(nbytes: int, rate_bps: float, credit_bytes: int = 0) -> float:
    """Seconds a link at rate_bps needs for nbytes when credit_bytes may go at once; NaN when unshaped."""
    if not rate_bps:
        return math.nan
    return max(nbytes - credit_bytes, 0) * 8 / rate_bps


def host_distance(topo: Topology, a: str, b: str, dist: Mapping[str, Mapping[str, int]] | None = None) -> int:
    """Links between two hosts on a shortest path (2 under the same switch)."""
    dist = dist or switch_distances(topo)
    return 2 + dist[topo.host(a).switch][topo.host(b).switch]


def tree_height(plan: JobPlan) -> int:
    """Links from the job's farthest member host up to the root (1: every member under the root)."""
    by = {sp.switch: sp for sp in plan.switches}
    members = set(plan.spec.hosts)

    def depth(name: str) -> int:
        sp = by[name]
        return 0 if sp.parent is None else 1 + depth(sp.parent)

    return 1 + max(depth(sp.switch) for sp in plan.switches if any(c.node in members for c in sp.children))


def inc_path(
    method: Method, *, elements: int, height: int, slots: int, delay_s: float, exponent_rounds: bool = True
) -> float:
    """The busiest slot's rounds (its exponent round, unless speculated, then its data rounds), each up `height`
    links and back down."""
    chunks = max(1, -(-elements // AGG.num_lanes))
    window = min(slots, chunks)
    rounds = int(exponent_rounds) + -(-chunks // window)
    return rounds * 2 * height * delay_s


def ring_path(method: Method, *, elements: int, hops: Sequence[int], delay_s: float) -> float:
    """The last chunk of a segment through 2(n-1) consecutive ring hops (the longest such chain)."""
    n = len(hops)
    if n < 2:
        return 0.0
    steps = 2 * (n - 1)
    chains = [sum(hops[(p + i) % n] for i in range(steps)) for p in range(n)]
    return max(chains) * delay_s


def hier_path(
    method: Method, *, elements: int, member_hops: Sequence[int], ring_hops: Sequence[int], delay_s: float
) -> float:
    """A chunk from a member up to its leader, k ring hops, down to a member: the longest such chain.

    member_hops[g] = links between leader g and its farthest member (0 for a group of one); ring_hops[g]
    = links from leader g to the next. A chunk of the segment that enters the ring at leader g is summed
    after L-1 hops and reaches the last leader after 2(L-1); each leader on the way from the (L-1)th hop
    on hands it down to its members, so k runs over L-1..2(L-1). One group: up and down again.
    """
    n_ring = len(ring_hops)
    if n_ring != len(member_hops) or n_ring < 1:
        raise ValueError(f"{len(member_hops)} groups' member hops for {n_ring} leaders")
    longest = 0
    for g in range(n_ring):
        ring = 0
        for k in range(2 * (n_ring - 1) + 1):
            if k >= n_ring - 1:
                longest = max(longest, member_hops[g] + ring + member_hops[(g + k) % n_ring])
            ring += ring_hops[(g + k) % n_ring]
    return longest * delay_s


def tree_links(tree: BinaryTree, hops: Callable[[int, int], int]) -> int:
    """Links on the tree's longest root-to-node path; hops(a, b) = links between positions a and b."""
    longest = 0
    for p in range(tree.size):
        path = tree.path_to_root(p)
        longest = max(longest, sum(hops(a, b) for a, b in zip(path, path[1:])))
    return longest


def tree_path(method: Method, *, elements: int, depths: Sequence[int], delay_s: float) -> float:
    """The deepest chunk up to the root and back down, in the slower of the trees.

    depths[k] = tree k's links on its longest root-to-node path (tree_links). Each tree carries half
    of the tensor, so its chunks are of half the elements at most.
    """
    if not depths:
        return 0.0
    return 2 * max(depths) * delay_s


def path_bound(
    method: Method,
    *,
    elements: int,
    rate_bps: float | None,
    delay_s: float,
    plan: JobPlan | None = None,
    slots: int = 0,
    topo: Topology | None = None,
    ring_order: Sequence[str] = (),
    exponent_rounds: bool = True,
) -> float:
    """T_path of one all-reduce; NaN when the links have no delay (then nothing but software is on the path).

    ring_order: the job's hosts in topology order (hosts.ring.topology_order), which is the ring's
    order, the trees' positions, and, group by group, hier's leader ring (each group's first host leads).
    """
    if not delay_s:
        return math.nan
    if method.in_network:
        if plan is None:
            raise ValueError(f"{method.name}: the path bound needs the job's tree")
        return inc_path(
            method,
            elements=elements,
            height=tree_height(plan),
            slots=slots,
            delay_s=delay_s,
            exponent_rounds=exponent_rounds,
        )
    if topo is None or not ring_order:
        raise ValueError(f"{method.name}: the path bound needs the topology and the ring's order")
    dist = switch_distances(topo)
    n = len(ring_order)

    def links(a: int, b: int) -> int:
        return host_distance(topo, ring_order[a], ring_order[b], dist)

    if method.family == "ring":
        hops = [links(i, (i + 1) % n) for i in range(n)]
        return ring_path(method, elements=elements, hops=hops, delay_s=delay_s)
    if method.family == "hier":
        lay = hier_layout([topo.host(h).switch for h in ring_order])
        leaders = lay.leaders
        member_hops = [max((links(lead, m) for m in lay.members[g]), default=0) for g, lead in enumerate(leaders)]
        ring_hops = [links(lead, leaders[(g + 1) % len(leaders)]) for g, lead in enumerate(leaders)]
        return hier_path(method, elements=elements, member_hops=member_hops, ring_hops=ring_hops, delay_s=delay_s)
    if method.family == "tree":
        if n < 2:
            return 0.0
        depths = [tree_links(t, links) for t in double_binary_tree(n)]
        return tree_path(method, elements=elements, depths=depths, delay_s=delay_s)
    if method.family == "a2a-direct":
        return max((links(a, b) for a in range(n) for b in range(n) if a != b), default=0) * delay_s
    if method.family == "a2a-hier":
        # ring_order keeps the groups' ranks together; the rails are positions within a group
        lay = rail_layout([topo.host(h).switch for h in ring_order])
        groups = lay.groups  # positions in ring_order
        longest = 0
        for grp in groups:
            for i in grp:
                for j in grp:
                    for other in groups:
                        hop1 = links(i, j) if i != j else 0
                        dst = other[grp.index(j)]
                        longest = max(longest, hop1 + (links(j, dst) if dst != j else 0))
        return longest * delay_s
    raise ValueError(f"{method.name}: no path bound for host methods of family {method.family!r}")


def classify(
    latency_s: float,
    t_wire_s: float,
    t_path_s: float,
    *,
    switch_busy: float = math.nan,
    agents_busy: float = math.nan,
    cores_busy: float = math.nan,
) -> str:
    """'link', 'latency', 'cpu' or 'unexplained' (see the module docstring)."""
    if not math.isnan(t_wire_s) and t_wire_s > 0 and latency_s <= BOUND_SLACK * t_wire_s:
        return "link"
    if not math.isnan(t_path_s) and t_path_s > 0 and latency_s <= BOUND_SLACK * t_path_s:
        return "latency"
    busy = [x for x in (switch_busy, agents_busy) if not math.isnan(x)]
    if (busy and max(busy) >= CPU_BUSY) or (not math.isnan(cores_busy) and cores_busy >= MACHINE_BUSY):
        return "cpu"
    return "unexplained"


def wire_bytes_per_element(method: Method) -> tuple[float, float]:
    """Bytes on a host link per element (up, down) at full packets: the bandwidth cost of each method.

    The host methods (ring, ring-bf16, hier, tree) all move MTU-sized hosts.reliable datagrams, so per
    element they cost the same; how many times a link carries the tensor is tensor_copies below.
    """
    if method.in_network:
        frame = AGG.frame_bytes(ELEM_OF_LANES[method.lanes])
        return frame / AGG.num_lanes, frame / AGG.num_lanes
    per = elements_per_packet(method.wire)
    frame = FRAME_OVERHEAD + DATA_HDR.size + per * WIRE_BYTES[method.wire]
    return frame / per, frame / per


def tensor_copies(method: Method, hosts: int, group_size: int = 1) -> float:
    """How many times the busiest host link direction carries the tensor (large messages).

    In-network: once each way. Ring: 2(n-1)/n. Tree: each rank sends half the tensor up each tree and,
    where it is interior, down to its children (read off the trees). hier with groups of group_size
    hosts: a leader receives every member's tensor and sends it the result, plus its share of the
    leaders' ring, 2(L-1)/L.
    """
    if method.in_network:
        return 1.0
    if hosts < 2:
        return 0.0
    if method.family == "ring":
        return 2 * (hosts - 1) / hosts
    if method.family == "tree":
        halves = [0.0] * hosts
        for t in double_binary_tree(hosts):
            for p in range(hosts):
                halves[p] += len(t.children[p]) + (t.parent[p] != NO_PARENT)
        return max(halves) / 2
    if method.family == "hier":
        g = min(max(1, group_size), hosts)
        leaders = -(-hosts // g)
        return (g - 1) + (2 * (leaders - 1) / leaders if leaders > 1 else 0.0)
    if method.family == "a2a-direct":
        return (hosts - 1) / hosts
    if method.family == "a2a-hier":  # (g-1)/g of the buffer inside the group, then (G-1)/G along the rail
        g = min(max(1, group_size), hosts)
        groups = hosts // g
        return (g - 1) / g + (groups - 1) / groups
    raise ValueError(f"{method.name}: unknown host method family {method.family!r}")


def bandwidth_speedup(method: Method, baseline: Method, hosts: int, group_size: int = 1) -> float:
    """Large-message speed-up the wire predicts: bytes per element times the copies on the busiest link."""

    def cost(m: Method) -> float:
        up, _down = wire_bytes_per_element(m)
        return up * tensor_copies(m, hosts, group_size)

    return cost(baseline) / cost(method)
