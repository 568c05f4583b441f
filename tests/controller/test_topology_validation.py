"""Topology files are checked completely before anything is built, and every refusal is one line naming the field.

A catalogue of bad inputs (every finding of issue 33 and their kin) and a generator of broken topologies
(hypothesis: a valid fat-tree or leaf-spine with one thing broken) are fed to the loader every entry point
uses (controller.topospec.load_topology). Each gives a TopologyError of one line that starts with the file,
names the field as a path and says what is wanted. The published JSON Schema and the checker agree: what
the schema refuses, the checker refuses for the same field; what only the checker's rules refuse (names that
refer to switches, ports used once, uplinks, connectivity), a standard JSON Schema validator accepts; valid
examples (the builders', the docs', the emulation's own files) pass both.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller import toposchema
from controller.fattree import fat_tree
from controller.leafspine import leaf_spine
from controller.routing import all_route_entries
from controller.topology import FORMAT_VERSION, Topology, TopologyError
from controller.topospec import load_topology
from tests.common import REPO

BASES = {
    "fat-tree:2": fat_tree(2),
    "fat-tree:4": fat_tree(4),
    "leaf-spine:3x2x2": leaf_spine(3, 2, 2),
    "served leaf-spine:2x2x1": leaf_spine(2, 2, 1).with_grpc({"l1": "127.0.0.1:50001", "s2": "[::1]:50004"}),
}
REQUIRED = {
    "switches": ("name", "tier", "role", "device_id"),
    "hosts": ("name", "ip", "mac", "switch", "port"),
    "links": ("a", "a_port", "b", "b_port"),
}
INTEGERS = {"tier", "device_id", "port", "a_port", "b_port"}
STANDARD = jsonschema.Draft202012Validator(toposchema.schema())


def document(topo: Topology) -> dict[str, Any]:
    return json.loads(json.dumps(topo.to_dict()))


def refusal(path: Path, content: Any) -> str:
    """Write `content` (bytes, or a document as JSON) to `path`, load it as --topology does; the one-line refusal."""
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content, indent=1).encode())
    with pytest.raises(TopologyError) as ex:
        load_topology(str(path))
    message = str(ex.value)
    assert "\n" not in message and message.strip() == message, f"not one line: {message!r}"
    assert message.startswith(f"{path}: "), message
    return message


def names_field(message: str, field: str) -> bool:
    """The message names `field` as the subject: 'switches[3].tier is ...' or 'switches[3].tier: ...'."""
    return re.search(re.escape(field) + r"(:| is )", message) is not None


# -- the catalogue ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Bad:
    """A broken input: raw bytes, or a change to leaf-spine:2x2x2 (a function of the document, returning the new
    one or None after changing it in place). `layer`: who refuses it: the reader (not a JSON document), the
    schema, only the checker's rules, or only the checker's strict integers (JSON Schema counts 1.0 as one)."""

    name: str
    change: bytes | Callable[[dict[str, Any]], Any]
    field: str
    wants: str  # words the message must hold: what is wrong or wanted
    layer: str  # "file", "schema", "rules", "strict"

    def content(self) -> Any:
        if isinstance(self.change, bytes):
            return self.change
        doc = document(leaf_spine(2, 2, 2))
        out = self.change(doc)
        return out.value if isinstance(out, Instead) else doc


@dataclass(frozen=True)
class Instead:
    """What a change returns to replace the whole document."""

    value: Any


def _set(where: str, index: int, **values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d[where][index].update(values)


def _without_links_of(name: str, extra: list[dict[str, Any]] | None = None) -> Callable[[dict[str, Any]], None]:
    def change(d: dict[str, Any]) -> None:
        d["links"] = [ln for ln in d["links"] if name not in (ln["a"], ln["b"])] + (extra or [])

    return change


CATALOGUE = [
    # issue 33's findings
    Bad("JSON syntax error", b'{"switches": [\n  {"name": "l1",, }\n]}', "line 2, column 17", "not valid JSON", "file"),
    Bad("binary file", bytes(range(256)) * 4, "not UTF-8", "binary", "file"),
    Bad("tier zero as a word", _set("switches", 1, tier="zero"), "switches[1].tier", '"zero", a string', "schema"),
    Bad("top-level list", lambda d: Instead([d]), "the top level", "a list; want an object", "schema"),
    Bad("leaf without uplinks", _without_links_of("l2"), "switches[1]", "no uplink", "rules"),
    Bad(
        "leaf without uplinks, joined to a leaf",
        _without_links_of("l2", [{"a": "l1", "a_port": 9, "b": "l2", "b_port": 9}]),
        "switches[1]",
        "no uplink",
        "rules",
    ),
    Bad("self-loop link", _set("links", 1, b="l1"), "links[1].b", "to itself", "rules"),
    Bad("bad MAC", _set("hosts", 1, mac="02:00:0a:00:00"), "hosts[1].mac", "malformed; want the host's MAC", "schema"),
    # the reader
    Bad("empty file", b"", "empty", "want a topology JSON object", "file"),
    Bad("NaN", b'{"switches": NaN}', "NaN is not JSON", "want a number", "file"),
    Bad("a key twice", b'{"switches": [{"name": "a", "name": "b"}]}', "switches[0].name", "given twice", "file"),
    # the top level
    Bad("top-level string", lambda d: Instead("fat-tree:4"), "the top level", '"fat-tree:4", a string', "schema"),
    Bad("top-level null", lambda d: Instead(None), "the top level", "is null", "schema"),
    Bad("no switches", lambda d: d.pop("switches") and None, "switches", "missing", "schema"),
    Bad("no switch", lambda d: d.update(switches=[]), "switches", "empty", "schema"),
    Bad("misspelt field", lambda d: d.update(link=d.pop("links")), "link", "not a field of a p4ina topology", "schema"),
    Bad("format 2", lambda d: d.update(format=2), "format", "version 1", "schema"),
    Bad("kind a number", lambda d: d.update(kind=4), "kind", "4, an integer", "schema"),
    Bad("hosts an object", lambda d: d.update(hosts={}), "hosts", "an object; want a list", "schema"),
    Bad("host a string", lambda d: d["hosts"].__setitem__(0, "h1"), "hosts[0]", "want an object with", "schema"),
    # switches
    Bad(
        "switch without tier", lambda d: d["switches"][2].pop("tier") and None, "switches[2].tier", "missing", "schema"
    ),
    Bad(
        "misspelt switch field", _set("switches", 0, tierr=0), "switches[0].tierr", "not a field of a switch", "schema"
    ),
    Bad("negative tier", _set("switches", 3, tier=-1), "switches[3].tier", "out of range", "schema"),
    Bad("tier 16", _set("switches", 3, tier=16), "switches[3].tier", "0..15", "schema"),
    Bad("device id a string", _set("switches", 1, device_id="2"), "switches[1].device_id", "a string", "schema"),
    Bad("device id 2.0", _set("switches", 1, device_id=2.0), "switches[1].device_id", "decimal point", "strict"),
    Bad("device id a boolean", _set("switches", 1, device_id=True), "switches[1].device_id", "boolean", "schema"),
    Bad("device id 2^64", _set("switches", 1, device_id=1 << 64), "switches[1].device_id", "out of range", "schema"),
    Bad("device id twice", _set("switches", 1, device_id=1), "switches[1].device_id", "also switches[0]'s", "rules"),
    Bad("switch name twice", _set("switches", 3, name="s1"), "switches[3].name", "also switches[2]'s", "rules"),
    Bad("name with a space", _set("switches", 0, name="leaf 1"), "switches[0].name", "malformed", "schema"),
    Bad("empty role", _set("switches", 0, role=""), "switches[0].role", "empty", "schema"),
    Bad("negative pod", _set("switches", 0, pod=-1), "switches[0].pod", "out of range", "schema"),
    Bad(
        "gRPC without a port",
        _set("switches", 0, grpc_addr="localhost"),
        "switches[0].grpc_addr",
        "HOST:PORT",
        "schema",
    ),
    Bad("gRPC port 70000", _set("switches", 0, grpc_addr="h:70000"), "switches[0].grpc_addr", "1..65535", "rules"),
    # hosts
    Bad("host without port", lambda d: d["hosts"][3].pop("port") and None, "hosts[3].port", "missing", "schema"),
    Bad("host name too long", _set("hosts", 0, name="host_number_1"), "hosts[0].name", "10 characters", "schema"),
    Bad("host named like a switch", _set("hosts", 2, name="l1"), "hosts[2].name", "also switches[0]'s", "rules"),
    Bad("host name twice", _set("hosts", 2, name="h1"), "hosts[2].name", "also hosts[0]'s", "rules"),
    Bad("host on no switch", _set("hosts", 1, switch="l9"), "hosts[1].switch", "not a switch", "rules"),
    Bad("host port 0", _set("hosts", 1, port=0), "hosts[1].port", "out of range", "schema"),
    Bad("host port 511", _set("hosts", 1, port=511), "hosts[1].port", "drop port", "schema"),
    Bad("host port as text", _set("hosts", 1, port="2"), "hosts[1].port", '"2", a string', "schema"),
    Bad("host port taken", _set("hosts", 1, port=1), "hosts[1].port", "already taken by hosts[0]", "rules"),
    Bad("IP out of range", _set("hosts", 1, ip="10.0.0.300"), "hosts[1].ip", "malformed", "schema"),
    Bad("IP with a leading zero", _set("hosts", 1, ip="10.0.0.03"), "hosts[1].ip", "malformed", "schema"),
    Bad("multicast IP", _set("hosts", 1, ip="224.0.0.1"), "hosts[1].ip", "not a unicast", "rules"),
    Bad("IP twice", _set("hosts", 1, ip="10.0.0.2"), "hosts[1].ip", "also hosts[0]'s", "rules"),
    Bad("MAC with dashes", _set("hosts", 1, mac="02-00-0a-00-00-03"), "hosts[1].mac", "malformed", "schema"),
    Bad("multicast MAC", _set("hosts", 1, mac="01:00:0a:00:00:03"), "hosts[1].mac", "not a unicast", "rules"),
    Bad("MAC twice", _set("hosts", 1, mac="02:00:0A:00:00:02"), "hosts[1].mac", "also hosts[0]'s", "rules"),
    # links
    Bad("link to no switch", _set("links", 0, b="s9"), "links[0].b", "not a switch", "rules"),
    Bad("link port taken by a host", _set("links", 1, a_port=1), "links[1].a_port", "taken by hosts[0]", "rules"),
    Bad("link port taken by a link", _set("links", 2, b_port=1), "links[2].b_port", "taken by links[0]", "rules"),
    Bad("link port 0", _set("links", 0, a_port=0), "links[0].a_port", "out of range", "schema"),
    Bad("link port 1.5", _set("links", 0, b_port=1.5), "links[0].b_port", "decimal point", "schema"),
    Bad("link without b", lambda d: d["links"][0].pop("b") and None, "links[0].b", "missing", "schema"),
    Bad("spine cut off", _without_links_of("s2"), "links", "s2 cannot reach l1", "rules"),
]


@pytest.mark.parametrize("bad", CATALOGUE, ids=[b.name for b in CATALOGUE])
def test_catalogue_is_refused_in_one_line_naming_the_field(bad: Bad, tmp_path: Path) -> None:
    message = refusal(tmp_path / "bad.json", bad.content())
    assert bad.field in message and bad.wants in message, message
    if bad.layer != "file":
        assert names_field(message, bad.field), message
    assert "; " in message.partition(bad.field)[2], f"no fix after the field: {message}"


@pytest.mark.parametrize("bad", [b for b in CATALOGUE if b.layer != "file"], ids=lambda b: b.name)
def test_the_schema_and_the_checker_agree_on_the_catalogue(bad: Bad) -> None:
    """What the schema refuses, a standard validator refuses too; the rules are the checker's alone (and the
    checker's strict integers: JSON Schema calls 2.0 an integer, P4Runtime would not)."""
    assert STANDARD.is_valid(bad.content()) == (bad.layer in ("rules", "strict")), bad.layer


