"""Failures the switches announce (controller.monitor): an embedded switch process with one real port, a link
whose carrier drops (its port's oper-status, published ON_CHANGE over gNMI, the monitor's default, and over the
JSON stream), and the process killed (its P4Runtime stream breaks). Each becomes one FailureSignal naming the
right link or switch; what the controller closes itself signals nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.api import Controller
from controller.fattree import fat_tree
from controller.monitor import FailureMonitor, FailureSignal
from controller.portstatus import GnmiPortStatus, JsonPortStatus, PortStatusSource
from wireformat.portstatus import PortStatus

pytestmark = pytest.mark.netns  # root: a veth pair in the root namespace (named for `p4ina clean`)

PORT_IF, PEER_IF = "p4inaf0-e1-2", "p4inaf0-a1-1"  # e1's port 2 is its link to a1 (fat_tree(2))
WAIT_S = 60.0  # a bound on waiting, not a measurement: a loaded machine is slow


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def e1(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """The embedded switch e1 in its own process, its port 2 on one end of a veth pair (the other end: a1's)."""
    ip("link", "add", PORT_IF, "type", "veth", "peer", "name", PEER_IF)
    proc: subprocess.Popen[bytes] | None = None
    try:
        for name in (PORT_IF, PEER_IF):
            ip("link", "set", name, "up")
        ready = tmp_path / "e1.ready"
        cmd = [sys.executable, "-m", "softswitch", "--device-id", "1", "-i", f"2@{PORT_IF}"]
        cmd += ["--grpc-server-addr", "127.0.0.1:0", "--ready-file", str(ready), "--no-p4"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + WAIT_S
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the switch did not start"
            time.sleep(0.05)
        yield proc, f"127.0.0.1:{json.loads(ready.read_text())['grpc_port']}"
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        subprocess.run(["ip", "link", "del", PORT_IF], capture_output=True)


@pytest.mark.parametrize("source", [GnmiPortStatus, JsonPortStatus])
def test_a_port_status_subscription_sees_the_carrier_drop_and_come_back(
    e1: tuple[subprocess.Popen[bytes], str], source: type[PortStatusSource]
) -> None:
    _, addr = e1
    seen: list[PortStatus] = []
    changed = threading.Condition()

    def on_status(switch: str, st: PortStatus) -> None:
        with changed:
            seen.append(st)
            changed.notify_all()

    sub = source().subscribe("e1", addr, on_status)
    try:
        with changed:  # the initial value came before subscribe() returned
            assert [(s.port, s.interface, s.oper_status) for s in seen] == [(2, PORT_IF, "UP")], seen
        ip("link", "set", PEER_IF, "down")  # the cable's far end: e1's port loses its carrier
        with changed:
            assert changed.wait_for(lambda: len(seen) >= 2, WAIT_S), seen
            assert seen[1].port == 2 and seen[1].oper_status == "LOWER_LAYER_DOWN" and not seen[1].up, seen
            assert seen[1].path == f"/interfaces/interface[name={PORT_IF}]/state/oper-status"
        ip("link", "set", PEER_IF, "up")
        with changed:
            assert changed.wait_for(lambda: len(seen) >= 3, WAIT_S), seen
            assert seen[2].up, seen
    finally:
        sub.cancel()


def test_the_monitor_signals_the_link_then_the_dead_switch_once_each(
    e1: tuple[subprocess.Popen[bytes], str],
) -> None:
    proc, addr = e1
    topo = fat_tree(2).with_grpc({"e1": addr})
    signals: list[FailureSignal] = []
    got = threading.Condition()

    def on_signal(sig: FailureSignal) -> None:
        with got:
            signals.append(sig)
            got.notify_all()

    with Controller(topo, timeout=WAIT_S) as ctl:
        mon = FailureMonitor(ctl.fabric, on_signal)
        assert isinstance(mon.port_status, GnmiPortStatus)  # the default: the switch's gNMI
        mon.watch(["e1"])
        try:
            assert not mon.no_port_status, mon.no_port_status
            ip("link", "set", PEER_IF, "down")
            with got:
                assert got.wait_for(lambda: len(signals) >= 1, WAIT_S), signals
            (link,) = signals
            assert link.kind == "link" and link.link == ("a1", "e1") and link.what == "a1-e1", link
            assert mon.down_links == {("a1", "e1")} and not mon.failed_switches
            ip("link", "set", PEER_IF, "up")
            proc.kill()
            with got:
                assert got.wait_for(lambda: len(signals) >= 2, WAIT_S), signals
            dead = signals[1]
            assert dead.kind == "switch" and dead.switch == "e1" and "stream" in dead.how, dead
            assert mon.failed_switches == {"e1"}
            time.sleep(0.5)  # nothing more comes: one signal per failure
            assert len(signals) == 2, signals
        finally:
            mon.close()


def test_a_session_the_controller_closes_itself_signals_nothing(e1: tuple[subprocess.Popen[bytes], str]) -> None:
    _, addr = e1
    signals: list[FailureSignal] = []
    with Controller(fat_tree(2).with_grpc({"e1": addr}), timeout=WAIT_S) as ctl:
        mon = FailureMonitor(ctl.fabric, signals.append)
        mon.watch(["e1"])
        ctl.fabric.forget("e1")  # as fail_over does with a switch it gave up
        time.sleep(0.5)
        mon.close()
    assert signals == []
