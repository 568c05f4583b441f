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
from typing import Any

import numpy as np

from wireformat import AGG
from wireformat.format import ETH_LEN, IPV4_LEN, UDP_LEN

AGG_MAC = AGG.agg_mac_text
AGG_IP = AGG.agg_ip_text
PREFIX_LEN = ETH_LEN + IPV4_LEN + UDP_LEN
HEADER_LEN = AGG.header_bytes
LANE_DTYPE: dict[int, np.dtype[np.signedinteger[Any]]] = {  # by bytes per lane
    4: np.dtype(">i4"),
    2: np.dtype(">i2"),
    1: np.dtype("i1"),
}
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


def _byte_of(name: str, bits: int = 8) -> int:
    """Offset in the agg header of a byte-aligned field of `bits` bits (patched per chunk at send time)."""
    pos = 0
    for f in AGG.fields:
        if f.name == name:
            if pos % 8 or f.bits != bits:
                raise NotImplementedError(f"field {name} is not a byte-aligned {bits}-bit field")
            return pos // 8
        pos += f.bits
    raise KeyError(name)


EXPONENT_AT = PREFIX_LEN + _byte_of("exponent")
CHECKSUM_AT = PREFIX_LEN + _byte_of("checksum", 32)
ELEM_NONE = AGG.elem_types["ELEM_NONE"]
EXPONENT_MAX = AGG.field("exponent").max_value


