"""The tree planner: shape, consistency with the topology, non-overlap, spreading, refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller import names as N
from controller.fattree import fat_tree
from controller.jobentries import job_entries
from controller.leafspine import leaf_spine
from controller.planner import (
    DuplicateJobError,
    JobDoesNotFitError,
    JobPlan,
    JobSpec,
    PlanError,
    UnknownHostError,
    plan_job,
)
from controller.topology import Topology

K4 = fat_tree(4)


def check_plan(topo: Topology, plan: JobPlan) -> None:
    """Every invariant a plan must satisfy on its own."""
    nodes = {sp.switch: sp for sp in plan.switches}
    assert plan.switches[0].switch == plan.root
    root = nodes[plan.root]
    assert root.role == N.ROLE_ROOT and root.up_port == 0 and root.parent is None
    host_children = [c.node for sp in plan.switches for c in sp.children if c.node not in nodes]
    assert sorted(host_children) == sorted(plan.spec.hosts), "fan-ins at the edges add up to the members"
    total_fan_in = sum(sp.fan_in for sp in plan.switches)
    assert total_fan_in == len(plan.spec.hosts) + len(plan.switches) - 1, (
        "each member and each non-root switch is exactly one child"
    )
    for sp in plan.switches:
        assert sp.fan_in <= N.MAX_FAN_IN
        assert [c.index for c in sp.children] == list(range(sp.fan_in))
        ports = {n.port: n for n in topo.neighbors(sp.switch)}
        for c in sp.children:
            assert ports[c.port].peer == c.node, f"{sp.switch} port {c.port} does not face {c.node}"
        if sp.switch != plan.root:
            assert sp.role == N.ROLE_INNER
            assert ports[sp.up_port].peer == sp.parent
            parent = nodes[sp.parent]
            assert [c.port for c in parent.children if c.node == sp.switch] == [ports[sp.up_port].peer_port]
        assert 1 <= sp.job_index < N.MAX_JOBS and sp.mcast_grp > 0
        assert 0 <= sp.slot_base and sp.slot_base + sp.slot_count <= N.NUM_SLOTS
    for h in plan.spec.hosts:  # every member reaches the root by following up ports
        sw, hops = topo.host(h).switch, 0
        while sw != plan.root:
            sw = nodes[sw].parent
            hops += 1
            assert hops < 10
    # the tree reaches only as high as needed
    tiers = {topo.switch(topo.host(h).switch).tier for h in plan.spec.hosts}
    edges = {topo.host(h).switch for h in plan.spec.hosts}
    pods = {topo.switch(e).pod for e in edges}
    want = 0 if len(edges) == 1 else (1 if len(pods) == 1 else 2)
    assert topo.switch(plan.root).tier == want, tiers


def check_disjoint(plans: list[JobPlan]) -> None:
    per_switch: dict[str, list] = {}
    for p in plans:
        for sp in p.switches:
            per_switch.setdefault(sp.switch, []).append(sp)
    for sw, sps in per_switch.items():
        idx = [sp.job_index for sp in sps]
        assert len(set(idx)) == len(idx), f"{sw}: job indexes {idx}"
        grps = [sp.mcast_grp for sp in sps]
        assert len(set(grps)) == len(grps)
        spans = sorted((sp.slot_base, sp.slot_base + sp.slot_count) for sp in sps)
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert end <= start, f"{sw}: slot ranges overlap {spans}"


@pytest.mark.parametrize(
    ("hosts", "root_tier", "n_switches"),
    [
        (["h1"], 0, 1),
        (["h1", "h2"], 0, 1),
        (["h1", "h3"], 1, 3),
        (["h1", "h5"], 2, 5),
        ([f"h{i}" for i in range(1, 17)], 2, 13),
    ],
)
def test_tree_shapes(hosts: list[str], root_tier: int, n_switches: int) -> None:
    plan = plan_job(K4, JobSpec.make(1, hosts))
    check_plan(K4, plan)
    assert K4.switch(plan.root).tier == root_tier
    assert len(plan.switches) == n_switches


def test_all_hosts_k4_tree_details() -> None:
    plan = plan_job(K4, JobSpec.make(9, [h.name for h in K4.hosts]))
    root = plan.on(plan.root)
    assert root.fan_in == 4 and K4.switch(plan.root).tier == 2
    edge = plan.on("e1")
    assert edge.up_port in (3, 4) and [(c.port, c.node) for c in edge.children] == [(1, "h1"), (2, "h2")]


def test_jobs_spread_over_cores_and_aggregation() -> None:
    plans: list[JobPlan] = []
    for j in range(1, 5):
        plans.append(plan_job(K4, JobSpec.make(j, ["h1", "h5", "h9", "h13"]), plans))
    assert len({p.root for p in plans}) == 4, "four equal jobs get four different cores"
    pod_local: list[JobPlan] = []
    for j in range(1, 3):
        pod_local.append(plan_job(K4, JobSpec.make(j, ["h1", "h3"]), pod_local))
    assert {p.root for p in pod_local} == {"a1", "a2"}
    check_disjoint(plans)


def test_jobs_do_not_overlap_and_slots_run_out() -> None:
    plans: list[JobPlan] = []
    for j in range(1, 5):  # 4 x 128 slots fill the 512 slots of e1
        plans.append(plan_job(K4, JobSpec.make(j, ["h1", "h2"]), plans))
    check_disjoint(plans)
    assert sorted(p.on("e1").slot_base for p in plans) == list(range(0, N.NUM_SLOTS, 128))
    with pytest.raises(
        JobDoesNotFitError, match=r"job 99 does not fit: root e1: switch e1 has 0 contiguous free slots, job needs 128"
    ):
        plan_job(K4, JobSpec.make(99, ["h1"]), plans)
    # a smaller job still fits on a switch that is not full; a freed range is reused
    plan_job(K4, JobSpec.make(50, ["h3"], slots=128), plans)
    rest = [p for p in plans if p.job_id != 3]
    again = plan_job(K4, JobSpec.make(77, ["h1", "h2"]), rest)
    assert again.on("e1").slot_base == 256 and again.on("e1").job_index == 3


def test_job_index_limit() -> None:
    plans: list[JobPlan] = []
    for j in range(1, N.MAX_JOBS):
        plans.append(plan_job(K4, JobSpec.make(j, ["h1"], slots=8), plans))
    with pytest.raises(JobDoesNotFitError, match="already carries 15 jobs"):
        plan_job(K4, JobSpec.make(100, ["h1"], slots=8), plans)


def test_refusals_name_the_reason() -> None:
    first = plan_job(K4, JobSpec.make(5, ["h1", "h2"]))
    with pytest.raises(DuplicateJobError, match="job 5 is already installed"):
        plan_job(K4, JobSpec.make(5, ["h3"]), [first])
    with pytest.raises(UnknownHostError, match="unknown host.*h17.*bogus"):
        plan_job(K4, JobSpec.make(6, ["h1", "h17", "bogus"]))
    with pytest.raises(PlanError, match="no hosts"):
        JobSpec.make(7, [])
    with pytest.raises(PlanError, match="job id must be"):
        JobSpec.make(0, ["h1"])
    with pytest.raises(PlanError, match=r"lane type 'fp8': choose one of int32, int16, int8"):
        JobSpec.make(7, ["h1"], down_lanes="fp8")
    with pytest.raises(PlanError, match=r"lane type 'none': .*\(\"none\" is int32 now\)"):
        JobSpec.make(7, ["h1"], "none")
    with pytest.raises(PlanError, match="lane type 'int4'"):
        JobSpec.make(7, ["h1"], up_lanes="int4")
    with pytest.raises(PlanError, match="slots must be"):
        JobSpec.make(7, ["h1"], slots=2048)


def test_lane_defaults_and_plan_round_trip() -> None:
    hosts = [f"h{i}" for i in range(1, 17)]
    # narrow lanes both ways: the shift is the headroom of 16 contributions (log2 16 = 4)
    assert (
        JobSpec.make(1, hosts, "int8").shift,
        JobSpec.make(1, hosts, "int16").shift,
        JobSpec.make(1, hosts).shift,
    ) == (4, 4, 0)
    assert JobSpec.make(1, hosts, "int8").up_lanes == "int8" and JobSpec.make(1, hosts).up_lanes == "int32"
    assert JobSpec.make(1, hosts, "int8", up_lanes="int32").shift == 24  # int32 up, int8 down
    with pytest.raises(
        PlanError, match=r"job 1: 16 workers with int8 contributions and int8 results, shift 24: .* use shift 4"
    ):
        JobSpec.make(1, hosts, "int8", shift=24)
    plan = plan_job(K4, JobSpec.make(3, ["h1", "h9"], "int8", up_lanes="int32", slots=64))
    assert all(sp.result_type == N.ELEM_INT8 and sp.shift == 24 for sp in plan.switches)
    assert JobPlan.from_dict(plan.to_dict()) == plan


def test_job_entries_follow_design() -> None:
    plan = plan_job(K4, JobSpec.make(12, ["h1", "h2", "h3"]))
    entries = job_entries(plan)
    assert set(entries) == {sp.switch for sp in plan.switches}
    e1 = [str(e) for e in entries["e1"]]
    up = plan.on("e1").up_port
    assert e1[0] == "multicast group 1 [port 1 rid 0, port 2 rid 1]"
    assert e1[1:4] == [
        "job_ports[ingress_port=1, job_id=12] -> from_child(child_index=0)",
        "job_ports[ingress_port=2, job_id=12] -> from_child(child_index=1)",
        f"job_ports[ingress_port={up}, job_id=12] -> from_parent()",
    ]
    assert e1[-1].startswith(
        "job_config[job_id=12] -> set_job(fan_in=2, in_shift=0, job_index=1, mcast_grp=1, result_type=0, role=2, "
        "shift=0, slot_base=0, slot_count=128,"
    )
    root = [str(e) for e in entries[plan.root]]
    assert not any("from_parent" in e for e in root) and root[-1].endswith("up_port=0, up_shift=0, up_type=0)")


def test_leaf_spine_plans() -> None:
    t = leaf_spine(4, 2, 4)
    p1 = plan_job(t, JobSpec.make(1, ["h1", "h5", "h9"]))
    p2 = plan_job(t, JobSpec.make(2, ["h2", "h6"]), [p1])
    assert {p1.root, p2.root} == {"s1", "s2"}
    assert len(p1.switches) == 4


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sets(st.integers(1, 16), min_size=1, max_size=16), min_size=1, max_size=6))
def test_random_jobs_on_k4(jobs: list[set[int]]) -> None:
    plans: list[JobPlan] = []
    for j, members in enumerate(jobs, start=1):
        plan = plan_job(K4, JobSpec.make(j, [f"h{i}" for i in sorted(members)], slots=64), plans)
        check_plan(K4, plan)
        plans.append(plan)
    check_disjoint(plans)


@pytest.mark.parametrize("k", [6, 8])
def test_all_hosts_large_fat_tree(k: int) -> None:
    t = fat_tree(k)
    plan = plan_job(t, JobSpec.make(1, [h.name for h in t.hosts]))
    check_plan(t, plan)
    assert len(plan.switches) == k * k // 2 + k + 1  # all edges, one aggregation switch per pod, one core


def test_tokens_change_at_every_install_on_a_switch() -> None:
    installs: dict[str, int] = {}
    tokens = []
    for j in range(1, 300):  # install and remove the same job many times
        plan = plan_job(K4, JobSpec.make(j, ["h1", "h2"]), [], installs)
        tokens.append(plan.on("e1").token)
        installs["e1"] = installs.get("e1", 0) + 1
    assert all(1 <= t <= 255 for t in tokens)
    assert all(a != b for a, b in zip(tokens, tokens[1:]))
    assert len(set(tokens[:255])) == 255, "no token repeats within 255 installs"
    other = plan_job(K4, JobSpec.make(1, ["h3", "h4"]), [], installs)
    assert other.on("e2").token == 1  # counters are per switch


def test_narrow_jobs_spread_their_shift_over_the_tree_levels() -> None:
    """int8 lanes both ways on 16 hosts: edges and aggregation switches each shift off the bit their
    two-way sum gained, the core the remaining two; every partial stays int8 on every link."""
    plan = plan_job(K4, JobSpec.make(1, [f"h{i}" for i in range(1, 17)], "int8"))
    by = {sp.switch: sp for sp in plan.switches}
    root = by[plan.root]
    assert plan.spec.shift == 4 and root.in_shift == 2 and root.up_shift == 0
    for sp in plan.switches:
        if sp.switch.startswith("e"):
            assert (sp.up_type, sp.up_shift, sp.in_shift) == (N.ELEM_INT8, 1, 0)
        elif sp.switch.startswith("a"):
            assert (sp.up_type, sp.up_shift, sp.in_shift) == (N.ELEM_INT8, 1, 1)
    # the bound: 16 hosts' roundings (8), and half of 2^S for each rounding switch: 8 edges x 1, 4 x 2, root 8
    assert plan.error_lsb == 8 + 8 * 1 + 4 * 2 + 8


@settings(max_examples=40, deadline=None)
@given(st.sets(st.integers(1, 16), min_size=1, max_size=16), st.sampled_from(["int8", "int16"]))
def test_narrow_partials_never_overflow_their_lanes(members: set[int], lanes: str) -> None:
    """Whatever the members, every level's largest partial (after its rounding shift) fits the lanes,
    and the root's result fits the result lanes."""
    from wireformat import fixedpoint as fxp

    plan = plan_job(K4, JobSpec.make(1, [f"h{i}" for i in sorted(members)], lanes))
    bits = fxp.bits_of(lanes)
    q = plan.q_limit  # the hosts' limit, lowered by the planner where rounding could push a sum over
    assert (
        fxp.q_limit(len(members), bits, bits, plan.spec.shift) - 3
        <= q
        <= fxp.q_limit(len(members), bits, bits, plan.spec.shift)
    )
    by = {sp.switch: sp for sp in plan.switches}
    bound: dict[str, int] = {}

    def top(name: str) -> int:  # the largest |partial| a switch sends (or, the root, its largest result)
        sp = by[name]
        total = sum(q if c.node.startswith("h") else top(c.node) for c in sp.children)
        s = sp.up_shift if sp.parent else plan.spec.shift - sp.in_shift
        bound[name] = (total + ((1 << s) >> 1)) >> s
        return bound[name]

    assert top(plan.root) <= 2 ** (bits - 1) - 1
    assert all(v <= 2 ** (bits - 1) - 1 for v in bound.values())
