"""The all-to-alls in the model: their flows, the rail-only fabric, link loads at scale, and the emulation's points."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from simulation.alltoall import A2A_METHODS, fluid_loads, link_kind, load_table, summarise_loads
from simulation.calibrate import Calibration, check
from simulation.engine import Engine
from simulation.fabric import FabricError
from simulation.model import Evaluation, Scenario, ScenarioError, evaluate
from simulation.params import get_preset
from simulation.topologies import build
from tests.simulation.conftest import DATA, needs_simgrid

A2A_RUNS = DATA / "emulation-a2a"  # `p4ina emulate --preset sweep --methods a2a-direct,a2a-hier`, never fitted
H100 = get_preset("h100")
MIB = 1 << 20


def test_direct_is_every_pair_and_hier_the_group_then_the_rails() -> None:
    ev = Evaluation(Scenario(topology="rail:radix=16", gpus=64, preset="h100", methods=A2A_METHODS, sizes=(MIB,)))
    ev.build()
    direct, hier = (next(p for p in ev.plans if p.method == m) for m in A2A_METHODS)
    (stage,) = direct.phases[0].stages
    assert stage[0] == "a2a-direct" and stage[2] == 1 / 64
    assert len(ev.tables["a2a-direct"].src) == 64 * 63
    group, rail = hier.phases[0].stages
    assert group[2] == 1 / 8 and group[4] is True  # S/g to each server-mate, over NVLink
    assert rail[2] == 1 / 8 and rail[4] is False  # S/G to the same rail's GPU of each of the G = 8 other servers
    t = ev.tables
    assert len(t["a2a-group"].src) == 64 * 7 and len(t["a2a-rail"].src) == 64 * 7
    f = ev.fabric
    assert all(
        f.local[a] == f.local[b] and f.server[a] != f.server[b] for a, b in zip(t["a2a-rail"].src, t["a2a-rail"].dst)
    )


@needs_simgrid
def test_an_all_to_all_is_never_an_all_reduce_choice_and_its_bus_bandwidth_is_nccl_tests(engine: Engine) -> None:
    out = evaluate(
        Scenario(topology="fat-tree:4", gpus=8, methods=("ring-1nic", "a2a-direct", "adaptive"), sizes=(4096, 1 << 19)),
        engine,
    )
    by = {(r.method, r.size): r for r in out.rows}
    assert {r.choice for r in out.rows if r.method == "adaptive"} == {"ring-1nic"}
    r = by[("a2a-direct", 1 << 19)]
    assert r.busbw == pytest.approx(r.algbw * 7 / 8)
    # on a host link a direct all-to-all carries 7/8 of the buffer where the ring carries 2 x 7/8: about half the time
    assert 0.4 < r.time_s / by[("ring-1nic", 1 << 19)].time_s < 0.6


def test_rail_only_has_no_switch_between_rails_and_crosses_nvlink_instead() -> None:
    f = build("rail-only:radix=8", H100, 128)  # 16 servers of 8 GPUs: rails of 16 servers, two-tier (8 a leaf)
    rail_of = {}
    for g in range(f.n_gpus):
        rail_of[int(f.attach[g])] = int(f.local[g])
    reach: dict[int, set[int]] = {}
    for s, d in zip(f.link_src.tolist(), f.link_dst.tolist()):
        if s >= f.n_gpus and d >= f.n_gpus and f.tiers[s] >= 0 and f.tiers[d] >= 0:
            reach.setdefault(s, set()).add(d)
    # every switch reaches only switches of its own rail: walk from each rail's leaves
    for leaf, rail in rail_of.items():
        seen, todo = {leaf}, [leaf]
        while todo:
            for y in reach.get(todo.pop(), ()):
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        assert {rail_of[x] for x in seen if x in rail_of} == {rail}
    a = next(g for g in range(f.n_gpus) if f.server[g] == 0 and f.local[g] == 0)
    b = next(g for g in range(f.n_gpus) if f.server[g] == 9 and f.local[g] == 3)
    path = f.path(a, b, 0)
    mid = path[2]
    assert path[1] == f.nvswitch[0] and f.server[mid] == 0 and f.local[mid] == 3  # NVLink to rail 3, then rail 3
    assert all(f.tiers[x] >= 0 for x in path[3:-1])
    with pytest.raises(FabricError, match="holds 64 GPUs"):
        build("rail-only:radix=4", H100, 512)
    with pytest.raises(FabricError, match="several GPUs"):
        build("rail-only", get_preset("ndr"), 64)


@needs_simgrid
@pytest.mark.parametrize(
    "topology,gpus",
    [("clos:radix=16", 256), ("rail:radix=16", 256), ("rail-only:radix=8", 128), ("dragonfly+:radix=16", 256)],
)
def test_fluid_loads_are_the_flow_models_loads_without_its_flows(topology: str, gpus: int, engine: Engine) -> None:
    """NIC and NVLink loads are exact (no choice of path); every tier's total too (every shortest path uses the
    same number of links of each tier); the busiest link of a tier within 3% (even spreading against the flows'
    own routes). The flow model counts headers and acks: data over wire bytes is one factor for every link."""
    size = 1 << 28
    ev = Evaluation(
        Scenario(topology=topology, gpus=gpus, preset="h100", methods=A2A_METHODS, sizes=(size,)), engine=engine
    )
    ev.build()
    ev.solve()
    f = ev.fabric
    kinds = np.array([link_kind(f, i) for i in range(len(f.link_bw))])
    header = H100.wire_bytes(size / gpus) / (size / gpus)  # wire bytes per data byte of a full-size flow
    for plan in ev.plans:
        flow = ev.link_bytes(plan, size)
        fluid = fluid_loads(f, plan.job.gpus, plan.method, size)
        for kind in set(kinds.tolist()):
            sel = kinds == kind
            assert flow[sel].sum() == pytest.approx(fluid[sel].sum() * header, rel=0.01), (plan.method, kind)
            if kind in ("nic", "nvlink"):
                assert np.allclose(flow[sel], fluid[sel] * header, rtol=0.01), (plan.method, kind)
            else:
                assert flow[sel].max() == pytest.approx(fluid[sel].max() * header, rel=0.03), (plan.method, kind)


@needs_simgrid
def test_dragonfly_plus_global_links_carry_an_all_to_all_at_nic_load_but_a_pair_of_groups_far_more(
    engine: Engine,
) -> None:
    """The essays' disagreement in miniature (docs/simulation.md has it at 1k-16k GPUs): radix 16 Dragonfly+ of
    16 groups of 64 GPUs. Uniform all-to-all spreads over every global link at no more than the NICs' load; a
    job whose traffic goes between two groups only has just those groups' direct links."""
    rows = load_table(["dragonfly+:radix=16"], [1024], placements=("contiguous",), allreduce=("ring-1nic",))
    by = {r["method"]: r for r in rows}
    for m in A2A_METHODS:
        assert by[m]["top"] == "global" and by[m]["top_max"] <= by[m]["nic_max"] * 1.1
    f = build("dragonfly+:radix=16", H100, 1024)
    # two groups' GPUs exchanging with each other only (e.g. an all-to-all of a job split across two groups)
    ranks = [g for g in range(f.n_gpus) if g < 64 or 64 <= g < 128]
    load = fluid_loads(f, ranks, "a2a-direct", 1 << 28)
    s = summarise_loads(f, load, 1 << 28)
    assert s["busiest_kind"] == "global" and s["busiest"] > 2 * s["kinds"]["nic"]["max"]


