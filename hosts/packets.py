"""Pre-built frames: one Ethernet/IPv4/UDP template per worker, numpy stamps out every contribution.

The worker's hot path only indexes a row of a uint8 array and hands it to
``socket.send``; nothing is built per packet.  The Ethernet/IPv4/UDP prefix is
the same for every contribution of a worker (the IPv4 id is fixed at 0, so the
IPv4 checksum is too), and the aggregation header is packed for all chunks at
once from the field layout in ``wireformat``.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

import numpy as np

from wireformat import AGG
from wireformat.format import ETH_LEN, IPV4_LEN, UDP_LEN

AGG_MAC = AGG.agg_mac_text
AGG_IP = AGG.agg_ip_text
PREFIX_LEN = ETH_LEN + IPV4_LEN + UDP_LEN
HEADER_LEN = AGG.header_bytes
LANE_DTYPE = {4: np.dtype(">i4"), 2: np.dtype(">i2"), 1: np.dtype("i1")}
FLAG_RETRANSMIT = AGG.flags["FLAG_RETRANSMIT"]
FLAG_OVERFLOW = AGG.flags["FLAG_OVERFLOW"]
OP_CONTRIB = AGG.ops["OP_CONTRIB"]
OP_RESULT = AGG.ops["OP_RESULT"]


@dataclass(frozen=True)
class Endpoint:
    """A host's own addresses (the source of its contributions)."""

    mac: str
    ip: str


def _field_layout() -> dict[str, tuple[int, int, int]]:
    """field -> (64-bit word index, left shift in the word, bit mask)."""
    layout: dict[str, tuple[int, int, int]] = {}
    pos = 0
    for f in AGG.fields:
        word, bit = divmod(pos, 64)
        if bit + f.bits > 64:
            raise NotImplementedError(f"field {f.name} straddles a 64-bit word; packets.py packs by 64-bit words")
        layout[f.name] = (word, 64 - bit - f.bits, (1 << f.bits) - 1)
        pos += f.bits
    return layout


