"""AF_PACKET port I/O of the embedded switch, on a veth pair inside a namespace the test creates."""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from softswitch.runtime.ports import (
    ETH_P_ALL,
    PACKET_OUTGOING,
    InterfaceError,
    PortIO,
    PortSpec,
    PortSpecError,
    parse_port_spec,
)
from softswitch.runtime.switch import SoftSwitch
from tests.softswitch import fake_switch

CLONE_NEWNET = 0x40000000
SWITCH_END, HOST_END = "p4sw0", "p4host0"


def test_port_specs_parse_like_simple_switch() -> None:
    assert parse_port_spec("1@s1-eth1") == PortSpec(1, "s1-eth1")
    for bad in ("1", "@eth0", "x@eth0", "1@", "511@eth0", "1@averyveryverylongname"):
        with pytest.raises(PortSpecError):
            parse_port_spec(bad)


@pytest.mark.netns  # raw sockets need root
def test_a_missing_interface_is_refused_by_name() -> None:
    io = PortIO(SoftSwitch(), {1: "p4ina-nonexistent"[:15]})
    with pytest.raises(InterfaceError, match="p4ina-nonexiste"):
        io.start()


# ---------------------------------------------------------------------------------------------
# namespace helpers


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


@contextlib.contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Run the block with this thread in namespace `name` (sockets opened there stay there)."""
    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {name} failed")
        try:
            yield
        finally:
            if libc.setns(home, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back to the original namespace failed")
    finally:
        os.close(home)
        os.close(target)


@pytest.fixture
def veth_ns() -> Iterator[str]:
    name = f"p4ina-ports-{uuid.uuid4().hex[:8]}"
    _run("ip", "netns", "add", name)
    try:
        _run("ip", "-n", name, "link", "add", SWITCH_END, "type", "veth", "peer", "name", HOST_END)
        for dev in (SWITCH_END, HOST_END):
            _run("ip", "netns", "exec", name, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
            _run("ip", "-n", name, "link", "set", dev, "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _frame(marker: bytes, size: int) -> bytes:
    eth = bytes.fromhex("020000000002020000000001") + b"\x88\xb5"  # local experimental ethertype
    body = marker + b"\x00" * max(0, size - 14 - len(marker))
    return eth + body


def _receive(sock: socket.socket, marker: bytes, timeout: float = 10.0) -> bytes:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data, addr = sock.recvfrom(65536)
        except TimeoutError:
            break
        if addr[2] != PACKET_OUTGOING and marker in data:
            return data
    raise AssertionError(f"no frame with marker {marker!r} came back")


@pytest.mark.netns
def test_frames_go_through_the_switch_and_back(veth_ns: str) -> None:
    switch = SoftSwitch(device_id=1, name="ptest")
    switch.load_program(fake_switch.TINY_JSON)  # default: every frame leaves on port 1
    with in_netns(veth_ns):
        io = PortIO(switch, {1: SWITCH_END}, name="ptest")
        io.start()
        host = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        host.bind((HOST_END, ETH_P_ALL))
    try:
        for size, marker in ((42, b"short-frame"), (300, b"long-frame"), (1514, b"mtu-frame")):
            sent = _frame(marker, size)
            host.send(sent)
            got = _receive(host, marker)
            assert got == sent  # unchanged, and short frames are not padded
        assert io.stats[1].rx >= 3 and io.stats[1].tx >= 3

        # the interface disappears: the port stops, the switch keeps running
        _run("ip", "-n", veth_ns, "link", "del", HOST_END)
        deadline = time.monotonic() + 10
        while io.active_ports and time.monotonic() < deadline:
            time.sleep(0.05)
        assert io.active_ports == []
    finally:
        host.close()
        io.stop()


@pytest.mark.netns
def test_a_port_survives_its_interface_going_down_and_up(veth_ns: str) -> None:
    switch = SoftSwitch(device_id=1, name="ptest")
    switch.load_program(fake_switch.TINY_JSON)
    with in_netns(veth_ns):
        io = PortIO(switch, {1: SWITCH_END}, name="ptest")
        io.start()
        host = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        host.bind((HOST_END, ETH_P_ALL))
    try:
        _run("ip", "-n", veth_ns, "link", "set", SWITCH_END, "down")
        _run("ip", "-n", veth_ns, "link", "set", SWITCH_END, "up")
        sent = _frame(b"after-flap", 64)
        deadline = time.monotonic() + 10
        while True:  # the veth carrier comes back asynchronously
            host.send(sent)
            try:
                assert _receive(host, b"after-flap", timeout=0.5) == sent
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
        assert io.active_ports == [1]
    finally:
        host.close()
        io.stop()


def _roundtrip_sizes(host: socket.socket) -> list[tuple[int, int]]:
    """(sent, received) lengths for a short, a mid-size and an MTU-size frame sent out and back."""
    out = []
    for size, marker in ((42, b"short-frame"), (300, b"long-frame"), (1514, b"mtu-frame")):
        deadline = time.monotonic() + 30
        while True:  # the first frames may arrive before a freshly started switch listens
            host.send(_frame(marker, size))
            try:
                got = _receive(host, marker, timeout=0.5)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
        out.append((size, len(got)))
    return out


@pytest.mark.netns
@pytest.mark.bmv2
def test_frame_sizes_match_bmv2(veth_ns: str, tmp_path: Path) -> None:
    """BMv2 passes short frames through unpadded too: both back ends return every frame as sent."""
    program = tmp_path / "tiny.json"
    program.write_text(fake_switch.TINY_JSON)
    with in_netns(veth_ns):
        host = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        host.bind((HOST_END, ETH_P_ALL))
    bmv2 = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            veth_ns,
            "simple_switch_grpc",
            "-i",
            f"1@{SWITCH_END}",
            "--log-level",
            "off",
            str(program),
            "--",
            "--grpc-server-addr",
            "127.0.0.1:0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        bmv2_sizes = _roundtrip_sizes(host)
    finally:
        bmv2.terminate()
        bmv2.wait(timeout=30)
    switch = SoftSwitch(device_id=1, name="ptest")
    switch.load_program(fake_switch.TINY_JSON)
    with in_netns(veth_ns):
        io = PortIO(switch, {1: SWITCH_END}, name="ptest")
        io.start()
    try:
        ours = _roundtrip_sizes(host)
    finally:
        io.stop()
        host.close()
    assert ours == bmv2_sizes == [(42, 42), (300, 300), (1514, 1514)]


@pytest.mark.netns
def test_an_oversized_frame_is_dropped_and_counted_not_truncated(veth_ns: str) -> None:
    """A frame longer than the receive buffer must not reach the switch cut short (item 16)."""
    for dev in (SWITCH_END, HOST_END):
        _run("ip", "-n", veth_ns, "link", "set", dev, "mtu", "9000")
    switch = SoftSwitch(device_id=1, name="ptest")
    switch.load_program(fake_switch.TINY_JSON)
    with in_netns(veth_ns):
        io = PortIO(switch, {1: SWITCH_END}, name="ptest", max_frame=2000)
        io.start()
        host = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        host.bind((HOST_END, ETH_P_ALL))
    try:
        host.send(_frame(b"jumbo-frame", 4000))
        sent = _frame(b"after-jumbo", 1000)
        host.send(sent)
        assert _receive(host, b"after-jumbo") == sent
        assert io.stats[1].oversized == 1
        assert io.stats[1].rx == 1 and switch.stats["rx"] == 1
        with pytest.raises(AssertionError):
            _receive(host, b"jumbo-frame", timeout=0.3)
    finally:
        host.close()
        io.stop()
