"""An index of a P4Info: names to ids and bit widths, and the canonical byte encoding of values.

P4Runtime identifies everything by numeric id and sends values as big-endian
byte strings; this module is the only place that knows either.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from p4proto import p4info_pb2

LOG = logging.getLogger(__name__)

MATCH_TYPES = {
    p4info_pb2.MatchField.EXACT: "exact",
    p4info_pb2.MatchField.LPM: "lpm",
    p4info_pb2.MatchField.TERNARY: "ternary",
    p4info_pb2.MatchField.RANGE: "range",
    p4info_pb2.MatchField.OPTIONAL: "optional",
}


class P4InfoError(ValueError):
    """A name is not in the P4Info, or a value does not fit its field."""


def encode_int(value: int, bitwidth: int) -> bytes:
    """Canonical P4Runtime bytes: the shortest big-endian string (one zero byte for 0)."""
    if value < 0 or value >> bitwidth:
        raise P4InfoError(f"value {value} does not fit in {bitwidth} bits")
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def decode_int(data: bytes) -> int:
    return int.from_bytes(data, "big")


@dataclass(frozen=True)
class MatchFieldInfo:
    id: int
    name: str
    bitwidth: int
    match_type: str


@dataclass(frozen=True)
class ParamInfo:
    id: int
    name: str
    bitwidth: int


@dataclass(frozen=True)
class ActionInfo:
    id: int
    name: str
    params: tuple[ParamInfo, ...]

    def param(self, name: str) -> ParamInfo:
        for p in self.params:
            if p.name == name:
                return p
        raise P4InfoError(f"action {self.name!r} has no parameter {name!r} (has {[p.name for p in self.params]})")


@dataclass(frozen=True)
class TableInfo:
    id: int
    name: str
    match_fields: tuple[MatchFieldInfo, ...]
    action_ids: tuple[int, ...]
    size: int

    def field(self, name: str) -> MatchFieldInfo:
        for f in self.match_fields:
            if f.name == name:
                return f
        raise P4InfoError(
            f"table {self.name!r} has no match field {name!r} (has {[f.name for f in self.match_fields]})"
        )

    def field_by_id(self, fid: int) -> MatchFieldInfo:
        for f in self.match_fields:
            if f.id == fid:
                return f
        raise P4InfoError(f"table {self.name!r} has no match field id {fid}")


@dataclass(frozen=True)
class CounterInfo:
    id: int
    name: str
    size: int


@dataclass(frozen=True)
class RegisterInfo:
    id: int
    name: str
    size: int
    bitwidth: int


class P4Schema:
    """Read-only lookups into one P4Info message."""

    def __init__(self, p4info: p4info_pb2.P4Info) -> None:
        self.p4info = p4info
        self._tables: dict[str, TableInfo] = {}
        self._tables_by_id: dict[int, TableInfo] = {}
        self._actions_by_id: dict[int, ActionInfo] = {}
        self._counters: dict[str, CounterInfo] = {}
        self._counters_by_id: dict[int, CounterInfo] = {}
        self._registers: dict[str, RegisterInfo] = {}
        for a in p4info.actions:
            params = tuple(ParamInfo(p.id, p.name, p.bitwidth) for p in a.params)
            self._actions_by_id[a.preamble.id] = ActionInfo(a.preamble.id, a.preamble.name, params)
        for t in p4info.tables:
            fields = tuple(
                MatchFieldInfo(f.id, f.name, f.bitwidth, MATCH_TYPES.get(f.match_type, "other")) for f in t.match_fields
            )
            info = TableInfo(t.preamble.id, t.preamble.name, fields, tuple(r.id for r in t.action_refs), t.size)
            self._tables[t.preamble.name] = info
            self._tables_by_id[info.id] = info
        for c in p4info.counters:
            info_c = CounterInfo(c.preamble.id, c.preamble.name, c.size)
            self._counters[c.preamble.name] = info_c
            self._counters_by_id[info_c.id] = info_c
        for r in p4info.registers:
            width = r.type_spec.bitstring.bit.bitwidth or r.type_spec.bitstring.int.bitwidth
            self._registers[r.preamble.name] = RegisterInfo(r.preamble.id, r.preamble.name, r.size, width)

    @classmethod
    def load(cls, path: Path) -> P4Schema:
        """Load a P4Info in text format (.txt, .txtpb, .pb.txt) or binary (.bin, .pb)."""
        path = Path(path)
        try:
            raw = path.read_bytes()
        except OSError as ex:
            raise P4InfoError(f"cannot read P4Info {path}: {ex.strerror}") from ex
        msg = p4info_pb2.P4Info()
        try:
            if path.suffix in (".bin", ".pb"):
                msg.ParseFromString(raw)
            else:
                text_format.Parse(raw.decode(), msg)
        except (text_format.ParseError, DecodeError, UnicodeDecodeError) as ex:
            raise P4InfoError(f"{path} is not a P4Info: {ex}") from ex
        return cls(msg)

    # -- lookups ---------------------------------------------------------------------
    def table(self, name: str) -> TableInfo:
        try:
            return self._tables[name]
        except KeyError:
            raise P4InfoError(f"P4Info has no table {name!r} (has {sorted(self._tables)})") from None

    def table_by_id(self, tid: int) -> TableInfo:
        try:
            return self._tables_by_id[tid]
        except KeyError:
            raise P4InfoError(f"P4Info has no table id {tid}") from None

    def action(self, table: TableInfo, name: str) -> ActionInfo:
        """An action of `table`, by full name or by its last dotted component."""
        for aid in table.action_ids:
            a = self._actions_by_id[aid]
            if a.name == name or a.name.rsplit(".", 1)[-1] == name:
                return a
        names = [self._actions_by_id[i].name for i in table.action_ids]
        raise P4InfoError(f"table {table.name!r} has no action {name!r} (has {names})")

    def action_by_id(self, aid: int) -> ActionInfo:
        try:
            return self._actions_by_id[aid]
        except KeyError:
            raise P4InfoError(f"P4Info has no action id {aid}") from None

    def counter(self, name: str) -> CounterInfo:
        try:
            return self._counters[name]
        except KeyError:
            raise P4InfoError(f"P4Info has no counter {name!r} (has {sorted(self._counters)})") from None

    def counter_by_id(self, cid: int) -> CounterInfo:
        try:
            return self._counters_by_id[cid]
        except KeyError:
            raise P4InfoError(f"P4Info has no counter id {cid}") from None

    def register(self, name: str) -> RegisterInfo:
        try:
            return self._registers[name]
        except KeyError:
            raise P4InfoError(f"P4Info has no register {name!r}") from None

    @property
    def registers(self) -> tuple[RegisterInfo, ...]:
        return tuple(self._registers.values())


def pipeline_cookie(p4info: p4info_pb2.P4Info, device_config: bytes) -> int:
    """A 64-bit fingerprint of a pipeline, stored on the switch to skip pushing it again."""
    digest = hashlib.sha256(p4info.SerializeToString(deterministic=True) + b"\0" + device_config).digest()
    return int.from_bytes(digest[:8], "big")