def test_more_problems_are_counted(tmp_path: Path) -> None:
    doc = document(leaf_spine(2, 2, 2))
    doc["switches"][1]["tier"] = "zero"
    doc["hosts"][0]["port"] = 0
    doc["links"][0]["a"] = 7
    message = refusal(tmp_path / "t.json", doc)
    assert names_field(message, "switches[1].tier") and message.endswith("(2 more problems after this one)")


@pytest.mark.parametrize(
    ("spec", "wants"),
    [
        ("fat-tree:3", "K is 3; want an even K, 2..16"),
        ("fat-tree:0", "K is 0"),
        ("fat-tree:18", "K is 18"),
        ("fat-tree:four", "K must be an integer"),
        ("fat-tree:", "K must be an integer"),
        ("leaf-spine:0x2x2", "leaves must be 1..255, got 0"),
        ("leaf-spine:2x0x2", "spines must be 1..64, got 0"),
        ("leaf-spine:2x2x0", "hosts per leaf must be 1..64, got 0"),
        ("leaf-spine:2x2", "want leaf-spine:LxSxH"),
        ("leaf-spine:axbxc", "want leaf-spine:LxSxH"),
        ("fattree:4", "'fattree' is not a builder"),
    ],
)
def test_builder_specs_are_refused_in_one_line(spec: str, wants: str) -> None:
    with pytest.raises(TopologyError) as ex:
        load_topology(spec)
    message = str(ex.value)
    assert "\n" not in message and message.startswith(f"--topology {spec!r}: ") and wants in message, message
    assert "e.g." in message or "want" in message


