"""The aggregation header as a Scapy layer, derived from ``wireformat/agg_header.toml``.

One Scapy field per TOML field (signed ones two's complement), then the lanes,
whose width follows ``elem_type``.  Scapy defines, builds and dissects; the
worker's hot path sends pre-built bytes (see ``hosts.packets``).
"""

from __future__ import annotations

import struct
from typing import Any, ClassVar

from scapy.fields import AnyField, BitEnumField, BitField, Field, FlagsField
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from wireformat import AGG, WireFormatError
from wireformat import Field as WireField

ELEM_NAMES = {code: name.removeprefix("ELEM_").lower() for name, code in AGG.elem_types.items()}
OP_NAMES = {code: name.removeprefix("OP_").lower() for name, code in AGG.ops.items()}
# FlagsField wants the names by bit position, least significant first.
_FLAG_BITS = {code.bit_length() - 1: name.removeprefix("FLAG_").lower() for name, code in AGG.flags.items()}


class SignedBitField(BitField):
    """A BitField read as two's complement (Scapy's BitField is unsigned only)."""

    def m2i(self, pkt: Packet | None, x: int) -> int:
        return x - (1 << self.size) if x >> (self.size - 1) else x

    def randval(self) -> Any:
        from scapy.volatile import RandNum

        return RandNum(-(1 << (self.size - 1)), (1 << (self.size - 1)) - 1)


class LanesField(Field[list[int], bytes]):
    """NUM_LANES big-endian two's complement integers, as wide as the packet's elem_type.

    Building pads a short list with zeros, so every built packet has the length the
    switch expects.  Dissecting an unknown elem_type or a short payload takes the
    whole lanes that are there and leaves the rest to the payload (Raw), so a
    malformed packet can still be looked at.
    """

    __slots__ = ["num_lanes"]
    islist = 1  # a list value is one field value, not a set of packets to generate

    def __init__(self, name: str, num_lanes: int) -> None:
        super().__init__(name, None)
        self.num_lanes = num_lanes

    @staticmethod
    def _width(pkt: Packet) -> int | None:
        try:
            return AGG.lane_bytes(pkt.elem_type)
        except WireFormatError:  # an elem_type the wire format does not know: no lanes to read
            return None

    def addfield(self, pkt: Packet, s: bytes, val: list[int] | None) -> bytes:
        width = self._width(pkt)
        values = list(val or [])
        if width is None:
            if values:
                raise ValueError(f"cannot build lanes for unknown elem_type {pkt.elem_type}")
            return s
        if width == 0:  # ELEM_NONE: an exponent round has no lanes
            if values:
                raise ValueError(f"{len(values)} lanes given for an ELEM_NONE packet, which has none")
            return s
        if len(values) > self.num_lanes:
            raise ValueError(f"{len(values)} lanes given, the packet holds {self.num_lanes}")
        values += [0] * (self.num_lanes - len(values))
        try:
            return s + AGG.lane_struct(pkt.elem_type).pack(*values)
        except struct.error as ex:
            raise ValueError(f"a lane value does not fit {ELEM_NAMES[pkt.elem_type]}: {ex}") from ex

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, list[int]]:
        width = self._width(pkt)
        if not width:
            return s, []
        n = min(self.num_lanes, len(s) // width)
        code = {4: "i", 2: "h", 1: "b"}[width]
        return s[n * width :], list(struct.unpack(f">{n}{code}", s[: n * width]))

    def i2len(self, pkt: Packet, x: list[int] | None) -> int:
        width = self._width(pkt) or 0
        return width * self.num_lanes

    def i2repr(self, pkt: Packet | None, x: list[int] | None) -> str:
        values = list(x or [])
        if len(values) <= 8:
            return repr(values)
        return f"[{', '.join(map(str, values[:4]))}, ... {values[-1]}] ({len(values)} lanes)"


def _scapy_field(f: WireField) -> Field[Any, Any]:
    default = AGG.version if f.name == "version" else (AGG.ops["OP_CONTRIB"] if f.name == "op" else 0)
    if f.name == "op":
        return BitEnumField(f.name, default, f.bits, OP_NAMES)
    if f.name == "elem_type":
        return BitEnumField(f.name, default, f.bits, ELEM_NAMES)
    if f.name == "flags":
        return FlagsField(f.name, default, f.bits, [_FLAG_BITS.get(i, f"bit{i}") for i in range(f.bits)])
    if f.signed:
        return SignedBitField(f.name, default, f.bits)
    return BitField(f.name, default, f.bits)


class AggHeader(Packet):
    """p4ina aggregation header plus its lanes (the UDP payload on ``UDP_PORT_AGG``)."""

    name = "P4inaAgg"
    fields_desc: ClassVar[list[AnyField]] = [*(_scapy_field(f) for f in AGG.fields), LanesField("lanes", AGG.num_lanes)]

    def mysummary(self) -> str:
        op = OP_NAMES.get(self.op, str(self.op)).upper()
        elem = ELEM_NAMES.get(self.elem_type, f"elem{self.elem_type}")
        text = (
            f"Agg {op} job={self.job_id} slot={self.slot}/{self.shadow} off={self.offset} "
            f"from={self.contributor} ep={self.epoch} e={self.exponent} next_e={self.next_exponent} {elem}"
        )
        if self.shift:
            text += f">>{self.shift}"
        if int(self.flags):
            text += f" [{self.flags}]"
        return text


bind_layers(UDP, AggHeader, dport=AGG.udp_port)
bind_layers(UDP, AggHeader, sport=AGG.udp_port)