class ContributionFrames:
    """Every contribution frame of one all-reduce: one exponent round per slot, then one frame per chunk.

    A slot's rounds alternate its shadow copy: round 0 (shadow 0) is the exponent
    round, an ELEM_NONE frame proposing the exponent of the slot's first chunk;
    chunk k then travels in slot k % slot_count, round 1 + k // slot_count, and
    proposes the exponent of chunk k + slot_count (the slot's next round). Headers
    are packed for all frames at once; a chunk's exponent and lanes are written
    into its row when the agreed exponent is known (`fill`), just before it is sent.
    The shadows here assume a slot's first round is its round 0; the worker sets each
    round's own (`set_shadow`, `set_exponent_shadow`) from its per-slot round count,
    which carries on across all-reduces.

    speculative=True (hosts.inc_worker: the exponents of the previous all-reduce
    of the same tensor): no exponent rounds; chunk k starts in round k // slot_count
    and proposes its own exponent, so its result tells whether the speculation held.
    A chunk sent again as a new round (a missed speculation) gets its shadow from
    `set_shadow`.
    """

    def __init__(
        self,
        src: Endpoint,
        proposals: np.ndarray,
        *,
        job_id: int,
        rank: int,
        epoch: int,
        elem_type: int,
        slot_count: int,
        speculative: bool = False,
    ) -> None:
        if slot_count < 1:
            raise ValueError(f"slot_count must be >= 1, got {slot_count}")
        n = int(proposals.size)
        if n < 1:
            raise ValueError("an all-reduce has at least one chunk")
        self.elem_type = elem_type
        self.width = AGG.lane_bytes(elem_type)
        if not self.width:
            raise ValueError("contributions carry lanes: elem_type must be int32, int16 or int8")
        self.frame_len = AGG.frame_bytes(elem_type)
        self.exp_frame_len = AGG.frame_bytes(ELEM_NONE)
        self.slot_count = slot_count
        self.n_slots = min(slot_count, n)
        k = np.arange(n, dtype=np.int64)
        self.slots = k % slot_count
        self.speculative = speculative
        self.shadows = (k // slot_count + (0 if speculative else 1)) % 2
        self.offsets = k * AGG.num_lanes
        if speculative:
            nxt = np.asarray(proposals, dtype=np.int64)
        else:
            nxt = np.full(n, EXPONENT_MAX, dtype=np.int64)
            nxt[: max(0, n - slot_count)] = proposals[slot_count:]
        self.salts = salts(self.offsets, job_id, epoch)
        common = dict(version=AGG.version, op=OP_CONTRIB, job_id=job_id, contributor=rank, epoch=epoch)
        self.frames = self._rows(
            n,
            frame_prefix(src, elem_type),
            self.frame_len,
            pack_headers(
                n,
                elem_type=elem_type,
                shadow=self.shadows,
                slot=self.slots,
                offset=self.offsets,
                next_exponent=nxt,
                **common,
            ),
        )
        s = np.arange(self.n_slots, dtype=np.int64)
        self.exp_frames = self._rows(
            self.n_slots,
            frame_prefix(src, ELEM_NONE),
            self.exp_frame_len,
            pack_headers(
                self.n_slots,
                elem_type=ELEM_NONE,
                shadow=0,
                slot=s,
                offset=s * AGG.num_lanes,
                next_exponent=proposals[: self.n_slots],
                checksum=self.salts[: self.n_slots],
                **common,
            ),
        )
        self._lane_view = self.frames[:, PREFIX_LEN + HEADER_LEN :].view(LANE_DTYPE[self.width]) if self.width else None
        self._flag_at = PREFIX_LEN + _byte_of("flags")
        word, shift, _mask = LAYOUT["shadow"]
        self._shadow_at, self._shadow_bit = PREFIX_LEN + word * 8 + (63 - shift) // 8, 1 << (shift % 8)

    @staticmethod
    def _rows(n: int, prefix: bytes, length: int, headers: np.ndarray) -> np.ndarray:
        rows = np.zeros((n, length), dtype=np.uint8)
        rows[:, :PREFIX_LEN] = np.frombuffer(prefix, dtype=np.uint8)
        rows[:, PREFIX_LEN : PREFIX_LEN + HEADER_LEN] = headers
        return rows

    def __len__(self) -> int:
        return self.frames.shape[0]

    def layout(self) -> dict[str, int]:
        """Where fill() and set_shadow() write in a frame (for the C stream loop, which writes the same bytes)."""
        return dict(
            exponent_at=EXPONENT_AT,
            checksum_at=CHECKSUM_AT,
            flag_at=self._flag_at,
            shadow_at=self._shadow_at,
            shadow_bit=self._shadow_bit,
            lanes_at=PREFIX_LEN + HEADER_LEN,
        )

    def fill(self, chunk: int, exponent: int, lanes: np.ndarray) -> None:
        """Write the agreed exponent, the chunk's quantized lanes and their checksum into its frame."""
        self.frames[chunk, EXPONENT_AT] = exponent & 0xFF
        self._lane_view[chunk] = lanes  # type: ignore[index]
        lanes = np.asarray(lanes)
        # integer-valued floats (the worker's rounded products, |q| < 2^31) sum exactly in float64: no int copy
        lane_sum = lanes.sum() if lanes.dtype.kind == "f" else lanes.sum(dtype=np.int64)
        total = (int(lane_sum) + int(self.salts[chunk])) & 0xFFFFFFFF
        self.frames[chunk, CHECKSUM_AT : CHECKSUM_AT + 4] = np.frombuffer(total.to_bytes(4, "big"), dtype=np.uint8)

    def set_shadow(self, chunk: int, shadow: int) -> None:
        """The shadow copy of the round a chunk is (re)sent in."""
        if shadow:
            self.frames[chunk, self._shadow_at] |= self._shadow_bit
        else:
            self.frames[chunk, self._shadow_at] &= 0xFF ^ self._shadow_bit

    def set_exponent_shadow(self, slot: int, shadow: int) -> None:
        """The shadow copy of a slot's exponent round (the other one than the slot's last round)."""
        if shadow:
            self.exp_frames[slot, self._shadow_at] |= self._shadow_bit
        else:
            self.exp_frames[slot, self._shadow_at] &= 0xFF ^ self._shadow_bit

    def frame(self, chunk: int) -> memoryview:
        """A chunk's first transmission (a view; no copy)."""
        return memoryview(self.frames[chunk])

    def exponent_frame(self, slot: int) -> memoryview:
        return memoryview(self.exp_frames[slot])

    def _flagged(self, row: np.ndarray) -> bytes:
        out = bytearray(row.tobytes())
        out[self._flag_at] |= FLAG_RETRANSMIT
        return bytes(out)

    def retransmission(self, chunk: int) -> bytes:
        """The same contribution with FLAG_RETRANSMIT set (same slot, shadow and offset)."""
        return self._flagged(self.frames[chunk])

    def exponent_retransmission(self, slot: int) -> bytes:
        return self._flagged(self.exp_frames[slot])


def salts(offsets: np.ndarray, job_id: int, epoch: int) -> np.ndarray:
    """The checksum salt of each packet (wireformat's salt, vectorized)."""
    o = np.asarray(offsets, dtype=np.int64)
    return (o ^ (job_id << 16) ^ (epoch << 8) ^ AGG.checksum_salt) & 0xFFFFFFFF


def checks_out(lanes: np.ndarray, checksum: int, offset: int, job_id: int, epoch: int) -> bool:
    """Does a packet's checksum match its lanes (the end-to-end check of every result)?"""
    return AGG.checksum(int(np.asarray(lanes).sum(dtype=np.int64)), offset, job_id, epoch) == checksum


class ResultDecoder:
    """Reads the fields a worker needs from a result's UDP payload without Scapy."""

    def __init__(self) -> None:
        self._fields = {
            name: LAYOUT[name]
            for name in (
                "op",
                "flags",
                "elem_type",
                "shift",
                "job_id",
                "shadow",
                "slot",
                "epoch",
                "offset",
                "exponent",
                "next_exponent",
                "checksum",
            )
        }
        self._exp_sign = 1 << (AGG.field("exponent").bits - 1)

    def header(self, payload: bytes | memoryview) -> dict[str, int]:
        if len(payload) < HEADER_LEN:
            raise ValueError(f"payload of {len(payload)} bytes is shorter than the {HEADER_LEN}-byte header")
        words = (
            [int.from_bytes(payload[i * 8 : i * 8 + 8], "big") for i in range(_WORDS)] if HEADER_LEN % 8 == 0 else None
        )
        if words is None:
            acc = int.from_bytes(bytes(payload[:HEADER_LEN]) + bytes(_WORDS * 8 - HEADER_LEN), "big")
            words = [(acc >> (64 * (_WORDS - 1 - i))) & ((1 << 64) - 1) for i in range(_WORDS)]
        out = {name: (words[w] >> s) & m for name, (w, s, m) in self._fields.items()}
        for name in ("exponent", "next_exponent"):
            if out[name] & self._exp_sign:
                out[name] -= self._exp_sign << 1
        return out

    @staticmethod
    def lanes(payload: bytes | memoryview, elem_type: int, widen: bool = True) -> np.ndarray:
        """The lanes as int64 (widen=False: a read-only view in the wire's type, no copy); raises ValueError if
        the payload is too short for its elem_type."""
        width = AGG.lane_bytes(elem_type)
        need = HEADER_LEN + AGG.num_lanes * width
        if len(payload) < need:
            raise ValueError(f"result payload has {len(payload)} bytes, elem_type {elem_type} needs {need}")
        view = np.frombuffer(payload, dtype=LANE_DTYPE[width], count=AGG.num_lanes, offset=HEADER_LEN)
        return view.astype(np.int64) if widen else view
