"""_jump/_jump_if_zero inside actions (newer p4c emits them for if/else, return and loops).

The committed arith.json (p4c 1.2.4.x) predicates if/else into ?: instead, so these tests
rewrite one action's primitives in the JSON by hand, in the exact format newer p4c uses.
"""

from __future__ import annotations

import copy
import json
import struct
from pathlib import Path
from typing import Any

from softswitch import SoftSwitch

PROGRAMS = Path(__file__).parent / "programs"
BASE: dict[str, Any] = json.loads((PROGRAMS / "arith.json").read_text())
IN = struct.Struct(">BBbbHI")
BRANCH_OFFSET = IN.size + 25  # out_h.branch


def field(h: str, f: str) -> dict[str, Any]:
    return {"type": "field", "value": [h, f]}


def hexstr(v: int) -> dict[str, Any]:
    return {"type": "hexstr", "value": hex(v)}


def expr(op: str, left: Any, right: Any) -> dict[str, Any]:
    return {"type": "expression", "value": {"op": op, "left": left, "right": right}}


def assign(dst: dict[str, Any], src: dict[str, Any]) -> dict[str, Any]:
    return {"op": "assign", "parameters": [dst, src]}


def jump(target: int) -> dict[str, Any]:
    return {"op": "_jump", "parameters": [hexstr(target)]}


def jump_if_zero(cond: dict[str, Any], target: int) -> dict[str, Any]:
    return {"op": "_jump_if_zero", "parameters": [cond, hexstr(target)]}


def _names(doc: dict[str, Any]) -> tuple[str, str, str]:
    res = next(h["name"] for h in doc["headers"] if h["header_type"].startswith("out_h"))
    inp = next(h["name"] for h in doc["headers"] if h["header_type"].startswith("in_h"))
    scalars = next(h for h in doc["headers"] if h["name"] == "scalars")
    stype = next(t for t in doc["header_types"] if t["name"] == scalars["header_type"])
    tmp = next(f[0] for f in stype["fields"] if f[0].endswith("tmp"))
    return res, inp, tmp


def with_branchy(prims_for: Any) -> SoftSwitch:
    doc = copy.deepcopy(BASE)
    res, inp, tmp = _names(doc)
    action = next(a for a in doc["actions"] if a["name"].endswith("branchy"))
    action["primitives"] = prims_for(res, inp, tmp)
    sw = SoftSwitch()
    sw.load_program(json.dumps(doc))
    return sw


def branch_of(sw: SoftSwitch, a: int) -> int:
    out = sw.process_packet(0, IN.pack(a, 0, 0, 0, 0, 0))
    assert len(out) == 1
    return out[0][1][BRANCH_OFFSET]


def test_if_else_with_jumps() -> None:
    def prims(res: str, inp: str, tmp: str) -> list[Any]:
        param = hexstr(100)  # p4c specialised branchy(100): the limit is a constant
        return [
            jump_if_zero(expr("b2d", None, expr(">", field(inp, "a"), param)), 3),
            assign(field(res, "branch"), expr("&", expr("-", field(inp, "a"), param), hexstr(0xFF))),
            jump(4),
            assign(field(res, "branch"), param),
        ]

    sw = with_branchy(prims)
    assert branch_of(sw, 150) == 50
    assert branch_of(sw, 100) == 100
    assert branch_of(sw, 3) == 100


def test_return_inside_if() -> None:
    def prims(res: str, inp: str, tmp: str) -> list[Any]:
        return [
            assign(field(res, "branch"), hexstr(1)),
            jump_if_zero(expr("b2d", None, expr("==", field(inp, "a"), hexstr(7))), 3),
            jump(4),  # return
            assign(field(res, "branch"), hexstr(2)),
        ]

    sw = with_branchy(prims)
    assert branch_of(sw, 7) == 1
    assert branch_of(sw, 8) == 2


def test_loop_with_backward_jump() -> None:
    def prims(res: str, inp: str, tmp: str) -> list[Any]:
        t = field("scalars", tmp)
        return [
            assign(field(res, "branch"), hexstr(0)),
            assign(t, hexstr(0)),
            jump_if_zero(expr("b2d", None, expr("<", t, hexstr(3))), 6),
            assign(field(res, "branch"), expr("&", expr("+", field(res, "branch"), field(inp, "a")), hexstr(0xFF))),
            assign(t, expr("&", expr("+", t, hexstr(1)), hexstr(0xFF))),
            jump(2),
        ]

    sw = with_branchy(prims)
    assert branch_of(sw, 100) == 300 & 0xFF
    assert branch_of(sw, 1) == 3


def test_jump_past_the_end_ends_the_action() -> None:
    def prims(res: str, inp: str, tmp: str) -> list[Any]:
        return [assign(field(res, "branch"), hexstr(5)), jump(99), assign(field(res, "branch"), hexstr(6))]

    sw = with_branchy(prims)
    assert branch_of(sw, 1) == 5
