"""Common-subexpression elimination never changes what an action computes (issue 14, item 4).

The first regression: `~5` and `-5` were given one key, so `(f & ~5) + 1` and `(f & -5) + 1` computed
the same value. Then random actions (hypothesis) run with and without CSE must agree bit for bit.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from softswitch import SoftSwitch
from softswitch.compiler import compilecache, cse
from tests.softswitch import fake_switch


def _field(h: str, f: str) -> dict[str, Any]:
    return {"type": "field", "value": [h, f]}


def _hex(v: int) -> dict[str, Any]:
    return {"type": "hexstr", "value": hex(v)}


def _op(op: str, left: Any, right: Any) -> dict[str, Any]:
    return {"type": "expression", "value": {"op": op, "left": left, "right": right}}


def _assign(dst: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    return {"op": "assign", "parameters": [dst, value]}


def probe_program(assigns: list[dict[str, Any]]) -> str:
    """The tiny program whose fwd table's default action runs `assigns` (padded past CSE's threshold)."""
    doc = copy.deepcopy(fake_switch.TINY_JSON_DOC)
    port = _assign(_field("standard_metadata", "egress_spec"), _hex(1))
    doc["actions"].append({"name": "probe", "id": 6, "runtime_data": [], "primitives": [port] * 6 + assigns})
    fwd = doc["pipelines"][0]["tables"][0]
    fwd["action_ids"].append(6)
    fwd["actions"].append("probe")
    fwd["next_tables"]["probe"] = fwd["base_default_next"]
    fwd["default_entry"] = {"action_id": 6, "action_const": False, "action_data": [], "action_entry_const": False}
    return json.dumps(doc)


def frame(dst: int, src: int, ether_type: int) -> bytes:
    return dst.to_bytes(6, "big") + src.to_bytes(6, "big") + ether_type.to_bytes(2, "big") + bytes(46)


def run(program: str, pkt: bytes) -> bytes:
    # CSE is in the shared lowering: the Python engine shows what it does without a C compile per example
    # (the C engine runs the same lowered bodies: test_cengine_expressions.py, test_cengine_differential.py)
    sw = SoftSwitch(engine="python")
    sw.load_program(program)
    out = sw.process_packet(3, pkt)
    assert sw.stats["errors"] == 0
    assert len(out) == 1
    return out[0][1]


def test_complement_and_negative_constants_are_different_subexpressions() -> None:
    et = _field("ethernet", "ether_type")
    not5 = {"type": "expression", "value": {"op": "~", "left": None, "right": _hex(5)}}
    minus5 = {"type": "hexstr", "value": "-0x5"}
    mask48 = _hex((1 << 48) - 1)
    program = probe_program(
        [
            _assign(_field("ethernet", "dst_addr"), _op("&", _op("+", _op("&", et, not5), _hex(1)), mask48)),
            _assign(_field("ethernet", "src_addr"), _op("&", _op("+", _op("&", et, minus5), _hex(1)), mask48)),
        ]
    )
    out = run(program, frame(0, 0, 0xFFFF))
    assert int.from_bytes(out[0:6], "big") == (0xFFFF & ~5) + 1 == 0xFFFB
    assert int.from_bytes(out[6:12], "big") == (0xFFFF & -5) + 1 == 0xFFFC


# ---- random actions: with and without CSE -------------------------------------------------

FIELDS = [("ethernet", "dst_addr", 48), ("ethernet", "src_addr", 48), ("ethernet", "ether_type", 16)]
BINARY = ["+", "-", "*", "&", "|", "^"]


@st.composite
def expressions(draw: Any, depth: int = 0) -> dict[str, Any]:
    if depth >= 4 or draw(st.integers(0, 3)) == 0:
        if draw(st.booleans()):
            h, f, _ = draw(st.sampled_from(FIELDS))
            return _field(h, f)
        value = draw(st.integers(-(1 << 20), 1 << 20))
        return {"type": "hexstr", "value": ("-" if value < 0 else "") + hex(abs(value))}
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return {"type": "expression", "value": {"op": "~", "left": None, "right": draw(expressions(depth + 1))}}
    if kind == 1:
        cond = _op(draw(st.sampled_from(["==", "<", ">"])), draw(expressions(depth + 1)), draw(expressions(depth + 1)))
        return {
            "type": "expression",
            "value": {
                "op": "?",
                "left": draw(expressions(depth + 1)),
                "right": draw(expressions(depth + 1)),
                "cond": cond,
            },
        }
    if kind == 2:
        return _op(">>", draw(expressions(depth + 1)), _hex(draw(st.integers(0, 20))))
    if kind == 3:
        return _op("two_comp_mod", draw(expressions(depth + 1)), _hex(draw(st.sampled_from([8, 16, 32]))))
    return _op(draw(st.sampled_from(BINARY)), draw(expressions(depth + 1)), draw(expressions(depth + 1)))


@st.composite
def actions(draw: Any) -> list[dict[str, Any]]:
    common = [draw(expressions()) for _ in range(3)]  # reused subtrees, as p4c's copy propagation makes
    out = []
    for _ in range(draw(st.integers(2, 8))):
        h, f, w = draw(st.sampled_from(FIELDS))
        e = draw(st.sampled_from(common))
        if draw(st.booleans()):
            e = _op(draw(st.sampled_from(BINARY)), e, draw(st.sampled_from(common)))
        out.append(_assign(_field(h, f), _op("&", e, _hex((1 << w) - 1))))
    return out


@settings(max_examples=120, deadline=None)
@given(prims=actions(), dst=st.integers(0, (1 << 48) - 1), src=st.integers(0, (1 << 48) - 1), et=st.integers(0, 0xFFFF))
def test_random_actions_compute_the_same_with_and_without_cse(
    prims: list[dict[str, Any]], dst: int, src: int, et: int
) -> None:
    program = probe_program(prims)
    pkt = frame(dst, src, et)
    with_cse = run(program, pkt)
    compilecache._MEMORY.clear()
    original = cse.eliminate
    try:
        cse.eliminate = lambda body, pool, fresh: body  # type: ignore[assignment]
        without = run(program, pkt)
    finally:
        cse.eliminate = original  # type: ignore[assignment]
        compilecache._MEMORY.clear()
    assert with_cse == without


@pytest.fixture(autouse=True)
def _fresh_cache() -> Any:
    compilecache._MEMORY.clear()
    yield
    compilecache._MEMORY.clear()
