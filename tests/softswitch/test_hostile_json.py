"""A pushed BMv2 JSON is data, never code: hostile names cannot make the embedded switch run anything.

Every name in a BMv2 JSON (actions, tables, headers, fields, stacks, parser states, counters,
registers, calculations, conditionals) is replaced, consistently, by a hostile string: a newline
followed by a statement that would create a marker file, quotes, `__import__`, 100k characters,
non-ASCII. Each program goes through the loader directly and through the P4Runtime server
(SetForwardingPipelineConfig VERIFY_AND_COMMIT); the marker must never appear, a load either
succeeds harmlessly or is refused with a clear error, and the generated source never contains the
name.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from p4proto import p4runtime_pb2, p4runtime_pb2_grpc
from softswitch import SoftSwitch, SoftSwitchError
from softswitch.p4runtime.server import P4RuntimeServer
from tests.softswitch import fake_switch

PROGRAMS = Path(__file__).parent / "programs"
# (program, names to replace): one name of each kind the generator used to look at
TARGETS: dict[str, tuple[str, ...]] = {
    "tiny": (
        "MyIngress.set_port",
        "MyIngress.fwd",
        "MyIngress.acl",
        "ethernet",
        "ether_type",
        "MyIngress.pkts",
        "MyIngress.reg",
        "start",
    ),
    "stack_union": ("tags", "kind", "value", "ab.a", "parse_union", "tmp_0"),
    "arith": ("ArithIngress.acc", "ArithIngress.seen"),
    "parse_csum": (),
    "hash": (),
}


def hostile_names(marker: Path) -> Iterator[tuple[str, str]]:
    """(label, name) pairs; each would create `marker` if it reached generated code as text."""
    touch = f"getattr(getattr(__import__('pathlib'), 'Path')({str(marker)!r}), 'touch')()"
    yield "newline-module", f"x\n{touch}\ndef _q(F, P):\n    #"
    yield "newline-body", f"x\n    {touch}\n    #"
    yield "expression", f"t or {touch} or t"
    yield "quotes", f'x\'"\\\'; {touch}; \'"""#'
    yield "import", f"__import__('os').system('touch {marker}')"
    yield "long", "n" * 100_000
    yield "non-ascii", "tête\u202e\u0000\U0001f600" + touch


# names v1model fixes (a program without them is refused before any code is made)
STRUCTURAL = {"ingress", "egress", "standard_metadata"}


