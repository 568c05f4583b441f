"""The CLI without switches (topology, job list/show from the state) and the state file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from controller.cli import build_parser, main
from controller.fattree import fat_tree
from controller.leafspine import leaf_spine
from controller.planner import JobSpec, plan_job
from controller.state import State, StateError


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_topo_show_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    st = ["--state", str(tmp_path / "s.json")]
    code, out, _ = run(capsys, "topo", "show", "--topology", "fat-tree:4", *st)
    assert code == 0 and out.startswith("fat-tree k=4: 20 switches (8 edge, 8 aggregation, 4 core), 16 hosts")
    assert "  edge        e1  dev 1   ports 1:h1 2:h2 3:a1 4:a2" in out
    assert "  aggregation a1  dev 9   ports 1:e1 2:e2 3:c1 4:c2" in out  # roles spelled out, in one column
    code, out, _ = run(capsys, "topo", "show", *st, "--json")  # remembered from the state
    data = json.loads(out)
    assert data["kind"] == "fat-tree" and len(data["switches"]) == 20
    code, out, _ = run(capsys, "topo", "show", "--topology", "leaf-spine:2x2x3", "--state", str(tmp_path / "o.json"))
    assert code == 0 and "leaf-spine" in out


def test_topology_json_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.json"
    fat_tree(2).with_grpc({"e1": "127.0.0.1:1"}).save(path)
    code, out, _ = run(capsys, "topo", "show", "--topology", str(path), "--state", str(tmp_path / "s.json"))
    assert code == 0 and "@127.0.0.1:1" in out


def test_topo_show_spells_every_role_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A custom topology whose spines sit in pods: `topo show` printed their role cut to four letters ("spin")."""
    data = leaf_spine(2, 2, 1).to_dict()
    for sw in data["switches"]:
        if sw["role"] == "spine":
            sw["pod"] = 0 if sw["name"] == "s1" else 1
    path = tmp_path / "pods.json"
    path.write_text(json.dumps(data))
    code, out, _ = run(capsys, "topo", "show", "--topology", str(path), "--state", str(tmp_path / "s.json"))
    assert code == 0, out
    assert "  spine s1  dev" in out and "  leaf  l1  dev" in out
    assert "spin " not in out


def test_routes_show_from_the_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`routes show`: every switch's routes as `routes install` put them (from the state, no switch asked)."""
    path = tmp_path / "s.json"
    State(path, topology="leaf-spine:2x2x2").save()
    code, out, _ = run(capsys, "routes", "show", "--state", str(path))
    assert code == 0 and out.strip() == "no routes installed (`p4ina routes install` installs them)"
    State(path, topology="leaf-spine:2x2x2", routes=True).save()
    code, out, _ = run(capsys, "routes", "show", "--state", str(path))
    assert code == 0 and out.startswith("routes on 4 switches")
    lines = out.splitlines()
    l1 = lines.index("l1 (leaf, dev 1)")
    assert lines[l1 + 1 : l1 + 4] == [
        "  10.0.0.2/32  port 1 (h1)",
        "  10.0.0.3/32  port 2 (h2)",
        "  10.0.1.0/24  ports 3,4 (s1, s2)  ECMP",
    ]
    assert "s2 (spine, dev 4)" in lines
    # around a failed spine, as `routes install` routes
    State(path, topology="leaf-spine:2x2x2", routes=True, failed={"s2"}).save()
    code, out, _ = run(capsys, "routes", "show", "--state", str(path), "--json")
    data = json.loads(out)
    assert data["installed"] and data["failed"] == ["s2"] and sorted(data["switches"]) == ["l1", "l2", "s1"]
    assert data["switches"]["l1"][2] == {"prefix": "10.0.1.0/24", "ports": [3], "via": ["s1"]}


def test_errors_are_one_line_naming_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every error is one line starting with the command as typed. Bad input (no topology, a bad one, an option
    the verb lacks) exits 2, as argparse's refusals do; what fails on a valid command line exits 1."""
    st = ["--state", str(tmp_path / "s.json")]
    code, _, err = run(capsys, "job", "list", *st)
    assert code == 2 and err.startswith("p4ina job list: error: no topology: pass --topology")
    with pytest.raises(SystemExit) as exited:
        run(capsys, "counters", "--switch", "e1", *st)
    assert (
        exited.value.code == 2
        and "p4ina counters: error: unrecognized arguments: --switch e1" in capsys.readouterr().err
    )
    code, _, err = run(capsys, "topo", "show", "--topology", "fat-tree:5", *st)
    assert code == 2 and "even" in err
    code, _, err = run(capsys, "topo", "show", "--topology", str(tmp_path / "missing.json"), *st)
    assert code == 2 and "missing.json: no such file" in err
    code, _, err = run(capsys, "job", "show", "--job", "3", "--topology", "fat-tree:4", *st)
    assert code == 1 and "job 3 is not installed" in err
    # a switch command on a topology without P4Runtime addresses names the switch and the fix
    code, _, err = run(
        capsys, "routes", "install", "--topology", "fat-tree:2", *st, "--p4info", str(tmp_path / "none.txtpb")
    )
    assert code == 1 and "switch e1" in err and "grpc_addr" in err


