"""Reliable datagrams between the ranks of a host collective: what ring, hier and tree share.

Every host method (hosts.ring, hosts.hier, hosts.tree) moves float32 segments
between pairs of ranks over one UDP socket per method, and needs the same loss
recovery. This module is that one transport, so no method carries its own:

- a *stream* is one segment sent by one rank to another under a 16-bit `tag`
  (the ring's step, a tree's "up" or "down", a hierarchy's phase), cut into
  MTU-sized chunks; the receiver declares which streams it expects
  (``Exchange.expect``), so anything else is counted as a duplicate and dropped;
- the sender keeps at most `window` unacknowledged datagrams per peer and
  resends after the adapted timeout (hosts.rto, one estimator per peer, kept
  across calls), up to `max_retries`, then raises ``TransferTimeoutError``
  naming the peer;
- acknowledgements are selective but batched, as a fair transport would pay
  for them: one ack datagram per `ack_every` data packets from a peer, or after
  `ack_delay_s`, or as soon as every stream expected from that peer is
  complete; each entry echoes which copy of a datagram arrived, so round trips
  are measured even across retransmissions;
- duplicates are acknowledged again and ignored; every datagram carries the
  call id, so a late copy from a finished call is re-acknowledged (also between
  calls, by ``Endpoint.service``), and a next call's early data, seen while
  this rank still waits at a barrier, is kept for that call.

The datagram formats are the ring's original ones (the ring moved onto this
module unchanged on the wire): data = type, transmission number mod 256, tag,
call, chunk, element count, then the values (little-endian float32 or
bfloat16); ack = type, entry count, call, then (tag, chunk, nth) entries.
"""

from __future__ import annotations

import heapq
import logging
import select
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from hosts import clock
from hosts.bf16 import from_bf16, to_bf16
from hosts.rto import RtoEstimator

LOG = logging.getLogger(__name__)

T = TypeVar("T")

DATA, ACK = 1, 2
DATA_HDR = struct.Struct("!BBHIII")  # type, transmission number (mod 256), tag, call, chunk, element count
ACK_HDR = struct.Struct("!BxHI")  # type, number of entries, call
ACK_ENTRY = np.dtype([("tag", ">u2"), ("chunk", ">u4"), ("nth", "u1")])  # nth echoes the copy acknowledged
FRAME_OVERHEAD = 14 + 20 + 8  # Ethernet, IPv4, UDP: counted in bytes_sent like the in-network frames
MAX_UDP_PAYLOAD = 1500 - 20 - 8
MAX_ACKS = (MAX_UDP_PAYLOAD - ACK_HDR.size) // ACK_ENTRY.itemsize
MAX_TAG = 0xFFFF
WIRE_BYTES = {"float32": 4, "bfloat16": 2}
DRAIN_BATCH = 256  # datagrams taken in before the sender side gets another turn


def elements_per_packet(wire: str) -> int:
    """Values in one MTU-sized datagram after the 16-byte data header."""
    return (MAX_UDP_PAYLOAD - DATA_HDR.size) // WIRE_BYTES[wire]


class TransferTimeoutError(TimeoutError):
    """A datagram got no acknowledgement, or nothing arrived, for too long: a peer is gone or unreachable."""


