"""Control-plane faults against running embedded switches (no Mininet): a controller restarted with the
switches running reconciles with its state file, a lost state file hands out no token a switch still holds,
and a switch restarted with empty tables is found and re-installed by `p4ina verify --repair`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller import installer as I
from controller import names as N
from controller.api import DEFAULT_BMV2_JSON, DEFAULT_P4INFO, Controller
from controller.cli import main as cli_main
from controller.client import update
from controller.entities import TableEntry
from controller.fattree import fat_tree
from controller.installer import read_entities
from controller.planner import DuplicateJobError, next_token
from controller.state import State
from controller.topology import Topology
from emulation.localnet import embedded_switches
from softswitch.cli import start_switch
from tests.controller.test_integration import _contribution
from wireformat import AGG

TIMEOUT = 120.0  # a loaded machine makes RPCs slow; nothing here is about speed


@pytest.fixture(scope="module")
def net() -> Iterator[tuple[Topology, dict[str, Any]]]:
    """fat_tree(2): e1 (h1), e2 (h2), a1, a2, c1; pipeline pushed once."""
    with embedded_switches(fat_tree(2)) as (live, handles):
        with Controller(live, timeout=TIMEOUT) as first:
            first.push_pipeline()
        yield live, handles


def controller(topo: Topology, path: Path, election_id: int = 1) -> Controller:
    return Controller(
        topo,
        p4info=DEFAULT_P4INFO,
        device_config=DEFAULT_BMV2_JSON,
        state=State.load(path),
        election_id=election_id,
        timeout=TIMEOUT,
    )


@pytest.fixture
def topo(net: tuple[Topology, dict[str, Any]], tmp_path: Path) -> Iterator[Topology]:
    live, _ = net
    with controller(live, tmp_path / "wipe.json") as c:
        c.restore_pipelines()
        I.repair(c.fabric, State())  # an empty state: delete whatever an earlier test left
    yield live


def job_entries_on(ctl: Controller, switch: str, job_id: int) -> list:
    return [
        e
        for e in read_entities(ctl.fabric.client(switch), ctl.schema, N.JOB_TABLES, groups=())
        if dict(e.match).get(N.K_JOB_ID) == job_id
    ]


def test_restarted_controller_reconciles_with_its_state(topo: Topology, tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    with controller(topo, path) as ctl:
        ctl.install_routes()
        ctl.install_job(5, ["h1", "h2"])
        six = ctl.install_job(6, ["h1", "h2"])
        installs = dict(ctl.state.installs)
    # while this controller is down: job 6 loses an entry on e1, and e1 gains a job the state does not know,
    # with the token this state would hand out next there
    nxt = next_token(installs["e1"])
    with controller(topo, tmp_path / "other.json") as other:
        cl = other.fabric.client("e1")
        lost = [e for e in job_entries_on(other, "e1", 6) if e.table == N.T_JOB_PORTS][0]
        cl.write([update("delete", lost.encode(other.schema))])
        cl.write([update("insert", stray_job(9, nxt).encode(other.schema))])
    with controller(topo, path) as ctl:  # the restart: the same state file
        rec = ctl.reconcile()
        assert rec.ok == [5] and rec.drifted == {6: ["e1"]} and rec.unknown == {9: ["e1"]}, rec
        assert not rec.no_pipeline and not rec.clean
        # the token the stray entry holds is not handed out again: e1's count moved past it, and was saved
        assert rec.tokens == {"e1": [installs["e1"], installs["e1"] + 1]}, rec.tokens
        assert next_token(ctl.state.installs["e1"]) != nxt
        assert State.load(path).installs["e1"] == installs["e1"] + 1
        fixed = ctl.reconcile(fix=True)
        assert fixed.repaired["e1"].inserted == 1 and fixed.repaired["e1"].deleted == 1, fixed.repaired
        again = ctl.reconcile()
        assert again.clean and again.ok == [5, 6] and not again.tokens, again
        assert all(d.clean for d in ctl.verify().values())
        assert job_entries_on(ctl, "e1", 9) == []
        assert six.on("e1").token != next_token(ctl.state.installs["e1"])


def stray_job(job_id: int, token: int) -> TableEntry:
    """A job_config entry no state file knows (left by another controller), on slots no plan here uses."""
    return TableEntry.make(
        N.T_JOB_CONFIG,
        {N.K_JOB_ID: job_id},
        N.A_SET_JOB,
        dict(
            job_index=9,
            role=1,
            fan_in=1,
            slot_base=400,
            slot_count=1,
            mcast_grp=99,
            up_port=0,
            result_type=0,
            shift=0,
            token=token,
            up_type=0,
            up_shift=0,
            in_shift=0,
        ),
    )


def test_a_lost_state_file_reuses_no_token(
    net: tuple[Topology, dict[str, Any]], topo: Topology, tmp_path: Path
) -> None:
    _, handles = net
    h1 = topo.host("h1")
    path = tmp_path / "state.json"
    with controller(topo, path) as ctl:
        old = ctl.install_job(5, ["h1", "h2"])
        root = old.on(old.root)  # fan-in 2: a1's and a2's partial sums meet there
        sw, (first, second) = handles[old.root].switch, [c.port for c in root.children]
        # the first child's contribution to slot 0 waits for the second's: the cell keeps job 5's token and value
        assert sw.process_packet(first, _contribution(h1.ip, 5, 0, 5)) == []
        ctl.remove_job(5)
    path.unlink()  # the state file is lost
    with controller(topo, tmp_path / "fresh-a.json") as ctl:
        rec = ctl.reconcile()  # reads back the token the root's cell holds
        assert rec.clean and rec.tokens[old.root] == [0, root.token], rec
    with controller(topo, tmp_path / "fresh-b.json") as ctl:  # no reconcile: the install reads the tokens itself
        new = ctl.install_job(5, ["h1", "h2"])  # the same job again, as its owner would after losing the state
        assert new.root == old.root and new.on(new.root).slot_base == root.slot_base  # the same cells...
        assert new.on(new.root).token != root.token  # ...with a token they do not hold
        # so the second child's contribution starts a new round instead of completing the old install's stale
        # one (which would send 5 + 7 down to the hosts: the lane checksums agree, the same job id in both)
        assert sw.process_packet(second, _contribution(h1.ip, 5, 0, 7)) == []
        ctl.remove_job(5)


def _lanes_of(frame: bytes) -> tuple[dict[str, int], tuple[int, ...]]:
    agg = frame[14 + 20 + 8 :]
    h = AGG.unpack_header(agg)
    return h, AGG.lane_struct(h["elem_type"]).unpack_from(agg, AGG.header_bytes)


def test_two_controllers_with_their_own_state_files_keep_apart(
    net: tuple[Topology, dict[str, Any]], topo: Topology, tmp_path: Path
) -> None:
    """A second controller (its own state file) plans around the jobs the switches hold for the first: other
    job indexes, multicast groups and slots; the first's job id is refused by name. Without the read-back both
    jobs get slots from 0 on and their rounds overwrite each other's cells (the traffic below checks it)."""
    _, handles = net
    with controller(topo, tmp_path / "a.json") as a:
        five = a.install_job(5, ["h1", "h2"])
    try:
        with controller(topo, tmp_path / "b.json", election_id=2) as b:
            with pytest.raises(DuplicateJobError, match=r"job 5 is already on .*another controller"):
                b.install_job(5, ["h1", "h2"])
            six = b.install_job(6, ["h1", "h2"])
            try:
                assert not b.state.jobs.get(5)
                for sp in six.switches:  # fat_tree(2): one tree, c1 over a1/e1 and a2/e2, for both jobs
                    x = five.on(sp.switch)
                    assert (sp.job_index, sp.mcast_grp) != (x.job_index, x.mcast_grp)
                    assert sp.slot_base >= x.slot_base + x.slot_count or x.slot_base >= sp.slot_base + sp.slot_count
                root = handles[five.root].switch
                first, second = [c.port for c in five.on(five.root).children]
                h1 = topo.host("h1")
                assert root.process_packet(first, _contribution(h1.ip, 5, 0, 5)) == []  # job 5's round waits
                assert root.process_packet(first, _contribution(h1.ip, 6, 0, 1)) == []
                down6 = root.process_packet(second, _contribution(h1.ip, 6, 0, 2))  # job 6's round completes...
                assert down6 and all(_lanes_of(f)[1] == (3,) * AGG.num_lanes for _, f in down6)
                down5 = root.process_packet(second, _contribution(h1.ip, 5, 0, 7))  # ...and job 5's cell kept its 5
                assert down5, "job 5's round was lost: job 6 used its cell"
                h, lanes = _lanes_of(down5[0][1])
                assert h["job_id"] == 5 and lanes == (12,) * AGG.num_lanes
            finally:
                b.remove_job(6)
    finally:
        with controller(topo, tmp_path / "a.json", election_id=3) as a:
            a.remove_job(5)


