"""Load a p4c-bm2-ss (v1model) BMv2 JSON into typed, validated dataclasses.

Structure-level refusals happen here (meters, action profiles, learning, value sets,
variable-length headers, ...); the code generator refuses unknown primitives and ops.
Action bodies, expressions and parser ops stay raw JSON: only the code generator reads
them, once, at load time.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from emulation.softswitch.errors import UnsupportedProgramError

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
    """A BMv2 hexstr ('0x0a', '-0x1') as a Python int."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected a hex string, got {value!r}")
    text = value.strip()
    neg = text.startswith("-")
    if neg:
        text = text[1:]
    n = int(text, 16) if text.lower().startswith("0x") else int(text, 16)
    return -n if neg else n


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


def load(bmv2_json: str | bytes) -> Program:
    """Parse and validate a BMv2 JSON document; refuse what the switch cannot execute."""
    try:
        doc = json.loads(bmv2_json)
    except (ValueError, UnicodeDecodeError) as ex:
        raise ValueError(f"program is not valid JSON: {ex}") from ex
    if not isinstance(doc, dict):
        raise ValueError("program JSON must be an object (BMv2 JSON from p4c-bm2-ss)")
    try:
        return _load(doc)
    except (KeyError, TypeError, IndexError) as ex:
        raise ValueError(f"malformed BMv2 JSON: {type(ex).__name__}: {ex}") from ex


def _load(doc: dict[str, Json]) -> Program:
    meta = doc.get("__meta__") or {}
    version = meta.get("version")
    if version and int(version[0]) != SUPPORTED_MAJOR_VERSION:
        raise UnsupportedProgramError(f"BMv2 JSON format version {version} (need {SUPPORTED_MAJOR_VERSION}.x)")

    _refuse_nonempty(doc, "meter_arrays", "meters (meter_arrays)")
    _refuse_nonempty(doc, "learn_lists", "digests/learning (learn_lists)")
    _refuse_nonempty(doc, "parse_vsets", "parser value sets (parse_vsets)")
    _refuse_nonempty(doc, "extern_instances", "extern instances")
    _refuse_nonempty(doc, "header_union_stacks", "header union stacks")

    types: dict[str, HeaderType] = {}
    for ht in _nonempty(doc, "header_types"):
        fields = []
        for f in ht["fields"]:
            name, width = f[0], f[1]
            if width == "*":
                raise UnsupportedProgramError(f"variable-length field {name!r} in header type {ht['name']!r}")
            signed = bool(f[2]) if len(f) > 2 else False
            if len(f) > 3 and f[3]:
                raise UnsupportedProgramError(f"saturating field {name!r} in header type {ht['name']!r}")
            fields.append(FieldDef(str(name), int(width), signed))
        types[ht["name"]] = HeaderType(ht["name"], tuple(fields))

    headers = []
    by_id: dict[int, str] = {}
    for h in _nonempty(doc, "headers"):
        if h["header_type"] not in types:
            raise ValueError(f"header {h['name']!r} has unknown type {h['header_type']!r}")
        headers.append(HeaderInstance(h["name"], types[h["header_type"]], bool(h.get("metadata", False))))
        by_id[int(h["id"])] = h["name"]

    stacks = tuple(
        HeaderStack(s["name"], tuple(by_id[int(i)] for i in s["header_ids"])) for s in _nonempty(doc, "header_stacks")
    )
    unions = tuple(
        HeaderUnion(u["name"], tuple(by_id[int(i)] for i in u["header_ids"])) for u in _nonempty(doc, "header_unions")
    )

    errors = dict(CORE_ERRORS)
    for name, value in _nonempty(doc, "errors"):
        errors[str(name)] = int(value)

    actions = []
    for a in _nonempty(doc, "actions"):
        params = tuple(ActionParam(p["name"], int(p["bitwidth"])) for p in a.get("runtime_data") or [])
        actions.append(ActionDef(a["name"], int(a["id"]), params, tuple(a.get("primitives") or [])))
    action_ids = {a.id: a for a in actions}

    parsers = _nonempty(doc, "parsers")
    if not parsers:
        raise ValueError("BMv2 JSON has no parser (is this p4c-bm2-ss output for v1model?)")
    if len(parsers) != 1:
        raise UnsupportedProgramError(f"exactly one parser expected, the JSON has {len(parsers)}")
    p = parsers[0]
    parser = ParserDef(p["name"], p.get("init_state"), tuple(p.get("parse_states") or []))

    deparsers = _nonempty(doc, "deparsers")
    if not deparsers:
        raise ValueError("BMv2 JSON has no deparser (is this p4c-bm2-ss output for v1model?)")
    if len(deparsers) != 1:
        raise UnsupportedProgramError(f"exactly one deparser expected, the JSON has {len(deparsers)}")
    deparser_order = tuple(deparsers[0].get("order") or [])

    pipelines: dict[str, PipelineDef] = {}
    for pl in _nonempty(doc, "pipelines"):
        if pl.get("action_profiles"):
            names = [ap.get("name") for ap in pl["action_profiles"]]
            raise UnsupportedProgramError(f"action profiles/selectors {names} in pipeline {pl['name']!r}")
        tables = tuple(_table(t, action_ids) for t in pl.get("tables") or [])
        conds = tuple(
            ConditionalDef(c["name"], c["expression"], c.get("true_next"), c.get("false_next"))
            for c in pl.get("conditionals") or []
        )
        calls = tuple(
            ActionCallDef(c["name"], int(c["action_id"]), c.get("next_node")) for c in pl.get("action_calls") or []
        )
        pipelines[pl["name"]] = PipelineDef(pl["name"], pl.get("init_table"), tables, conds, calls)
    for needed in ("ingress", "egress"):
        if needed not in pipelines:
            raise ValueError(f"BMv2 JSON has no {needed!r} pipeline (is this p4c-bm2-ss output for v1model?)")

    counters = []
    for c in _nonempty(doc, "counter_arrays"):
        if c.get("is_direct"):
            raise UnsupportedProgramError(f"direct counter {c['name']!r} (bound to table {c.get('binding')!r})")
        counters.append(CounterDef(c["name"], int(c["size"])))
    registers = tuple(
        RegisterDef(r["name"], int(r["size"]), int(r["bitwidth"])) for r in _nonempty(doc, "register_arrays")
    )
    calculations = {
        c["name"]: CalculationDef(c["name"], c["algo"], tuple(c.get("input") or []))
        for c in _nonempty(doc, "calculations")
    }
    checksums = []
    for c in _nonempty(doc, "checksums"):
        if c.get("type", "generic") != "generic":
            raise UnsupportedProgramError(f"checksum {c['name']!r} of type {c.get('type')!r} (only 'generic')")
        if c["calculation"] not in calculations:
            raise ValueError(f"checksum {c['name']!r} refers to unknown calculation {c['calculation']!r}")
        target = c["target"]
        checksums.append(
            ChecksumDef(
                c["name"],
                (target[0], target[1]),
                c["calculation"],
                bool(c.get("verify", True)),
                bool(c.get("update", True)),
                c.get("if_cond"),
            )
        )
    aliases = {str(a[0]): (a[1][0], a[1][1]) for a in _nonempty(doc, "field_aliases")}

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
        registers=registers,
        calculations=calculations,
        checksums=tuple(checksums),
        field_aliases=aliases,
    )


