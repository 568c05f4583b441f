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
  exponent round, then its data rounds), each a trip up the tree and back; a
  pipelined ring passes its last chunk through 2(n-1) neighbour hops. Each
  link on the way costs the frame's serialization plus the link's delay; switch
  and host processing are not included (an ASIC's are negligible), so where
  T_path dominates and the measurement is close to it, the point is
  latency-bound; where it is far above both bounds, the emulator's software
  (switch or host CPU) is what was measured.

A point is `link`-bound when measured / T_wire <= 1.15, `latency`-bound when
measured / T_path <= 1.15, and otherwise `cpu` (a switch process, a host agent
or the machine was busy) or `unexplained`. Only link- and latency-bound points
are statements about the network; the report says which points were left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from controller.planner import JobPlan
from controller.routing import switch_distances
from controller.topology import Topology
from hosts.methods import Method
from hosts.ring import DATA_HDR, FRAME_OVERHEAD, WIRE_BYTES, elements_per_packet
from wireformat import AGG

BOUND_SLACK = 1.15  # measured / bound at most this: the bound explains the measurement
CPU_BUSY = 0.6  # a switch process or host agent busy this share of the time ...
MACHINE_BUSY = 0.85  # ... or all cores together: the point measured the CPUs

ELEM_OF_LANES = {"int32": AGG.elem_types["ELEM_INT32"], "int16": AGG.elem_types["ELEM_INT16"],
                 "int8": AGG.elem_types["ELEM_INT8"]}


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


def _link_time(frame_bytes: int, rate_bps: float, delay_s: float) -> float:
    return frame_bytes * 8 / rate_bps + delay_s


def inc_path(method: Method, *, elements: int, height: int, slots: int, rate_bps: float, delay_s: float) -> float:
    """The busiest slot's rounds, each up `height` links and back down."""
    chunks = max(1, -(-elements // AGG.num_lanes))
    window = min(slots, chunks)
    data_rounds = -(-chunks // window)
    lanes = ELEM_OF_LANES[method.lanes]
    up = down = AGG.frame_bytes(lanes)
    exp = AGG.frame_bytes(AGG.elem_types["ELEM_NONE"])
    one_round = height * (_link_time(up, rate_bps, delay_s) + _link_time(down, rate_bps, delay_s))
    return 2 * height * _link_time(exp, rate_bps, delay_s) + data_rounds * one_round


def ring_path(method: Method, *, elements: int, hops: Sequence[int], rate_bps: float, delay_s: float) -> float:
    """The last chunk of a segment through 2(n-1) consecutive ring hops (the longest such chain)."""
    n = len(hops)
    if n < 2:
        return 0.0
    segment = max(1, elements // n)
    per = min(segment, elements_per_packet(method.wire))
    frame = FRAME_OVERHEAD + DATA_HDR.size + per * WIRE_BYTES[method.wire]
    steps = 2 * (n - 1)
    chains = [sum(hops[(p + i) % n] for i in range(steps)) for p in range(n)]
    return max(chains) * _link_time(frame, rate_bps, delay_s)


def path_bound(method: Method, *, elements: int, rate_bps: float | None, delay_s: float, plan: JobPlan | None = None,
               slots: int = 0, topo: Topology | None = None, ring_order: Sequence[str] = ()) -> float:
    """T_path of one all-reduce; NaN when the links are unshaped (no rate, no bound)."""
    if not rate_bps:
        return math.nan
    if method.in_network:
        if plan is None:
            raise ValueError(f"{method.name}: the path bound needs the job's tree")
        return inc_path(method, elements=elements, height=tree_height(plan), slots=slots, rate_bps=rate_bps,
                        delay_s=delay_s)
    if topo is None or not ring_order:
        raise ValueError(f"{method.name}: the path bound needs the topology and the ring's order")
    dist = switch_distances(topo)
    n = len(ring_order)
    hops = [host_distance(topo, ring_order[i], ring_order[(i + 1) % n], dist) for i in range(n)]
    return ring_path(method, elements=elements, hops=hops, rate_bps=rate_bps, delay_s=delay_s)


def classify(latency_s: float, t_wire_s: float, t_path_s: float, *, switch_busy: float = math.nan,
             agents_busy: float = math.nan, cores_busy: float = math.nan) -> str:
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
    """Bytes on a host link per element (up, down) at full packets: the bandwidth cost of each method."""
    if method.in_network:
        frame = AGG.frame_bytes(ELEM_OF_LANES[method.lanes])
        return frame / AGG.num_lanes, frame / AGG.num_lanes
    per = elements_per_packet(method.wire)
    frame = FRAME_OVERHEAD + DATA_HDR.size + per * WIRE_BYTES[method.wire]
    return frame / per, frame / per


def bandwidth_speedup(method: Method, baseline: Method, hosts: int) -> float:
    """Large-message speed-up the wire predicts: a ring sends 2(n-1)/n of the tensor, in-network once."""
    def cost(m: Method) -> float:
        up, _down = wire_bytes_per_element(m)
        return up * (2 * (hosts - 1) / hosts if not m.in_network else 1.0)

    return cost(baseline) / cost(method)