def test_files_that_are_not_there_or_not_files(tmp_path: Path) -> None:
    for path, wants in ((tmp_path / "none.json", "no such file"), (tmp_path, "is a folder")):
        with pytest.raises(TopologyError, match=re.escape(f"{path}: {wants}; want a topology JSON file")):
            load_topology(str(path))


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(document(fat_tree(2))).encode())
    assert load_topology(str(path)) == fat_tree(2)


# -- a generator of broken topologies ---------------------------------------------------------------------------------
WRONG_TYPES = {"int": ["3", None, 2.5, True, [], {}], "str": [3, None, [], {}, True, 1.5]}
OUT_OF_RANGE = {"tier": [-1, 16, 1000], "device_id": [-1, 1 << 64], "port": [0, 511, 4096, -2]}
MALFORMED = {
    "ip": ["10.0.0", "10.0.0.256", "10.0.0.02", "ten.0.0.1", "", " 10.0.0.2"],
    "mac": ["02:00:0a:00:00", "02-00-0a-00-00-02", "zz:00:0a:00:00:02", "0200.0a00.0002", "02:00:0a:00:00:02:03"],
    "name": ["", "1abc", "a-b", "a b", "x" * 11, "h1\n"],
}


def _port_uses(doc: dict[str, Any]) -> list[tuple[str, int, str]]:
    """(switch, port, field) of every port use, in the order the checker takes them (hosts, then links)."""
    uses = [(h["switch"], h["port"], f"hosts[{i}].port") for i, h in enumerate(doc["hosts"])]
    for i, ln in enumerate(doc["links"]):
        uses += [(ln["a"], ln["a_port"], f"links[{i}].a_port"), (ln["b"], ln["b_port"], f"links[{i}].b_port")]
    return uses


