"""The embedded switch's port I/O: frames through real interfaces, the C port loop, and p4ina's forwarding.

A sender process in namespace `a` writes UDP frames into a veth as fast as one Python loop can;
the switch (namespace `sw`, C engine, p4/build/p4ina.json with bench_softswitch's routes) reads
them from port 1 with recvmmsg, runs the pipeline and writes them to port 2 with sendmmsg, into
namespace `b`. Figures: frames the switch sent on port 2 per second of the sender's sending and per CPU second
of the switch (this process: the C loop's thread does the work, the Python thread sleeps), and
the sender's own rate (the switch can only be measured up to it; per CPU second is the figure
that says what a core of the switch does, and it is a lower bound: a loop that waits for frames
offered at a third of a microsecond apart runs with part-filled batches). The target is 300k
frames per second per core through a trivial program; p4ina's forwarding pipeline alone costs
about 0.16 us a frame (bench_softswitch's engine_c_fwd_pps_cpu), a small part of that budget.

Needs root (namespaces, raw sockets); without it the benchmark says so and gives no figures.
"""

from __future__ import annotations

import logging
import os
import resource
import subprocess
import sys
import threading
import time

from bench.bench_softswitch import HOST_IPS, HOST_MACS, PROGRAM, _eth, _ipv4, _switch
from bench.results import Figure, Figures

LOG = logging.getLogger(__name__)

FRAMES = 600_000
PAYLOAD = 64  # UDP payload bytes: 110-byte frames

# the sender: a raw socket on eth0 of namespace a, one frame (hex on argv) written FRAMES times
_SENDER = """
import socket, sys, time
frame, n = bytes.fromhex(sys.argv[1]), int(sys.argv[2])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
send, sent, t0 = s.send, 0, time.perf_counter()
while sent < n:
    try:
        send(frame)
        sent += 1
    except BlockingIOError:
        pass
print(sent, time.perf_counter() - t0)
"""


def _frame() -> bytes:
    import struct

    payload = bytes(PAYLOAD)
    udp = struct.pack(">HHHH", 5000, 6000, 8 + len(payload), 0)
    return _eth(HOST_MACS[2], HOST_MACS[1]) + _ipv4(HOST_IPS[1], HOST_IPS[2], len(udp) + len(payload)) + udp + payload


def run() -> Figures:
    if os.geteuid() != 0:
        LOG.warning("port_io: needs root (network namespaces, raw sockets); no figures")
        return {}
    if not PROGRAM.exists():
        raise FileNotFoundError(f"{PROGRAM} is missing: run `make p4` first")
    from emulation.netns import NetnsLab, enter
    from softswitch.runtime.ports import PortIO

    with NetnsLab() as lab:
        a, sw_ns, b = lab.ns("a"), lab.ns("sw"), lab.ns("b")
        lab.veth(a, "eth0", sw_ns, "p1")
        lab.veth(sw_ns, "p2", b, "eth0")
        sw = _switch("c")
        io: list[PortIO] = []
        failure: list[BaseException] = []

        def start() -> None:  # the switch's sockets are opened in namespace sw (a thread of its own enters it)
            try:
                enter(sw_ns)
                io.append(PortIO(sw, {1: "p1", 2: "p2"}, name="bench-io"))
                io[0].start()
            except BaseException as ex:  # noqa: BLE001 - not handled here: reported by the caller's thread below
                failure.append(ex)

        t = threading.Thread(target=start)
        t.start()
        t.join(60)
        if failure or not io:
            raise RuntimeError(f"port_io: the switch's port loop did not start: {failure}")
        port_io = io[0]
        try:
            if port_io.mode != "c":
                raise RuntimeError(f"port_io: the port loop runs in {port_io.mode}, not C")
            before = port_io.stats
            ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            done = subprocess.run(
                ["ip", "netns", "exec", a, sys.executable, "-c", _SENDER, _frame().hex(), str(FRAMES)],
                capture_output=True,
                text=True,
                timeout=600,
                check=True,
            )
            # the last frames drain: wait until port 2's count stops moving
            last, still = -1, 0
            while still < 3:
                time.sleep(0.05)
                now = port_io.stats[2].tx
                still = still + 1 if now == last else 0
                last = now
            elapsed = time.perf_counter() - t0
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
            after = port_io.stats
        finally:
            port_io.stop()
    sent, send_s = done.stdout.split()
    rx = after[1].rx - before[1].rx
    tx = after[2].tx - before[2].tx
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    sender_pps = int(sent) / float(send_s)
    note = (
        f"{int(sent)} frames of {len(_frame())} B sent by one Python loop at {sender_pps:,.0f}/s; switch received "
        f"{rx}, forwarded {tx} (C port loop, recvmmsg/sendmmsg, p4ina IPv4 forwarding)"
    )
    LOG.info("port_io: %s; %.1f CPU-s over %.1f s", note, cpu, elapsed)
    return {
        # the sender's own send time: the wall clock of this process also holds the sender's start-up
        "port_io_c_fwd_pps": Figure(
            round(tx / float(send_s)),
            "packets/s",
            note + "; over the sender's send time (port_io_delivered < 1: the switch's limit, "
            "its receive queue overflowed; = 1: the sender's)",
        ),
        "port_io_c_fwd_pps_cpu": Figure(
            round(tx / cpu) if cpu > 0 else 0,
            "packets/CPU-s",
            "frames forwarded per CPU second of the switch process (its C loop thread)",
        ),
        "port_io_sender_pps": Figure(round(sender_pps), "packets/s", "the Python sender's rate: the offered load"),
        "port_io_delivered": Figure(round(tx / int(sent), 4), "ratio", "frames forwarded / frames sent"),
    }
