"""P4Info ids <-> interpreter names, P4Runtime byte strings <-> ints, entities <-> switch entries.

P4Runtime names objects by numeric id and carries values as big-endian byte strings; the interpreter
uses the BMv2 JSON names and Python ints. p4c writes the P4Info and the BMv2 JSON from one source, so
names agree (table, action, counter, register) and match fields / action parameters agree in order.
This module is the whole translation layer, kept free of gRPC so it can be tested on its own.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass

from p4proto import code_pb2, p4info_pb2, p4runtime_pb2
from softswitch.runtime.switch import (
    ActionCall,
    Exact,
    Lpm,
    MatchKey,
    Range,
    SoftSwitch,
    TableEntry,
    Ternary,
)

LOG = logging.getLogger(__name__)

MATCH_KINDS = {
    p4info_pb2.MatchField.EXACT: "exact",
    p4info_pb2.MatchField.LPM: "lpm",
    p4info_pb2.MatchField.TERNARY: "ternary",
    p4info_pb2.MatchField.RANGE: "range",
    p4info_pb2.MatchField.OPTIONAL: "optional",
}
# p4c-bm2-ss's own tables (one per action called outside a table, one per switch on a value);
# P4Info never lists them.
HIDDEN_TABLE = re.compile(r"tbl_.*|switch_\d+_table")
# The JSON kinds each P4Info kind may appear as ("optional" runs as ternary in BMv2).
_JSON_KINDS = {
    "exact": ("exact",),
    "lpm": ("lpm",),
    "ternary": ("ternary",),
    "range": ("range",),
    "optional": ("optional", "ternary"),
}


class P4RuntimeStatusError(Exception):
    """A request (or one update of a batch) the server refuses, with its google.rpc canonical code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(message: str) -> P4RuntimeStatusError:
    return P4RuntimeStatusError(code_pb2.INVALID_ARGUMENT, message)


# ---------------------------------------------------------------------------------------------
# Byte strings


def decode_bytes(data: bytes, bitwidth: int, what: str) -> int:
    """A P4Runtime byte string as an int; both canonical (shortest) and full-width forms are accepted."""
    if not data:
        raise invalid(f"{what}: empty byte string")
    value = int.from_bytes(data, "big")
    if value >> bitwidth:
        raise invalid(f"{what}: value 0x{data.hex()} does not fit in {bitwidth} bits")
    return value


def encode_int(value: int) -> bytes:
    """The canonical P4Runtime form: big-endian, leading zero bytes stripped, at least one byte."""
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def uint128(msg: p4runtime_pb2.Uint128) -> int:
    return (msg.high << 64) | msg.low


# ---------------------------------------------------------------------------------------------
# The index


@dataclass(frozen=True)
class MatchFieldSpec:
    id: int
    name: str
    bitwidth: int
    kind: str  # exact | lpm | ternary | range | optional (P4Info's kind)


@dataclass(frozen=True)
class ParamSpec:
    id: int
    name: str
    bitwidth: int


@dataclass(frozen=True)
class ActionSpec:
    id: int
    name: str
    params: tuple[ParamSpec, ...]


@dataclass(frozen=True)
class TableSpec:
    id: int
    name: str
    match_fields: tuple[MatchFieldSpec, ...]  # in id order == the JSON key order
    action_scopes: dict[int, int]  # action id -> ActionRef.Scope
    const_default_action_id: int
    size: int
    is_const: bool = False  # entries come from the program (P4 `const entries`)
    idle_timeout: bool = False  # the table supports idle timeout (P4Info idle_timeout_behavior)

    @property
    def needs_priority(self) -> bool:
        return any(f.kind in ("ternary", "range", "optional") for f in self.match_fields)


@dataclass(frozen=True)
class CounterSpec:
    id: int
    name: str
    unit: int  # p4info CounterSpec.Unit
    size: int


@dataclass(frozen=True)
class RegisterSpec:
    id: int
    name: str
    bitwidth: int
    size: int


@dataclass(frozen=True)
class PacketMetadataSpec:
    """A controller header (P4Info controller_packet_metadata 'packet_in' or 'packet_out'): fields in wire order."""

    name: str
    fields: tuple[tuple[int, str, int], ...]  # (id, name, bitwidth)

    @property
    def nbits(self) -> int:
        return sum(w for _, _, w in self.fields)

    @property
    def nbytes(self) -> int:
        return (self.nbits + 7) // 8