def test_job_list_and_show_from_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.json"
    topo = fat_tree(4)
    state = State(path, topology="fat-tree:4")
    state.jobs[4] = plan_job(topo, JobSpec.make(4, ["h1", "h2", "h5"], "int16"))
    state.save()
    code, out, _ = run(capsys, "job", "list", "--state", str(path), "--json")
    assert json.loads(out) == [
        {
            "job_id": 4,
            "hosts": ["h1", "h2", "h5"],
            "root": state.jobs[4].root,
            "switches": 5,
            "up_lanes": "int16",
            "down_lanes": "int16",
            "shift": 2,
            "slots": 128,
        }
    ]
    code, out, _ = run(capsys, "job", "show", "--job", "4", "--state", str(path))
    assert code == 0 and out.splitlines()[0].startswith("job 4: 3 hosts, int16 up, int16 results (shift 2), 128 slots")
    assert "→ h5" in out


def test_state_round_trip_and_corruption(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "s.json"
    st = State(path, topology="fat-tree:4", routes=True, pipeline_cookie=12345)
    st.jobs[9] = plan_job(fat_tree(4), JobSpec.make(9, ["h1", "h16"]), [], {"e1": 4})
    st.installs = {"e1": 5}
    st.save()
    back = State.load(path)
    assert (back.topology, back.routes, back.pipeline_cookie, back.jobs, back.installs) == (
        "fat-tree:4",
        True,
        12345,
        st.jobs,
        {"e1": 5},
    )
    assert back.jobs[9].on("e1").token == 5
    path.write_text("{")
    with pytest.raises(StateError, match="unreadable"):
        State.load(path)
    path.write_text('{"version": 99}')
    with pytest.raises(StateError, match="version 99"):
        State.load(path)


def test_parser_knows_every_command() -> None:
    p = build_parser()
    for argv in (
        ["topo", "show"],
        ["pipeline", "push"],
        ["routes", "install"],
        ["routes", "show"],
        ["job", "install", "--job", "1", "--hosts", "h1"],
        ["job", "remove", "--job", "1"],
        ["job", "list"],
        ["job", "show", "--job", "1"],
        ["counters"],
        ["verify"],
    ):
        assert p.parse_args(argv + ["--json"]).json


def test_state_of_another_fabric_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.json"
    state = State(path, topology="fat-tree:4")
    state.jobs[1] = plan_job(fat_tree(4), JobSpec.make(1, ["h1", "h16"]))
    state.save()
    code, _, err = run(capsys, "job", "list", "--topology", "fat-tree:2", "--state", str(path))
    assert code == 2 and "job 1 on" in err and "lacks" in err


# A state file as the controller wrote it before the lane types had one name (version 1): job 1 with int32 lanes
# ("quantize": "none"), job 2 with int32 up and int8 down, job 3 from before `contrib` existed (int16 both ways).
V1_STATE = """{"version": 1, "topology": "fat-tree:4", "routes": false, "pipeline_cookie": null, "jobs": {
"1": {"spec": {"job_id": 1, "hosts": ["h1", "h2"], "quantize": "none", "shift": 0, "slots": 128, "contrib": "int32",
 "result_type": 0}, "root": "e1", "switches": [{"switch": "e1", "role": 1, "job_index": 1, "slot_base": 0,
 "slot_count": 128, "mcast_grp": 1, "up_port": 0, "parent": null, "children": [{"port": 1, "index": 0, "node": "h1"},
 {"port": 2, "index": 1, "node": "h2"}], "result_type": 0, "shift": 0, "token": 1, "up_type": 0, "up_shift": 0,
 "in_shift": 0}], "error_lsb": 1.0, "q_limit": 1073741823},
"2": {"spec": {"job_id": 2, "hosts": ["h3", "h4"], "quantize": "int8", "shift": 24, "slots": 16, "contrib": "int32",
 "result_type": 2}, "root": "e2", "switches": [{"switch": "e2", "role": 1, "job_index": 1, "slot_base": 0,
 "slot_count": 16, "mcast_grp": 1, "up_port": 0, "parent": null, "children": [{"port": 1, "index": 0, "node": "h3"},
 {"port": 2, "index": 1, "node": "h4"}], "result_type": 2, "shift": 24, "token": 1, "up_type": 0, "up_shift": 0,
 "in_shift": 0}], "error_lsb": 8388609.0, "q_limit": 1073741823},
"3": {"spec": {"job_id": 3, "hosts": ["h5", "h6"], "quantize": "int16", "shift": 1, "slots": 8, "result_type": 1},
 "root": "e3", "switches": [{"switch": "e3", "role": 1, "job_index": 1, "slot_base": 0, "slot_count": 8,
 "mcast_grp": 1, "up_port": 0, "parent": null, "children": [{"port": 1, "index": 0, "node": "h5"}, {"port": 2,
 "index": 1, "node": "h6"}], "result_type": 1, "shift": 1, "token": 1, "up_type": 0, "up_shift": 0, "in_shift": 0}],
 "error_lsb": 2.0, "q_limit": 32767}},
"installs": {"e1": 1, "e2": 1, "e3": 1}, "failed": [], "failed_links": []}"""


def test_a_version_1_state_file_loads_with_its_lanes_translated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.json"
    path.write_text(V1_STATE)
    st = State.load(path)
    lanes = {j: (p.spec.up_lanes, p.spec.down_lanes, p.spec.shift, p.spec.slots) for j, p in st.jobs.items()}
    assert lanes == {1: ("int32", "int32", 0, 128), 2: ("int32", "int8", 24, 16), 3: ("int16", "int16", 1, 8)}
    # the plans are today's for the same specs: nothing else of the file was lost or changed
    topo = fat_tree(4)
    assert st.jobs[2] == plan_job(topo, JobSpec.make(2, ["h3", "h4"], "int8", up_lanes="int32", slots=16))
    assert st.installs == {"e1": 1, "e2": 1, "e3": 1} and st.topology == "fat-tree:4"
    # the CLI reads it too, and the next save writes version 2 in the new vocabulary
    code, out, _ = run(capsys, "job", "list", "--state", str(path), "--json")
    assert code == 0 and [(r["job_id"], r["up_lanes"], r["down_lanes"]) for r in json.loads(out)] == [
        (1, "int32", "int32"),
        (2, "int32", "int8"),
        (3, "int16", "int16"),
    ]
    st.save()
    saved = json.loads(path.read_text())
    assert saved["version"] == 2
    assert saved["jobs"]["2"]["spec"] == {
        "job_id": 2,
        "hosts": ["h3", "h4"],
        "up_lanes": "int32",
        "down_lanes": "int8",
        "shift": 24,
        "slots": 16,
    }
    assert State.load(path).jobs == st.jobs


def test_a_version_2_job_without_its_lanes_is_refused(tmp_path: Path) -> None:
    """Only version 1 files are translated: a version 2 spec in the old vocabulary is not read as int32 lanes."""
    path = tmp_path / "s.json"
    old = json.loads(V1_STATE)
    old["version"] = 2
    path.write_text(json.dumps(old))
    with pytest.raises(StateError, match="unreadable.*down_lanes"):
        State.load(path)


@pytest.mark.parametrize(
    ("argv", "lanes", "deprecated"),
    [
        ([], ("int32", "int32"), ""),
        (["--lanes", "int8"], ("int8", "int8"), ""),
        (["--down-lanes", "int16"], ("int16", "int16"), ""),
        (["--lanes", "int8", "--up-lanes", "int32"], ("int32", "int8"), ""),
        (["--up-lanes", "int16"], ("int16", "int32"), ""),
        (["--quantize", "none"], ("int32", "int32"), "--quantize is deprecated"),
        (["--quantize", "int8", "--contrib", "int32"], ("int32", "int8"), "--contrib is deprecated"),
    ],
)
def test_job_install_lane_flags(
    argv: list[str], lanes: tuple[str, str], deprecated: str, caplog: pytest.LogCaptureFixture
) -> None:
    from controller.cli import job_lanes

    args = build_parser().parse_args(["job", "install", "--job", "1", "--hosts", "h1", *argv])
    with caplog.at_level("WARNING", logger="p4ina"):
        assert job_lanes(args) == lanes
    warned = [r.getMessage() for r in caplog.records]
    assert (warned == []) if not deprecated else (len(warned) >= 1 and deprecated in warned[-1])


class _Recorded(Exception):
    pass


@pytest.mark.parametrize("argv", [["job", "list"], ["routes", "install"], ["verify"], ["counters"]])
def test_every_command_claims_the_controller_election_id_unless_told(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shell's own default (2^64) once leaked into every command through argparse's shared parent
    actions, so `p4ina job install` beside an open `p4ina shell` failed with "Election id already exists"."""
    import controller.cli as cli

    seen: list[int] = []

    def fake_controller(*_a: object, election_id: int, **_kw: object) -> None:
        seen.append(election_id)
        raise _Recorded

    monkeypatch.setattr(cli, "Controller", fake_controller)
    st = ["--state", str(tmp_path / "s.json"), "--topology", "fat-tree:2"]
    with pytest.raises(_Recorded):
        main([*argv, *st])
    with pytest.raises(_Recorded):
        main([*argv, *st, "--election-id", "7"])
    assert seen == [cli.CONTROLLER_ELECTION_ID, 7] and cli.CONTROLLER_ELECTION_ID == 1
    # the shell's default stays its own (resolved in cmd_shell), and an explicit one reaches it
    assert build_parser().parse_args(["shell", "e1"]).election_id is None
    assert build_parser().parse_args(["shell", "e1", "--election-id", "3"]).election_id == 3


def test_a_served_network_that_is_gone_is_named_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A state whose `p4ina serve` was killed (its PID no longer the process that wrote it): a switch verb fails at
    once, in one line (it waited --timeout for every switch, with no hint); the jobs its switches held are
    forgotten, and the verbs that only read the state say why after a note. The served network's state is the
    default (state/current -> state/<topology>/)."""
    import os
    import socket
    import time

    from controller.state import Served, default_state, process_start

    with socket.socket() as s:  # a port nobody listens on: the switches are gone
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder = tmp_path / "state" / "fat-tree-2"
    folder.mkdir(parents=True)
    topo_file = folder / "topology.json"
    topo = fat_tree(2)
    topo.with_grpc({sw.name: f"127.0.0.1:{port}" for sw in topo.switches}).save(topo_file)
    gone = Served(os.getpid(), (process_start(os.getpid()) or 0) + 1, "fat-tree:2", "2026-01-01T10:00:00")
    state = State(folder / "p4ina-state.json", topology=str(topo_file), routes=True, served=gone)
    state.jobs[4] = plan_job(topo, JobSpec.make(4, ["h1", "h2"], "int16"))
    state.epochs[4] = 9
    state.save()
    monkeypatch.chdir(tmp_path)
    assert default_state() == Path("state/p4ina-state.json")  # nothing served here yet
    (tmp_path / "state" / "current").symlink_to("fat-tree-2")
    assert default_state() == Path("state/current/p4ina-state.json")

    t0 = time.monotonic()
    code, out, err = run(capsys, "routes", "install")
    assert code == 1 and time.monotonic() - t0 < 3 and out == ""
    assert re.fullmatch(
        r"p4ina routes install: error: the network `p4ina serve --topology fat-tree:2` started "
        r"2026-01-01T10:00:00 is down \(its "
        rf"process {os.getpid()} is gone, found [0-9T:-]+\): start it again with `sudo p4ina serve --topology "
        r"fat-tree:2`, or pass --state for other switches",
        err.strip(),
    ), err
    after = State.load(folder / "p4ina-state.json")
    assert after.jobs == {} and after.epochs == {} and not after.routes
    assert after.served is not None and after.served.stopped is not None  # marked, once
    code, out, err = run(capsys, "job", "list")
    assert code == 0 and out.strip() == "no jobs installed"
    assert (
        err.startswith("p4ina job list: note: the network `p4ina serve --topology fat-tree:2`")
        and "is gone, found" in err
    )
    code, out, err = run(capsys, "shell", "e1")
    assert code == 1 and "is down" in err and len(err.strip().splitlines()) == 1
    # a network still up: no note, nothing forgotten
    alive = Served(os.getpid(), process_start(os.getpid()) or 0, "fat-tree:2", "2026-01-01T10:00:00")
    state = State(folder / "p4ina-state.json", topology=str(topo_file), served=alive)
    state.jobs[4] = plan_job(topo, JobSpec.make(4, ["h1", "h2"], "int16"))
    state.save()
    code, out, err = run(capsys, "job", "list", "--json")
    assert code == 0 and [r["job_id"] for r in json.loads(out)] == [4] and err == ""
