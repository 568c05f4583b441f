"""Load and validate the aggregation header definition."""

from __future__ import annotations

import struct
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFINITION = Path(__file__).with_name("agg_header.toml")

ELEM_BYTES = {"ELEM_INT32": 4, "ELEM_INT16": 2, "ELEM_INT8": 1, "ELEM_NONE": 0}

ETH_LEN = 14
IPV4_LEN = 20
UDP_LEN = 8


class WireFormatError(ValueError):
    """The header definition file is inconsistent."""


@dataclass(frozen=True)
class Field:
    name: str
    bits: int
    doc: str
    signed: bool = False

    @property
    def max_value(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    @property
    def min_value(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0


@dataclass(frozen=True)
class WireFormat:
    fields: tuple[Field, ...]
    udp_port: int
    agg_mac: int
    agg_ip: int
    version: int
    num_lanes: int
    checksum_salt: int
    ops: dict[str, int]
    flags: dict[str, int]
    elem_types: dict[str, int]

    @property
    def header_bits(self) -> int:
        return sum(f.bits for f in self.fields)

    @property
    def header_bytes(self) -> int:
        return self.header_bits // 8

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"aggregation header has no field {name!r}")

    def lane_bytes(self, elem_type: int) -> int:
        """Bytes per lane for an elem_type code."""
        for name, code in self.elem_types.items():
            if code == elem_type:
                return ELEM_BYTES[name]
        raise WireFormatError(f"unknown elem_type {elem_type}")

    def payload_bytes(self, elem_type: int) -> int:
        """Bytes of the agg header plus its lanes (the UDP payload)."""
        return self.header_bytes + self.num_lanes * self.lane_bytes(elem_type)

    def frame_bytes(self, elem_type: int) -> int:
        return ETH_LEN + IPV4_LEN + UDP_LEN + self.payload_bytes(elem_type)

    def salt(self, offset: int, job_id: int, epoch: int) -> int:
        """The checksum's salt of a packet (the `checksum` field's doc; the P4 program computes the same)."""
        return (offset ^ (job_id << 16) ^ (epoch << 8) ^ self.checksum_salt) & 0xFFFFFFFF

    def checksum(self, lane_sum: int, offset: int, job_id: int, epoch: int) -> int:
        """(sum of a packet's lanes + salt) mod 2^32."""
        return (lane_sum + self.salt(offset, job_id, epoch)) & 0xFFFFFFFF

    @property
    def agg_mac_text(self) -> str:
        return ":".join(f"{b:02x}" for b in self.agg_mac.to_bytes(6, "big"))

    @property
    def agg_ip_text(self) -> str:
        return ".".join(str(b) for b in self.agg_ip.to_bytes(4, "big"))

    def constants(self) -> dict[str, int]:
        """Every named constant, flat (for code generators and docs)."""
        out = {
            "UDP_PORT_AGG": self.udp_port,
            "AGG_VERSION": self.version,
            "NUM_LANES": self.num_lanes,
            "CHECKSUM_SALT": self.checksum_salt,
        }
        out.update(self.ops)
        out.update(self.flags)
        out.update(self.elem_types)
        return out

    # -- packing -----------------------------------------------------------
    def pack_header(self, **values: int) -> bytes:
        """Pack the header fields (missing ones are 0; version defaults to VERSION)."""
        values.setdefault("version", self.version)
        unknown = set(values) - {f.name for f in self.fields}
        if unknown:
            raise KeyError(f"unknown aggregation header field(s): {sorted(unknown)}")
        acc = 0
        for f in self.fields:
            v = int(values.get(f.name, 0))
            if not f.min_value <= v <= f.max_value:
                raise ValueError(f"field {f.name}={v} out of range [{f.min_value}, {f.max_value}]")
            acc = (acc << f.bits) | (v & ((1 << f.bits) - 1))
        return acc.to_bytes(self.header_bytes, "big")

    def unpack_header(self, data: bytes) -> dict[str, int]:
        if len(data) < self.header_bytes:
            raise ValueError(f"need {self.header_bytes} bytes for the aggregation header, got {len(data)}")
        acc = int.from_bytes(data[: self.header_bytes], "big")
        out: dict[str, int] = {}
        shift = self.header_bits
        for f in self.fields:
            shift -= f.bits
            v = (acc >> shift) & ((1 << f.bits) - 1)
            if f.signed and v >> (f.bits - 1):
                v -= 1 << f.bits
            out[f.name] = v
        return out

    def lane_struct(self, elem_type: int) -> struct.Struct:
        code = {4: "i", 2: "h", 1: "b"}[self.lane_bytes(elem_type)]
        return struct.Struct(f">{self.num_lanes}{code}")


def _parse(raw: dict[str, Any]) -> WireFormat:
    try:
        consts = raw["constants"]
        fields = tuple(
            Field(name=f["name"], bits=int(f["bits"]), doc=f["doc"], signed=bool(f.get("signed", False)))
            for f in raw["field"]
        )
        wf = WireFormat(
            fields=fields,
            udp_port=int(consts["UDP_PORT_AGG"]),
            agg_mac=int(consts["address"]["AGG_MAC"]),
            agg_ip=int(consts["address"]["AGG_IP"]),
            version=int(consts["VERSION"]),
            num_lanes=int(consts["NUM_LANES"]),
            checksum_salt=int(consts["CHECKSUM_SALT"]),
            ops=dict(consts["op"]),
            flags=dict(consts["flags"]),
            elem_types=dict(consts["elem_type"]),
        )
    except KeyError as ex:
        raise WireFormatError(f"{DEFINITION.name}: missing key {ex}") from ex
    if wf.header_bits % 8:
        raise WireFormatError(f"header is {wf.header_bits} bits, not a whole number of bytes")
    names = [f.name for f in fields]
    if len(set(names)) != len(names):
        raise WireFormatError(f"duplicate field names in {names}")
    if set(wf.elem_types) != set(ELEM_BYTES):
        raise WireFormatError(f"elem types must be exactly {sorted(ELEM_BYTES)}")
    if not 0 < wf.udp_port < 65536:
        raise WireFormatError(f"UDP_PORT_AGG {wf.udp_port} is not a port number")
    return wf


def load(path: Path = DEFINITION) -> WireFormat:
    with path.open("rb") as fh:
        return _parse(tomllib.load(fh))


AGG = load()
