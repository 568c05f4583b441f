"""The embedded switch's delay stage (a link's propagation delay where the kernel has no netem)."""

from __future__ import annotations

import socket
import time

import pytest

from native import cbuild
from softswitch.cli import UsageError, parse_options
from softswitch.runtime.delayline import EGRESS, INGRESS, DelayLine, DelaySpecError, PortDelays, parse_delay
from softswitch.runtime.ports import ETH_P_ALL, PortIO
from softswitch.runtime.switch import SoftSwitch
from tests.softswitch import fake_switch
from tests.softswitch.test_ports import HOST_END, SWITCH_END, _frame, _receive, in_netns, veth_ns


def test_delays_parse_as_port_equals_milliseconds() -> None:
    assert parse_delay("3=2.5") == (3, 0.0025)
    assert parse_delay("1=0") == (1, 0.0)
    for bad in ("3", "x=1", "3=abc", "3=-1", "3=nan", "3=inf", "3=20000"):
        with pytest.raises(DelaySpecError):
            parse_delay(bad)
    with pytest.raises(DelaySpecError, match="egress delay of port 1"):
        PortDelays(egress={1: 11.0})


def test_the_command_line_refuses_a_delay_on_a_port_without_an_interface() -> None:
    opts = parse_options(["--no-p4", "-i", "1@veth0", "--egress-delay", "1=5", "--ingress-delay", "1=5"])
    assert opts.delays == PortDelays(egress={1: 0.005}, ingress={1: 0.005})
    with pytest.raises(UsageError, match="port 2 has no interface"):
        parse_options(["--no-p4", "-i", "1@veth0", "--egress-delay", "2=5"])
    with pytest.raises(UsageError, match="given twice"):
        parse_options(["--no-p4", "-i", "1@veth0", "--egress-delay", "1=5", "--egress-delay", "1=6"])
    with pytest.raises(ValueError, match="without an interface"):
        PortIO(SoftSwitch(), {1: "veth0"}, delays=PortDelays(ingress={2: 0.01}))


def test_the_line_releases_in_due_order_and_keeps_a_ports_order() -> None:
    line = DelayLine()
    line.push(2.0, EGRESS, 1, b"late")
    line.push(1.0, INGRESS, 2, b"first")
    line.push(1.0, INGRESS, 2, b"second")  # same due time: arrival order
    assert line.next_due() == 1.0 and len(line) == 3
    assert line.pop_due(0.5) == []
    assert line.pop_due(1.5) == [(INGRESS, 2, b"first"), (INGRESS, 2, b"second")]
    assert line.pop_due(9.0) == [(EGRESS, 1, b"late")] and line.next_due() is None


@pytest.mark.netns
@pytest.mark.parametrize("ingress_ms,egress_ms", [(0.0, 60.0), (40.0, 30.0)])
def test_a_frame_spends_at_least_the_ports_delays_in_the_switch(
    veth_ns: str, each_engine: str, ingress_ms: float, egress_ms: float
) -> None:
    """A lower bound only (a loaded machine adds time, never removes it); frames keep their order. The C engine's
    port loop holds the frames itself (no frame of a delayed switch enters Python), the Python engine's loop too."""
    switch = SoftSwitch(device_id=1, name="dtest")
    switch.load_program(fake_switch.TINY_JSON)  # every frame leaves on port 1
    delays = PortDelays(egress={1: egress_ms / 1000}, ingress={1: ingress_ms / 1000})
    with in_netns(veth_ns):
        io = PortIO(switch, {1: SWITCH_END}, name="dtest", delays=delays)
        io.start()
        host = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        host.bind((HOST_END, ETH_P_ALL))
    assert io.mode == each_engine
    try:
        for i in range(3):
            marker = f"delayed-{i}".encode()
            t0 = time.monotonic()
            host.send(_frame(marker, 100))
            _receive(host, marker)
            assert time.monotonic() - t0 >= (ingress_ms + egress_ms) / 1000
        # a burst comes back in the order it was sent
        markers = [f"burst-{i:02d}".encode() for i in range(20)]
        for m in markers:
            host.send(_frame(m, 100))
        # _receive discards frames before the one it waits for: a frame overtaken by a later one would be lost
        got = [_receive(host, m) for m in markers]
        assert len(got) == 20
        assert io.stats[1].tx >= 23 and io.stats[1].rx >= 23
        if each_engine == "c":
            held = io._cloop.stats()
            assert held["held"] == 0 and held["held_dropped"] == 0  # every frame was released
    finally:
        host.close()
        io.stop()


@pytest.mark.netns
def test_the_c_loop_drops_and_counts_what_a_full_delay_fifo_cannot_hold(veth_ns: str) -> None:
    """A port's FIFO holds at most hold_cap frames: the rest are dropped and counted, none is lost silently, and
    frames still held when the loop is closed are freed with it."""
    if cbuild.toolchain() is None:
        pytest.skip("[cc] no C compiler (cc) on PATH: the C port loop cannot be built")
    from softswitch.runtime.cio import CPortLoop

    switch = SoftSwitch(device_id=1, name="dcap", engine="c")
    switch.load_program(fake_switch.TINY_JSON)  # every frame leaves on port 1
    with in_netns(veth_ns):
        port = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        port.bind((SWITCH_END, ETH_P_ALL))
        host = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        host.bind((HOST_END, ETH_P_ALL))
        ifindex = socket.if_nametoindex(SWITCH_END)
    with pytest.raises(ValueError, match="hold_cap must be at least 1"):
        CPortLoop([(1, port.fileno(), ifindex, SWITCH_END)], 2048, None, hold_cap=0)
    loop = CPortLoop(
        [(1, port.fileno(), ifindex, SWITCH_END)],
        2048,
        None,
        name="dcap",
        delays=PortDelays(ingress={1: 9.0}),
        hold_cap=8,
    )
    loop.attach(switch._rt.batch_entry())
    loop.start()
    try:
        for i in range(20):
            host.send(_frame(f"cap-{i:02d}".encode(), 100))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and loop.port_stats(1)[0] < 20:
            time.sleep(0.01)
        stats = loop.stats()
        assert loop.port_stats(1)[0] == 20  # every frame was received ...
        assert (stats["held"], stats["held_dropped"]) == (8, 12)  # ... 8 held for 9 s, 12 dropped and counted
        assert stats["frames"] == 0  # none went through the program yet
    finally:
        loop.close()  # frees the 8 still held
        port.close()
        host.close()
