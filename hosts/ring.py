"""Ring all-reduce over UDP: the host baseline the in-network worker is measured against.

Reduce-scatter then all-gather (Patarasuk and Yuan's bandwidth-optimal ring, as
NCCL and Horovod run it): the tensor is cut into one segment per rank, and in
2(n-1) steps each rank sends one segment to its right neighbour, adding (first
n-1 steps) or storing (last n-1 steps) what it receives from its left.  Each
segment travels in MTU-sized chunks and every chunk moves on to the next step
as soon as it arrives, so the steps are pipelined over the ring rather than run
in lock step.  Sums are float32; each segment's sum is computed by one rank and
then copied, so every rank ends with bit-identical results.  With
``wire="bfloat16"`` the values cross the network as bfloat16 (2 bytes, as NCCL
all-reduces bf16 gradients): each partial sum is rounded to bfloat16 before it
is sent and widened back to float32 to be added to.

Loss recovery, as a real transport does it without paying an ack per packet:
acknowledgements are selective but batched (one ack datagram per `ack_every`
data packets, or after `ack_delay_s`, or as soon as a rank holds its whole
result), each entry echoing which copy arrived so that round trips are measured
even across retransmissions; the sender keeps at most `window` unacknowledged
packets to its right neighbour and resends after the adapted timeout; the
receiver ignores duplicates (but acknowledges them again).  A rank's result is
complete when it received everything (that moment is the all-reduce's end);
it returns once its own packets are acknowledged too, and keeps answering late
copies while it waits for the next call (``service``).
"""

from __future__ import annotations

import heapq
import logging
import select
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from hosts import clock
from hosts.bf16 import from_bf16, to_bf16
from hosts.coordination import Group, same_size
from hosts.quantization import check_finite
from hosts.rto import RtoEstimator
from hosts.stats import AllreduceStats

LOG = logging.getLogger(__name__)

T = TypeVar("T")

DATA, ACK = 1, 2
DATA_HDR = struct.Struct("!BBHIII")  # type, transmission number (mod 256), step, call, chunk, element count
ACK_HDR = struct.Struct("!BxHI")  # type, number of entries, call
ACK_ENTRY = np.dtype([("step", ">u2"), ("chunk", ">u4"), ("nth", "u1")])  # nth echoes the copy acknowledged
FRAME_OVERHEAD = 14 + 20 + 8  # Ethernet, IPv4, UDP: counted in bytes_sent like the in-network frames
MAX_UDP_PAYLOAD = 1500 - 20 - 8
DEFAULT_PORT = 16712
MAX_ACKS = (MAX_UDP_PAYLOAD - ACK_HDR.size) // ACK_ENTRY.itemsize
WIRE_BYTES = {"float32": 4, "bfloat16": 2}


def elements_per_packet(wire: str) -> int:
    """Values in one MTU-sized datagram after the 16-byte data header."""
    return (MAX_UDP_PAYLOAD - DATA_HDR.size) // WIRE_BYTES[wire]


class RingTimeoutError(TimeoutError):
    """A packet got no acknowledgement, or nothing arrived, for too long."""


@dataclass(frozen=True)
class RingConfig:
    """One rank's view of the ring.  peers[i] = (ip, port) of rank i; order = ring positions."""

    rank: int
    peers: tuple[tuple[str, int], ...]
    order: tuple[int, ...] | None = None
    wire: str = "float32"
    elements_per_packet: int | None = None  # default: as many as fit one MTU-sized datagram
    window: int = 128
    # Batched acks: one ack datagram per ack_every data packets, or once the oldest unacknowledged
    # arrival is ack_delay_s old (well under the sender's min_timeout_s, so acks never cause a resend).
    ack_every: int = 16
    ack_delay_s: float = 0.01
    # Retransmission timeout: starts at timeout_s, then follows the measured round trips but never
    # below min_timeout_s: emulated hosts share CPUs, so acks are often late by a scheduling quantum,
    # and spurious retransmissions feed on themselves (measured: 20 ms floors cost 20% duplicates).
    timeout_s: float = 0.05
    min_timeout_s: float = 0.05
    max_timeout_s: float = 2.0
    max_retries: int = 200

    def __post_init__(self) -> None:
        n = len(self.peers)
        if not 0 <= self.rank < n:
            raise ValueError(f"rank {self.rank} not in 0..{n - 1}")
        if self.order is not None and sorted(self.order) != list(range(n)):
            raise ValueError(f"order {self.order} is not a permutation of 0..{n - 1}")
        if self.wire not in WIRE_BYTES:
            raise ValueError(f"wire {self.wire!r}: choose one of {', '.join(WIRE_BYTES)}")
        if not 1 <= self.per_packet <= elements_per_packet(self.wire):
            raise ValueError(f"elements_per_packet {self.elements_per_packet} does not fit one 1500-byte MTU packet")
        if self.window < 1 or self.timeout_s <= 0:
            raise ValueError("window must be >= 1 and timeout_s > 0")
        if self.ack_every < 1 or self.ack_delay_s < 0:
            raise ValueError("ack_every must be >= 1 and ack_delay_s >= 0")

    @property
    def per_packet(self) -> int:
        return self.elements_per_packet or elements_per_packet(self.wire)

    @property
    def size(self) -> int:
        return len(self.peers)

    @property
    def ring(self) -> tuple[int, ...]:
        return self.order if self.order is not None else tuple(range(self.size))