@needs_simgrid
def test_the_emulated_all_to_alls_link_bound_points_are_predicted_within_15_percent(
    emulation_fit: Calibration, engine: Engine
) -> None:
    """Predicted with the costs fitted to the all-reduce runs (never to these), with each run's own measured
    wake-ups: every point the emulation labels link-bound within 15%."""
    calib = check(copy.copy(emulation_fit), A2A_RUNS, engine=engine)
    rows = calib.held_out
    assert {r["method"] for r in rows} == set(A2A_METHODS)
    link = [r for r in rows if r["bound"] == "link"]
    assert link, "no link-bound point in the runs"
    misses = [
        (r["folder"], r["method"], r["hosts"], r["elements"], f"{r['rel_error']:+.1%}")
        for r in link
        if abs(r["rel_error"]) > 0.15
    ]
    assert not misses, misses


def test_a2a_hier_needs_groups_of_one_size() -> None:
    with pytest.raises(ScenarioError, match="choose from"):
        Scenario(methods=("a2a-sideways",))
    ev = Evaluation(Scenario(topology="fat-tree:4", gpus=5, methods=A2A_METHODS, sizes=(4096,)))
    ev.build()
    assert "groups of one size" in ev.skipped["a2a-hier"] and "a2a-direct" not in ev.skipped
