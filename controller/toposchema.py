"""The topology file format: read a file, check the document completely, say in one line what is wrong.

The published contract is the JSON Schema shipped beside this module (controller/topology.schema.json,
described in docs/topology.md): every document is checked against it first, then for what a schema cannot
say (names that refer to switches, each port used once, no self-loops, an uplink from every edge switch, a
connected fabric). Nothing is built before the whole document passes, so a topology that loads is one the
routing, the planner and the emulation can use.

Every refusal is a TopologyError whose message is one line: the file, the field as a path
(`switches[3].tier`), what is wrong, what is wanted (for the schema's checks: the field's description in the
schema), and how many more problems follow the first.
"""

from __future__ import annotations

import ipaddress
import json
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from controller.topology import TopologyError

SCHEMA_FILE = "topology.schema.json"
DOCS = "docs/topology.md"
MAX_FILE_BYTES = 64 << 20  # a fat-tree:16 is 0.3 MB
SPECS = f"a topology JSON file ({DOCS}), fat-tree:K (K even, 2..16) or leaf-spine:LxSxH (e.g. leaf-spine:4x2x4)"

Where = tuple[str | int, ...]  # a place in a document: ("switches", 3, "tier")


# -- the schema ------------------------------------------------------------------------------------------------------
@cache
def _schema_text() -> str:
    return resources.files("controller").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")


def schema() -> dict[str, Any]:
    """The published JSON Schema of topology files (a fresh copy)."""
    return dict(json.loads(_schema_text()))


@cache
def _schema() -> dict[str, Any]:
    return schema()


@cache
def _validator() -> Any:
    import jsonschema  # late: only files need it, fat-tree:K does not

    base = jsonschema.Draft202012Validator
    # JSON Schema counts 1.0 as an integer; a device id or port of 1.0 would reach Mininet and P4Runtime as a float
    strict = base.TYPE_CHECKER.redefine("integer", lambda _checker, v: isinstance(v, int) and not isinstance(v, bool))
    return jsonschema.validators.extend(base, type_checker=strict)(_schema())


def _schemas_on(schema_path: Sequence[Any]) -> list[Mapping[str, Any]]:
    """The schemas a schema path passes through, from the root; a $ref is followed (both schemas are on the path)."""
    root = _schema()
    on: list[Mapping[str, Any]] = []

    def enter(s: Any) -> Any:
        on.append(s)
        while isinstance(s, Mapping) and "$ref" in s:
            s = root
            for part in str(on[-1]["$ref"]).removeprefix("#/").split("/"):
                s = s[part]
            on.append(s)
        return s

    cur = enter(root)
    for step in schema_path:
        if step == "$ref":
            continue  # some jsonschema versions name the step; enter() has followed it
        try:
            cur = enter(cur[step])
        except (KeyError, IndexError, TypeError):
            break
    return [s for s in on if isinstance(s, Mapping)]


def _want(schema_path: Sequence[Any]) -> str:
    """The description of the innermost schema on the path that has one: what the field wants."""
    for s in reversed(_schemas_on(schema_path)):
        if isinstance(s.get("description"), str):
            return str(s["description"])
    return f"a topology as {DOCS} describes it"


# -- reading ---------------------------------------------------------------------------------------------------------
class _Object(dict[str, Any]):
    """A JSON object that remembers a key it was given twice (json keeps the last silently)."""

    twice: str | None = None


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                obj.twice = key
                break
            seen.add(key)
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def read(path: Path) -> Any:
    """The JSON document in a file; a file that is not one (missing, binary, not UTF-8, bad syntax) is refused."""
    where = str(path)
    try:
        if path.is_dir():
            raise TopologyError(f"{where}: is a folder; want {SPECS}")
        if path.exists() and not path.is_file():
            raise TopologyError(f"{where}: is not a regular file; want a topology JSON file ({DOCS})")
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise TopologyError(f"{where}: no such file; want {SPECS}") from None
    except OSError as ex:
        raise TopologyError(f"{where}: cannot be read ({ex.strerror}); want a readable topology JSON file") from None
    if len(raw) > MAX_FILE_BYTES:
        raise TopologyError(f"{where}: larger than {MAX_FILE_BYTES >> 20} MiB; want a topology JSON file ({DOCS})")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as ex:
        raise TopologyError(
            f"{where}: not UTF-8 text (byte 0x{raw[ex.start]:02x} at offset {ex.start}: a binary file?); "
            f"want a topology JSON file ({DOCS})"
        ) from None
    if not text.strip():
        raise TopologyError(f"{where}: the file is empty; want a topology JSON object ({DOCS})")
    try:
        data = json.loads(text, object_pairs_hook=_object, parse_constant=_no_constant)
    except json.JSONDecodeError as ex:
        raise TopologyError(
            f"{where}: line {ex.lineno}, column {ex.colno}: not valid JSON ({ex.msg}); fix the syntax there ({DOCS})"
        ) from None
    except ValueError as ex:  # NaN, Infinity
        raise TopologyError(f"{where}: {ex} is not JSON; want a number such as 0 or 1.5") from None
    except RecursionError:
        raise TopologyError(
            f"{where}: nested too deeply to be a topology; want a topology JSON file ({DOCS})"
        ) from None
    for at, obj in _objects(data):
        if obj.twice is not None:
            raise TopologyError(
                f"{where}: {_join(at, obj.twice)}: given twice in one object; keep one (JSON would keep the last)"
            )
    return data


