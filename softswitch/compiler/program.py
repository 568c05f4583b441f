"""Load a p4c-bm2-ss (v1model) BMv2 JSON into typed, validated dataclasses.

Structure-level refusals happen here (meters, action profiles, learning, value sets,
variable-length headers, ...); the lowering (lower.py) refuses unknown primitives and ops.
Action bodies, expressions and parser ops stay raw JSON: only the lowering reads them, once,
at load time. Every number is checked to be a JSON integer (not a bool, float or string), and
`Limits` bounds what a pushed program may ask for.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from softswitch.errors import ProgramLimitError, UnsupportedProgramError

LOG = logging.getLogger(__name__)

Json = Any

# p4c numbers the core errors in declaration order; used when the JSON omits one.
CORE_ERRORS = {
    "NoError": 0,
    "PacketTooShort": 1,
    "NoMatch": 2,
    "StackOutOfBounds": 3,
    "HeaderTooShort": 4,
    "ParserTimeout": 5,
    "ParserInvalidArgument": 6,
}

SUPPORTED_MAJOR_VERSION = 2
_HEXSTR = re.compile(r"-?(0[xX])?[0-9a-fA-F]+")


@dataclass(frozen=True)
class Limits:
    """What a pushed program may ask for; beyond these a load is refused, naming the limit.

    Anyone who reaches the P4Runtime port can push a program, so nothing in it may make the switch
    allocate, recurse or loop without bound.
    """

    max_json_bytes: int = 64 << 20  # the document (p4ina.json is 5 MB)
    max_register_cells: int = 1 << 22  # all register arrays together (allocated at load)
    max_counter_cells: int = 1 << 22  # all counter arrays together (allocated at load, twice)
    max_table_entries: int = 1 << 20  # one table's declared size
    max_slots: int = 1 << 16  # fields and validity bits of all headers: the per-packet state, copied per packet
    max_expression_depth: int = 256  # nesting of one expression (deep ones are computed through temporaries)
    max_constant_bits: int = 4096  # a hexstr constant
    max_field_bits: int = 2048  # one field, a cast width, a lookahead
    max_header_bits: int = 65535 * 8  # one header (no frame is longer)
    max_parser_steps: int = 1 << 16  # parser states per packet, when the state graph has a cycle


@dataclass(frozen=True)
class FieldDef:
    name: str
    width: int
    signed: bool = False


@dataclass(frozen=True)
class HeaderType:
    name: str
    fields: tuple[FieldDef, ...]

    @property
    def width(self) -> int:
        return sum(f.width for f in self.fields)


@dataclass(frozen=True)
class HeaderInstance:
    name: str
    type: HeaderType
    metadata: bool


@dataclass(frozen=True)
class HeaderStack:
    name: str
    headers: tuple[str, ...]


@dataclass(frozen=True)
class HeaderUnion:
    name: str
    headers: tuple[str, ...]


@dataclass(frozen=True)
class ActionParam:
    name: str
    width: int


@dataclass(frozen=True)
class ActionDef:
    name: str
    id: int
    params: tuple[ActionParam, ...]
    primitives: tuple[Json, ...]


@dataclass(frozen=True)
class KeyDef:
    name: str
    match_type: str  # exact | lpm | ternary | range
    header: str
    field: str
    width: int
    mask: int | None


@dataclass(frozen=True)
class ConstEntry:
    """A table entry from the JSON: per key (value, mask) or (low, high), action and priority."""

    key: tuple[tuple[str, int, int], ...]  # (kind, a, b): exact (v, -), lpm (v, plen), ternary (v, m), range (lo, hi)
    action_id: int
    action_data: tuple[int, ...]
    priority: int


@dataclass(frozen=True)
class TableDef:
    name: str
    id: int
    match_type: str
    max_size: int
    keys: tuple[KeyDef, ...]
    action_ids: tuple[int, ...]
    next_tables: dict[str, str | None]
    base_default_next: str | None
    default_action_id: int | None
    default_action_data: tuple[int, ...]
    default_const: bool
    const_entries: tuple[ConstEntry, ...]

    @property
    def uses_hit_miss(self) -> bool:
        return "__HIT__" in self.next_tables or "__MISS__" in self.next_tables


@dataclass(frozen=True)
class ConditionalDef:
    name: str
    expression: Json
    true_next: str | None
    false_next: str | None


@dataclass(frozen=True)
class ActionCallDef:
    name: str
    action_id: int
    next_node: str | None


@dataclass(frozen=True)
class PipelineDef:
    name: str
    init: str | None
    tables: tuple[TableDef, ...]
    conditionals: tuple[ConditionalDef, ...]
    action_calls: tuple[ActionCallDef, ...]


@dataclass(frozen=True)
class ParserDef:
    name: str
    init_state: str | None
    states: tuple[Json, ...]


@dataclass(frozen=True)
class CounterDef:
    name: str
    size: int


@dataclass(frozen=True)
class RegisterDef:
    name: str
    size: int
    width: int


@dataclass(frozen=True)
class CalculationDef:
    name: str
    algo: str
    inputs: tuple[Json, ...]


@dataclass(frozen=True)
class ChecksumDef:
    name: str
    target: tuple[str, str]
    calculation: str
    verify: bool
    update: bool
    if_cond: Json | None


@dataclass(frozen=True)
class Program:
    headers: tuple[HeaderInstance, ...]
    stacks: tuple[HeaderStack, ...]
    unions: tuple[HeaderUnion, ...]
    errors: dict[str, int]
    actions: tuple[ActionDef, ...]
    parser: ParserDef
    deparser_order: tuple[str, ...]
    pipelines: dict[str, PipelineDef]
    counters: tuple[CounterDef, ...]
    registers: tuple[RegisterDef, ...]
    calculations: dict[str, CalculationDef]
    checksums: tuple[ChecksumDef, ...]
    field_aliases: dict[str, tuple[str, str]] = field(default_factory=dict)

    def header(self, name: str) -> HeaderInstance:
        for h in self.headers:
            if h.name == name:
                return h
        raise ValueError(f"BMv2 JSON refers to unknown header instance {name!r}")

    def action_by_id(self, action_id: int) -> ActionDef:
        for a in self.actions:
            if a.id == action_id:
                return a
        raise ValueError(f"BMv2 JSON refers to unknown action id {action_id}")


def parse_hexstr(value: Any) -> int:
    """A BMv2 hexstr ('0x0a', '-0x1'; a plain JSON integer is accepted too) as a Python int.

    Anything else (bools, floats, other text) is refused: every number of the program must be an int.
    """
    if type(value) is int:
        return value
    if isinstance(value, str) and len(value) > _MAX_HEXSTR_CHARS:
        raise ProgramLimitError(
            f"limit max_constant_bits={Limits.max_constant_bits}: a hex constant of {len(value)} characters"
        )
    if not isinstance(value, str) or not _HEXSTR.fullmatch(value):
        raise ValueError(f"expected a hex string, got {type(value).__name__} {value!r:.40}")
    neg = value.startswith("-")
    text = value[1:] if neg else value
    n = int(text, 16)
    return -n if neg else n


_MAX_HEXSTR_CHARS = Limits.max_constant_bits // 4 + 8  # parse no more than a limit-sized constant


def _int(value: Any, what: str, lo: int | None = 0, hi: int | None = None) -> int:
    """A JSON integer (not a bool, float or string), optionally within [lo, hi]."""
    if type(value) is not int:
        raise ValueError(f"BMv2 JSON: {what} must be an integer, got {type(value).__name__} {value!r:.40}")
    if lo is not None and value < lo or hi is not None and value > hi:
        raise ValueError(f"BMv2 JSON: {what} = {value} is outside {lo}..{hi if hi is not None else ''}")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"BMv2 JSON: {what} must be a string, got {type(value).__name__}")
    return value


def _bool(value: Any, what: str, default: bool = False) -> bool:
    if value is None:
        return default
    if type(value) is not bool:
        raise ValueError(f"BMv2 JSON: {what} must be true or false, got {type(value).__name__} {value!r:.40}")
    return value


def _nonempty(doc: dict[str, Json], key: str) -> list[Json]:
    value = doc.get(key) or []
    if not isinstance(value, list):
        raise ValueError(f"BMv2 JSON: {key!r} must be a list")
    return value


def _refuse_nonempty(doc: dict[str, Json], key: str, what: str) -> None:
    items = _nonempty(doc, key)
    if items:
        names = ", ".join(repr(i.get("name", "?")) if isinstance(i, dict) else repr(i) for i in items[:5])
        raise UnsupportedProgramError(f"{what} not supported by the embedded switch: {names}")


def load(bmv2_json: str | bytes, limits: Limits | None = None) -> Program:
    """Parse and validate a BMv2 JSON document; refuse what the switch cannot execute."""
    limits = limits or Limits()
    if len(bmv2_json) > limits.max_json_bytes:
        raise ProgramLimitError(
            f"limit max_json_bytes={limits.max_json_bytes}: the program JSON has {len(bmv2_json)} bytes"
        )
    try:
        doc = json.loads(bmv2_json)
    except RecursionError as ex:
        raise ProgramLimitError("the program JSON is nested deeper than the JSON parser allows") from ex
    except (ValueError, UnicodeDecodeError) as ex:
        raise ValueError(f"program is not valid JSON: {ex}") from ex
    if not isinstance(doc, dict):
        raise ValueError("program JSON must be an object (BMv2 JSON from p4c-bm2-ss)")
    try:
        return _load(doc, limits)
    except (KeyError, TypeError, IndexError, AttributeError) as ex:
        raise ValueError(f"malformed BMv2 JSON: {type(ex).__name__}: {ex!s:.200}") from ex


def _load(doc: dict[str, Json], limits: Limits) -> Program:
    meta = doc.get("__meta__") or {}
    version = meta.get("version") if isinstance(meta, dict) else None
    if version:
        if not isinstance(version, list) or type(version[0]) is not int:
            raise ValueError(f"BMv2 JSON: __meta__.version must be [major, minor], got {version!r:.40}")
        if version[0] != SUPPORTED_MAJOR_VERSION:
            raise UnsupportedProgramError(
                f"BMv2 JSON format version {version!r:.40} (need {SUPPORTED_MAJOR_VERSION}.x)"
            )

    _refuse_nonempty(doc, "meter_arrays", "meters (meter_arrays)")
    _refuse_nonempty(doc, "learn_lists", "digests/learning (learn_lists)")
    _refuse_nonempty(doc, "parse_vsets", "parser value sets (parse_vsets)")
    _refuse_nonempty(doc, "extern_instances", "extern instances")
    _refuse_nonempty(doc, "header_union_stacks", "header union stacks")

    types: dict[str, HeaderType] = {}
    for ht in _nonempty(doc, "header_types"):
        tname = _str(ht["name"], "header type name")
        fields = []
        for f in ht["fields"]:
            name, width = _str(f[0], f"field name in header type {tname!r}"), f[1]
            if width == "*":
                raise UnsupportedProgramError(f"variable-length field {name!r} in header type {tname!r}")
            width = _int(width, f"width of field {name!r} in header type {tname!r}", 0)
            if width > limits.max_field_bits:
                raise ProgramLimitError(
                    f"limit max_field_bits={limits.max_field_bits}: "
                    f"field {name!r} of header type {tname!r} has {width} bits"
                )
            signed = f[2] if len(f) > 2 else False
            if signed not in (True, False):  # p4c writes false, or 0/1 for some bool-typed fields
                raise ValueError(f"BMv2 JSON: signedness of field {name!r} must be true or false, got {signed!r:.40}")
            signed = bool(signed)
            if len(f) > 3 and f[3]:
                raise UnsupportedProgramError(f"saturating field {name!r} in header type {tname!r}")
            fields.append(FieldDef(name, width, signed))
        htype = HeaderType(tname, tuple(fields))
        if htype.width > limits.max_header_bits:
            raise ProgramLimitError(
                f"limit max_header_bits={limits.max_header_bits}: header type {tname!r} has {htype.width} bits"
            )
        types[tname] = htype

    headers = []
    by_id: dict[int, str] = {}
    for h in _nonempty(doc, "headers"):
        hname = _str(h["name"], "header name")
        if h["header_type"] not in types:
            raise ValueError(f"header {hname!r} has unknown type {h['header_type']!r:.80}")
        headers.append(
            HeaderInstance(hname, types[h["header_type"]], _bool(h.get("metadata"), f"metadata of header {hname!r}"))
        )
        by_id[_int(h["id"], f"id of header {hname!r}")] = hname

    def members(x: dict[str, Json], what: str) -> tuple[str, ...]:
        out = []
        for i in x["header_ids"]:
            hid = _int(i, f"header id in {what}")
            if hid not in by_id:
                raise ValueError(f"BMv2 JSON: {what} refers to unknown header id {hid}")
            out.append(by_id[hid])
        return tuple(out)

    stacks = tuple(
        HeaderStack(_str(s["name"], "header stack name"), members(s, f"header stack {s['name']!r}"))
        for s in _nonempty(doc, "header_stacks")
    )
    slots = sum(1 + len(h.type.fields) for h in headers) + len(stacks) + 4
    if slots > limits.max_slots:
        raise ProgramLimitError(
            f"limit max_slots={limits.max_slots}: the program's headers have {slots} fields and validity bits"
        )
    unions = tuple(
        HeaderUnion(_str(u["name"], "header union name"), members(u, f"header union {u['name']!r}"))
        for u in _nonempty(doc, "header_unions")
    )

    errors = dict(CORE_ERRORS)
    for name, value in _nonempty(doc, "errors"):
        errors[_str(name, "error name")] = _int(value, f"value of error {name!r}")

    actions = []
    seen_ids: set[int] = set()
    for a in _nonempty(doc, "actions"):
        aname = _str(a["name"], "action name")
        aid = _int(a["id"], f"id of action {aname!r}", None)
        if aid in seen_ids:
            raise ValueError(f"BMv2 JSON: two actions have id {aid}")
        seen_ids.add(aid)
        params = tuple(
            ActionParam(
                _str(p["name"], "parameter name"),
                _int(p["bitwidth"], f"parameter width in action {aname!r}", 0, limits.max_field_bits),
            )
            for p in a.get("runtime_data") or []
        )
        prims = a.get("primitives") or []
        if not isinstance(prims, list):
            raise ValueError(f"BMv2 JSON: primitives of action {aname!r} must be a list")
        actions.append(ActionDef(aname, aid, params, tuple(prims)))
    action_ids = {a.id: a for a in actions}

    parsers = _nonempty(doc, "parsers")
    if not parsers:
        raise ValueError("BMv2 JSON has no parser (is this p4c-bm2-ss output for v1model?)")
    if len(parsers) != 1:
        raise UnsupportedProgramError(f"exactly one parser expected, the JSON has {len(parsers)}")
    p = parsers[0]
    states = p.get("parse_states") or []
    if not isinstance(states, list):
        raise ValueError("BMv2 JSON: parse_states must be a list")
    parser = ParserDef(_str(p["name"], "parser name"), p.get("init_state"), tuple(states))

    deparsers = _nonempty(doc, "deparsers")
    if not deparsers:
        raise ValueError("BMv2 JSON has no deparser (is this p4c-bm2-ss output for v1model?)")
    if len(deparsers) != 1:
        raise UnsupportedProgramError(f"exactly one deparser expected, the JSON has {len(deparsers)}")
    deparser_order = tuple(_str(h, "deparsed header") for h in deparsers[0].get("order") or [])

    pipelines: dict[str, PipelineDef] = {}
    for pl in _nonempty(doc, "pipelines"):
        plname = _str(pl["name"], "pipeline name")
        if pl.get("action_profiles"):
            names = [ap.get("name") for ap in pl["action_profiles"]]
            raise UnsupportedProgramError(f"action profiles/selectors {names!r:.200} in pipeline {plname!r}")
        tables = tuple(_table(t, action_ids, limits) for t in pl.get("tables") or [])
        conds = tuple(
            ConditionalDef(
                _str(c["name"], "conditional name"),
                c["expression"],
                _opt_str(c.get("true_next")),
                _opt_str(c.get("false_next")),
            )
            for c in pl.get("conditionals") or []
        )
        calls = tuple(
            ActionCallDef(
                _str(c["name"], "action call name"),
                _int(c["action_id"], "action id", None),
                _opt_str(c.get("next_node")),
            )
            for c in pl.get("action_calls") or []
        )
        pipelines[plname] = PipelineDef(plname, _opt_str(pl.get("init_table")), tables, conds, calls)
    for needed in ("ingress", "egress"):
        if needed not in pipelines:
            raise ValueError(f"BMv2 JSON has no {needed!r} pipeline (is this p4c-bm2-ss output for v1model?)")

    counters = []
    for c in _nonempty(doc, "counter_arrays"):
        cname = _str(c["name"], "counter name")
        if c.get("is_direct"):
            raise UnsupportedProgramError(f"direct counter {cname!r} (bound to table {c.get('binding')!r:.80})")
        counters.append(CounterDef(cname, _int(c["size"], f"size of counter {cname!r}")))
    cells = sum(c.size for c in counters)
    if cells > limits.max_counter_cells:
        raise ProgramLimitError(
            f"limit max_counter_cells={limits.max_counter_cells}: the counter arrays have {cells} cells"
        )
    registers = []
    for r in _nonempty(doc, "register_arrays"):
        rname = _str(r["name"], "register name")
        width = _int(r["bitwidth"], f"width of register {rname!r}", 1)
        if width > limits.max_field_bits:
            raise ProgramLimitError(
                f"limit max_field_bits={limits.max_field_bits}: register {rname!r} is {width} bits wide"
            )
        registers.append(RegisterDef(rname, _int(r["size"], f"size of register {rname!r}"), width))
    cells = sum(r.size for r in registers)
    if cells > limits.max_register_cells:
        raise ProgramLimitError(
            f"limit max_register_cells={limits.max_register_cells}: the register arrays have {cells} cells"
        )
    calculations = {}
    for c in _nonempty(doc, "calculations"):
        cname = _str(c["name"], "calculation name")
        inputs = c.get("input") or []
        if not isinstance(inputs, list):
            raise ValueError(f"BMv2 JSON: input of calculation {cname!r} must be a list")
        calculations[cname] = CalculationDef(cname, c["algo"], tuple(inputs))
    checksums = []
    for c in _nonempty(doc, "checksums"):
        cname = _str(c["name"], "checksum name")
        if c.get("type", "generic") != "generic":
            raise UnsupportedProgramError(f"checksum {cname!r} of type {c.get('type')!r:.80} (only 'generic')")
        if c["calculation"] not in calculations:
            raise ValueError(f"checksum {cname!r} refers to unknown calculation {c['calculation']!r:.80}")
        target = c["target"]
        if not (isinstance(target, list) and len(target) == 2 and all(isinstance(x, str) for x in target)):
            raise ValueError(f"checksum {cname!r}: target must be [header, field]")
        checksums.append(
            ChecksumDef(
                cname,
                (target[0], target[1]),
                c["calculation"],
                _bool(c.get("verify"), f"verify of checksum {cname!r}", True),
                _bool(c.get("update"), f"update of checksum {cname!r}", True),
                c.get("if_cond"),
            )
        )
    aliases = {}
    for a in _nonempty(doc, "field_aliases"):
        name, (hdr, fld) = _str(a[0], "field alias"), a[1]
        aliases[name] = (_str(hdr, "aliased header"), _str(fld, "aliased field"))

    return Program(
        headers=tuple(headers),
        stacks=stacks,
        unions=unions,
        errors=errors,
        actions=tuple(actions),
        parser=parser,
        deparser_order=deparser_order,
        pipelines=pipelines,
        counters=tuple(counters),
        registers=tuple(registers),
        calculations=calculations,
        checksums=tuple(checksums),
        field_aliases=aliases,
    )


def _table_size(value: Any, name: str, limits: Limits) -> int:
    size = _int(value, f"size of table {name!r}")
    if size > limits.max_table_entries:
        raise ProgramLimitError(
            f"limit max_table_entries={limits.max_table_entries}: table {name!r} declares {size} entries"
        )
    return size


def _opt_str(value: Any) -> str | None:
    return None if value is None else _str(value, "control node name")


def _table(t: dict[str, Json], actions: dict[int, ActionDef], limits: Limits) -> TableDef:
    name = _str(t["name"], "table name")
    if t.get("type", "simple") != "simple":
        raise UnsupportedProgramError(f"table {name!r} of type {t.get('type')!r:.80} (action profiles/selectors)")
    if t.get("with_counters"):
        raise UnsupportedProgramError(f"direct counters on table {name!r}")
    if t.get("direct_meters"):
        raise UnsupportedProgramError(f"direct meter {t['direct_meters']!r:.80} on table {name!r}")
    if t.get("support_timeout"):
        raise UnsupportedProgramError(f"idle timeout (support_timeout) on table {name!r}")
    keys = []
    for k in t.get("key") or []:
        mt = k["match_type"]
        if mt not in ("exact", "lpm", "ternary", "range"):
            raise UnsupportedProgramError(f"match type {mt!r:.80} in table {name!r}")
        target = k["target"]
        if not (isinstance(target, list) and len(target) == 2 and all(isinstance(x, str) for x in target)):
            if "dereference" in json.dumps(target) or "access_field" in json.dumps(target):
                raise UnsupportedProgramError(
                    "a table key on a header stack element chosen at run time (dereference_header_stack) "
                    f"in table {name!r}"
                )
            raise UnsupportedProgramError(f"key target {target!r:.80} in table {name!r} (only header fields)")
        mask = k.get("mask")
        kname = k.get("name") or f"{target[0]}.{target[1]}"
        keys.append(
            KeyDef(
                _str(kname, f"key name in table {name!r}"),
                mt,
                target[0],
                target[1],
                0,  # width filled in by the lowering, which knows the header types
                parse_hexstr(mask) if mask is not None else None,
            )
        )
    if sum(1 for k in keys if k.match_type == "lpm") > 1:
        raise UnsupportedProgramError(f"table {name!r} has more than one lpm key")
    ids = tuple(_int(i, f"action id of table {name!r}", None) for i in t.get("action_ids") or [])
    for i in ids:
        if i not in actions:
            raise ValueError(f"table {name!r} refers to unknown action id {i}")
    default = t.get("default_entry")
    d_id = _int(default["action_id"], f"default action of table {name!r}", None) if default else None
    if d_id is not None and d_id not in actions:
        raise ValueError(f"table {name!r}: default action id {d_id} is unknown")
    d_data = tuple(parse_hexstr(v) for v in (default.get("action_data") or [])) if default else ()
    d_const = _bool(default.get("action_const"), f"action_const of table {name!r}") if default else False
    entries = []
    for e in t.get("entries") or []:
        key = []
        for part in e["match_key"]:
            mt = part["match_type"]
            if mt == "exact":
                key.append(("exact", parse_hexstr(part["key"]), 0))
            elif mt == "lpm":
                key.append(
                    ("lpm", parse_hexstr(part["key"]), _int(part["prefix_length"], f"prefix length in table {name!r}"))
                )
            elif mt == "ternary":
                key.append(("ternary", parse_hexstr(part["key"]), parse_hexstr(part["mask"])))
            elif mt == "range":
                key.append(("range", parse_hexstr(part["start"]), parse_hexstr(part["end"])))
            else:
                raise UnsupportedProgramError(f"const entry match type {mt!r:.80} in table {name!r}")
        ae = e["action_entry"]
        entries.append(
            ConstEntry(
                tuple(key),
                _int(ae["action_id"], f"action of a const entry in table {name!r}", None),
                tuple(parse_hexstr(v) for v in ae.get("action_data") or []),
                _int(e.get("priority", 0), f"priority of a const entry in table {name!r}", None),
            )
        )
    next_tables = t.get("next_tables") or {}
    if not isinstance(next_tables, dict):
        raise ValueError(f"table {name!r}: next_tables must be an object")
    return TableDef(
        name=name,
        id=_int(t["id"], f"id of table {name!r}", None),
        match_type=_str(t.get("match_type", "exact"), f"match type of table {name!r}"),
        max_size=_table_size(t.get("max_size", 1024), name, limits),
        keys=tuple(keys),
        action_ids=ids,
        next_tables={_str(k, "next_tables key"): _opt_str(v) for k, v in next_tables.items()},
        base_default_next=_opt_str(t.get("base_default_next")),
        default_action_id=d_id,
        default_action_data=d_data,
        default_const=d_const,
        const_entries=tuple(entries),
    )
