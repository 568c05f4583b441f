"""The system layer's rank structures, and each method planned on one fabric."""

from __future__ import annotations

import math

import pytest

from simulation import topologies as T
from simulation.methods import METHODS, MethodError, binary_tree, double_binary_tree, node_depths, plan_method, ring_pairs
from simulation.params import H100
from simulation.placement import place
from simulation.trees import plan_trees


@pytest.mark.parametrize("n", [2, 3, 7, 8, 31, 64, 100])
def test_double_binary_tree_inner_nodes_of_one_are_leaves_of_the_other(n):
    t1, t2 = double_binary_tree(n)
    for t in (t1, t2):
        assert sum(1 for p in t if p < 0) == 1
        assert max(node_depths(t)) <= math.ceil(math.log2(n)) + 1
    inner1 = {p for p in t1 if p >= 0}
    inner2 = {p for p in t2 if p >= 0}
    if n % 2 == 0 and n > 2:
        assert not (inner1 & inner2)
    assert max(node_depths(binary_tree(64))) == 6


def test_every_method_plans_on_a_rail_optimised_cluster():
    f = T.fat_tree3(256, H100, radix=16, rail=True)
    job = place(f, [256])[0]
    trees = {"inc": plan_trees(f, [job])}
    g = 8
    from simulation.placement import Job
    from simulation.methods import groups_of
    groups = groups_of(f, job.topology_order(f))
    trees["hier-inc"] = plan_trees(f, [Job(i, tuple(grp[i] for grp in groups)) for i in range(g)])
    tables: dict = {}
    for m in METHODS:
        if m == "adaptive":
            continue
        plan = plan_method(m, f, job, tables, trees)
        assert plan.phases and plan.n == 256
    assert len(tables["ring"].src) == 256 and ring_pairs([1, 2, 3]) == [(1, 2), (2, 3), (3, 1)]
    with pytest.raises(MethodError, match="power-of-two"):
        plan_method("rd", f, place(f, [248])[0], {}, trees)


def test_in_network_frames_follow_wire_format_v2_1():
    from simulation.params import EXPONENT_FRAME, IncFrames
    from wireformat import AGG

    assert EXPONENT_FRAME == AGG.frame_bytes(AGG.elem_types["ELEM_NONE"]) == 63
    i32, i16, i8 = IncFrames.of("int32", 16), IncFrames.of("int16", 16), IncFrames.of("int8", 256)
    assert (i32.host_up, i32.switch_up, i32.down) == (1087, 1087, 1087)
    # narrow lanes stay narrow on every level (the planner's per-level rounding shifts)
    assert (i16.host_up, i16.switch_up, i16.down) == (575, 575, 575)
    assert (i8.host_up, i8.switch_up, i8.down, i8.partial) == (319, 319, 319, "int8")
    # an unbalanced tree cannot shift by levels: its partial sums are as wide as the job's sum needs
    assert IncFrames.of("int8", 256, balanced=False).switch_up == 575
    assert IncFrames.of("int8", 257, balanced=False).switch_up == IncFrames.of("int16", 16, balanced=False).switch_up == 1087
    assert IncFrames.of("int8", 257, balanced=False).host_up == 319
    with pytest.raises(ValueError, match="int4"):
        IncFrames.of("int4", 16)


def test_trees_are_balanced_on_clos_fabrics_and_not_across_dragonfly_groups():
    for spec, n, balanced in (("fattree:radix=16", 256, True), ("rail:radix=16", 256, True), ("dragonfly+:radix=16", 64, True),
                              ("dragonfly+:radix=16", 256, False)):
        f = T.build(spec, H100, n)
        (tree,) = plan_trees(f, place(f, [n]))
        assert tree.balanced is balanced, spec


def test_host_methods_pay_the_transports_acks():
    from hosts.reliable import ACK_ENTRY, ACK_HDR, FRAME_OVERHEAD
    from simulation.params import EMULATION, NDR

    one = FRAME_OVERHEAD + ACK_HDR.size + ACK_ENTRY.itemsize  # an ack with a single entry: 57 bytes
    # at 1 Mbit/s a full frame takes 12 ms, longer than the 10 ms ack delay: one ack per frame
    assert EMULATION.ack_bytes(EMULATION.mtu_payload, 125_000.0) == pytest.approx(one)
    # fast enough, 16 frames share an ack
    assert EMULATION.ack_bytes(EMULATION.mtu_payload, 1e9) == pytest.approx((FRAME_OVERHEAD + ACK_HDR.size) / 16 + ACK_ENTRY.itemsize)
    assert NDR.wire_bytes(4096) == 4096 + NDR.frame_overhead  # no acks on RDMA


def test_hier_on_shared_leader_links_is_slower_than_its_busiest_link():
    from simulation.methods import hier_shared_time

    for leaders in (2, 4, 8):
        ring = 2 * (leaders - 1) / leaders
        t = hier_shared_time(1.0, ring, 1, 1.0)
        assert t >= 1.0 + ring - 1e-12  # never below the leader link's bytes
    assert hier_shared_time(1.0, 1.75, 1, 1.0) == pytest.approx(3.18, abs=0.01)  # 8 leaders: 1.16x the bytes
    assert hier_shared_time(1.0, 1.0, 1, 1.0) == pytest.approx(2.0)  # 2 leaders: the links stay busy