@dataclass(frozen=True)
class CollectiveConfig:
    """One rank's view of a host collective: peers[i] = (ip, port) of rank i, and the transport's settings."""

    rank: int
    peers: tuple[tuple[str, int], ...]
    wire: str = "float32"
    elements_per_packet: int | None = None  # default: as many as fit one MTU-sized datagram
    window: int = 128  # unacknowledged datagrams per peer
    # Batched acks: one ack datagram per ack_every data packets, or once the oldest unacknowledged
    # arrival is ack_delay_s old (well under the sender's min_timeout_s, so acks never cause a resend).
    ack_every: int = 16
    ack_delay_s: float = 0.01
    # Retransmission timeout: starts at timeout_s, then follows the measured round trips but never
    # below min_timeout_s: emulated hosts share CPUs, so acks are often late by a scheduling quantum,
    # and spurious retransmissions feed on themselves (a 20 ms floor did, on the emulation: docs/results-history.md).
    timeout_s: float = 0.05
    min_timeout_s: float = 0.05
    max_timeout_s: float = 2.0
    max_retries: int = 200

    def __post_init__(self) -> None:
        n = len(self.peers)
        if not 0 <= self.rank < n:
            raise ValueError(f"rank {self.rank} not in 0..{n - 1}")
        if self.wire not in WIRE_BYTES:
            raise ValueError(f"wire {self.wire!r}: choose one of {', '.join(WIRE_BYTES)}")
        if not 1 <= self.per_packet <= elements_per_packet(self.wire):
            raise ValueError(f"elements_per_packet {self.elements_per_packet} does not fit one 1500-byte MTU packet")
        if self.window < 1 or self.timeout_s <= 0:
            raise ValueError("window must be >= 1 and timeout_s > 0")
        if self.ack_every < 1 or self.ack_delay_s < 0:
            raise ValueError("ack_every must be >= 1 and ack_delay_s >= 0")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")

    @property
    def per_packet(self) -> int:
        return self.elements_per_packet or elements_per_packet(self.wire)

    @property
    def size(self) -> int:
        return len(self.peers)


