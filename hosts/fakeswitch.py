"""An in-memory model of one switch's aggregation state machine (docs/DESIGN.md).

It is the root of a one-level tree: every worker is a child.  Tests drive the
worker logic with it without root or a P4 program; it is deliberately written
from the design text, not from the P4 source, so the two can be compared.
Results go back as UDP payloads, as a worker's UDP socket would see them.
"""

from __future__ import annotations

import logging
import queue
import select
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hosts.native_stream import Fds
from hosts.packets import FLAG_OVERFLOW, HEADER_LEN, LANE_DTYPE, OP_CONTRIB, OP_RESULT, PREFIX_LEN, pack_headers
from wireformat import AGG, WireFormatError
from wireformat import fixedpoint as fxp

LOG = logging.getLogger(__name__)

AGGREGATING, FINAL = 0, 2
INT_RANGE = {4: (-(2**31), 2**31 - 1), 2: (-(2**15), 2**15 - 1), 1: (-128, 127)}

# A drop rule sees (direction, worker rank, header fields) and returns True to drop.
DropRule = Callable[[str, int, dict[str, int]], bool]


@dataclass
class _Cell:
    token: int = 0
    epoch: int = 0
    bitmap: int = 0
    count: int = 0
    exponent: int = 0
    next_exponent: int = 0
    no_lanes: bool = False
    checksum: int = 0
    state: int = AGGREGATING
    overflow: bool = False
    lanes: np.ndarray = field(default_factory=lambda: np.zeros(AGG.num_lanes, dtype=np.int64))


class FakeSwitch:
    """One job on one switch; worker rank r is child r, its 'port' is its result queue."""

    def __init__(
        self,
        *,
        job_id: int,
        n_workers: int,
        slot_count: int,
        result_type: int = AGG.elem_types["ELEM_INT32"],
        shift: int = 0,
        token: int = 1,
        drop: DropRule | None = None,
    ) -> None:
        self.job_id, self.fan_in, self.slot_count = job_id, n_workers, slot_count
        self.result_type, self.shift, self.token = result_type, shift, token
        self.drop = drop
        self.queues: list[queue.Queue[bytes]] = [queue.Queue() for _ in range(n_workers)]
        self.cells = [_Cell() for _ in range(2 * slot_count)]
        self.counters = {
            "contributions": 0,
            "retransmissions": 0,
            "completions": 0,
            "overflows": 0,
            "drops": 0,
            "results_sent": 0,
            "corrupt": 0,
        }
        self._lock = threading.Lock()

    def receive(self, rank: int, frame: bytes | memoryview) -> None:
        """A frame from worker `rank` (its ingress port)."""
        data = bytes(frame)
        with self._lock:
            self._receive(rank, data)

    def _drop(self, why: str) -> None:
        LOG.debug("fake switch drops: %s", why)
        self.counters["drops"] += 1

    def _receive(self, rank: int, data: bytes) -> None:
        if len(data) < PREFIX_LEN + HEADER_LEN:
            return self._drop("short frame")
        h = AGG.unpack_header(data[PREFIX_LEN:])
        if self.drop and self.drop("up", rank, h):
            return None
        if h["version"] != AGG.version or h["op"] != OP_CONTRIB or h["job_id"] != self.job_id:
            return self._drop(f"not a contribution of job {self.job_id}: {h}")
        try:
            width = AGG.lane_bytes(h["elem_type"])
        except WireFormatError:
            return self._drop(f"bad elem_type {h['elem_type']}")
        no_lanes = width == 0
        if len(data) != AGG.frame_bytes(h["elem_type"]):
            return self._drop("length mismatch")
        if h["slot"] >= self.slot_count:
            return self._drop("bad slot")
        lanes = (
            np.zeros(AGG.num_lanes, dtype=np.int64)
            if no_lanes
            else np.frombuffer(data, dtype=LANE_DTYPE[width], offset=PREFIX_LEN + HEADER_LEN).astype(np.int64)
        )
        s, v, bit = h["slot"], h["shadow"], 1 << rank
        cell = self.cells[2 * s + v]
        diff = (h["epoch"] - cell.epoch) % 256
        if cell.token != self.token or 1 <= diff <= 127:
            cell.token, cell.epoch, cell.bitmap, cell.count, cell.state = self.token, h["epoch"], 0, 0, AGGREGATING
        elif diff != 0:
            return self._drop("stale epoch")
        other = self.cells[2 * s + (1 - v)]
        if other.token == self.token and other.epoch == h["epoch"]:
            other.bitmap &= ~bit
        if cell.bitmap & bit:
            self.counters["retransmissions"] += 1
            if cell.state == FINAL:
                self._send(rank, s, v, cell, h["offset"])
            return None
        if cell.bitmap == 0:
            cell.lanes = lanes.copy()
            cell.count, cell.exponent, cell.overflow, cell.state = 1, h["exponent"], False, AGGREGATING
            cell.next_exponent, cell.no_lanes, cell.checksum = h["next_exponent"], no_lanes, h["checksum"]
        else:
            if h["exponent"] != cell.exponent or no_lanes != cell.no_lanes:
                return self._drop("scale mismatch")
            cell.next_exponent = min(cell.next_exponent, h["next_exponent"])
            cell.checksum = (cell.checksum + h["checksum"]) & 0xFFFFFFFF
            total = cell.lanes + lanes
            lo, hi = INT_RANGE[4]
            if (total < lo).any() or (total > hi).any():
                cell.overflow = True
                self.counters["overflows"] += 1
            cell.lanes = np.clip(total, lo, hi)
            cell.count += 1
        cell.bitmap |= bit
        self.counters["contributions"] += 1
        if cell.count == self.fan_in:
            salt = AGG.salt(h["offset"], h["job_id"], h["epoch"])
            if (int(cell.lanes.sum()) + self.fan_in * salt) & 0xFFFFFFFF != cell.checksum:
                self.counters["corrupt"] += 1  # the round restarts: the workers' retransmissions rebuild it
                cell.bitmap, cell.count, cell.state = 0, 0, AGGREGATING
                return None
            cell.state = FINAL
            self.counters["completions"] += 1
            for child in range(self.fan_in):
                self._send(child, s, v, cell, h["offset"])
        return None

    def _send(self, rank: int, slot: int, shadow: int, cell: _Cell, offset: int) -> None:
        elem = AGG.elem_types["ELEM_NONE"] if cell.no_lanes else self.result_type
        width = AGG.lane_bytes(elem)
        # the switch's arithmetic shift rounds to nearest, ties to even (wireformat.fixedpoint.shift_even)
        narrowed = fxp.shift_even(cell.lanes, self.shift)
        lo, hi = INT_RANGE.get(width, (0, 0))
        clamped = bool(width) and ((narrowed < lo).any() or (narrowed > hi).any())
        flags = FLAG_OVERFLOW if (cell.overflow or clamped) else 0
        fields = dict(
            version=AGG.version,
            op=OP_RESULT,
            flags=flags,
            elem_type=elem,
            shift=self.shift,
            job_id=self.job_id,
            shadow=shadow,
            slot=slot,
            contributor=0,
            exponent=cell.exponent,
            epoch=cell.epoch,
            offset=offset,
            next_exponent=cell.next_exponent,
        )
        if self.drop and self.drop("down", rank, fields):
            return
        out = np.clip(narrowed, lo, hi) if width else np.zeros(0, dtype=np.int64)
        fields["checksum"] = AGG.checksum(int(out.sum()), offset, self.job_id, cell.epoch)
        lanes = out.astype(LANE_DTYPE[width]).tobytes() if width else b""
        payload = pack_headers(1, **fields)[0].tobytes() + lanes
        self.counters["results_sent"] += 1
        self.queues[rank].put(payload)