def test_restarted_switch_is_found_and_reinstalled_by_verify_repair(
    net: tuple[Topology, dict[str, Any]], topo: Topology, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, handles = net
    path, topo_file = tmp_path / "state.json", tmp_path / "topo.json"
    topo.save(topo_file)
    with controller(topo, path) as ctl:
        ctl.install_routes()
        plan = ctl.install_job(5, ["h1", "h2"])
        routes_e1 = len(read_entities(ctl.fabric.client("e1"), ctl.schema, N.ROUTE_TABLES, groups=()))
        want_e1 = len(job_entries_on(ctl, "e1", 5))
    # e1 restarts: a new process on the same address, empty tables, no pipeline
    addr = handles["e1"].grpc_addr
    handles["e1"].stop()
    handles["e1"] = start_switch(topo.switch("e1").device_id, addr, name="e1")
    st = ["--topology", str(topo_file), "--state", str(path), "--timeout", str(TIMEOUT), "--election-id", "2"]

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli_main(list(argv))
        cap = capsys.readouterr()
        return code, cap.out, cap.err

    code, out, err = run("verify", *st, "--json")
    assert code == 1, err
    drift = json.loads(out)
    assert set(drift["switches"]) == {"e1"}, drift
    assert drift["switches"]["e1"]["missing"][0] == I.NO_PIPELINE
    assert len(drift["switches"]["e1"]["missing"]) > want_e1 + routes_e1  # and every entry of it
    code, out, err = run("verify", *st, "--repair")
    assert code == 0, err
    assert "e1 (+" in out
    code, out, err = run("verify", *st)
    assert code == 0 and "match the state" in out, (out, err)
    with controller(topo, path, election_id=3) as ctl:
        assert len(job_entries_on(ctl, "e1", 5)) == want_e1
        assert len(read_entities(ctl.fabric.client("e1"), ctl.schema, N.ROUTE_TABLES, groups=())) == routes_e1
        assert ctl.state.jobs[5].on("e1").token == plan.on("e1").token  # the state's plan, as it was


def test_the_liveness_probe_finds_the_killed_switch_and_a_restarted_one_alive(
    net: tuple[Topology, dict[str, Any]], topo: Topology, tmp_path: Path
) -> None:
    """The fail-over's probe on running switches: all alive; a killed one dead (its address refuses connections);
    the same address served by a restarted process alive again."""
    _, handles = net
    names = [s.name for s in topo.switches]
    with controller(topo, tmp_path / "state.json") as ctl:
        assert ctl.unreachable(names, timeout=TIMEOUT, attempts=1) == set()
        addr = handles["a1"].grpc_addr
        handles["a1"].stop()
        assert ctl.unreachable(names, timeout=TIMEOUT) == {"a1"}
        handles["a1"] = start_switch(topo.switch("a1").device_id, addr, name="a1")
        assert ctl.unreachable(names, timeout=TIMEOUT) == set()
        ctl.fabric.forget("a1")  # a session to it, if one was opened, died with the old process
        ctl.restore_pipelines()  # the restarted switch as the next tests expect it


def test_reconcile_cli_reports_and_fixes(topo: Topology, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, topo_file = tmp_path / "state.json", tmp_path / "topo.json"
    topo.save(topo_file)
    st = ["--topology", str(topo_file), "--state", str(path), "--timeout", str(TIMEOUT), "--election-id", "4"]
    with controller(topo, tmp_path / "other.json", election_id=4) as other:  # a job this state does not know
        other.fabric.client("e2").write([update("insert", stray_job(9, 200).encode(other.schema))])
    code = cli_main(["reconcile", *st, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and not out["clean"] and set(out["unknown"]) == {"9"}, out
    assert cli_main(["reconcile", *st, "--fix"]) == 0
    assert "repaired:" in capsys.readouterr().out
    assert cli_main(["reconcile", *st, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["clean"] is True


def test_safe_installs_skips_the_tokens_a_switch_holds() -> None:
    assert I.safe_installs("e1", 0, set()) == 0
    assert I.safe_installs("e1", 0, {1, 2, 3}) == 3  # next token 4
    assert next_token(I.safe_installs("e1", 254, {255, 1})) == 2  # past the wrap, 1 held too
    with pytest.raises(I.InstallError, match="switch e1: all 255 install tokens are held"):
        I.safe_installs("e1", 7, set(range(1, 256)))


def test_a_session_reads_each_switch_back_once_and_remembers_its_own_installs(
    topo: Topology, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While this session is primary nothing changes on a switch but what it writes, so a second install
    (a fail-over's re-plan) reuses the first read-back; the tokens its own installs left in the cells are
    still not handed out again, and a lost primary (another controller took over) forgets it all."""
    reads: list[str] = []
    real = I.read_register_cells

    def counting(cl, *args, **kw):  # type: ignore[no-untyped-def]
        reads.append(cl.name)
        return real(cl, *args, **kw)

    monkeypatch.setattr(I, "read_register_cells", counting)
    with controller(topo, tmp_path / "state.json") as ctl:
        first = ctl.install_job(5, ["h1", "h2"])
        tree = sorted(sp.switch for sp in first.switches)
        assert sorted(reads) == tree  # each switch's cells read once
        ctl.remove_job(5)
        reads.clear()
        again = ctl.install_job(5, ["h1", "h2"])
        assert reads == []  # the same cells: known
        for sp in again.switches:
            assert sp.token != first.on(sp.switch).token
            rb = ctl.fabric.memo(sp.switch)["read_back"]
            assert all({first.on(sp.switch).token, sp.token} <= rb.cells[c] for c in I._cells(sp))
        # a token only the memory of this session knows a cell may hold is not handed out: pretend the next
        # token of c1 is in one of its cells
        root = again.on(again.root)
        nxt = next_token(ctl.state.installs[again.root])
        ctl.fabric.memo(again.root)["read_back"].cells[I._cells(root)[0]].add(nxt)
        ctl.remove_job(5)
        third = ctl.install_job(5, ["h1", "h2"])
        assert reads == [] and third.on(third.root).token != nxt
        ctl.remove_job(5)
        ctl.fabric.client(third.root).primary_lost = True  # what the stream says when another controller wins
        assert "read_back" not in ctl.fabric.memo(third.root)
        ctl.fabric.forget(third.root)  # a fresh session (primary again) for the install below
        ctl.install_job(5, ["h1", "h2"])
        assert reads == [third.root]  # read back again
        ctl.remove_job(5)


def test_fail_over_moves_the_job_in_place_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """Leaf-spine, 2 leaves, 2 spines: the job's root spine fails and the job moves to the other one in place:
    the leaves keep their entries but job_config (a new token and up port) and the up port's entry, and every
    live switch then holds exactly the state's entries (verify is clean). When the second spine fails too, the
    leaves are cut off from each other (no tree, no ring): the job is taken off the live switches before the
    planner's error, which names the cut-off edge switch, is raised."""
    from controller.leafspine import leaf_spine
    from controller.planner import HostsCutOffError

    with embedded_switches(leaf_spine(2, 2, 1)) as (live, _handles):
        with controller(live, tmp_path / "state.json") as ctl:
            ctl.push_pipeline()
            hosts = [h.name for h in live.hosts]
            old = ctl.install_job(7, hosts)
            leaves = [sp.switch for sp in old.switches if live.switch(sp.switch).tier == 0]
            before = {name: job_entries_on(ctl, name, 7) for name in leaves}
            timings: dict[str, float] = {}
            new = ctl.fail_over(7, [old.root], timings=timings)
            assert new.root != old.root and set(timings) >= {"plan", "read_back", "write", "save"}
            assert all(d.clean for d in ctl.verify().values()), ctl.verify()
            for name in leaves:
                now = job_entries_on(ctl, name, 7)
                changed = [e for e in now if e not in before[name]]
                # job_config (the new token, the new up port) and the entry for the up port to the new spine
                assert {e.table for e in changed} == {N.T_JOB_CONFIG, N.T_JOB_PORTS}, (name, changed)
                assert [e for e in changed if e.table == N.T_JOB_PORTS] == [
                    e
                    for e in now
                    if e.table == N.T_JOB_PORTS and dict(e.match)[N.K_INGRESS_PORT] == new.on(name).up_port
                ]
                assert new.on(name).token != old.on(name).token
            with pytest.raises(HostsCutOffError, match="edge switch l2 has no live path to the others"):
                ctl.fail_over(7, [new.root])
            assert 7 not in ctl.state.jobs
            for name in leaves:
                assert job_entries_on(ctl, name, 7) == [], name
