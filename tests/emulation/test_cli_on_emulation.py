"""The p4ina CLI, as a new user runs it, against switches `p4ina serve` started."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.common import BACKENDS, REPO

pytestmark = pytest.mark.mininet


def p4ina(*args: str, state: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "p4ina", *args, "--state", str(state), "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"p4ina {' '.join(args)} failed:\n{proc.stderr}\n{proc.stdout}"
    return json.loads(proc.stdout)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cli_installs_inspects_and_removes_a_job(backend: str, tmp_path: Path, leak_check: None) -> None:
    topo_file, state = tmp_path / "topology.json", tmp_path / "state.json"
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "emulation.serve",
            "--topology",
            "leaf-spine:2x1x2",
            "--switch",
            backend,
            "--topology-out",
            str(topo_file),
            "--run-dir",
            str(tmp_path / "run"),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not topo_file.exists():
            assert serve.poll() is None, f"p4ina serve exited early:\n{serve.stderr.read()}"
            assert time.monotonic() < deadline, "the network did not come up in 240 s"
            time.sleep(0.2)
        p4ina("pipeline", "push", "--topology", str(topo_file), state=state)
        p4ina("routes", "install", state=state)
        installed = p4ina("job", "install", "--job", "7", "--hosts", "h1,h2,h3", "--lanes", "int8", state=state)
        assert installed["spec"]["job_id"] == 7 and installed["root"] in {
            s["name"] for s in json.loads(topo_file.read_text())["switches"]
        }
        listed = p4ina("job", "list", state=state)
        assert [(row["job_id"], sorted(row["hosts"]), row["up_lanes"], row["down_lanes"]) for row in listed] == [
            (7, ["h1", "h2", "h3"], "int8", "int8")
        ]
        shown = p4ina("job", "show", "--job", "7", state=state)
        assert "h3" in json.dumps(shown)
        p4ina("counters", "--job", "7", state=state)
        p4ina("verify", state=state)
        p4ina("job", "remove", "--job", "7", state=state)
        assert p4ina("job", "list", state=state) == []
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            out, err = serve.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            serve.kill()
            out, err = serve.communicate()
    assert serve.returncode == 0, err
    assert "network stopped" in out
