"""Attach an embedded switch to Linux interfaces with AF_PACKET raw sockets (`-i PORT@IFACE`).

One thread serves every port of a switch, in C or in Python depending on the engine of the
program loaded (PortIO follows every program change):

* C engine: the C port loop (c/cio.c, cio.py) gets the sockets' descriptors and runs the program
  without entering Python: epoll, recvmmsg batches, the batch through the program under its lock,
  sendmmsg per egress port. Frames for the CPU port are queued for a Python thread (packet-in).
* Python engine (or no program yet): an epoll loop in Python hands
  each frame to `switch.process_packet` (one loop: a thread per port was no faster).

Both pass frames exactly as received (frames under 60 bytes may arrive unpadded, as with BMv2)
and ignore our own transmissions, which the kernel loops back to packet sockets as PACKET_OUTGOING.
Sends block (back-pressure instead of drops). Frames are received with MSG_TRUNC, which reports a
frame's real length: one longer than the receive buffer (MAX_FRAME, a GSO super-frame's size) is
dropped and counted as oversized, never handed to the switch cut short. A port may hold frames for
a link's propagation delay (softswitch.runtime.delayline): the Python loop then waits on the next
due frame, the C loop holds them in a FIFO per port and direction behind a timerfd.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import logging
import math
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from softswitch.runtime.delayline import EGRESS, INGRESS, DelayLine, PortDelays

LOG = logging.getLogger(__name__)

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_IGNORE_OUTGOING = 23  # Linux >= 4.20; we still filter by pkttype below
PACKET_OUTGOING = 4
SIOCGIFINDEX = 0x8933
MAX_FRAME = 65536  # a GSO super-frame from a host can exceed the MTU
RCVBUF_BYTES = 4 * 1024 * 1024
BATCH = 64  # frames read from one socket before looking at the others
DROP_PORT = 511  # v1model's drop port
_GONE = (errno.ENETDOWN, errno.ENODEV, errno.ENXIO)


class PacketProcessor(Protocol):
    def process_packet(self, ingress_port: int, data: bytes) -> list[tuple[int, bytes]]: ...

    # (a SoftSwitch also has `transmit`, which PortIO sets to `inject` while it runs)


class PortSpecError(ValueError):
    """A `-i` argument that is not PORT@IFACE."""


class InterfaceError(OSError):
    """An interface that cannot be opened (absent, or no permission for raw sockets)."""


@dataclass(frozen=True)
class PortSpec:
    port: int
    iface: str


def parse_port_spec(text: str) -> PortSpec:
    """'1@s1-eth1' -> PortSpec(1, 's1-eth1'), as simple_switch's -i takes it."""
    port_text, sep, iface = text.partition("@")
    if not sep or not port_text.isdigit() or not iface:
        raise PortSpecError(f"interface {text!r} is not PORT@IFACE (e.g. 1@veth0)")
    port = int(port_text)
    if not 0 <= port < DROP_PORT:
        raise PortSpecError(f"interface {text!r}: port {port} is outside 0..{DROP_PORT - 1}")
    if len(iface) >= 16:
        raise PortSpecError(f"interface {text!r}: {iface!r} is longer than Linux's 15 characters")
    return PortSpec(port, iface)


@dataclass
class PortStats:
    rx: int = 0
    tx: int = 0
    tx_errors: int = 0
    oversized: int = 0  # frames longer than the receive buffer, dropped


@dataclass
class _Port:
    port: int
    iface: str
    sock: socket.socket
    ifindex: int
    stats: PortStats = field(default_factory=PortStats)


def _ifindex(sock: socket.socket, iface: str) -> int:
    """The interface's index in the socket's own network namespace (if_nametoindex uses the thread's)."""
    req = struct.pack("16si", iface.encode(), 0)
    return struct.unpack("16si", fcntl.ioctl(sock.fileno(), SIOCGIFINDEX, req))[1]


def open_port_socket(iface: str) -> tuple[socket.socket, int]:
    """A raw socket bound to one interface, promiscuous, ignoring our own transmissions.

    Opened in the calling thread's network namespace.
    """
    # protocol 0 until bound: a socket with ETH_P_ALL would receive every interface's frames meanwhile
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        ifindex = _ifindex(sock, iface)
        sock.bind((iface, ETH_P_ALL))
        mreq = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        except OSError:
            LOG.debug("PACKET_IGNORE_OUTGOING unavailable; filtering by packet type only")
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
        except OSError:
            pass
    except OSError as ex:
        sock.close()
        raise InterfaceError(ex.errno, f"cannot attach to interface {iface!r}: {ex.strerror}") from ex
    return sock, ifindex