LAYOUT = _field_layout()
_WORDS = -(-AGG.header_bits // 64)


def pack_headers(count: int, **values: int | np.ndarray) -> np.ndarray:
    """count aggregation headers as a (count, HEADER_LEN) uint8 array.

    Each value is a scalar or an array of length count; fields not given are 0
    (version too: pass it).  Values are range-checked like ``AGG.pack_header``.
    """
    words = np.zeros((count, _WORDS), dtype=np.uint64)
    for name, value in values.items():
        if name not in LAYOUT:
            raise KeyError(f"unknown aggregation header field {name!r}")
        field = AGG.field(name)
        arr = np.asarray(value, dtype=np.int64)
        if arr.size and (arr.min() < field.min_value or arr.max() > field.max_value):
            raise ValueError(f"field {name} out of range [{field.min_value}, {field.max_value}]")
        word, shift, mask = LAYOUT[name]
        words[:, word] |= (arr & mask).astype(np.uint64) << np.uint64(shift)
    return words.astype(">u8").view(np.uint8).reshape(count, _WORDS * 8)[:, :HEADER_LEN]


def ipv4_checksum(header: bytes) -> int:
    """RFC 1071 one's-complement sum of a header whose checksum field is zero."""
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def frame_prefix(src: Endpoint, elem_type: int, *, dst: Endpoint = Endpoint(AGG_MAC, AGG_IP)) -> bytes:
    """Ethernet/IPv4/UDP bytes of a contribution: IPv4 id 0, TTL 64, valid checksum; UDP checksum 0.

    Plain struct packing, so a worker starts without importing Scapy (over a
    second of CPU per host); tests check it byte for byte against the frame
    Scapy builds with the AggHeader layer.
    """
    payload = AGG.payload_bytes(elem_type)
    try:
        macs = bytes.fromhex(dst.mac.replace(":", "")) + bytes.fromhex(src.mac.replace(":", ""))
        addrs = socket.inet_aton(src.ip) + socket.inet_aton(dst.ip)
    except (ValueError, OSError) as ex:
        raise ValueError(f"bad address in {src} / {dst}: {ex}") from ex
    if len(macs) != 12:
        raise ValueError(f"bad MAC address in {src} / {dst}")
    ip = struct.pack("!BBHHHBBH", 0x45, 0, IPV4_LEN + UDP_LEN + payload, 0, 0, 64, 17, 0) + addrs
    ip = ip[:10] + struct.pack("!H", ipv4_checksum(ip)) + ip[12:]
    udp = struct.pack("!HHHH", AGG.udp_port, AGG.udp_port, UDP_LEN + payload, 0)
    return macs + b"\x08\x00" + ip + udp


class ContributionFrames:
    """Every contribution frame of one all-reduce, one row per chunk.

    Chunk k travels in slot k % slot_count with shadow (k // slot_count) % 2,
    so each reuse of a slot alternates the shadow copy; its lane 0 is element
    k * NUM_LANES of the tensor.
    """

    def __init__(
        self,
        prefix: bytes,
        lanes: np.ndarray,
        *,
        job_id: int,
        rank: int,
        epoch: int,
        exponent: int,
        elem_type: int,
        slot_count: int,
    ) -> None:
        if len(prefix) != PREFIX_LEN:
            raise ValueError(f"prefix must be {PREFIX_LEN} bytes, got {len(prefix)}")
        if slot_count < 1:
            raise ValueError(f"slot_count must be >= 1, got {slot_count}")
        n = lanes.shape[0]
        if lanes.ndim != 2 or lanes.shape[1] != AGG.num_lanes:
            raise ValueError(f"lanes must have shape (chunks, {AGG.num_lanes}), got {lanes.shape}")
        width = AGG.lane_bytes(elem_type)
        self.frame_len = AGG.frame_bytes(elem_type)
        self.slot_count = slot_count
        k = np.arange(n, dtype=np.int64)
        self.slots = k % slot_count
        self.shadows = (k // slot_count) % 2
        self.offsets = k * AGG.num_lanes
        headers = pack_headers(
            n,
            version=AGG.version,
            op=OP_CONTRIB,
            elem_type=elem_type,
            job_id=job_id,
            shadow=self.shadows,
            slot=self.slots,
            contributor=rank,
            exponent=exponent,
            epoch=epoch,
            offset=self.offsets,
        )
        frames = np.empty((n, self.frame_len), dtype=np.uint8)
        frames[:, :PREFIX_LEN] = np.frombuffer(prefix, dtype=np.uint8)
        frames[:, PREFIX_LEN : PREFIX_LEN + HEADER_LEN] = headers
        frames[:, PREFIX_LEN + HEADER_LEN :] = lanes.astype(LANE_DTYPE[width]).view(np.uint8).reshape(n, -1)
        self.frames = frames
        self._rows = [memoryview(row) for row in frames] if n <= 4096 else None
        self._retransmit_mask = np.zeros(self.frame_len, dtype=np.uint8)
        self._retransmit_mask[PREFIX_LEN : PREFIX_LEN + HEADER_LEN] = pack_headers(1, flags=FLAG_RETRANSMIT)[0]

    def __len__(self) -> int:
        return self.frames.shape[0]

    def frame(self, chunk: int) -> memoryview:
        """The first transmission of a chunk (a view; no copy)."""
        if self._rows is not None:
            return self._rows[chunk]
        return memoryview(self.frames[chunk])

    def retransmission(self, chunk: int) -> bytes:
        """The same contribution with FLAG_RETRANSMIT set (same slot, shadow and offset)."""
        return (self.frames[chunk] | self._retransmit_mask).tobytes()


class ResultDecoder:
    """Reads the fields a worker needs from a result's UDP payload without Scapy."""

    def __init__(self) -> None:
        self._fields = {name: LAYOUT[name] for name in ("op", "flags", "elem_type", "shift", "job_id", "shadow", "slot", "epoch", "offset", "exponent")}
        self._exp_sign = 1 << (AGG.field("exponent").bits - 1)

    def header(self, payload: bytes | memoryview) -> dict[str, int]:
        if len(payload) < HEADER_LEN:
            raise ValueError(f"payload of {len(payload)} bytes is shorter than the {HEADER_LEN}-byte header")
        words = [int.from_bytes(payload[i * 8 : i * 8 + 8], "big") for i in range(_WORDS)] if HEADER_LEN % 8 == 0 else None
        if words is None:
            acc = int.from_bytes(bytes(payload[:HEADER_LEN]) + bytes(_WORDS * 8 - HEADER_LEN), "big")
            words = [(acc >> (64 * (_WORDS - 1 - i))) & ((1 << 64) - 1) for i in range(_WORDS)]
        out = {name: (words[w] >> s) & m for name, (w, s, m) in self._fields.items()}
        if out["exponent"] & self._exp_sign:
            out["exponent"] -= self._exp_sign << 1
        return out

    @staticmethod
    def lanes(payload: bytes | memoryview, elem_type: int) -> np.ndarray:
        """The lanes as int64; raises ValueError if the payload is too short for its elem_type."""
        width = AGG.lane_bytes(elem_type)
        need = HEADER_LEN + AGG.num_lanes * width
        if len(payload) < need:
            raise ValueError(f"result payload has {len(payload)} bytes, elem_type {elem_type} needs {need}")
        return np.frombuffer(payload, dtype=LANE_DTYPE[width], count=AGG.num_lanes, offset=HEADER_LEN).astype(np.int64)