def _objects(data: Any) -> Iterator[tuple[Where, _Object]]:
    """Every object of a parsed document with its place, in document order."""
    todo: list[tuple[Where, Any]] = [((), data)]
    while todo:
        here, value = todo.pop()
        if isinstance(value, _Object):
            yield here, value
            todo.extend(reversed([((*here, k), v) for k, v in value.items()]))
        elif isinstance(value, list):
            todo.extend(reversed([((*here, i), v) for i, v in enumerate(value)]))


# -- checking --------------------------------------------------------------------------------------------------------
def check(data: Any, source: str = "topology") -> None:
    """Refuse a topology document (parsed JSON) the format does not allow: one line, the first problem."""
    problems = [_schema_message(err) for err in _validator().iter_errors(data)]
    if not problems:
        problems = _Semantics(data).problems()
    if problems:
        more = len(problems) - 1
        tail = f" ({more} more problem{'s' if more > 1 else ''} after this one)" if more else ""
        raise TopologyError(f"{source}: {problems[0]}{tail}")


def _join(at: Sequence[str | int], field: str | int | None = None) -> str:
    """('switches', 3, 'tier') -> 'switches[3].tier'; () -> 'the top level'."""
    out = ""
    for p in [*at, *([] if field is None else [field])]:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "the top level"


def _show(v: Any) -> str:
    """A value as JSON, long strings cut."""
    if isinstance(v, str) and len(v) > 40:
        v = v[:40] + "..."
    return json.dumps(v)