def topology_order(groups: Sequence[Hashable]) -> tuple[int, ...]:
    """Ring order keeping ranks of one group (e.g. one edge switch) next to each other.

    groups[rank] names the rank's group; groups keep the order in which they
    first appear, ranks keep their order within a group.  Like NCCL's rank
    reordering, this makes all but one hop per group cross the edge switch only.
    """
    first: dict[Hashable, int] = {}
    for g in groups:
        first.setdefault(g, len(first))
    return tuple(sorted(range(len(groups)), key=lambda r: (first[groups[r]], r)))


def segment_bounds(n_elements: int, n_segments: int) -> np.ndarray:
    """Start index of each segment plus the end: sizes differ by at most one."""
    return np.array([n_elements * i // n_segments for i in range(n_segments + 1)], dtype=np.int64)


class RingAllreduce:
    """allreduce(tensor) -> summed tensor over a ring of UDP sockets."""

    def __init__(self, config: RingConfig, group: Group | None = None, sock: socket.socket | None = None) -> None:
        self.cfg = config
        self.group = group
        ring = config.ring
        self.pos = ring.index(config.rank)
        n = config.size
        self.right = config.peers[ring[(self.pos + 1) % n]]
        self.left = config.peers[ring[(self.pos - 1) % n]]
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
            sock.bind(config.peers[config.rank])
        sock.setblocking(False)
        self.sock = sock
        self._left_addr = self._resolve(self.left)
        self._right_addr = self._resolve(self.right)
        self.calls = 0
        self.last_call = -1  # the id of the last finished call: older data is re-acknowledged, newer kept
        self.last_stats: AllreduceStats | None = None
        self.rto = RtoEstimator(config.timeout_s, min_s=min(config.min_timeout_s, config.timeout_s),
                                max_s=max(config.max_timeout_s, config.timeout_s))
        self._buf = bytearray(65536)
        self._early: deque[tuple[bytes, tuple[str, int]]] = deque()  # next call's packets, seen at a barrier
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLIN)

    @staticmethod
    def _resolve(addr: tuple[str, int]) -> tuple[str, int]:
        return (socket.gethostbyname(addr[0]), addr[1])

    def close(self) -> None:
        self.sock.close()

    # -- waiting without going deaf ---------------------------------------------------------------
    def service_while(self, fn: Callable[[], T]) -> T:
        """Run fn (a barrier) in a thread while answering late packets of finished calls."""
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = fn()
            except BaseException as ex:  # handed to the caller below
                box["error"] = ex

        t = threading.Thread(target=run, name="ring-barrier", daemon=True)
        t.start()
        while t.is_alive():
            if self._poll.poll(5):
                self._answer_stale()
            t.join(0)
        if "error" in box:
            raise box["error"]
        return box["value"]

    def fileno(self) -> int:
        return self.sock.fileno()

    def service(self) -> None:
        """Answer what arrived between calls (an agent calls this while it waits for its next command)."""
        self._answer_stale()

    def _answer_stale(self) -> None:
        """Acknowledge data of finished calls again (their senders may have lost our ack)."""
        while True:
            try:
                nbytes, addr = self.sock.recvfrom_into(self._buf)
            except BlockingIOError:
                return
            if nbytes >= DATA_HDR.size and self._buf[0] == DATA and addr == self._left_addr:
                _, nth, step, call, chunk, _ = DATA_HDR.unpack_from(self._buf)
                if call > self.last_call:  # the left neighbour already started the next call: keep it
                    self._early.append((bytes(self._buf[:nbytes]), addr))
                else:
                    entry = np.array([(step, chunk, nth)], dtype=ACK_ENTRY).tobytes()
                    self.sock.sendto(ACK_HDR.pack(ACK, 1, call) + entry, addr)

    def barrier(self, tag: str, size: int = 0) -> None:
        """All ranks arrive (with tensors of the same size) before anyone goes on."""
        if self.group is not None:
            group = self.group
            same_size(self.service_while(lambda: group.exchange(tag, [size])), tag)

    # -- the all-reduce ---------------------------------------------------------------------------
    def allreduce(self, tensor: np.ndarray, call: int | None = None) -> np.ndarray:
        """The float32 sum over the ring. `call` numbers the all-reduce the same on every rank, and must
        grow from call to call; without it the ranks number their calls themselves and meet at a barrier
        first (an agent instead passes its step and holds the barrier itself, outside the timing)."""
        t_start = clock.now()
        x = np.asarray(tensor, dtype=np.float32)
        check_finite(x)  # same contract as the in-network worker
        if call is None:
            self.barrier(f"ring-{self.calls}", x.size)
            t_start = clock.now()
            call = self.last_call + 1
        if call <= self.last_call:
            raise ValueError(f"call {call} does not follow the last call {self.last_call}")
        if call > 0xFFFFFFFF:
            raise ValueError(f"call {call} does not fit the header's 32 bits")
        self.calls += 1
        acc = x.ravel().copy()
        if self.cfg.size == 1:
            now = clock.now()
            self.last_stats = AllreduceStats("ring", acc.size, now - t_start, 0, 0, 0, 0, 0, t_start=t_start, t_done=now)
            self.last_call = call
            return acc.reshape(x.shape)
        try:
            self.last_stats = self._run(acc, call, t_start)
        finally:
            self.last_call = call
        return acc.reshape(x.shape)

    def _run(self, acc: np.ndarray, call: int, t_start: float) -> AllreduceStats:
        cfg, n, pos = self.cfg, self.cfg.size, self.pos
        per = cfg.per_packet
        bf16 = cfg.wire == "bfloat16"
        bounds = segment_bounds(acc.size, n)
        chunks_of = [-(-int(bounds[s + 1] - bounds[s]) // per) for s in range(n)]
        last_step = 2 * n - 3

        def seg_recv(step: int) -> int:
            return (pos - 1 - step) % n if step <= n - 2 else (pos - (step - (n - 1))) % n

        def span(seg: int, chunk: int) -> slice:
            lo = int(bounds[seg]) + chunk * per
            return slice(lo, min(lo + per, int(bounds[seg + 1])))

        expected = sum(chunks_of[seg_recv(t)] for t in range(last_step + 1))
        got = [np.zeros(chunks_of[seg_recv(t)], dtype=bool) for t in range(last_step + 1)]
        received = 0
        unacked: dict[tuple[int, int], list[Any]] = {}  # (step, chunk) -> [payload, sends, send times]
        waiting: deque[tuple[int, int, bytes]] = deque()  # built, not yet sent (window full)
        deadlines: list[tuple[float, tuple[int, int], int]] = []  # heap
        rto = self.rto
        acks_out: list[tuple[int, int, int]] = []
        oldest_ack = 0.0  # when the oldest entry of acks_out arrived
        sent = retrans = rx = dups = sent_bytes = 0
        t_done: float | None = None
        sock, right, left, buf, early = self.sock, self._right_addr, self._left_addr, self._buf, self._early
        width = WIRE_BYTES[cfg.wire]

        def queue_data(step: int, chunk: int, values: np.ndarray) -> None:
            body = to_bf16(values).astype("<u2").tobytes() if bf16 else values.astype("<f4").tobytes()
            waiting.append((step, chunk, DATA_HDR.pack(DATA, 1, step, call, chunk, values.size) + body))

        def put(payload: bytes, addr: tuple[str, int]) -> None:
            nonlocal sent, sent_bytes
            while True:
                try:
                    sock.sendto(payload, addr)
                    break
                except BlockingIOError:
                    select.select([], [sock], [], 0.01)
            sent += 1
            sent_bytes += len(payload) + FRAME_OVERHEAD

        def flush_acks() -> None:
            while acks_out:
                batch = acks_out[:MAX_ACKS]
                del acks_out[:MAX_ACKS]
                put(ACK_HDR.pack(ACK, len(batch), call) + np.array(batch, dtype=ACK_ENTRY).tobytes(), left)

        seg0 = pos % n  # step 0 sends this rank's own segment
        for c in range(chunks_of[seg0]):
            queue_data(0, c, acc[span(seg0, c)])

        last_progress = clock.now()
        while received < expected or unacked or waiting:
            # 1. send what the window allows
            while waiting and len(unacked) < cfg.window:
                step, chunk, payload = waiting.popleft()
                now = clock.now()
                unacked[(step, chunk)] = [payload, 1, [now]]
                put(payload, right)
                heapq.heappush(deadlines, (now + rto.timeout(1), (step, chunk), 1))
            # 2. resend what timed out
            now = clock.now()
            while deadlines:
                due, key, nth = deadlines[0]
                entry = unacked.get(key)
                if entry is None or entry[1] != nth:
                    heapq.heappop(deadlines)
                    continue
                if due > now:
                    break
                heapq.heappop(deadlines)
                if entry[1] > cfg.max_retries:
                    raise RingTimeoutError(
                        f"rank {cfg.rank}: step {key[0]} chunk {key[1]} unacknowledged by {right} after "
                        f"{cfg.max_retries} retransmissions; is that rank running?"
                    )
                rto.expired(now)
                entry[1] += 1
                entry[2].append(now)
                copy = bytearray(entry[0])
                copy[1] = entry[1] & 0xFF  # the receiver echoes it: which copy arrived
                put(bytes(copy), right)
                retrans += 1
                heapq.heappush(deadlines, (now + rto.timeout(entry[1]), key, entry[1]))
            # 3. take in what arrived
            drained = 0
            while drained < 256:
                if early:
                    packet, addr = early.popleft()
                    nbytes = len(packet)
                    buf[:nbytes] = packet
                else:
                    try:
                        nbytes, addr = sock.recvfrom_into(buf)
                    except BlockingIOError:
                        break
                drained += 1
                rx += 1
                kind = buf[0] if nbytes else 0
                if kind == ACK and nbytes >= ACK_HDR.size and addr == right:
                    _, count, acall = ACK_HDR.unpack_from(buf)
                    if acall != call:
                        dups += 1
                        continue
                    last_progress = clock.now()
                    for step, chunk, nth in np.frombuffer(buf, dtype=ACK_ENTRY, count=count,
                                                          offset=ACK_HDR.size).tolist():
                        entry = unacked.pop((step, chunk), None)
                        if entry is not None and 1 <= nth <= len(entry[2]) and entry[1] < 256:
                            # The echo says which copy arrived, so even retransmitted packets give
                            # a true round trip (Karn's ambiguity resolved as TCP timestamps do):
                            # a late ack of a first copy raises the timeout instead of being ignored.
                            rto.sample(last_progress - entry[2][nth - 1])
                elif kind == DATA and nbytes >= DATA_HDR.size and addr == left:
                    _, nth, step, dcall, chunk, count = DATA_HDR.unpack_from(buf)
                    if dcall != call or step > last_step or chunk >= got[step].size or nbytes != DATA_HDR.size + width * count:
                        dups += 1
                        if dcall < call:  # a late copy from a finished call: its sender may still wait
                            stale = np.array([(step, chunk, nth)], dtype=ACK_ENTRY).tobytes()
                            put(ACK_HDR.pack(ACK, 1, dcall) + stale, left)
                        continue
                    seg = seg_recv(step)
                    where = span(seg, chunk)
                    if count != where.stop - where.start:
                        dups += 1  # malformed (a peer with another tensor size?): dropped, never acked
                        continue
                    if not acks_out:
                        oldest_ack = clock.now()
                    acks_out.append((step, chunk, nth))
                    if got[step][chunk]:
                        dups += 1
                        continue
                    got[step][chunk] = True
                    received += 1
                    last_progress = clock.now()
                    if bf16:
                        data = from_bf16(np.frombuffer(buf, dtype="<u2", count=count, offset=DATA_HDR.size))
                    else:
                        data = np.frombuffer(buf, dtype="<f4", count=count, offset=DATA_HDR.size)
                    if step <= n - 2:
                        acc[where] += data
                        if bf16 and step == n - 2:
                            # This rank owns the segment's sum: round it as the others will receive it,
                            # so every rank ends with the same values.
                            acc[where] = from_bf16(to_bf16(acc[where]))
                    else:
                        acc[where] = data
                    if step < last_step:
                        queue_data(step + 1, chunk, acc[where])
                    if received == expected:
                        t_done = clock.now()  # the float32 result is complete in acc
                else:
                    dups += 1
            if acks_out and (len(acks_out) >= cfg.ack_every or received == expected
                             or clock.now() - oldest_ack >= cfg.ack_delay_s):
                flush_acks()
            if drained == 0 and (received < expected or unacked) and not (waiting and len(unacked) < cfg.window):
                wait = deadlines[0][0] - clock.now() if deadlines else rto.rto
                if acks_out:
                    wait = min(wait, oldest_ack + cfg.ack_delay_s - clock.now())
                self._poll.poll(max(1, int(min(max(wait, 0.0), rto.rto) * 1000)))
                silence = max(cfg.timeout_s, rto.rto) * cfg.max_retries
                if clock.now() - last_progress > silence:
                    raise RingTimeoutError(
                        f"rank {cfg.rank}: nothing from {left} for {silence:.1f}s "
                        f"({received}/{expected} chunks received); is that rank running?"
                    )
        flush_acks()
        done = t_done if t_done is not None else clock.now()
        return AllreduceStats(
            method="ring" if not bf16 else "ring-bf16", elements=acc.size, latency_s=done - t_start, packets_sent=sent,
            retransmissions=retrans, packets_received=rx, duplicates=dups, bytes_sent=sent_bytes,
            t_start=t_start, t_done=done,
        )
