"""Per-packet failures are counted and logged at a bounded rate, not one traceback per packet (item 15)."""

from __future__ import annotations

import copy
import json
import logging

import pytest

from softswitch import SoftSwitch
from tests.softswitch import fake_switch

FRAME = bytes.fromhex("0200000000020200000000010800") + bytes(50)


def test_internal_errors_are_counted_and_logged_rarely(caplog: pytest.LogCaptureFixture) -> None:
    sw = SoftSwitch(name="flaky", engine="python")  # patches the Python engine's generated code
    sw.load_program(fake_switch.TINY_JSON)

    def broken(slots: list[int], data: bytes) -> int:
        raise ZeroDivisionError("a bug in the interpreter")

    sw.runtime().parse = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.DEBUG, logger="softswitch"):
        for _ in range(1000):
            assert sw.process_packet(1, FRAME) == []
    assert sw.stats["errors"] == 1000 and sw.stats["dropped"] == 1000
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert 1 <= len(records) <= 3, [r.getMessage() for r in records]
    assert sum(1 for r in records if r.exc_info) == 1  # the first one carries the traceback
    assert "ZeroDivisionError" in caplog.text


def test_failed_program_assertions_are_counted_not_errors(caplog: pytest.LogCaptureFixture) -> None:
    doc = copy.deepcopy(fake_switch.TINY_JSON_DOC)
    set_port = next(a for a in doc["actions"] if a["name"] == "MyIngress.set_port")
    set_port["primitives"].append({"op": "assert", "parameters": [{"type": "bool", "value": False}]})
    sw = SoftSwitch(name="asserting")
    sw.load_program(json.dumps(doc))
    with caplog.at_level(logging.DEBUG, logger="softswitch"):
        for _ in range(500):
            assert sw.process_packet(1, FRAME) == []
    assert sw.stats["assertions"] == 500 and sw.stats["errors"] == 0 and sw.stats["dropped"] == 500
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert 1 <= len(records) <= 3
    assert "assert failed in action 'MyIngress.set_port'" in caplog.text