def _a(v: Any) -> str:
    """'"zero", a string', '1.5, a number with a fraction', 'a list' ..."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"{_show(v)}, a boolean"
    if isinstance(v, int):
        return f"{v}, an integer"
    if isinstance(v, float):
        return f"{v!r}, a number with a decimal point"
    if isinstance(v, str):
        return f"{_show(v)}, a string"
    return "an object" if isinstance(v, Mapping) else "a list"


def _schema_message(err: Any) -> str:
    at: Where = tuple(err.absolute_path)
    holder = list(err.absolute_schema_path)[:-1]  # the schema with the failing keyword
    kind, inst, field = err.validator, err.instance, _join(at)
    if kind == "required":
        missing = next(k for k in err.validator_value if k not in inst)
        return f"{_join(at, missing)}: missing; want {_want([*holder, 'properties', missing])}"
    if kind == "additionalProperties":
        own = _schemas_on(holder)[-1]
        known = [k for k in own.get("properties", {}) if k not in ("$schema", "description")]
        extra = next(k for k in inst if k not in own.get("properties", {}))
        return (
            f"{_join(at, extra)}: not a field of {own.get('title', 'a topology')}; "
            f"want one of {', '.join(known)} (check the spelling)"
        )
    want = _want(holder)
    if kind == "type":
        return f"{'the top level' if not at else field} is {_a(inst)}; want {want}"
    if kind in ("minimum", "maximum"):
        return f"{field} is {inst}, out of range; want {want}"
    if kind == "pattern":
        return f"{field} is {_show(inst)}, malformed; want {want}"
    if kind == "const":
        return f"{field} is {_show(inst)}, not supported; want {want}"
    if kind in ("minItems", "minLength"):
        return f"{field} is empty; want {want}"
    if kind == "maxLength":
        return f"{field} is too long; want {want}"
    return f"{field}: {err.message}; want {want}"


class _Semantics:
    """What the schema cannot say, on a document the schema accepts; problems in document order."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self.switches: list[Mapping[str, Any]] = list(doc["switches"])
        self.hosts: list[Mapping[str, Any]] = list(doc.get("hosts", []))
        self.links: list[Mapping[str, Any]] = list(doc.get("links", []))
        self.out: list[str] = []

    def add(self, field: str, what: str, fix: str) -> None:
        self.out.append(f"{field}: {what}; {fix}")

    def problems(self) -> list[str]:
        names = self.unique("switches", "name", "give every switch and host a name of its own")
        index = {name: i for name, (_, i) in names.items()}
        self.unique("hosts", "name", "give every switch and host a name of its own", seen=names)
        self.unique("switches", "device_id", "give every switch a device id of its own")
        self.addresses()
        self.ports(index)
        if not self.out:  # the shape of the fabric, once every name and port is sound
            self.uplinks()
            self.connected(index)
        return self.out

    def unique(
        self, rows: str, key: str, fix: str, seen: dict[Any, tuple[str, int]] | None = None
    ) -> dict[Any, tuple[str, int]]:
        """Refuse a value of `key` that an earlier element (of `rows`, or in `seen`) has; value -> (rows, index)."""
        seen = {} if seen is None else dict(seen)
        for i, row in enumerate(getattr(self, rows)):
            value = row[key].lower() if key == "mac" else row[key]
            if value in seen:
                other, j = seen[value]
                self.add(f"{rows}[{i}].{key}", f"{_show(row[key])} is also {other}[{j}]'s {key}", fix)
            else:
                seen[value] = (rows, i)
        return seen

    def addresses(self) -> None:
        """Host addresses are unicast and unique; a switch's P4Runtime port is a TCP port."""
        for i, s in enumerate(self.switches):
            addr = s.get("grpc_addr")
            port = None if addr is None else int(addr.rpartition(":")[2])
            if port is not None and not 1 <= port <= 65535:
                self.add(f"switches[{i}].grpc_addr", f"port {port} of {addr} is not a TCP port", "want 1..65535")
        for i, h in enumerate(self.hosts):
            ip = ipaddress.IPv4Address(h["ip"])
            if ip.is_multicast or ip.is_unspecified or ip.is_loopback or ip.is_reserved:
                self.add(f"hosts[{i}].ip", f"{h['ip']} is not a unicast address", "want one such as 10.0.0.2")
            if int(h["mac"][:2], 16) & 1 or int(h["mac"].replace(":", ""), 16) == 0:
                self.add(
                    f"hosts[{i}].mac",
                    f"{h['mac']} is not a unicast address (its first byte is odd, or it is zero)",
                    "want one whose first byte is even, such as 02:00:0a:00:00:02",
                )
        self.unique("hosts", "ip", "give every host an IPv4 address of its own")
        self.unique("hosts", "mac", "give every host a MAC address of its own")

    def ports(self, index: Mapping[str, int]) -> None:
        """Every host and link end names a switch and takes a port nothing else of that switch takes."""
        used: dict[tuple[str, int], str] = {}
        known = ", ".join(list(index)[:8]) + (", ..." if len(index) > 8 else "")

        def take(field: str, switch: str, port: int, what: str) -> None:
            if switch not in index:
                return
            other = used.setdefault((switch, port), what)
            if other != what:
                self.add(
                    field,
                    f"port {port} of switch {switch} is already taken by {other}",
                    "give every port of a switch to one host or one link end",
                )

        for i, h in enumerate(self.hosts):
            if h["switch"] not in index:
                self.add(
                    f"hosts[{i}].switch",
                    f"{_show(h['switch'])} is not a switch of this topology",
                    f"name one of switches[].name ({known})",
                )
            take(f"hosts[{i}].port", h["switch"], h["port"], f"hosts[{i}] ({h['name']})")
        for i, ln in enumerate(self.links):
            label = f"links[{i}] ({ln['a']}:{ln['a_port']}-{ln['b']}:{ln['b_port']})"
            for end in ("a", "b"):
                if ln[end] not in index:
                    self.add(
                        f"links[{i}].{end}",
                        f"{_show(ln[end])} is not a switch of this topology",
                        f"name one of switches[].name ({known})",
                    )
            if ln["a"] == ln["b"]:
                self.add(
                    f"links[{i}].b",
                    f"the link joins switch {ln['a']} to itself",
                    "a link joins two different switches: name another switch as b",
                )
                continue
            take(f"links[{i}].a_port", ln["a"], ln["a_port"], label)
            take(f"links[{i}].b_port", ln["b"], ln["b_port"], label)

    def uplinks(self) -> None:
        """With more than one tier, every tier-0 switch has a link to a higher tier (or no job could leave it)."""
        tiers = {s["name"]: s["tier"] for s in self.switches}
        if max(tiers.values()) == 0:
            return
        up = {
            ln[end] for ln in self.links for end, other in (("a", "b"), ("b", "a")) if tiers[ln[other]] > tiers[ln[end]]
        }
        for i, s in enumerate(self.switches):
            if s["tier"] == 0 and s["name"] not in up:
                self.add(
                    f"switches[{i}]",
                    f"edge switch {s['name']} (tier 0) has no uplink",
                    f"add a link from {s['name']} to a switch of a higher tier to links[]",
                )

    def connected(self, index: Mapping[str, int]) -> None:
        """Every switch reaches every other over the links."""
        adj: dict[str, set[str]] = {name: set() for name in index}
        for ln in self.links:
            adj[ln["a"]].add(ln["b"])
            adj[ln["b"]].add(ln["a"])
        first = self.switches[0]["name"]
        seen = {first}
        todo = deque([first])
        while todo:
            for nb in adj[todo.popleft()] - seen:
                seen.add(nb)
                todo.append(nb)
        cut = [name for name in index if name not in seen]
        if cut:
            shown = ", ".join(cut[:5]) + (f" and {len(cut) - 5} more" if len(cut) > 5 else "")
            self.add(
                "links",
                f"switches {shown} cannot reach {first}: the fabric is not connected",
                "add links that join every switch to the rest",
            )