class P4InfoMismatchError(ValueError):
    """The P4Info does not describe the BMv2 JSON it was pushed with."""


class P4InfoIndex:
    """Look-ups by id and by name for one P4Info."""

    def __init__(self, p4info: p4info_pb2.P4Info) -> None:
        self.p4info = p4info
        self.actions: dict[int, ActionSpec] = {}
        for a in p4info.actions:
            params = tuple(ParamSpec(p.id, p.name, p.bitwidth) for p in sorted(a.params, key=lambda p: p.id))
            self.actions[a.preamble.id] = ActionSpec(a.preamble.id, a.preamble.name, params)
        self.tables: dict[int, TableSpec] = {}
        self._translated: dict[int, set[int]] = {}  # table id -> ids of match fields of translated types
        for t in p4info.tables:
            fields = []
            for f in sorted(t.match_fields, key=lambda f: f.id):
                if f.match_type not in MATCH_KINDS:
                    raise P4InfoMismatchError(
                        f"table {t.preamble.name!r}: match field {f.name!r} has unsupported match type "
                        f"{p4info_pb2.MatchField.MatchType.Name(f.match_type)}"
                    )
                fields.append(MatchFieldSpec(f.id, f.name, f.bitwidth, MATCH_KINDS[f.match_type]))
            translated = {
                f.id
                for f in t.match_fields
                if f.HasField("type_name") and p4info.type_info.new_types[f.type_name.name].HasField("translated_type")
            }
            if translated:
                self._translated[t.preamble.id] = translated
            scopes = {r.id: r.scope for r in t.action_refs}
            self.tables[t.preamble.id] = TableSpec(
                t.preamble.id,
                t.preamble.name,
                tuple(fields),
                scopes,
                t.const_default_action_id,
                t.size,
                t.is_const_table,
                t.idle_timeout_behavior != p4info_pb2.Table.NO_TIMEOUT,
            )
        self.counters: dict[int, CounterSpec] = {
            c.preamble.id: CounterSpec(c.preamble.id, c.preamble.name, c.spec.unit, c.size) for c in p4info.counters
        }
        self.registers: dict[int, RegisterSpec] = {}
        for r in p4info.registers:
            width = r.type_spec.bitstring.bit.bitwidth or r.type_spec.bitstring.int.bitwidth
            self.registers[r.preamble.id] = RegisterSpec(r.preamble.id, r.preamble.name, width, r.size)
        self.packet_metadata: dict[str, PacketMetadataSpec] = {}
        for m in p4info.controller_packet_metadata:
            if m.preamble.name in ("packet_in", "packet_out"):
                self.packet_metadata[m.preamble.name] = PacketMetadataSpec(
                    m.preamble.name, tuple((f.id, f.name, f.bitwidth) for f in m.metadata)
                )
        self.table_by_name = {t.name: t for t in self.tables.values()}
        self.action_by_name = {a.name: a for a in self.actions.values()}

    # -- look-ups that fail the way PI does (an unknown id is INVALID_ARGUMENT) -------------
    def table(self, table_id: int) -> TableSpec:
        try:
            return self.tables[table_id]
        except KeyError:
            raise invalid(f"unknown table id {table_id}") from None

    def action(self, action_id: int) -> ActionSpec:
        try:
            return self.actions[action_id]
        except KeyError:
            raise invalid(f"unknown action id {action_id}") from None

    def counter(self, counter_id: int) -> CounterSpec:
        try:
            return self.counters[counter_id]
        except KeyError:
            raise invalid(f"unknown counter id {counter_id}") from None

    def register(self, register_id: int) -> RegisterSpec:
        try:
            return self.registers[register_id]
        except KeyError:
            raise invalid(f"unknown register id {register_id}") from None

    # -- consistency with the loaded program ----------------------------------------------
    def check_against(self, switch: SoftSwitch) -> None:
        """Raise P4InfoMismatchError naming every way this P4Info disagrees with the switch's program."""
        problems: list[str] = []
        tables = switch.tables()
        actions = switch.actions()
        absent = [t.name for t in self.tables.values() if t.name not in tables]
        unknown = [name for name in tables if name not in self.table_by_name and not HIDDEN_TABLE.fullmatch(name)]
        if unknown:
            # a table of the program the P4Info does not know: a P4Info of another program
            problems.append(f"the device config's table(s) {unknown[:5]} are not in the P4Info")
        elif absent:
            # p4c drops tables it proves unreachable from the BMv2 JSON and keeps them in P4Info;
            # writes to them are refused (no such table in the loaded program), as BMv2 refuses them
            LOG.info("P4Info tables not in the device config (unreachable, dropped by p4c): %s", absent[:10])
        for t in self.tables.values():
            info = tables.get(t.name)
            if info is None:
                if unknown:
                    problems.append(f"table {t.name!r} is not in the device config")
                continue
            if len(info.keys) != len(t.match_fields):
                problems.append(
                    f"table {t.name!r}: P4Info has {len(t.match_fields)} match fields, "
                    f"the device config {len(info.keys)}"
                )
            else:
                for i, (f, k) in enumerate(zip(t.match_fields, info.keys)):
                    if k.match_type in _JSON_KINDS[f.kind] and (
                        f.bitwidth == 0 or f.id in self._translated.get(t.id, ())
                    ):
                        # a field that is not a bit string (an `error`, say: P4Info gives no width) or
                        # of a @p4runtime_translation type (P4Info gives the controller's width): this
                        # switch translates none, so values are the data plane's, in its width
                        self._adopt_width(t.id, i, k.bitwidth)
                    elif k.match_type not in _JSON_KINDS[f.kind] or f.bitwidth != k.bitwidth:
                        problems.append(
                            f"table {t.name!r}: match field {f.name!r} is {f.kind}/{f.bitwidth} in P4Info "
                            f"but {k.match_type}/{k.bitwidth} in the device config"
                        )
        for a in self.actions.values():
            info = actions.get(a.name)
            if info is None:
                if unknown:
                    problems.append(f"action {a.name!r} is not in the device config")
                # else: an action only an unreachable table used (p4c drops both)
            elif tuple(p.bitwidth for p in a.params) != tuple(info.param_widths):
                problems.append(
                    f"action {a.name!r}: parameter widths {[p.bitwidth for p in a.params]} in P4Info, "
                    f"{list(info.param_widths)} in the device config"
                )
        counters = switch.counters()
        for c in self.counters.values():
            if c.name not in counters:
                problems.append(f"counter {c.name!r} is not in the device config")
            elif counters[c.name] != c.size:
                problems.append(f"counter {c.name!r}: size {c.size} in P4Info, {counters[c.name]} in the device config")
        registers = switch.registers()
        for r in self.registers.values():
            if r.name not in registers:
                problems.append(f"register {r.name!r} is not in the device config")
        if problems:
            raise P4InfoMismatchError("P4Info does not match the device config: " + "; ".join(problems))

    def _adopt_width(self, table_id: int, index: int, bitwidth: int) -> None:
        t = self.tables[table_id]
        fields = list(t.match_fields)
        fields[index] = dataclasses.replace(fields[index], bitwidth=bitwidth)
        self.tables[table_id] = dataclasses.replace(t, match_fields=tuple(fields))
        self.table_by_name[t.name] = self.tables[table_id]

    # -- packet I/O (PI's packet_io_mgr: the controller headers, packed MSB first, padded to bytes) --
    def packet_out_bytes(self, packet: p4runtime_pb2.PacketOut) -> bytes:
        """The packet a PacketOut stands for: its packet_out header (missing fields 0), then the payload."""
        spec = self.packet_metadata.get("packet_out")
        if spec is None:
            if len(packet.metadata):
                raise invalid("Unexpected metadata in PacketOut message (the P4Info has no packet_out header)")
            return packet.payload
        values: dict[int, int] = {}
        widths = {fid: (name, w) for fid, name, w in spec.fields}
        for m in packet.metadata:
            if m.metadata_id not in widths:
                raise invalid(f"Unknown metadata id {m.metadata_id} in PacketOut message")
            name, w = widths[m.metadata_id]
            values[m.metadata_id] = decode_bytes(m.value, w, f"PacketOut metadata {name!r}")
        acc = 0
        for fid, _, w in spec.fields:
            acc = (acc << w) | values.get(fid, 0)
        pad = spec.nbytes * 8 - spec.nbits
        return (acc << pad).to_bytes(spec.nbytes, "big") + packet.payload

    def packet_in_message(self, data: bytes) -> p4runtime_pb2.StreamMessageResponse | None:
        """A PacketIn for a packet sent to the CPU port: packet_in header fields as metadata; None if too short."""
        msg = p4runtime_pb2.StreamMessageResponse()
        spec = self.packet_metadata.get("packet_in")
        if spec is None:
            msg.packet.payload = data
            return msg
        if len(data) < spec.nbytes:
            return None  # PI drops it too
        acc = int.from_bytes(data[: spec.nbytes], "big") >> (spec.nbytes * 8 - spec.nbits)
        values = []
        for fid, _, w in reversed(spec.fields):
            values.append((fid, acc & ((1 << w) - 1)))
            acc >>= w
        for fid, v in reversed(values):
            msg.packet.metadata.add(metadata_id=fid, value=encode_int(v))
        msg.packet.payload = data[spec.nbytes :]
        return msg

    # -- table entries -------------------------------------------------------------------------
    def decode_match(self, table: TableSpec, matches: Iterable[p4runtime_pb2.FieldMatch]) -> tuple[MatchKey, ...]:
        """P4Runtime field matches (any order, don't-care fields omitted) as the interpreter's key tuple."""
        by_id: dict[int, p4runtime_pb2.FieldMatch] = {}
        for m in matches:
            if m.field_id in by_id:
                raise invalid(f"table {table.name!r}: match field id {m.field_id} given twice")
            by_id[m.field_id] = m
        known = {f.id for f in table.match_fields}
        for fid in by_id:
            if fid not in known:
                raise invalid(f"table {table.name!r}: unknown match field id {fid}")
        return tuple(_decode_field(table, f, by_id.get(f.id)) for f in table.match_fields)

    # Encoders fill a message in place: pure-Python protobuf makes every copy (CopyFrom, extend) costly.
    def encode_match(self, table: TableSpec, key: tuple[MatchKey, ...], out: p4runtime_pb2.TableEntry) -> None:
        for f, part in zip(table.match_fields, key):
            if not _is_dont_care(f, part):
                _encode_field(f, part, out.match.add(field_id=f.id))

    def decode_action(self, table: TableSpec, msg: p4runtime_pb2.TableAction, default: bool) -> ActionCall:
        kind = msg.WhichOneof("type")
        if kind is None:
            raise invalid(f"table {table.name!r}: entry has no action")
        if kind != "action":
            raise P4RuntimeStatusError(
                code_pb2.UNIMPLEMENTED, f"table {table.name!r}: action profiles are not supported ({kind})"
            )
        action = self.action(msg.action.action_id)
        if action.id not in table.action_scopes:
            raise invalid(f"table {table.name!r}: action {action.name!r} is not an action of this table")
        scope = table.action_scopes[action.id]
        if default and scope == p4info_pb2.ActionRef.TABLE_ONLY:
            raise P4RuntimeStatusError(
                code_pb2.PERMISSION_DENIED,
                f"table {table.name!r}: action {action.name!r} cannot be the default action (@tableonly)",
            )
        if not default and scope == p4info_pb2.ActionRef.DEFAULT_ONLY:
            raise P4RuntimeStatusError(
                code_pb2.PERMISSION_DENIED,
                f"table {table.name!r}: action {action.name!r} can only be the default action (@defaultonly)",
            )
        given: dict[int, bytes] = {}
        for p in msg.action.params:
            if p.param_id in given:
                raise invalid(f"action {action.name!r}: parameter id {p.param_id} given twice")
            given[p.param_id] = p.value
        unknown = set(given) - {p.id for p in action.params}
        if unknown:
            raise invalid(f"action {action.name!r}: unknown parameter id(s) {sorted(unknown)}")
        values = []
        for p in action.params:
            if p.id not in given:
                raise invalid(f"action {action.name!r}: parameter {p.name!r} (id {p.id}) is missing")
            values.append(decode_bytes(given[p.id], p.bitwidth, f"action {action.name!r} parameter {p.name!r}"))
        return ActionCall(action.name, tuple(values))

    def encode_action(self, call: ActionCall, out: p4runtime_pb2.TableAction) -> None:
        spec = self.action_by_name.get(call.name)
        if spec is None:  # an action the P4Info does not list (p4c always lists them); name it in the log
            LOG.warning("action %r of the device config is not in the P4Info", call.name)
            return
        action = out.action
        action.action_id = spec.id
        for p, v in zip(spec.params, call.params):
            action.params.add(param_id=p.id, value=encode_int(v))

    def encode_entry(self, table: TableSpec, entry: TableEntry, out: p4runtime_pb2.TableEntry) -> None:
        out.table_id = table.id
        if entry.priority:
            out.priority = entry.priority
        if table.is_const:
            out.is_const = True
        self.encode_match(table, entry.key, out)
        self.encode_action(entry.action, out.action)


