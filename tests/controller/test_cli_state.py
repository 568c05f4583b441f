"""The CLI without switches (topology, job list/show from the state) and the state file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller.cli import build_parser, main
from controller.fattree import fat_tree
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
    assert "  edge e1  dev 1   ports 1:h1 2:h2 3:a1 4:a2" in out
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


def test_errors_are_one_line_with_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    st = ["--state", str(tmp_path / "s.json")]
    code, _, err = run(capsys, "job", "list", *st)
    assert code == 1 and err.startswith("p4ina: error: no topology: pass --topology")
    code, _, err = run(capsys, "topo", "show", "--topology", "fat-tree:5", *st)
    assert code == 1 and "even" in err
    code, _, err = run(capsys, "topo", "show", "--topology", str(tmp_path / "missing.json"), *st)
    assert code == 1 and "cannot read topology" in err
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
            "quantize": "int16",
            "contrib": "int16",
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
    assert code == 1 and "job 1 on" in err and "lacks" in err