class FakeTransport:
    """A worker's view of a FakeSwitch: send frames up, receive result payloads."""

    def __init__(self, switch: FakeSwitch, rank: int) -> None:
        self.switch, self.rank = switch, rank

    def send(self, frame: bytes | memoryview) -> None:
        self.switch.receive(self.rank, frame)

    def recv(self, timeout: float) -> bytes | None:
        try:
            return self.switch.queues[self.rank].get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return None

    def close(self) -> None:
        pass


class SocketPairTransport:
    """A worker's transport through a datagram socket pair, so that the worker's C stream loop
    (hosts.native_stream), which needs file descriptors, runs against an in-process switch too: one thread
    hands each frame to `deliver`, another sends what arrives in `results` back. close() stops them."""

    def __init__(self, deliver: Callable[[bytes], None], results: queue.Queue[bytes], name: str = "") -> None:
        self._deliver, self._results = deliver, results
        self.sent = 0  # frames the worker sent through it
        self._mine, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        for sock in (self._mine, self._theirs):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self._theirs.settimeout(0.05)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._up, name=f"pair-up-{name}", daemon=True),
            threading.Thread(target=self._down, name=f"pair-down-{name}", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _up(self) -> None:
        while not self._stop.is_set():
            try:
                frame = self._theirs.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            self.sent += 1
            self._deliver(frame)

    def _down(self) -> None:
        q = self._results
        while not self._stop.is_set():
            try:
                payload = q.get(timeout=0.05)
            except queue.Empty:
                continue
            try:
                self._theirs.send(payload)
            except OSError:
                return

    def native_fds(self) -> Fds:
        return Fds(tx=self._mine.fileno(), rx=self._mine.fileno(), packet_mode=False)

    def send(self, frame: bytes | memoryview) -> None:
        self._mine.send(frame)

    def recv(self, timeout: float) -> bytes | None:
        ready, _, _ = select.select([self._mine], [], [], max(timeout, 0.0))
        return self._mine.recv(65536) if ready else None

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(2)
        self._mine.close()
        self._theirs.close()


def fake_socket_transport(switch: FakeSwitch, rank: int) -> SocketPairTransport:
    """FakeTransport's counterpart with sockets: worker `rank` of a FakeSwitch through a socket pair."""
    return SocketPairTransport(lambda frame: switch.receive(rank, frame), switch.queues[rank], str(rank))


class FakePortSwitch:
    """The model on ports, as a packet processor (`process_packet(port, frame) -> [(port, frame)]`).

    Port p (1..n) is child p - 1.  Results leave addressed to the host on the
    port, from the aggregation address.  For trying the host code in network
    namespaces without a P4 program; it is not the embedded switch.
    """

    def __init__(self, switch: FakeSwitch, hosts: dict[int, tuple[str, str]]) -> None:
        self.switch = switch
        self.hosts = hosts  # port -> (mac, ip)

    def process_packet(self, ingress_port: int, data: bytes) -> list[tuple[int, bytes]]:
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether
        from scapy.packet import Raw

        from hosts.packets import AGG_IP, AGG_MAC

        self.switch.receive(ingress_port - 1, data)
        out = []
        for rank, q in enumerate(self.switch.queues):
            while not q.empty():
                payload = q.get_nowait()
                mac, ip = self.hosts[rank + 1]
                frame = (
                    Ether(src=AGG_MAC, dst=mac)
                    / IP(src=AGG_IP, dst=ip, id=0)
                    / UDP(sport=AGG.udp_port, dport=AGG.udp_port, chksum=0)
                    / Raw(payload)
                )
                out.append((rank + 1, bytes(frame)))
        return out
