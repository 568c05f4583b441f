"""The p4ina CLI, as a new user runs it, against switches `p4ina serve` started: the verbs serve prints, as
printed (no --topology, no --state), then the same verbs once the network is gone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.common import BACKENDS
from tests.emulation.serving import Served, ok, p4ina, served

pytestmark = pytest.mark.mininet


def printed_commands(net: Served) -> list[list[str]]:
    """The `p4ina ...` commands serve printed (one per line; `a; b` is two)."""
    out = []
    for line in net.banner.splitlines():
        for cmd in line.split("#")[0].split(";"):
            words = cmd.split()
            if words[:1] == ["p4ina"]:
                out.append(words[1:])
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_cli_installs_inspects_and_removes_a_job(backend: str, tmp_path: Path, leak_check: None) -> None:
    with served(tmp_path, "--topology", "leaf-spine:2x1x2", "--switch", backend) as net:
        folder = tmp_path / "state" / "leaf-spine-2x1x2"
        assert (tmp_path / "state" / "current").resolve() == folder.resolve()
        commands = printed_commands(net)
        assert commands[0] == ["topo", "show"] and ["pipeline", "push"] in commands
        # right after serve, with nothing but the defaults: the served topology, with gRPC addresses
        topo = ok(tmp_path, "topo", "show")
        assert topo["kind"] == "leaf-spine" and all(s["grpc_addr"] for s in topo["switches"])
        assert ok(tmp_path, "routes", "show") == {"installed": False, "switches": {}}
        for cmd in commands:  # serve's own commands, in its order (allreduce: tests/emulation/test_byhand.py)
            if cmd[0] != "allreduce":
                ok(tmp_path, *cmd)
        routes = ok(tmp_path, "routes", "show")
        assert routes["installed"] and sorted(routes["switches"]) == ["l1", "l2", "s1"]
        assert {"prefix": "10.0.1.0/24", "ports": [3], "via": ["s1"]} in routes["switches"]["l1"]
        listed = ok(tmp_path, "job", "list")
        assert [(row["job_id"], sorted(row["hosts"]), row["up_lanes"], row["down_lanes"]) for row in listed] == [
            (7, ["h1", "h2", "h3", "h4"], "int8", "int8")
        ]
        shown = ok(tmp_path, "job", "show", "--job", "7")
        assert shown["root"] in {s["name"] for s in topo["switches"]} and "h3" in json.dumps(shown)
        ok(tmp_path, "job", "remove", "--job", "7")
        assert ok(tmp_path, "job", "list") == []
        ok(tmp_path, "job", "install", "--job", "9", "--hosts", "h1,h3", "--lanes", "int16")
        out, err = net.stop()
    assert net.proc.returncode == 0, err
    assert "network stopped" in out
    # the network is gone: a switch verb says so at once, in one line (it waited --timeout, 10 s, per switch)
    for verb in (["routes", "install"], ["counters", "--job", "9"], ["verify"], ["shell", "l1"]):
        done = p4ina(tmp_path, *verb)
        assert done.code == 1 and done.seconds < 5, (verb, done)
        lines = done.err.strip().splitlines()
        assert len(lines) == 1 and "`p4ina serve --topology leaf-spine:2x1x2`" in lines[0], (verb, done.err)
        assert "is down (stopped " in lines[0] and "start it again" in lines[0]
    # the verbs that read the state go on, with a note: the jobs went with the switches
    done = p4ina(tmp_path, "job", "list")
    assert done.code == 0 and done.out.strip() == "no jobs installed" and "is down" in done.err
    assert json.loads((folder / "p4ina-state.json").read_text())["jobs"] == {}
    assert not (folder / "serve.json").exists()
