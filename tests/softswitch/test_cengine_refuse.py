"""What the C engine does not run is refused by name and runs on the Python engine, with a log line saying why.

The C engine stores fields, action parameters and registers in at most 64 bits; a program with a
wider one (an IPv6 address, a 128-bit key) or an expression whose whole value is needed beyond 64
bits is refused for the C engine when it is loaded. The switch then runs it on the Python engine
(same behaviour, slower), and says so, naming the field, action or table from the program.
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

import pytest

from native import cbuild
from softswitch import SoftSwitch
from tests.softswitch import fake_switch

pytestmark = pytest.mark.skipif(cbuild.toolchain() is None, reason="[cc] no C compiler (cc) on PATH")

FRAME = bytes.fromhex("0200000000020200000000010800") + bytes(50)


def tiny() -> dict[str, Any]:
    return copy.deepcopy(fake_switch.TINY_JSON_DOC)


def wide_header(doc: dict[str, Any]) -> None:
    """An IPv6-like header with a 128-bit field, parsed after ethernet."""
    doc["header_types"].append({"name": "v6_t", "id": 9, "fields": [["src_addr", 128, False]]})
    doc["headers"].append({"name": "v6", "id": 9, "header_type": "v6_t", "metadata": False})
    doc["parsers"][0]["parse_states"][0]["parser_ops"].append(
        {"op": "extract", "parameters": [{"type": "regular", "value": "v6"}]}
    )
    doc["deparsers"][0]["order"].append("v6")


def wide_param(doc: dict[str, Any]) -> None:
    a = next(a for a in doc["actions"] if a["name"] == "MyIngress.set_src")
    a["runtime_data"][0]["bitwidth"] = 96


def wide_select(doc: dict[str, Any]) -> None:
    """select((dst_addr, src_addr)): a 96-bit key compared whole."""
    st = doc["parsers"][0]["parse_states"][0]
    st["transition_key"] = [
        {"type": "field", "value": ["ethernet", "dst_addr"]},
        {"type": "field", "value": ["ethernet", "src_addr"]},
    ]
    st["transitions"] = [
        {"type": "hexstr", "value": "0x" + "ab" * 12, "mask": None, "next_state": None},
        {"type": "default", "value": None, "mask": None, "next_state": None},
    ]


CASES = [
    (wide_header, "field v6.src_addr", "128 bits"),
    (wide_param, "action 'MyIngress.set_src'", "96 bits"),
    (wide_select, "parser state 'start'", "more than 64 bits"),
]


@pytest.mark.parametrize("edit,where,what", CASES, ids=[c[0].__name__ for c in CASES])
@pytest.mark.parametrize("asked", ["auto", "c"])
def test_a_program_the_c_engine_refuses_runs_on_python_saying_why(
    edit: Any, where: str, what: str, asked: str, caplog: pytest.LogCaptureFixture
) -> None:
    doc = tiny()
    edit(doc)
    sw = SoftSwitch(name="wide", engine=asked)
    with caplog.at_level(logging.WARNING, logger="softswitch"):
        sw.load_program(json.dumps(doc))
    assert sw.engine == "python"
    lines = [r.getMessage() for r in caplog.records if "C engine cannot run" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert where in lines[0] and what in lines[0] and "Python engine" in lines[0]
    ref = SoftSwitch(engine="python")
    ref.load_program(json.dumps(doc))
    pkt = FRAME + bytes(range(16))
    assert sw.process_packet(1, pkt) == ref.process_packet(1, pkt)


def test_the_next_program_goes_back_to_the_c_engine() -> None:
    doc = tiny()
    wide_header(doc)
    sw = SoftSwitch(name="back")
    sw.load_program(json.dumps(doc))
    assert sw.engine == "python"
    sw.load_program(fake_switch.TINY_JSON)
    assert sw.engine == "c"
    assert sw.process_packet(3, FRAME) == [(1, FRAME)]


def test_python_when_asked(caplog: pytest.LogCaptureFixture) -> None:
    sw = SoftSwitch(engine="python")
    with caplog.at_level(logging.WARNING, logger="softswitch"):
        sw.load_program(fake_switch.TINY_JSON)
    assert sw.engine == "python" and not caplog.records


def test_without_a_compiler_the_python_engine_runs_with_a_log_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(cbuild, "toolchain", lambda: None)
    sw = SoftSwitch(name="nocc", engine="c")
    with caplog.at_level(logging.WARNING, logger="softswitch"):
        sw.load_program(fake_switch.TINY_JSON)
    assert sw.engine == "python"
    assert any("no C compiler" in r.getMessage() for r in caplog.records)
    from softswitch.cli import _engine

    assert _engine(None) == "python" and _engine("c") == "python"
