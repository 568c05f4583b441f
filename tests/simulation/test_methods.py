"""The system layer's rank structures, and each method planned on one fabric."""

from __future__ import annotations

import math

import pytest

from simulation import topologies as T
from simulation.methods import (
    METHODS,
    NCCL_METHODS,
    MethodError,
    binary_tree,
    double_binary_tree,
    node_depths,
    plan_method,
    ring_pairs,
)
from simulation.params import H100
from simulation.placement import place
from simulation.trees import plan_trees
from tests.simulation.conftest import needs_simgrid


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
    from simulation.methods import groups_of
    from simulation.placement import Job

    groups = groups_of(f, job.topology_order(f))
    trees["hier-inc"] = plan_trees(f, [Job(i, tuple(grp[i] for grp in groups)) for i in range(g)])
    tables: dict = {}
    for m in METHODS:
        if m == "adaptive" or m in NCCL_METHODS:  # NCCL's methods are closed form (tests/simulation/test_nccl.py)
            continue
        plan = plan_method(m, f, job, tables, trees)
        assert plan.phases and plan.n == 256
    assert len(tables["ring-1nic"].src) == 256 and ring_pairs([1, 2, 3]) == [(1, 2), (2, 3), (3, 1)]
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
    assert (
        IncFrames.of("int8", 257, balanced=False).switch_up
        == IncFrames.of("int16", 16, balanced=False).switch_up
        == 1087
    )
    assert IncFrames.of("int8", 257, balanced=False).host_up == 319
    with pytest.raises(ValueError, match="int4"):
        IncFrames.of("int4", 16)


def test_trees_are_balanced_on_clos_fabrics_and_not_across_dragonfly_groups():
    for spec, n, balanced in (
        ("clos:radix=16", 256, True),
        ("rail:radix=16", 256, True),
        ("dragonfly+:radix=16", 64, True),
        ("dragonfly+:radix=16", 256, False),
    ):
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
    assert EMULATION.ack_bytes(EMULATION.mtu_payload, 1e9) == pytest.approx(
        (FRAME_OVERHEAD + ACK_HDR.size) / 16 + ACK_ENTRY.itemsize
    )
    assert NDR.wire_bytes(4096) == 4096 + NDR.frame_overhead  # no acks on RDMA


@needs_simgrid
@pytest.mark.parametrize("hosts", [4, 8, 16])
def test_hier_on_shared_leader_links_runs_at_its_busiest_links_bytes(engine, hosts):
    """hosts/hier.py paces each member by its results and runs the tensor in pieces, so the leader's link is
    busy both ways all along (the emulation: 1.01-1.02x its busiest link's bytes at 128K); the model has no
    penalty for members and ring sharing it: its time is that link's bytes over the rate, plus the pipeline's
    fill (before: 1.16x the bytes at 8 leaders, the fair share of an unpaced member's upload)."""
    from simulation.model import Evaluation, Scenario
    from simulation.params import EMULATION

    size = 4 * 131072
    ev = Evaluation(Scenario(topology="fat-tree:4", gpus=hosts, methods=("hier",), sizes=(size,)), EMULATION, engine)
    ev.build()
    ev.solve()
    wire = float(ev.link_bytes(ev.plans[0], size).max()) / EMULATION.nic_bw
    assert 0.99 * wire <= ev.times(ev.plans[0], size) <= 1.03 * wire  # less HTB's burst credit, at most 2 frames


@needs_simgrid
@pytest.mark.parametrize("method, burst", [("inc-int8", None), ("inc-int8", 16 * 1514), ("inc-int16", 16 * 1514)])
def test_an_in_network_all_reduce_within_the_links_token_bucket_is_not_serialized(engine, method, burst):
    """HTB lets a link's burst and the frame that empties it pass at once. An all-reduce whose bytes on every link
    fit in that credit (1K elements, 4 hosts; inc-int8 fits the emulation's own one-frame burst, inc-int16 a bucket
    of 16 frames) then takes what it takes on links a thousand times faster: nothing waits for the rate. The model
    once charged the last packet its serialization even there (1.3 ms for inc-int8's last 319-byte frame at
    2 Mbit/s, about 15% of a 1K all-reduce on 4 hosts)."""
    from simulation.model import Evaluation, Scenario
    from simulation.params import EMULATION

    size = 4 * 1024
    times = []
    for rate in (EMULATION.nic_bw, 1000 * EMULATION.nic_bw):
        preset = EMULATION.with_(link_burst_bytes=burst or EMULATION.link_burst_bytes, nic_bw=rate, fabric_bw=rate)
        ev = Evaluation(Scenario(topology="fat-tree:4", gpus=4, methods=(method,), sizes=(size,)), preset, engine)
        ev.build()
        ev.solve()
        # within the credit: the burst plus the frame that empties it (at least a data frame of 256 lanes)
        assert float(ev.link_bytes(ev.plans[0], size).max()) <= preset.credit_bytes(63 + 256)
        times.append(ev.times(ev.plans[0], size))
    assert times[0] == pytest.approx(times[1], rel=1e-6, abs=1e-6)