def _decode_field(table: TableSpec, f: MatchFieldSpec, m: p4runtime_pb2.FieldMatch | None) -> MatchKey:
    what = f"table {table.name!r} match field {f.name!r}"
    full = (1 << f.bitwidth) - 1
    if m is None:  # omitted: a don't-care, which exact fields cannot be
        if f.kind == "exact":
            raise invalid(f"{what}: exact match field is missing")
        if f.kind == "lpm":
            return Lpm(0, 0)
        if f.kind == "range":
            return Range(0, full)
        return Ternary(0, 0)
    kind = m.WhichOneof("field_match_type")
    if kind != f.kind:
        raise invalid(f"{what}: is a {f.kind} field, got a {kind} match")
    if f.kind == "exact":
        return Exact(decode_bytes(m.exact.value, f.bitwidth, what))
    if f.kind == "lpm":
        plen = m.lpm.prefix_len
        if not 0 <= plen <= f.bitwidth:
            raise invalid(f"{what}: prefix length {plen} is outside 0..{f.bitwidth}")
        if plen == 0:
            raise invalid(f"{what}: a /0 prefix is a don't-care; omit the match field instead (P4Runtime)")
        value = decode_bytes(m.lpm.value, f.bitwidth, what)
        if value & (full >> plen):
            raise invalid(f"{what}: lpm value has bits set beyond the /{plen} prefix")
        return Lpm(value, plen)
    if f.kind == "ternary":
        value = decode_bytes(m.ternary.value, f.bitwidth, what)
        mask = decode_bytes(m.ternary.mask, f.bitwidth, f"{what} mask")
        if mask == 0:
            raise invalid(f"{what}: a zero ternary mask is a don't-care; omit the match field instead (P4Runtime)")
        if value & ~mask:
            raise invalid(f"{what}: ternary value has bits set outside the mask")
        return Ternary(value, mask)
    if f.kind == "range":
        low = decode_bytes(m.range.low, f.bitwidth, f"{what} low")
        high = decode_bytes(m.range.high, f.bitwidth, f"{what} high")
        if low > high:
            raise invalid(f"{what}: range low {low} > high {high}")
        if low == 0 and high == full:
            raise invalid(f"{what}: the whole range is a don't-care; omit the match field instead (P4Runtime)")
        return Range(low, high)
    # optional: an exact value or (omitted) a don't-care, run as ternary
    return Ternary(decode_bytes(m.optional.value, f.bitwidth, what), full)


def _is_dont_care(f: MatchFieldSpec, part: MatchKey) -> bool:
    """Don't-care key parts are omitted on read, as the spec says."""
    if isinstance(part, Lpm):
        return part.prefix_len == 0
    if isinstance(part, Ternary):
        return part.mask == 0
    if isinstance(part, Range):
        return part.low == 0 and part.high == (1 << f.bitwidth) - 1
    return False


def _encode_field(f: MatchFieldSpec, part: MatchKey, m: p4runtime_pb2.FieldMatch) -> None:
    if isinstance(part, Exact):
        m.exact.value = encode_int(part.value)
    elif isinstance(part, Lpm):
        m.lpm.value = encode_int(part.value)
        m.lpm.prefix_len = part.prefix_len
    elif isinstance(part, Ternary):
        if f.kind == "optional":
            m.optional.value = encode_int(part.value)
        else:
            m.ternary.value = encode_int(part.value)
            m.ternary.mask = encode_int(part.mask)
    elif isinstance(part, Range):
        m.range.low = encode_int(part.low)
        m.range.high = encode_int(part.high)
    else:  # pragma: no cover - the interpreter only returns the four kinds
        raise TypeError(f"unknown match key part {part!r}")
