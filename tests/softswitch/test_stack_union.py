"""Header stacks and unions as p4c emits them for v1model.

Program: tests/softswitch/programs/stack_union.p4.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from softswitch import SoftSwitch

PROGRAMS = Path(__file__).parent / "programs"
OUT = struct.Struct(">IBBBB")


def load(name: str) -> SoftSwitch:
    sw = SoftSwitch(name=name)
    sw.load_program((PROGRAMS / f"{name}.json").read_bytes())
    return sw


def errors() -> dict[str, int]:
    """The program reports errors by name (P4 cannot cast an error to bits): see stack_union.p4."""
    return {"NoError": 0, "PacketTooShort": 1, "StackOutOfBounds": 3}


def send(pkt: bytes) -> tuple[dict[str, int], bytes]:
    sw = load("stack_union")
    out = sw.process_packet(0, pkt)
    assert sw.stats["errors"] == 0
    assert len(out) == 1 and out[0][0] == 1
    data = out[0][1]
    names = "err tags_valid tag1 which union_valid".split()
    return dict(zip(names, OUT.unpack_from(data))), data[OUT.size :]


def test_stack_then_union_member_a_replaced_by_b() -> None:
    tags = bytes([1, 10, 2, 20, 0, 30])
    rep, rest = send(tags + b"\xaa\xbb" + b"zz")
    assert rep == {"err": 0, "tags_valid": 7, "tag1": 20, "which": 1, "union_valid": 1}
    assert rest == tags + bytes([1, 2, 3, 4]) + b"zz"  # setValid(b) invalidated a


def test_union_member_b() -> None:
    rep, rest = send(bytes([0, 5]) + b"\x11\x22\x33\x44" + b"q")
    assert rep == {"err": 0, "tags_valid": 1, "tag1": 0, "which": 2, "union_valid": 1}
    assert rest == bytes([0, 5]) + b"\x11\x22\x33\x44q"


def test_stack_overflow_is_stack_out_of_bounds() -> None:
    pkt = bytes([1, 1, 1, 2, 1, 3, 1, 4]) + b"rest"
    rep, rest = send(pkt)
    assert rep["err"] == errors()["StackOutOfBounds"]
    assert rep["tags_valid"] == 7 and rep["which"] == 0 and rep["union_valid"] == 0
    assert rest == pkt  # three tags re-emitted, the fourth never extracted stays payload


def test_truncated_union_member() -> None:
    rep, rest = send(bytes([0, 1, 0xAA]))
    assert rep["err"] == errors()["PacketTooShort"]
    assert rep["tags_valid"] == 1 and rep["which"] == 0
    assert rest == bytes([0, 1, 0xAA])


def with_assign_into_member(member: str, src_type: str, field: str, value: int) -> SoftSwitch:
    """stack_union with `member = src` (assign_header from a valid non-member header) at the end of ingress."""
    doc = json.loads((PROGRAMS / "stack_union.json").read_text())
    doc["headers"].append({"name": "src", "id": 99, "header_type": src_type, "metadata": False, "pi_omit": True})
    last = next(a for a in doc["actions"] if a["name"] == "stack_union89_1")
    last["primitives"] += [
        {"op": "add_header", "parameters": [{"type": "header", "value": "src"}]},
        {
            "op": "assign",
            "parameters": [{"type": "field", "value": ["src", field]}, {"type": "hexstr", "value": hex(value)}],
        },
        {
            "op": "assign_header",
            "parameters": [{"type": "header", "value": member}, {"type": "header", "value": "src"}],
        },
    ]
    sw = SoftSwitch(name="assign-union")
    sw.load_program(json.dumps(doc))
    return sw


def test_assign_header_into_a_union_member_invalidates_its_siblings() -> None:
    """BMv2's assign_header marks dst valid, and a union member made valid invalidates the others."""
    sw = with_assign_into_member("ab.a", "a_h", "x", 0xBEEF)
    out = sw.process_packet(0, bytes([0, 5]) + b"\x11\x22\x33\x44" + b"q")  # parses ab.b
    assert sw.stats["errors"] == 0 and len(out) == 1
    data = out[0][1]
    assert data[OUT.size :] == bytes([0, 5]) + b"\xbe\xef" + b"q"  # ab.a emitted, ab.b no longer valid
