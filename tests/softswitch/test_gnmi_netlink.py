"""The port status from the kernel to the controller over gNMI (softswitch.p4runtime.gnmi on the rtnetlink feed,
controller.portstatus.GnmiPortStatus): a veth pair in a network namespace the test makes, the switch's side and
two subscribers in a child process inside it; the peer's carrier dropped and restored is seen by both, in order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.common import REPO

pytestmark = pytest.mark.netns

WAIT_S = 90.0  # a bound on the child's whole run, not a measurement


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def test_the_carrier_of_a_port_in_a_namespace_reaches_two_gnmi_subscribers(tmp_path: Path) -> None:
    ns = f"p4ina-gnmi-{uuid.uuid4().hex[:8]}"
    iface, peer = "sw-eth2", "peer-eth0"
    ip("netns", "add", ns)
    try:
        ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", ns, "link", "add", iface, "type", "veth", "peer", "name", peer)
        for name in (iface, peer):
            ip("-n", ns, "link", "set", name, "up")
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO))}
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "tests.softswitch.gnmi_netns_child"]
        cmd += ["--port", "2", "--iface", iface, "--peer", peer]
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=WAIT_S)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    assert report["steps"] == [True, True, True], report
    for name in ("a", "b"):
        seen = report["seen"][name]
        assert [(p, i, s) for p, i, s, _ in seen] == [
            (2, iface, "UP"),
            (2, iface, "LOWER_LAYER_DOWN"),  # the peer down: this end's carrier is gone
            (2, iface, "UP"),
        ], seen
        stamps = [t for *_, t in seen]
        assert stamps == sorted(stamps) and stamps[0] > 0, stamps
    assert report["seen"]["a"] == report["seen"]["b"]  # one feed: the same values, the same instants
    assert report["ends"] == ["a"]  # the cancelled one is not told; the other is, when the switch stops
    assert report["netlink_sockets"] == 1
