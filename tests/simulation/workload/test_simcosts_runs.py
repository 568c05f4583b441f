"""The system layer on the simulator, and the validation against published training runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulation import methods as methods_mod
from simulation import nccl
from simulation.engine import Engine
from simulation.model import Scenario, evaluate
from simulation.params import H100
from simulation.workload import costs as costs_mod
from simulation.workload import hardware, runs, simcosts
from simulation.workload.costs import CollectiveError
from simulation.workload.layout import Layout
from simulation.workload.simcosts import SimCollectives
from tests.simulation.conftest import needs_simgrid

pytestmark = needs_simgrid
A2A = ("a2a-direct", "a2a-hier")


def test_one_group_costs_what_the_simulator_says_for_that_job(engine: Engine) -> None:
    """A data-parallel 'group' that is the whole job: the all-reduce is the simulator's own row."""
    methods = ("ring-1nic", "tree-1nic", "inc-int32", "nccl", "nccl-tree")
    costs = SimCollectives("rail:radix=16", H100, 64, engine=engine)
    costs.prepare("dp", [tuple(range(64))], methods)
    rows = evaluate(
        Scenario(topology="rail:radix=16", gpus=64, preset="h100", methods=methods, sizes=(1 << 20,)), engine
    ).rows
    assert {r.method for r in rows} == set(methods)
    for r in rows:
        assert costs.allreduce(r.method, (1 << 20) / 4, "dp") == pytest.approx(r.time_s, rel=1e-9)
    # derived collectives: ring reduce-scatter half the ring, in-network the all-reduce's time (a flat tree)
    ring = costs.allreduce("ring-1nic", 1e6, "dp")
    assert costs.reduce_scatter("ring-1nic", 1e6, "dp") == pytest.approx(ring / 2)
    assert costs.reduce_scatter("tree-1nic", 1e6, "dp") == pytest.approx(ring / 2)  # NCCL has no tree reduce-scatter
    assert costs.reduce_scatter("inc-int32", 1e6, "dp") == pytest.approx(costs.allreduce("inc-int32", 1e6, "dp"))
    assert costs.allreduce("adaptive", 1e6, "dp") == min(costs.allreduce(m, 1e6, "dp") for m in methods)
    with pytest.raises(CollectiveError, match="not prepared"):
        costs.allreduce("ring-1nic", 1e6, "edp")


@pytest.mark.parametrize("elements", [1e5, 16e6])
def test_nccl_methods_run_nccls_own_reduce_scatter_and_all_gather(engine: Engine, elements: float) -> None:
    """nccl, nccl-ring: NCCL's reduce-scatter/all-gather for the group's shape (8 servers of 8 GPUs), not half an
    all-reduce; nccl-tree's are the ring's (NCCL has none); -bf16 reduces 2-byte elements; old names still read."""
    costs = SimCollectives("rail:radix=16", H100, 64, engine=engine)
    costs.prepare("dp", [tuple(range(64))], ("nccl", "nccl-ring", "nccl-tree", "ring"))
    server = nccl.Server.of_preset(H100)
    for m in ("nccl", "nccl-ring"):
        rs = nccl.nccl_collective("reduce-scatter", server, 8, int(elements * 4), m, 8).time_s
        ag = nccl.nccl_collective("all-gather", server, 8, int(elements * 2), m, 8).time_s
        assert costs.reduce_scatter(m, elements, "dp") == pytest.approx(rs, rel=1e-9)
        assert costs.all_gather(m, elements * 2, "dp") == pytest.approx(ag, rel=1e-9)
    assert costs.reduce_scatter("nccl", elements, "dp") != pytest.approx(costs.allreduce("nccl", elements, "dp") / 2)
    assert costs.reduce_scatter("nccl-tree", elements, "dp") == costs.reduce_scatter("nccl-ring", elements, "dp")
    assert costs.allreduce("nccl-bf16", elements, "dp") == costs.allreduce("nccl", elements / 2, "dp")
    assert costs.allreduce("ring", elements, "dp") == costs.allreduce("ring-1nic", elements, "dp")
    with pytest.raises(CollectiveError, match="not prepared"):
        costs.allreduce("inc-int8", elements, "dp")


def test_a_group_of_one_gpu_a_server_gets_one_nic(engine: Engine) -> None:
    """TP 8 fills a server, so each of its 8 data-parallel groups has one GPU there and all 8 reduce at once:
    NCCL's time is that of a server with one NIC, not of one GPU driving all eight."""
    lo = Layout(tp=8, dp=8)
    costs = SimCollectives("rail:radix=16", H100, lo.gpus, engine=engine)
    costs.prepare("dp", lo.groups("dp"), ("nccl",))
    server = nccl.Server.of_preset(H100)
    one = replace(server, nics=1)
    want = nccl.nccl_collective("reduce-scatter", one, 8, 1 << 28, "nccl", 1).time_s
    assert costs.reduce_scatter("nccl", (1 << 28) / 4, "dp") == pytest.approx(want, rel=1e-9)
    assert want > 4 * nccl.nccl_collective("reduce-scatter", server, 8, 1 << 28, "nccl", 1).time_s


