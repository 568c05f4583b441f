"""The NCCL model: published bus bandwidths, the tuner's choices, reduce-scatter and all-gather."""

from __future__ import annotations

import json

import pytest

from simulation import nccl
from simulation.nccl import Server, inc_collective, nccl_collective, tree_node_load
from simulation.nccl_anchors import DATA, check, figures, load
from simulation.params import H100, gbit
from tests.simulation.conftest import needs_simgrid

MIB, GIB = 1 << 20, 1 << 30
H100_SERVER = Server.of_preset(H100)


def test_every_published_busbw_is_within_tolerance():
    data = load()
    figs = figures()
    assert len(figs) >= 4 and data["tolerance"] == 0.15
    # single- and multi-node, H100 and A100-class, InfiniBand and RoCE, ring and tree
    assert {f.nodes == 1 for f in figs} == {True, False}
    assert {fig["arch"] for fig in data["figures"]} == {"hopper", "ampere"}
    assert {fig["transport"] for fig in data["figures"]} == {"ib", "roce"}
    assert {f.choice.split("/")[0] for f in figs} == {"ring", "tree"}
    for f in figs:
        assert f.source.startswith("https://") and f.quote, f.id
        assert abs(f.rel_error) <= data["tolerance"], (f.id, f.published, f.model)
    assert check()["nccl_busbw_max_rel_error"] == max(abs(f.rel_error) for f in figs)