def chunk_count(elements: int, per: int) -> int:
    return -(-elements // per)


class Endpoint:
    """One rank's UDP socket for one method, kept across calls: peers' addresses, timers, the last call's id."""

    def __init__(self, config: CollectiveConfig, sock: socket.socket | None = None) -> None:
        self.cfg = config
        if sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
            sock.bind(config.peers[config.rank])
        sock.setblocking(False)
        self.sock = sock
        self.addrs = [(socket.gethostbyname(ip), port) for ip, port in config.peers]
        self.rank_of = {addr: r for r, addr in enumerate(self.addrs) if r != config.rank}
        self.last_call = -1  # the id of the last finished call: older data is re-acknowledged, newer kept
        self._rtos: dict[int, RtoEstimator] = {}
        self.buf = bytearray(65536)
        self.early: deque[tuple[bytes, tuple[str, int]]] = deque()  # next call's packets, seen at a barrier
        self.poll = select.poll()
        self.poll.register(sock.fileno(), select.POLLIN)

    def rto(self, peer: int) -> RtoEstimator:
        """The retransmission timer towards one peer (peers at different distances get their own)."""
        est = self._rtos.get(peer)
        if est is None:
            cfg = self.cfg
            est = self._rtos[peer] = RtoEstimator(
                cfg.timeout_s, min_s=min(cfg.min_timeout_s, cfg.timeout_s), max_s=max(cfg.max_timeout_s, cfg.timeout_s)
            )
        return est

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def service(self) -> None:
        """Acknowledge data of finished calls again (their senders may have lost our ack); keep newer data."""
        buf = self.buf
        while True:
            try:
                nbytes, addr = self.sock.recvfrom_into(buf)
            except BlockingIOError:
                return
            if nbytes >= DATA_HDR.size and buf[0] == DATA and addr in self.rank_of:
                _, nth, tag, call, chunk, _ = DATA_HDR.unpack_from(buf)
                if call > self.last_call:  # a peer already started the next call: keep it for that call
                    self.early.append((bytes(buf[:nbytes]), addr))
                else:
                    entry = np.array([(tag, chunk, nth)], dtype=ACK_ENTRY).tobytes()
                    self.sock.sendto(ACK_HDR.pack(ACK, 1, call) + entry, addr)

    def service_while(self, fn: Callable[[], T]) -> T:
        """Run fn (a barrier) in a thread while answering late packets of finished calls."""
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = fn()
            # anything fn raised (a KeyboardInterrupt too) is raised again in the caller's thread below
            except BaseException as ex:  # noqa: BLE001
                box["error"] = ex

        t = threading.Thread(target=run, name="collective-barrier", daemon=True)
        t.start()
        while t.is_alive():
            if self.poll.poll(5):
                self.service()
            t.join(0)
        if "error" in box:
            raise box["error"]
        return box["value"]


# Receive handler: (source rank, tag, chunk, values as float32) for each chunk's first copy. The values
# are a view of the receive buffer, valid only during the call: copy what must outlive it.
OnData = Callable[[int, int, int, np.ndarray], None]


class Exchange:
    """One call's transfers on an endpoint: declare expected streams, queue chunks, then ``run`` until done.

    ``run`` returns once every expected chunk arrived (``t_done``: the moment the
    last one was handled, i.e. when the method's result is complete, since each
    method finishes its result on an arrival) and every chunk sent was
    acknowledged. Handlers may queue further chunks (``send``) as data arrives:
    that is how the methods pipeline their phases chunk by chunk.
    """

    def __init__(self, endpoint: Endpoint, call: int, on_data: OnData) -> None:
        if not 0 <= call <= 0xFFFFFFFF:
            raise ValueError(f"call {call} does not fit the header's 32 bits")
        self.ep = endpoint
        self.call = call
        self.on_data = on_data
        cfg = endpoint.cfg
        self.per = cfg.per_packet
        self.bf16 = cfg.wire == "bfloat16"
        # (src << 16 | tag) -> [chunks seen (bool array), elements]: integer keys, cheaper than tuples per packet
        self._inbound: dict[int, list[Any]] = {}
        self._left = [0] * cfg.size  # chunks still expected from each source
        self.expected = 0
        self.received = 0
        # per destination: (tag, chunk, payload) built, not yet sent (its window is full)
        self._waiting: list[deque[tuple[int, int, bytes]]] = [deque() for _ in range(cfg.size)]
        self._dsts: list[int] = []  # destinations sent to so far
        self._queued = 0
        # per destination: its window (None: the config's window for every peer); an all-to-all gives a peer
        # the share of its rank's window that its share of the bytes needs (hosts.alltoall.split_window)
        self.windows: list[int] | None = None
        self.t_done: float | None = None
        self.sent = self.retransmissions = self.packets_received = self.duplicates = self.bytes_sent = 0

    # -- declaring ---------------------------------------------------------------------------------
    def expect(self, src: int, tag: int, elements: int) -> None:
        """A stream of `elements` values will come from rank `src` under `tag` (zero elements: nothing comes)."""
        if src == self.ep.cfg.rank or not 0 <= src < self.ep.cfg.size:
            raise ValueError(f"rank {self.ep.cfg.rank} cannot expect a stream from rank {src}")
        if not 0 <= tag <= MAX_TAG or (src << 16 | tag) in self._inbound:
            raise ValueError(f"tag {tag} from rank {src}: out of 16 bits or declared twice")
        chunks = chunk_count(elements, self.per)
        self._inbound[src << 16 | tag] = [np.zeros(chunks, dtype=bool), elements]
        self._left[src] += chunks
        self.expected += chunks

    def send(self, dst: int, tag: int, chunk: int, values: np.ndarray) -> None:
        """Queue one chunk (at most per_packet values; copied now, so the caller may overwrite its array)."""
        body = to_bf16(values).astype("<u2") if self.bf16 else values.astype("<f4", copy=False)
        q = self._waiting[dst]
        if not q and dst not in self._dsts:
            self._dsts.append(dst)
        q.append((tag, chunk, DATA_HDR.pack(DATA, 1, tag, self.call, chunk, values.size) + body.tobytes()))
        self._queued += 1

    def send_stream(self, dst: int, tag: int, values: np.ndarray) -> None:
        """Queue a whole segment as chunks 0, 1, ... (the receiver expects it with the same element count)."""
        per = self.per
        for c in range(chunk_count(values.size, per)):
            self.send(dst, tag, c, values[c * per : (c + 1) * per])

    # -- running -----------------------------------------------------------------------------------
    def run(self) -> None:
        """Send, resend, receive and acknowledge until this rank's part of the call is done.

        The hot loop of every host method: counters are locals and keys are integers
        (dst << 48 | tag << 32 | chunk for datagrams in flight), because a Python
        transport spends its time per packet, not per byte.
        """
        ep, cfg, call = self.ep, self.ep.cfg, self.call
        me = cfg.rank
        sock, buf, early, addrs, rank_of = ep.sock, ep.buf, ep.early, ep.addrs, ep.rank_of
        per, bf16 = self.per, self.bf16
        window = self.windows if self.windows is not None else [cfg.window] * cfg.size
        width = WIRE_BYTES[cfg.wire]
        inbound, left, waiting, dsts, on_data = self._inbound, self._left, self._waiting, self._dsts, self.on_data
        now_fn = clock.now
        unacked: dict[int, list[Any]] = {}  # key -> [payload, sends, send times]
        inflight = [0] * cfg.size
        deadlines: list[tuple[float, int, int]] = []  # heap of (due, key, sends)
        rtos = [ep.rto(p) for p in range(cfg.size)]  # rtos[me] is never used
        acks_out: dict[int, list[tuple[int, int, int]]] = {}  # per source: entries not yet acknowledged
        oldest_ack: dict[int, float] = {}  # when the oldest of those arrived
        ack_every, ack_delay = cfg.ack_every, cfg.ack_delay_s
        expected = self.expected
        received = sent = sent_bytes = retrans = rx = dups = 0

        def put(payload: bytes, dst: int) -> None:
            nonlocal sent, sent_bytes
            addr = addrs[dst]
            while True:
                try:
                    sock.sendto(payload, addr)
                    break
                except BlockingIOError:
                    select.select([], [sock], [], 0.01)
            sent += 1
            sent_bytes += len(payload) + FRAME_OVERHEAD

        def flush_acks(src: int) -> None:
            entries = acks_out.pop(src)
            for i in range(0, len(entries), MAX_ACKS):
                batch = entries[i : i + MAX_ACKS]
                put(ACK_HDR.pack(ACK, len(batch), call) + np.array(batch, dtype=ACK_ENTRY).tobytes(), src)

        last_progress = now_fn()
        try:
            while received < expected or unacked or self._queued:
                # 1. send what the windows allow
                if self._queued:
                    for dst in dsts:
                        q = waiting[dst]
                        while q and inflight[dst] < window[dst]:
                            tag, chunk, payload = q.popleft()
                            self._queued -= 1
                            now = now_fn()
                            key = dst << 48 | tag << 32 | chunk
                            unacked[key] = [payload, 1, [now]]
                            inflight[dst] += 1
                            put(payload, dst)
                            heapq.heappush(deadlines, (now + rtos[dst].timeout(1), key, 1))
                # 2. resend what timed out
                now = now_fn()
                while deadlines:
                    due, key, nth = deadlines[0]
                    entry = unacked.get(key)
                    if entry is None or entry[1] != nth:
                        heapq.heappop(deadlines)
                        continue
                    if due > now:
                        break
                    heapq.heappop(deadlines)
                    dst = key >> 48
                    if entry[1] > cfg.max_retries:
                        raise TransferTimeoutError(
                            f"rank {me}: tag {key >> 32 & MAX_TAG} chunk {key & 0xFFFFFFFF} unacknowledged by rank "
                            f"{dst} {addrs[dst]} after {cfg.max_retries} retransmissions; is that rank running?"
                        )
                    rto = rtos[dst]
                    rto.expired(now)
                    entry[1] += 1
                    entry[2].append(now)
                    copy = bytearray(entry[0])
                    copy[1] = entry[1] & 0xFF  # the receiver echoes it: which copy arrived
                    put(bytes(copy), dst)
                    retrans += 1
                    heapq.heappush(deadlines, (now + rto.timeout(entry[1]), key, entry[1]))
                # 3. take in what arrived
                drained = 0
                while drained < DRAIN_BATCH:
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
                    src = rank_of.get(addr, -1)
                    kind = buf[0] if nbytes and src >= 0 else 0
                    if kind == ACK and nbytes >= ACK_HDR.size:
                        _, count, acall = ACK_HDR.unpack_from(buf)
                        if acall != call:
                            dups += 1
                            continue
                        last_progress = now_fn()
                        est = rtos[src]
                        base = src << 48
                        for tag, chunk, nth in np.frombuffer(
                            buf, dtype=ACK_ENTRY, count=count, offset=ACK_HDR.size
                        ).tolist():
                            entry = unacked.pop(base | tag << 32 | chunk, None)
                            if entry is not None:
                                inflight[src] -= 1
                                if 1 <= nth <= len(entry[2]) and entry[1] < 256:
                                    # The echo says which copy arrived, so even retransmitted packets give
                                    # a true round trip (Karn's ambiguity resolved as TCP timestamps do):
                                    # a late ack of a first copy raises the timeout instead of being ignored.
                                    est.sample(last_progress - entry[2][nth - 1])
                    elif kind == DATA and nbytes >= DATA_HDR.size:
                        _, nth, tag, dcall, chunk, count = DATA_HDR.unpack_from(buf)
                        stream = inbound.get(src << 16 | tag) if dcall == call else None
                        if stream is None or chunk >= stream[0].size or nbytes != DATA_HDR.size + width * count:
                            dups += 1
                            if dcall < call:  # a late copy from a finished call: its sender may still wait
                                stale = np.array([(tag, chunk, nth)], dtype=ACK_ENTRY).tobytes()
                                put(ACK_HDR.pack(ACK, 1, dcall) + stale, src)
                            continue
                        if count != min(per, stream[1] - chunk * per):
                            dups += 1  # malformed (a peer with another tensor size?): dropped, never acked
                            continue
                        pending = acks_out.get(src)
                        if pending is None:
                            pending = acks_out[src] = []
                            oldest_ack[src] = now_fn()
                        pending.append((tag, chunk, nth))
                        got = stream[0]
                        if got[chunk]:
                            dups += 1
                            continue
                        got[chunk] = True
                        received += 1
                        left[src] -= 1
                        last_progress = now_fn()
                        if bf16:
                            data = from_bf16(np.frombuffer(buf, dtype="<u2", count=count, offset=DATA_HDR.size))
                        else:
                            data = np.frombuffer(buf, dtype="<f4", count=count, offset=DATA_HDR.size)
                        on_data(src, tag, chunk, data)
                        if received == expected:
                            self.t_done = now_fn()  # the method's result is complete
                    else:
                        dups += 1
                if acks_out:
                    now = now_fn()
                    for src in tuple(acks_out):
                        if len(acks_out[src]) >= ack_every or left[src] == 0 or now - oldest_ack[src] >= ack_delay:
                            flush_acks(src)
                if drained == 0 and (received < expected or unacked) and not self._sendable(inflight, window):
                    cap = max(rtos[p].rto for p in dsts) if dsts else rtos[me].rto
                    wait = deadlines[0][0] - now_fn() if deadlines else cap
                    if acks_out:
                        wait = min(wait, min(oldest_ack[s] for s in acks_out) + ack_delay - now_fn())
                    ep.poll.poll(max(1, int(min(max(wait, 0.0), cap) * 1000)))
                    silence = max(cfg.timeout_s, cap) * cfg.max_retries
                    if now_fn() - last_progress > silence:
                        raise TransferTimeoutError(
                            f"rank {me}: nothing from {self._missing(unacked)} for {silence:.1f}s "
                            f"({received}/{expected} chunks received); is that rank running?"
                        )
            for src in list(acks_out):
                flush_acks(src)
        finally:
            self.received, self.sent, self.bytes_sent = received, sent, sent_bytes
            self.retransmissions, self.packets_received, self.duplicates = retrans, rx, dups
        if self.t_done is None:
            self.t_done = now_fn()

    def _sendable(self, inflight: list[int], window: list[int]) -> bool:
        return self._queued > 0 and any(self._waiting[d] and inflight[d] < window[d] for d in self._dsts)

    def _missing(self, unacked: dict[int, list[Any]]) -> str:
        """Which peers this rank still waits for (data or acknowledgements), for the error message."""
        data = [src for src, n in enumerate(self._left) if n > 0]
        acks = sorted({key >> 48 for key in unacked} - set(data))
        parts = [f"rank {r} {self.ep.addrs[r]} (data)" for r in data]
        parts += [f"rank {r} {self.ep.addrs[r]} (acknowledgements)" for r in acks]
        return ", ".join(parts) or "any peer"