def test_alltoall_is_the_simulators_for_the_group_and_pods_apart_are_alike(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An expert-parallel group's all-to-all is the simulator's a2a-direct/a2a-hier for that job; four groups,
    each a pod of a radix-16 fat-tree (contiguous), cost what the first alone costs (simcosts' reduction)."""
    assert costs_mod.A2A_METHODS == methods_mod.A2A_METHODS
    lo = Layout(dp=256, ep=64)
    rows = evaluate(
        Scenario(topology="clos:radix=16", gpus=64, cluster_gpus=256, preset="h100", methods=A2A, sizes=(1 << 24,)),
        engine,
    ).rows
    every = SimCollectives("clos:radix=16", H100, 256, engine=engine)
    every.prepare("ep", lo.groups("ep"), A2A)
    for r in rows:
        assert every.alltoall(r.method, 1 << 24, "ep") == pytest.approx(r.time_s, rel=1e-9)
    monkeypatch.setattr(simcosts, "EP_GROUPS_SOLVED", 1)
    first = SimCollectives("clos:radix=16", H100, 256, engine=engine)
    first.prepare("ep", lo.groups("ep"), A2A)
    assert len(first.dims["ep"].ev.plans) == 2 and len(every.dims["ep"].ev.plans) == 8  # type: ignore[union-attr]
    for m in A2A:
        assert first.alltoall(m, 1 << 24, "ep") == pytest.approx(every.alltoall(m, 1 << 24, "ep"), rel=1e-9)
    # scattered, the groups share the pods' upper links and are not alike: the reduction does not hold there
    spread = SimCollectives("clos:radix=16", H100, 256, "scattered", seed=1, engine=engine)
    spread.prepare("ep", lo.groups("ep"), A2A)
    assert spread.alltoall("a2a-direct", 1 << 24, "ep") > every.alltoall("a2a-direct", 1 << 24, "ep")
    with pytest.raises(CollectiveError, match="choose from"):
        every.alltoall("a2a-ring", 1 << 24, "ep")


def test_groups_sharing_links_are_slower_than_one_alone(engine: Engine) -> None:
    """Eight rail groups at once (scattered servers) against the same group alone: contention shows."""
    lo = Layout(tp=8, dp=16)
    alone = SimCollectives("clos:radix=16,oversub=2", H100, 128, "scattered", seed=1, engine=engine)
    alone.prepare("dp", lo.groups("dp")[:1], ("ring-1nic",))
    together = SimCollectives("clos:radix=16,oversub=2", H100, 128, "scattered", seed=1, engine=engine)
    together.prepare("dp", lo.groups("dp"), ("ring-1nic",))
    assert together.allreduce("ring-1nic", 64e6, "dp") > 1.2 * alone.allreduce("ring-1nic", 64e6, "dp")


def test_pipeline_send_is_latency_plus_bytes_at_the_nic(engine: Engine) -> None:
    lo = Layout(tp=8, pp=4, dp=2)
    costs = SimCollectives("clos:radix=16", H100, lo.gpus, engine=engine)
    costs.prepare("pp", lo.groups("pp"), ())
    t = costs.p2p(50e6, "pp")
    assert t == pytest.approx(50e6 / H100.nic_bw, rel=0.01)
    assert t > 50e6 / H100.nic_bw


def test_the_stored_compute_rates_are_the_fit(engine: Engine) -> None:
    """hardware.GPUS holds what runs.fit_compute gives from the 'fit' runs (not numbers set by hand)."""
    fitted = runs.fit_compute(engine)
    for name, gpu in hardware.GPUS.items():
        assert gpu.gemm_flops == pytest.approx(fitted[name].gemm_flops, rel=0.002), name
        assert gpu.h_half == pytest.approx(fitted[name].h_half, rel=0.002), name


def test_held_out_runs_are_predicted_within_the_tolerance(engine: Engine) -> None:
    v = runs.validate(engine)
    held = [r for r in v.rows if r["role"] == "held-out"]
    assert len(held) >= 5 and {r["source"] for r in held} == {runs.LLAMA3_T4, runs.NARAYANAN_T1}
    for r in v.rows:
        limit = runs.WORKLOAD_TOLERANCE if r["role"] == "held-out" else 0.001  # the fit reproduces its anchors
        assert abs(r["rel_error"]) <= limit, r
        assert 0 < r["mfu"] < 1 and sum(r["breakdown"].values()) == pytest.approx(r["step_s"])
    assert v.max_rel_error == max(abs(r["rel_error"]) for r in held)


def test_the_validation_can_fail(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compute rate 20% off puts the held-out runs outside the tolerance: the check is not vacuous."""
    slow = {k: g.with_(gemm_flops=g.gemm_flops * 0.8) for k, g in hardware.GPUS.items()}
    monkeypatch.setattr(runs, "get_gpu", lambda name: slow[name])
    v = runs.validate(engine, runs=tuple(r for r in runs.RUNS if r.model in ("gpt-530b", "llama3-405b")))
    assert v.max_rel_error > runs.WORKLOAD_TOLERANCE


def test_a_tree_that_cannot_span_the_rails_is_skipped_not_fatal(engine: Engine) -> None:
    """Rail-only has no switch joining the rails: a group of whole servers gets no aggregation tree, NCCL runs."""
    costs = SimCollectives("rail-only:radix=16", H100, 64, engine=engine)
    costs.prepare("dp", [tuple(range(64))], ("nccl", "inc-int32"))
    assert "inc-int32" in costs.skipped("dp") and costs.methods("dp") == ("nccl",)
    assert costs.allreduce("nccl", 1e6, "dp") > 0
    with pytest.raises(CollectiveError, match="does not apply"):
        costs.allreduce("inc-int32", 1e6, "dp")