def _table(t: dict[str, Json], actions: dict[int, ActionDef]) -> TableDef:
    name = t["name"]
    if t.get("type", "simple") != "simple":
        raise UnsupportedProgramError(f"table {name!r} of type {t.get('type')!r} (action profiles/selectors)")
    if t.get("with_counters"):
        raise UnsupportedProgramError(f"direct counters on table {name!r}")
    if t.get("direct_meters"):
        raise UnsupportedProgramError(f"direct meter {t['direct_meters']!r} on table {name!r}")
    if t.get("support_timeout"):
        raise UnsupportedProgramError(f"idle timeout (support_timeout) on table {name!r}")
    keys = []
    for k in t.get("key") or []:
        mt = k["match_type"]
        if mt not in ("exact", "lpm", "ternary", "range"):
            raise UnsupportedProgramError(f"match type {mt!r} in table {name!r}")
        target = k["target"]
        if not (isinstance(target, list) and len(target) == 2):
            raise UnsupportedProgramError(f"key target {target!r} in table {name!r} (only header fields)")
        mask = k.get("mask")
        keys.append(
            KeyDef(
                k.get("name") or f"{target[0]}.{target[1]}",
                mt,
                target[0],
                target[1],
                0,  # width filled in by the code generator, which knows the header types
                parse_hexstr(mask) if mask is not None else None,
            )
        )
    if sum(1 for k in keys if k.match_type == "lpm") > 1:
        raise UnsupportedProgramError(f"table {name!r} has more than one lpm key")
    ids = tuple(int(i) for i in t.get("action_ids") or [])
    for i in ids:
        if i not in actions:
            raise ValueError(f"table {name!r} refers to unknown action id {i}")
    default = t.get("default_entry")
    d_id = int(default["action_id"]) if default else None
    d_data = tuple(parse_hexstr(v) for v in (default.get("action_data") or [])) if default else ()
    d_const = bool(default.get("action_const", False)) if default else False
    entries = []
    for e in t.get("entries") or []:
        key = []
        for part in e["match_key"]:
            mt = part["match_type"]
            if mt == "exact":
                key.append(("exact", parse_hexstr(part["key"]), 0))
            elif mt == "lpm":
                key.append(("lpm", parse_hexstr(part["key"]), int(part["prefix_length"])))
            elif mt == "ternary":
                key.append(("ternary", parse_hexstr(part["key"]), parse_hexstr(part["mask"])))
            elif mt == "range":
                key.append(("range", parse_hexstr(part["start"]), parse_hexstr(part["end"])))
            else:
                raise UnsupportedProgramError(f"const entry match type {mt!r} in table {name!r}")
        ae = e["action_entry"]
        entries.append(
            ConstEntry(
                tuple(key),
                int(ae["action_id"]),
                tuple(parse_hexstr(v) for v in ae.get("action_data") or []),
                int(e.get("priority", 0)),
            )
        )
    return TableDef(
        name=name,
        id=int(t["id"]),
        match_type=t.get("match_type", "exact"),
        max_size=int(t.get("max_size", 1024)),
        keys=tuple(keys),
        action_ids=ids,
        next_tables=dict(t.get("next_tables") or {}),
        base_default_next=t.get("base_default_next"),
        default_action_id=d_id,
        default_action_data=d_data,
        default_const=d_const,
        const_entries=tuple(entries),
    )