class PortIO:
    """Moves frames between the given interfaces and one switch, on one background thread."""

    def __init__(
        self,
        switch: PacketProcessor,
        ports: Mapping[int, str],
        name: str = "",
        max_frame: int = MAX_FRAME,
        delays: PortDelays | None = None,
    ) -> None:
        self.switch = switch
        self.delays = delays or PortDelays()
        unknown = sorted((set(self.delays.egress) | set(self.delays.ingress)) - set(ports))
        if unknown:
            raise ValueError(f"delay given for port(s) {unknown} without an interface")
        self._egress_delay = {p: d for p, d in self.delays.egress.items() if d > 0}
        self._ingress_delay = {p: d for p, d in self.delays.ingress.items() if d > 0}
        self._held = DelayLine()
        self.max_frame = max_frame
        self._buf = bytearray(max_frame)
        self._view = memoryview(self._buf)
        self.name = name or "softswitch"
        self._wanted = dict(ports)
        self._ports: dict[int, _Port] = {}
        self._by_fd: dict[int, _Port] = {}
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = -1, -1
        self._stop = threading.Event()
        self._epoll: select.epoll | None = None
        self._tx_no_port = 0  # frames for a port without an interface
        # frames produced outside the loop (a controller's packet-outs), sent by the loop thread
        self._injected: collections.deque[tuple[int, bytes]] = collections.deque()
        # the C engine's loop, while the switch's program runs on the C engine
        self._cloop: Any = None
        self._bind_lock = threading.Lock()
        self._running = False
        self._watch: threading.Thread | None = None
        self._watch_stop = threading.Event()

    @property
    def mode(self) -> str | None:
        """Which loop moves the frames: "c", "python", or None when stopped."""
        if not self._running:
            return None
        return "c" if self._cloop is not None else "python"

    @property
    def stats(self) -> dict[int, PortStats]:
        loop = self._cloop
        if loop is None:
            return {p: port.stats for p, port in self._ports.items()}
        out = {}
        for p, port in self._ports.items():
            rx, tx, err, big, _ = loop.port_stats(p)
            s = port.stats
            out[p] = PortStats(s.rx + rx, s.tx + tx, s.tx_errors + err, s.oversized + big)
        return out

    @property
    def tx_no_port(self) -> int:
        loop = self._cloop
        return self._tx_no_port + (loop.stats()["tx_no_port"] if loop is not None else 0)

    @property
    def active_ports(self) -> list[int]:
        loop = self._cloop
        if loop is not None:
            return sorted(p for p in self._ports if loop.port_stats(p)[4])
        return sorted(p.port for p in list(self._by_fd.values()))  # copied: the loop thread may remove one

    def loop_cpu_seconds(self) -> float | None:
        """CPU time of the C loop's thread (None while the Python loop runs)."""
        loop = self._cloop
        return loop.thread_cpu_seconds() if loop is not None else None

    def start(self) -> None:
        """Open every socket (raising InterfaceError naming the first that fails), then serve."""
        try:
            for port, iface in sorted(self._wanted.items()):
                sock, ifindex = open_port_socket(iface)
                self._ports[port] = _Port(port, iface, sock, ifindex)
        except InterfaceError:
            self._close_sockets()
            raise
        self._epoll = select.epoll()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._epoll.register(self._wake_r, select.EPOLLIN)
        for p in self._ports.values():
            self._by_fd[p.sock.fileno()] = p
            self._epoll.register(p.sock.fileno(), select.EPOLLIN)
        self._running = True
        self._bind()
        listeners = getattr(self.switch, "on_program_change", None)
        if listeners is not None:
            listeners.append(self._bind)
        if hasattr(self.switch, "transmit"):
            self.switch.transmit = self.inject
        LOG.info(
            "%s: ports %s (%s loop)",
            self.name,
            ", ".join(f"{p}@{i}" for p, i in sorted(self._wanted.items())),
            self.mode,
        )

    # -- which loop ---------------------------------------------------------------------------------
    def _c_entry(self) -> tuple[int, int] | None:
        """The C program's batch entry when the switch's current program runs on the C engine."""
        rt = getattr(self.switch, "_rt", None)
        if rt is None or getattr(rt, "engine", None) != "c":
            return None
        return rt.batch_entry()

    def _bind(self) -> None:
        """Run the loop the switch's program needs (called at start and after every program change)."""
        with self._bind_lock:
            if not self._running:
                return
            entry = self._c_entry()
            if entry is not None:
                if self._thread is not None:
                    self._stop_python_loop()
                if self._cloop is None:
                    from softswitch.runtime.cio import CPortLoop  # needs a compiler; only with the C engine

                    cpu = getattr(self.switch, "cpu_port", None)
                    deliver = getattr(self.switch, "deliver_packet_in", None)
                    loop = CPortLoop(
                        [(p.port, p.sock.fileno(), p.ifindex, p.iface) for p in self._ports.values()],
                        self.max_frame,
                        cpu,
                        deliver if cpu is not None else None,
                        name=self.name,
                        delays=PortDelays(self._egress_delay, self._ingress_delay),
                    )
                    loop.attach(entry)
                    loop.start()
                    self._cloop = loop
                    self._start_watch()
                else:
                    self._cloop.attach(entry)  # returns once no batch runs on the old program
                return
            if self._cloop is not None:
                self._close_c_loop()
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(target=self._loop, name=f"{self.name}-ports", daemon=True)
                self._thread.start()

    def _stop_python_loop(self) -> None:
        self._stop.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self._stop.clear()

    def _close_c_loop(self) -> None:
        """Stop the C loop; its counts are kept in the ports' own statistics."""
        loop, self._cloop = self._cloop, None
        if loop is None:
            return
        loop.stop()
        for p, port in self._ports.items():
            rx, tx, err, big, active = loop.port_stats(p)
            port.stats.rx += rx
            port.stats.tx += tx
            port.stats.tx_errors += err
            port.stats.oversized += big
            if not active:
                fd = port.sock.fileno()
                if self._by_fd.pop(fd, None) is not None and self._epoll is not None:
                    try:
                        self._epoll.unregister(fd)
                    except (OSError, ValueError):
                        pass
        self._tx_no_port += loop.stats()["tx_no_port"]
        loop.close()
        self._stop_watch()

    def _start_watch(self) -> None:
        """Log what the C loop's packets ran into (failed asserts, internal errors): C does not log per packet."""
        self._watch_stop.clear()
        self._watch = threading.Thread(target=self._watch_loop, name=f"{self.name}-watch", daemon=True)
        self._watch.start()

    def _stop_watch(self) -> None:
        self._watch_stop.set()
        if self._watch is not None:
            self._watch.join(timeout=5)
            self._watch = None

    def _watch_loop(self) -> None:
        stats = getattr(self.switch, "stats", None)
        if not isinstance(stats, dict):
            return
        last = dict(stats)
        while not self._watch_stop.wait(5.0):
            now = dict(self.switch.stats)  # type: ignore[attr-defined]
            for key, level in (("assertions", logging.WARNING), ("errors", logging.ERROR)):
                grew = now.get(key, 0) - last.get(key, 0)
                if grew > 0:
                    LOG.log(
                        level,
                        "%s: %d packets dropped by %s in the last 5 s (C engine)",
                        self.name,
                        grew,
                        "failed assert()/assume()" if key == "assertions" else "internal errors",
                    )
            last = now

    def inject(self, egress: int, frame: bytes) -> None:
        """Send a frame from another thread (the port loop's sockets and counters are its own)."""
        loop = self._cloop
        if loop is not None:
            loop.send(egress, frame)
            return
        self._injected.append((egress, frame))
        self._wake()

    def _wake(self) -> None:
        if self._wake_w >= 0:
            try:
                os.write(self._wake_w, b"x")
            except BlockingIOError:
                pass  # the loop has wake-ups pending already

    def stop(self) -> None:
        if getattr(self.switch, "transmit", None) == self.inject:
            self.switch.transmit = None
        listeners = getattr(self.switch, "on_program_change", None)
        if listeners is not None and self._bind in listeners:
            listeners.remove(self._bind)
        with self._bind_lock:
            self._running = False
            self._close_c_loop()
            self._stop.set()
            self._wake()
            if self._thread is not None:
                self._thread.join(timeout=5)
                self._thread = None
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1
        self._close_sockets()

    def _close_sockets(self) -> None:
        for p in self._ports.values():
            p.sock.close()
        self._by_fd.clear()

    def __enter__(self) -> PortIO:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the loop ------------------------------------------------------------------------------
    def _loop(self) -> None:
        assert self._epoll is not None
        held = self._held
        while not self._stop.is_set():
            due = held.next_due()
            # epoll counts whole milliseconds and CPython rounds a wait up: a frame would leave up to 1 ms late
            # at every delayed hop. So wait whole ms rounded down, and poll without blocking for the last one.
            timeout = -1.0 if due is None else math.floor(max(0.0, due - time.monotonic()) * 1000.0) / 1000.0
            try:
                events = self._epoll.poll(timeout)
            except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for clarity
                continue
            if due is not None:
                self._release(time.monotonic())
            for fd, _mask in events:
                if fd == self._wake_r:
                    try:
                        os.read(self._wake_r, 4096)
                    except BlockingIOError:
                        pass
                    if self._stop.is_set():
                        return
                    while self._injected:
                        self._send(*self._injected.popleft())
                    continue
                port = self._by_fd.get(fd)
                if port is not None:
                    self._drain(port)

    def _drain(self, port: _Port) -> None:
        sock = port.sock
        buf, view, limit = self._buf, self._view, self.max_frame
        for _ in range(BATCH):
            try:
                # MSG_TRUNC: n is the frame's real length, even when the buffer is shorter
                n, addr = sock.recvfrom_into(buf, limit, socket.MSG_DONTWAIT | socket.MSG_TRUNC)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as ex:
                self._receive_error(port, ex)
                return
            if addr[2] == PACKET_OUTGOING:
                continue
            if n > limit:
                port.stats.oversized += 1
                LOG.debug("%s: dropped a %d-byte frame on port %d (longer than %d)", self.name, n, port.port, limit)
                continue
            data = bytes(view[:n])
            port.stats.rx += 1
            hold = self._ingress_delay.get(port.port)
            if hold:
                self._held.push(time.monotonic() + hold, INGRESS, port.port, data)
                continue
            for egress, frame in self.switch.process_packet(port.port, data):
                self._send(egress, frame)

    def _release(self, now: float) -> None:
        """Frames whose delay is over: received ones go through the switch, sent ones leave."""
        for kind, port, frame in self._held.pop_due(now):
            if kind == INGRESS:
                for egress, out in self.switch.process_packet(port, frame):
                    self._send(egress, out)
            else:
                self._send_now(port, frame)

    def _send(self, egress: int, frame: bytes) -> None:
        hold = self._egress_delay.get(egress)
        if hold:
            self._held.push(time.monotonic() + hold, EGRESS, egress, frame)
            return
        self._send_now(egress, frame)

    def _send_now(self, egress: int, frame: bytes) -> None:
        out = self._ports.get(egress)
        if out is None or out.sock.fileno() not in self._by_fd:
            self._tx_no_port += 1
            LOG.debug("%s: frame for port %d, which has no interface", self.name, egress)
            return
        out.stats.tx += 1  # counted first so that a reader who saw the frame also sees the count
        try:
            out.sock.send(frame)
        except OSError as ex:
            out.stats.tx -= 1
            out.stats.tx_errors += 1
            LOG.debug("%s: send on port %d (%s) failed: %s", self.name, egress, out.iface, ex)
            if ex.errno in _GONE:
                self._check_gone(out)

    def _receive_error(self, port: _Port, ex: OSError) -> None:
        if ex.errno in _GONE:
            self._check_gone(port)
        else:
            LOG.warning("%s: receive on port %d (%s) failed: %s", self.name, port.port, port.iface, ex)

    def _check_gone(self, port: _Port) -> None:
        """An interface that went down stays attached (it may come back up); one that vanished is closed."""
        try:
            if _ifindex(port.sock, port.iface) == port.ifindex:
                LOG.info("%s: interface %s of port %d is down", self.name, port.iface, port.port)
                return
        except OSError:
            pass
        LOG.warning("%s: interface %s of port %d disappeared; port stopped", self.name, port.iface, port.port)
        fd = port.sock.fileno()
        self._by_fd.pop(fd, None)
        if self._epoll is not None:
            try:
                self._epoll.unregister(fd)
            except (OSError, ValueError):
                pass
