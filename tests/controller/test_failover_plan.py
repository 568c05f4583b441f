"""Planning around failed switches and links that are down: another root or branch where the fat-tree has one,
names where it has not."""

from __future__ import annotations

import pytest

from controller import names as N
from controller.client import SwitchError
from controller.fattree import fat_tree
from controller.leafspine import leaf_spine
from controller.planner import HostsCutOffError, JobDoesNotFitError, JobSpec, PlanError, plan_job
from controller.routing import all_route_entries, lookup
from controller.state import State, StateError
from controller.topology import TopologyError
from tests.controller.test_planner import check_plan

K4 = fat_tree(4)
ALL16 = JobSpec.make(3, [h.name for h in K4.hosts])


def tree_switches(plan) -> set[str]:  # type: ignore[no-untyped-def]
    return {sp.switch for sp in plan.switches}


@pytest.mark.parametrize("tier", [1, 2])
def test_the_16_host_job_survives_any_aggregation_or_core_switch(tier: int) -> None:
    first = plan_job(K4, ALL16)
    for victim in sorted(tree_switches(first)):
        if K4.switch(victim).tier != tier:
            continue
        again = plan_job(K4, ALL16, installs={sp.switch: 1 for sp in first.switches}, exclude={victim})
        check_plan(K4, again)
        assert victim not in tree_switches(again)
        # every switch the old tree also used gets a new token: its cells start afresh
        for sp in again.switches:
            if sp.switch in tree_switches(first):
                assert sp.token != first.on(sp.switch).token


def test_a_failed_edge_switch_names_the_hosts_it_cuts_off() -> None:
    with pytest.raises(HostsCutOffError, match=r"edge switch e1 is down, cutting off h1, h2") as info:
        plan_job(K4, ALL16, exclude={"e1"})
    assert info.value.cut == {"e1": ("h1", "h2")}


def test_a_fabric_split_by_a_failed_switch_names_the_edge_switch_it_cuts_off() -> None:
    """The only spine fails: the leaves are alive but cannot reach each other, so no tree and no ring exists;
    the error names the edge switch cut off (not a ring fallback that would hang)."""
    topo = leaf_spine(2, 1, 2)
    spec = JobSpec.make(1, [h.name for h in topo.hosts])
    assert plan_job(topo, spec).root == "s1"
    with pytest.raises(HostsCutOffError, match="edge switch l2 has no live path to the others, cutting off h3, h4"):
        plan_job(topo, spec, exclude={"s1"})


def test_no_tree_that_fits_is_refused_with_the_reason() -> None:
    topo = leaf_spine(2, 2, 2)
    spec = JobSpec.make(1, [h.name for h in topo.hosts], slots=N.NUM_SLOTS)
    full = plan_job(topo, spec)
    with pytest.raises(JobDoesNotFitError, match="does not fit"):
        plan_job(topo, JobSpec.make(2, [h.name for h in topo.hosts], slots=N.NUM_SLOTS), [full])
    with pytest.raises(PlanError, match="unknown switch"):
        plan_job(topo, spec, exclude={"nope"})


def test_routes_avoid_a_failed_switch() -> None:
    victim = "c1"
    live = K4.without({victim})
    assert victim not in {s.name for s in live.switches} and len(live.hosts) == 16
    entries = all_route_entries(live)
    # every switch still reaches every host, and no next hop leads to the failed core
    for sw in live.switches:
        to_victim = {nb.port for nb in K4.switch_neighbors(sw.name) if nb.peer == victim}
        for h in live.hosts:
            for flow in range(8):
                port = lookup(entries[sw.name], h.ip, flow)
                assert port is not None and port not in to_victim


def test_failed_switches_survive_the_state_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    st = State(tmp_path / "s.json")
    st.failed = {"a3", "c1"}
    st.save()
    assert State.load(tmp_path / "s.json").failed == {"a3", "c1"}


def test_a_switch_whose_p4runtime_refuses_connections_is_unreachable() -> None:
    import socket

    from controller.fabric import Fabric

    with socket.socket() as s:  # a port nobody listens on: a killed switch process
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    topo = leaf_spine(2, 1, 1).with_grpc({"s1": f"127.0.0.1:{port}"})
    with Fabric(topo, None) as fabric:
        assert fabric.unreachable(["s1", "l1"], timeout=1.0) == {"s1"}  # l1 has no address: not probed, not dead