def test_a_wrong_setup_is_caught(tmp_path):
    """Half the NICs, or a tree as fast as the ring, puts figures outside the tolerance: the check can fail."""
    data = json.loads(DATA.read_text())
    for fig in data["figures"]:
        fig["nics"] = max(1, fig["nics"] // 2)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(data))
    assert check(wrong)["nccl_busbw_max_rel_error"] > 0.15
    by_id = {f.id: f for f in figures()}
    ring, tree = by_id["h100-5nodes-4x400roce-ring"], by_id["h100-5nodes-4x400roce-tree"]
    assert (ring.model - tree.published) / tree.published > 0.15  # NCCL's tree efficiencies are needed


def test_ring_uses_every_nic_and_nvlink_bounds_one_server():
    big = 8 * GIB
    multi = nccl_collective("all-reduce", H100_SERVER, 16, big, "nccl-ring")
    assert multi.choice == "ring/Simple"
    assert multi.busbw == pytest.approx(8 * H100_SERVER.nic_bw, rel=0.05)  # 8 NICs, not one (less 1,200 steps)
    one = nccl_collective("all-reduce", H100_SERVER, 1, big, "nccl-ring")
    assert one.busbw == pytest.approx(H100_SERVER.nvlink_bw, rel=0.01)
    half = Server(8, 4, gbit(400), H100_SERVER.nic_payload, 18, "hopper")
    assert nccl_collective("all-reduce", half, 16, big, "nccl-ring").busbw == pytest.approx(multi.busbw / 2, rel=0.05)


def test_double_binary_tree_loads_and_the_two_server_case():
    assert tree_node_load(2) == 1.0  # each server sends S: half the ring's 2(N-1)/N
    assert tree_node_load(1000) == 2.0
    two = nccl_collective("all-reduce", H100_SERVER, 2, 8 * GIB, "nccl-tree")
    ring = nccl_collective("all-reduce", H100_SERVER, 2, 8 * GIB, "nccl-ring")
    many = nccl_collective("all-reduce", H100_SERVER, 64, 8 * GIB, "nccl-tree")
    assert two.busbw > many.busbw  # NVIDIA/nccl#946: on two servers the tree goes beyond the network
    assert ring.busbw > many.busbw  # at scale the tree pays NCCL's tree efficiency (x0.92, x0.85, caps)


def test_the_tuner_picks_tree_for_small_and_ring_for_large_on_few_servers():
    small = nccl_collective("all-reduce", H100_SERVER, 12_500, 64 << 10, "nccl")
    assert small.choice.startswith("tree/LL")
    ring_small = nccl_collective("all-reduce", H100_SERVER, 12_500, 64 << 10, "nccl-ring")
    assert ring_small.time_s > 1000 * small.time_s  # 200,000 ring steps against 2 log2(12,500) tree levels
    assert nccl_collective("all-reduce", H100_SERVER, 2, GIB, "nccl").choice == "ring/Simple"
    for size in (64 << 10, MIB, 256 * MIB, GIB):
        best = nccl_collective("all-reduce", H100_SERVER, 16, size, "nccl")
        for m in ("nccl-ring", "nccl-tree"):
            assert best.time_s <= nccl_collective("all-reduce", H100_SERVER, 16, size, m).time_s
    with pytest.raises(nccl.NcclError, match="no tree reduce-scatter"):
        nccl_collective("reduce-scatter", H100_SERVER, 4, MIB, "nccl-tree")


@pytest.mark.parametrize("nodes", [1, 4, 100])
def test_reduce_scatter_and_all_gather_move_the_textbook_bytes(nodes):
    s = 256 * MIB
    n = nodes * 8
    rs = nccl_collective("reduce-scatter", H100_SERVER, nodes, s, "nccl-ring")
    ag = nccl_collective("all-gather", H100_SERVER, nodes, s, "nccl-ring")
    ar = nccl_collective("all-reduce", H100_SERVER, nodes, s, "nccl-ring")
    assert rs.sent_per_rank == pytest.approx((n - 1) / n * s)
    assert ag.sent_per_rank == rs.sent_per_rank and ar.sent_per_rank == pytest.approx(2 * rs.sent_per_rank)
    # the same per-direction bus bandwidth: all-reduce's bandwidth term is reduce-scatter's plus all-gather's
    bw = {
        c: [t for t in nccl.tune(c, H100_SERVER, nodes) if (t.algo, t.proto) == ("ring", "Simple")][0]
        for c in ("all-reduce", "reduce-scatter")
    }
    assert s / bw["all-reduce"].bandwidth == pytest.approx(2 * s / bw["reduce-scatter"].bandwidth)
    assert rs.busbw == pytest.approx(ag.busbw)
    # and its time about theirs: the same steps, less one start, plus the Simple ring's plateau (tuning.cc)
    assert ar.time_s == pytest.approx(rs.time_s + ag.time_s, rel=0.1)


def test_in_network_reduce_scatter_delivers_each_shard_to_its_owner_only():
    s, nodes = 256 * MIB, 64
    flat = H100.with_(gpus_per_server=1, nvlink_bw=0.0)
    rs = inc_collective("reduce-scatter", flat, nodes, s, gpus_per_node=1)
    ag = inc_collective("all-gather", flat, nodes, s, gpus_per_node=1)
    ar = inc_collective("all-reduce", flat, nodes, s, gpus_per_node=1)
    assert rs.sent_per_rank == pytest.approx(s) and ag.sent_per_rank == pytest.approx(s / nodes)
    # one direction carries S each: the same time as an all-reduce (S up and S down at once), no more
    assert rs.time_s == pytest.approx(ar.time_s, rel=1e-6) and ag.time_s == pytest.approx(ar.time_s, rel=1e-6)
    int8 = inc_collective("reduce-scatter", flat, nodes, s, lanes="int8", gpus_per_node=1)
    assert int8.time_s < rs.time_s / 3  # narrow lanes shrink the contributions
    hier = inc_collective("all-reduce", H100, 16, s)
    assert hier.time_s < ar.time_s  # NVLink first: each rail's tree carries S/8


def test_the_preset_s_links_set_the_rates():
    """NCCL's methods read the preset: half the NIC rate halves a multi-server ring's bus bandwidth, NVLink bounds
    one server's, and a preset without GPUs is refused by name."""
    big = 8 * GIB
    full = nccl_collective("all-reduce", Server.of_preset(H100), 8, big, "nccl-ring")
    slow = nccl_collective("all-reduce", Server.of_preset(H100.with_(nic_bw=gbit(200))), 8, big, "nccl-ring")
    assert slow.busbw == pytest.approx(full.busbw / 2, rel=0.03)
    assert Server.of_preset(H100).nvlinks == 18 and Server.of_preset(H100).nvlink_bw == pytest.approx(370.8e9)
    from simulation.params import NDR

    with pytest.raises(nccl.NcclError, match="describes no GPUs"):
        Server.of_preset(NDR)


@needs_simgrid
def test_the_model_runs_nccl_s_methods_for_each_job(engine):
    from simulation.model import Scenario, evaluate

    sizes = (MIB, 256 * MIB)
    sc = Scenario(
        topology="rail:radix=16", gpus=64, preset="h100", methods=("nccl", "inc-int8", "adaptive"), sizes=sizes
    )
    rows = {(r.method, r.size): r for r in evaluate(sc, engine).rows}
    for size in sizes:
        want = nccl_collective("all-reduce", H100_SERVER, 8, size, "nccl")
        assert rows[("nccl", size)].time_s == pytest.approx(want.time_s) and rows[("nccl", size)].choice == want.choice
        best = min(rows[(m, size)].time_s for m in ("nccl", "inc-int8"))
        assert rows[("adaptive", size)].time_s == best