def rename(doc: Any, old: str, new: str, keys: bool = False) -> Any:
    """Every string value equal to `old` becomes `new` (dict keys too under next_tables); so do dotted 'old.x' names."""
    if isinstance(doc, dict):
        return {
            (rename(k, old, new) if keys else k): rename(v, old, new, keys=(k == "next_tables")) for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [rename(v, old, new) for v in doc]
    if isinstance(doc, str):
        if doc == old:
            return new
        parts = doc.split(".")
        if old in parts and "." not in old:
            return ".".join(new if p == old else p for p in parts)
    return doc


def program_doc(name: str) -> dict[str, Any]:
    if name == "tiny":
        return copy.deepcopy(fake_switch.TINY_JSON_DOC)
    return json.loads((PROGRAMS / f"{name}.json").read_text())


def every_name(doc: Any) -> set[str]:
    """All 'name' values in a JSON (to rename every kind of object at once)."""
    out: set[str] = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == "name" and isinstance(v, str):
                out.add(v)
            out |= every_name(v)
    elif isinstance(doc, list):
        for v in doc:
            out |= every_name(v)
    return out


def cases(marker: Path) -> Iterator[tuple[str, bytes]]:
    for prog, targets in TARGETS.items():
        base = program_doc(prog)
        for label, hostile in hostile_names(marker):
            for target in targets:
                yield f"{prog}:{target}:{label}", json.dumps(rename(base, target, hostile)).encode()
            doc = base
            for i, target in enumerate(sorted(every_name(base) - STRUCTURAL, key=len, reverse=True)):
                doc = rename(doc, target, f"{hostile}{i}")
            yield f"{prog}:all:{label}", json.dumps(doc).encode()


PACKETS = [bytes(range(64)), bytes(14) + b"\x08\x00" + bytes(40), b"\x01\x0a\x02\x14\x00\x1e\xaa\xbb\x01" * 4]


def _load_directly(raw: bytes, marker: Path) -> None:
    sw = SoftSwitch(name="hostile")
    try:
        sw.load_program(raw)
    except (SoftSwitchError, ValueError) as ex:
        assert str(ex), "a refusal must say why"
        return
    finally:
        assert not marker.exists(), "loading the JSON ran code from it"
    source = sw.generated_source or ""
    assert str(marker) not in source and "__import__" not in source and "pathlib" not in source
    for port in (0, 1, 2):
        for pkt in PACKETS:
            sw.process_packet(port, pkt)
    assert not marker.exists(), "a packet ran code from the JSON"


def test_hostile_names_never_run_through_the_loader(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    seen = 0
    for label, raw in cases(marker):
        try:
            _load_directly(raw, marker)
        except AssertionError as ex:
            raise AssertionError(f"{label}: {ex}") from ex
        seen += 1
    assert seen > 50


@pytest.fixture
def server() -> Iterator[tuple[P4RuntimeServer, SoftSwitch]]:
    sw = SoftSwitch(device_id=1, name="hostile-server")
    srv = P4RuntimeServer({1: sw}, "127.0.0.1:0")
    srv.start()
    try:
        yield srv, sw
    finally:
        srv.stop()


def test_hostile_names_never_run_through_p4runtime(tmp_path: Path, server: tuple[P4RuntimeServer, SoftSwitch]) -> None:
    srv, sw = server
    marker = tmp_path / "pwned"
    allowed = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNIMPLEMENTED}
    with grpc.insecure_channel(srv.address, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        pushed = 0
        for label, raw in cases(marker):
            if not label.startswith("tiny:"):
                continue  # the P4Info below describes the tiny program
            req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
                device_id=1, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
            )
            req.config.p4info.CopyFrom(fake_switch.tiny_p4info())
            req.config.p4_device_config = raw
            try:
                stub.SetForwardingPipelineConfig(req, timeout=60)
            except grpc.RpcError as ex:
                assert ex.code() in allowed, f"{label}: {ex.code()} {ex.details()}"
                assert ex.details(), f"{label}: refused without a message"
            assert not marker.exists(), f"{label}: the push ran code from the JSON"
            for pkt in PACKETS:
                sw.process_packet(1, pkt)
            assert not marker.exists(), f"{label}: a packet ran code from the pushed JSON"
            pushed += 1
        assert pushed > 20


def _retype(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(fake_switch.TINY_JSON_DOC)
    node: Any = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return doc


WRONG_NUMBERS = [
    (("header_types", 2, "fields", 0, 1), "48"),  # a field width as text
    (("header_types", 2, "fields", 0, 1), 48.0),
    (("header_types", 2, "fields", 0, 1), True),
    (("register_arrays", 0, "size"), "4"),
    (("register_arrays", 0, "bitwidth"), 32.5),
    (("counter_arrays", 0, "size"), False),
    (("actions", 2, "runtime_data", 0, "bitwidth"), "9; import os"),
    (("actions", 2, "primitives", 1, "parameters", 1, "value"), "0"),  # a runtime_data index as text
    (("actions", 2, "id"), "2"),
    (("pipelines", 0, "tables", 0, "default_entry", "action_data", 0), 1.5),
    (("pipelines", 0, "tables", 0, "default_entry", "action_data", 0), "0x01; import os"),
]


@pytest.mark.parametrize("path,value", WRONG_NUMBERS, ids=[f"{'.'.join(map(str, p))}={v!r}" for p, v in WRONG_NUMBERS])
def test_every_number_must_be_an_integer(path: tuple[Any, ...], value: Any) -> None:
    sw = SoftSwitch()
    with pytest.raises(ValueError, match="integer|hex string"):
        sw.load_program(json.dumps(_retype(path, value)))
    assert not sw.program_loaded


def test_generated_code_runs_with_only_the_builtins_it_needs() -> None:
    sw = SoftSwitch(engine="python")  # the generated Python's namespace (the C engine: test_cengine_hostile.py)
    sw.load_program(fake_switch.TINY_JSON)
    namespace = sw.runtime().ns
    assert set(namespace["__builtins__"]) == {"len", "int", "min", "max"}
    assert "__import__" not in namespace and "open" not in namespace


def test_p4c_bool_fields_with_0_or_1_signedness_load() -> None:
    """p4c writes `["b", 1, 0]` for some bool-typed header fields: 0/1 mean false/true there."""
    doc = copy.deepcopy(fake_switch.TINY_JSON_DOC)
    doc["header_types"][0]["fields"] = [["b", 1, 0], ["c", 1, 1], ["_pad", 6, False]]
    SoftSwitch().load_program(json.dumps(doc))
