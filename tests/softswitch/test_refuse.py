"""Constructs the embedded switch does not implement are refused at load time, by name; bad JSON is a ValueError."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from softswitch import SoftSwitch, UnsupportedProgramError

PROGRAMS = Path(__file__).parent / "programs"
BASE: dict[str, Any] = json.loads((PROGRAMS / "arith.json").read_text())


def _first_action(doc: dict[str, Any]) -> dict[str, Any]:
    return next(a for a in doc["actions"] if a["primitives"])


def _add_primitive(op: str) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        _first_action(doc)["primitives"].append({"op": op, "parameters": [{"type": "hexstr", "value": "0x1"}]})

    return edit


def _add_expression_op(op: str) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        field = {"type": "field", "value": ["standard_metadata", "egress_spec"]}
        expr = {
            "type": "expression",
            "value": {"op": op, "left": {"type": "header_stack", "value": "s"}, "right": field},
        }
        _first_action(doc)["primitives"].append({"op": "assign", "parameters": [field, expr]})

    return edit


def _meter(doc: dict[str, Any]) -> None:
    doc["meter_arrays"] = [
        {"name": "ingress.m", "id": 0, "type": "bytes", "rate_count": 2, "size": 4, "is_direct": False}
    ]


def _direct_counter(doc: dict[str, Any]) -> None:
    doc["counter_arrays"].append({"name": "ingress.dc", "id": 9, "size": 1, "is_direct": True, "binding": "t"})


def _action_profile(doc: dict[str, Any]) -> None:
    doc["pipelines"][0]["action_profiles"] = [{"name": "ingress.ap", "id": 0, "max_size": 8}]


def _value_set(doc: dict[str, Any]) -> None:
    doc["parse_vsets"] = [{"name": "pvs", "id": 0, "compressed_bitwidth": 16}]


def _learn(doc: dict[str, Any]) -> None:
    doc["learn_lists"] = [{"name": "digest_t", "id": 1, "elements": []}]


def _random_hash(doc: dict[str, Any]) -> None:
    doc["calculations"].append({"name": "calc_rnd", "id": 99, "algo": "random", "input": []})


def _idle_timeout(doc: dict[str, Any]) -> None:
    doc["pipelines"][0]["tables"][0]["support_timeout"] = True


@pytest.mark.parametrize(
    "edit,names",
    [
        (_add_primitive("clone_ingress_pkt_to_egress"), "clone_ingress_pkt_to_egress"),
        (_add_primitive("resubmit"), "resubmit"),
        (_add_primitive("recirculate"), "recirculate"),
        (_add_primitive("generate_digest"), "generate_digest"),
        (_add_primitive("execute_meter"), "execute_meter"),
        (_add_primitive("my_new_extern_method"), "my_new_extern_method"),
        (_add_expression_op("dereference_header_stack"), "dereference_header_stack"),
        (_meter, "ingress.m"),
        (_direct_counter, "ingress.dc"),
        (_action_profile, "ingress.ap"),
        (_value_set, "pvs"),
        (_learn, "digest_t"),
        (_random_hash, "random"),
        (_idle_timeout, "support_timeout"),
    ],
)
def test_unsupported_constructs_are_refused_by_name(edit: Callable[[dict[str, Any]], None], names: str) -> None:
    doc = copy.deepcopy(BASE)
    edit(doc)
    sw = SoftSwitch()
    with pytest.raises(UnsupportedProgramError, match=names):
        sw.load_program(json.dumps(doc))
    assert not sw.program_loaded


def test_refused_program_keeps_the_running_one() -> None:
    sw = SoftSwitch()
    sw.load_program(json.dumps(BASE))
    doc = copy.deepcopy(BASE)
    _meter(doc)
    with pytest.raises(UnsupportedProgramError):
        sw.load_program(json.dumps(doc))
    assert sw.program_json == json.dumps(BASE).encode()


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", "{}", '{"headers": 3}'])
def test_malformed_json_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        SoftSwitch().load_program(text)