@st.composite
def broken(draw: st.DrawFn) -> tuple[str, Any, str, str]:
    """(base, document, the field the refusal must name, 'schema' or 'rules') with one thing broken."""
    base = draw(st.sampled_from(sorted(BASES)))
    doc = copy.deepcopy(document(BASES[base]))
    how = draw(
        st.sampled_from(
            [
                "drop",
                "retype",
                "range",
                "malform",
                "extra",
                "self-loop",
                "port twice",
                "unknown switch",
                "twice",
                "no uplinks",
                "cut off",
                "top",
            ]
        )
    )
    rows = draw(st.sampled_from(sorted(REQUIRED)))
    i = draw(st.integers(0, len(doc[rows]) - 1))
    row = doc[rows][i]
    if how == "drop":
        key = draw(st.sampled_from(REQUIRED[rows]))
        del row[key]
        return base, doc, f"{rows}[{i}].{key}", "schema"
    if how == "retype":
        key = draw(st.sampled_from(REQUIRED[rows]))
        row[key] = draw(st.sampled_from(WRONG_TYPES["int" if key in INTEGERS else "str"]))
        return base, doc, f"{rows}[{i}].{key}", "schema"
    if how == "range":
        key = draw(st.sampled_from([k for k in REQUIRED[rows] if k in INTEGERS]))
        row[key] = draw(st.sampled_from(OUT_OF_RANGE["port" if key.endswith("port") else key]))
        return base, doc, f"{rows}[{i}].{key}", "schema"
    if how == "malform":
        key = draw(st.sampled_from([k for k in REQUIRED[rows] if k not in INTEGERS and k != "role"]))
        row[key] = draw(st.sampled_from(MALFORMED.get(key, MALFORMED["name"])))
        return base, doc, f"{rows}[{i}].{key}", "schema"
    if how == "extra":
        key = draw(st.sampled_from(["colour", "Tier", "ports", "uplink", "ip_addr"]))
        row[key] = 1
        return base, doc, f"{rows}[{i}].{key}", "schema"
    if how == "self-loop":
        j = draw(st.integers(0, len(doc["links"]) - 1))
        doc["links"][j]["b"] = doc["links"][j]["a"]
        return base, doc, f"links[{j}].b", "rules"
    if how == "port twice":
        uses = _port_uses(doc)  # a use takes the port of an earlier use of the same switch: refused where it is
        k = draw(st.sampled_from([k for k, (sw, _, _) in enumerate(uses) if any(u[0] == sw for u in uses[:k])]))
        port = draw(st.sampled_from([u[1] for u in uses[:k] if u[0] == uses[k][0]]))
        field = uses[k][2]
        rows, _, key = field.partition(".")
        doc[rows.partition("[")[0]][int(rows.partition("[")[2].rstrip("]"))][key] = port
        return base, doc, field, "rules"
    if how == "unknown switch":
        if rows == "switches" or (rows == "links" and draw(st.booleans())):
            j = draw(st.integers(0, len(doc["links"]) - 1))
            end = draw(st.sampled_from("ab"))
            doc["links"][j][end] = "nosuch"
            return base, doc, f"links[{j}].{end}", "rules"
        row["switch" if rows == "hosts" else "a"] = "nosuch"
        return base, doc, f"{rows}[{i}].{'switch' if rows == 'hosts' else 'a'}", "rules"
    if how == "twice":
        key, rows = draw(
            st.sampled_from([("name", "switches"), ("device_id", "switches"), ("ip", "hosts"), ("mac", "hosts")])
        )
        i = draw(st.integers(1, len(doc[rows]) - 1))
        j = draw(st.integers(0, i - 1))
        value = doc[rows][j][key]
        doc[rows][i][key] = value.upper() if key == "mac" else value
        return base, doc, f"{rows}[{i}].{key}", "rules"
    if how == "no uplinks":
        edges = [n for n, s in enumerate(doc["switches"]) if s["tier"] == 0]
        n = draw(st.sampled_from(edges))
        _without_links_of(doc["switches"][n]["name"])(doc)
        return base, doc, f"switches[{n}]", "rules"
    if how == "cut off":
        top = max(s["tier"] for s in doc["switches"])
        name = draw(st.sampled_from([s["name"] for s in doc["switches"] if s["tier"] == top]))
        _without_links_of(name)(doc)
        return base, doc, "links", "rules"
    what = draw(st.sampled_from(["no switches", "empty", "list", "string", "null"]))
    if what == "no switches":
        del doc["switches"]
        return base, doc, "switches", "schema"
    if what == "empty":
        doc["switches"] = []
        return base, doc, "switches", "schema"
    return base, {"list": [doc], "string": "fat-tree:4", "null": None}[what], "the top level", "schema"