def test_a_listener_that_never_answers_is_alive_and_a_malformed_address_is_refused_by_name() -> None:
    """A stopped or busy switch process still completes the TCP handshake (the kernel does it): not dead."""
    import socket

    from controller.fabric import Fabric, refused

    with socket.socket() as deaf, socket.socket() as gone:
        deaf.bind(("127.0.0.1", 0))
        deaf.listen(1)  # never accept()s, never answers an RPC
        gone.bind(("127.0.0.1", 0))  # bound, not listening: refuses
        addrs = {"s1": f"127.0.0.1:{deaf.getsockname()[1]}", "l1": f"127.0.0.1:{gone.getsockname()[1]}"}
        assert refused(addrs, timeout=1.0) == {"l1"}
        with Fabric(leaf_spine(2, 1, 1).with_grpc(addrs), None) as fabric:
            assert fabric.unreachable(["s1", "l1", "l2"], timeout=1.0, attempts=1) == {"l1"}
    with pytest.raises(SwitchError, match="s1.*'nowhere' is not host:port"):
        refused({"s1": "nowhere"}, timeout=1.0)


def tree_links(plan) -> set[frozenset[str]]:  # type: ignore[no-untyped-def]
    return {frozenset((sp.switch, sp.parent)) for sp in plan.switches if sp.parent is not None}


def test_the_16_host_job_survives_any_link_of_its_tree_going_down() -> None:
    """Every switch-to-switch link of the tree, one at a time: the new plan (on the fabric without that link)
    is a valid tree that does not use it; the switches stay (their other links work)."""
    first = plan_job(K4, ALL16)
    assert tree_links(first)
    for link in sorted(tree_links(first), key=sorted):
        a, b = sorted(link)
        live = K4.without((), [(b, a)])
        again = plan_job(live, ALL16, installs={sp.switch: 1 for sp in first.switches})
        check_plan(live, again)
        assert link not in tree_links(again)


def test_routes_avoid_a_link_that_is_down() -> None:
    first = plan_job(K4, ALL16)
    down = next(iter(sorted(tree_links(first), key=sorted)))
    a, b = sorted(down)
    live = K4.without((), [(a, b)])
    entries = all_route_entries(live)
    for sw in live.switches:  # every switch still reaches every host, never through the dead link
        dead_ports = {nb.port for nb in K4.switch_neighbors(sw.name) if frozenset((sw.name, nb.peer)) == down}
        for h in live.hosts:
            for flow in range(8):
                port = lookup(entries[sw.name], h.ip, flow)
                assert port is not None and port not in dead_ports


def test_an_unknown_link_is_refused_by_name() -> None:
    with pytest.raises(TopologyError, match="no switch-to-switch link c1-e1"):
        K4.without((), [("e1", "c1")])  # an edge switch has no link to a core switch in a 3-tier fat-tree


def test_failed_links_survive_the_state_file_and_a_bad_one_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    st = State(tmp_path / "s.json")
    st.failed_links = {("a1", "c1")}
    st.save()
    assert State.load(tmp_path / "s.json").failed_links == {("a1", "c1")}
    (tmp_path / "bad.json").write_text('{"version": 1, "failed_links": [["a1"]]}')
    with pytest.raises(StateError, match="not a pair of switch names"):
        State.load(tmp_path / "bad.json")


def test_an_edge_switch_whose_uplinks_are_all_down_cuts_its_hosts_off_by_name() -> None:
    """e1's two links to the aggregation switches of its pod are down (the switch itself is alive): no tree and
    no ring reaches h1 and h2, and the error says so instead of handing the job to a ring that would hang."""
    ups = [(nb.peer, "e1") for nb in K4.switch_neighbors("e1")]
    assert len(ups) == 2
    with pytest.raises(HostsCutOffError, match=r"edge switch e1 has no live path to the others, cutting off h1, h2"):
        plan_job(K4.without((), ups), ALL16)
    # one uplink left is enough
    check_plan(K4.without((), ups[:1]), plan_job(K4.without((), ups[:1]), ALL16))


def test_a_state_file_naming_a_link_this_fabric_lacks_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from controller.api import Controller

    st = State(tmp_path / "s.json")
    st.failed_links = {("c1", "e1")}
    with pytest.raises(StateError, match="failed_links: no switch-to-switch link c1-e1"):
        Controller(K4, p4info=None, device_config=None, state=st)
