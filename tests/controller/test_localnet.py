"""`python -m emulation.localnet`: a process of embedded switches, as the controller benchmark runs them."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from controller.api import DEFAULT_BMV2_JSON, DEFAULT_P4INFO, Controller
from controller.state import State
from controller.topology import Topology

REPO = Path(__file__).resolve().parents[2]
_FROZEN = re.compile(r"heap: \d+ unreachable objects collected, (\d+) frozen")


def test_a_pushed_program_is_compiled_once_and_frozen_out_of_the_collector(tmp_path: Path) -> None:
    """The five switches of a k=2 fat-tree get the pipeline at once: one compile for all of them, and the
    process settles its heap once after they all changed program (the collector walking the program made every later
    P4Runtime call slow: routes and a job on twenty switches, 1.18 s and 2.91 s against 0.19 s and 0.77 s)."""
    out, log = tmp_path / "topo.json", tmp_path / "localnet.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "emulation.localnet", "fat-tree:2", str(out), "-v"], cwd=REPO, stderr=err
        )
    try:
        deadline = time.monotonic() + 120
        while not out.exists():
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "the switches did not come up"
            time.sleep(0.05)
        topo = Topology.load(out)
        with Controller(
            topo,
            p4info=DEFAULT_P4INFO,
            device_config=DEFAULT_BMV2_JSON,
            state=State(tmp_path / "state.json"),
            timeout=120.0,
        ) as ctl:
            assert set(ctl.push_pipeline().values()) == {"pushed"}
            ctl.install_routes()
            ctl.install_job(1, [h.name for h in topo.hosts])
            assert all(d.clean for d in ctl.verify().values())
        # the settle runs 0.5 s after the last load; routes and a job can take less than that on five switches
        deadline = time.monotonic() + 60
        while not _FROZEN.search(log.read_text()):
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "no settle within 60 s of the push: " + log.read_text()[-2000:]
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    text = log.read_text()
    assert rc == 0, text[-2000:]
    frozen = _FROZEN.findall(text)
    assert frozen, text[-2000:]  # settled after the push (how many times depends on how the loads spread out)
    assert all(int(n) > 0 for n in frozen)
    assert len(re.findall(r"compiled program [0-9a-f]+ in", text)) == 1, text[-2000:]
    assert len(re.findall(r"loaded program .* on the \w+ engine", text)) >= len(topo.switches), text[-2000:]