@settings(max_examples=300, deadline=None)
@given(case=broken())
def test_broken_topologies_are_refused_naming_the_field(
    case: tuple[str, Any, str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    base, doc, field, layer = case
    message = refusal(tmp_path_factory.getbasetemp() / "broken.json", doc)
    assert names_field(message, field), f"{base}: want {field} named first, got: {message}"
    # the schema says the same: a broken shape is refused by any JSON Schema validator; the rules are the checker's
    assert STANDARD.is_valid(doc) == (layer == "rules"), f"{base}, {layer}: {message}"


# -- valid examples, the schema itself, the docs ----------------------------------------------------------------------
def _docs_example() -> dict[str, Any]:
    text = (REPO / "docs" / "topology.md").read_text()
    return json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))  # type: ignore[union-attr]


VALID = {
    **{name: document(topo) for name, topo in BASES.items()},
    "fat-tree:8": document(fat_tree(8)),
    "leaf-spine:1x1x1": document(leaf_spine(1, 1, 1)),
    "one switch": {"switches": [{"name": "s1", "tier": 0, "role": "edge", "device_id": 0}]},
    "docs/topology.md": _docs_example(),
    **{
        str(p.relative_to(REPO)): json.loads(p.read_text())
        for p in sorted((REPO / "tests" / "simulation" / "data").rglob("topology.json"))
    },
}


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_topologies_pass_both(name: str, tmp_path: Path) -> None:
    doc = VALID[name]
    assert STANDARD.is_valid(doc), name
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    topo = load_topology(str(path))
    assert topo.to_dict() == Topology.from_dict(doc).to_dict()
    assert len(all_route_entries(topo)) == len(topo.switches)  # the routing takes what the loader lets through


def test_the_schema_is_a_valid_2020_12_schema_of_this_format() -> None:
    schema = toposchema.schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["format"]["const"] == FORMAT_VERSION
    shipped = REPO / "controller" / toposchema.SCHEMA_FILE
    assert json.loads(shipped.read_text()) == schema


def test_the_docs_describe_every_field() -> None:
    text = (REPO / "docs" / "topology.md").read_text()
    schema = toposchema.schema()
    fields = set(schema["properties"])
    for kind in ("switch", "host", "link"):
        fields |= set(schema["$defs"][kind]["properties"])
    missing = sorted(f for f in fields if f"`{f}`" not in text)
    assert not missing, f"docs/topology.md does not describe {missing}"
    assert "[topology.md](topology.md)" in (REPO / "docs" / "controller.md").read_text()
