"""A pushed program cannot make the switch allocate, recurse or loop without bound (issue 14, item 3).

Sizes beyond `program.Limits` are refused at load with the limit's name, mapped to
RESOURCE_EXHAUSTED over P4Runtime; deeply nested expressions (which Python's own parser would
refuse as generated code) are computed through temporaries instead.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from p4proto import p4runtime_pb2, p4runtime_pb2_grpc
from softswitch import SoftSwitch
from softswitch.errors import ProgramLimitError
from softswitch.p4runtime.server import MAX_MESSAGE_BYTES, P4RuntimeServer
from tests.softswitch import fake_switch

FRAME = bytes.fromhex("0200000000020200000000010800") + bytes(50)


def tiny() -> dict[str, Any]:
    return copy.deepcopy(fake_switch.TINY_JSON_DOC)


def _field(h: str, f: str) -> dict[str, Any]:
    return {"type": "field", "value": [h, f]}


def _hex(v: int) -> dict[str, Any]:
    return {"type": "hexstr", "value": hex(v)}


def nested(levels: int) -> dict[str, Any]:
    """two_comp_mod((two_comp_mod(ingress_port + 1, 16)) - 1, 16) ... `levels` deep: equal to ingress_port.

    (As p4c writes signed arithmetic: each level is several nested operations of generated code.)
    """
    e: dict[str, Any] = _field("standard_metadata", "ingress_port")
    for i in range(levels):
        e = {"type": "expression", "value": {"op": "+" if i % 2 == 0 else "-", "left": e, "right": _hex(1)}}
        if i % 2 == 0:
            e = {"type": "expression", "value": {"op": "two_comp_mod", "left": e, "right": _hex(16)}}
    return {"type": "expression", "value": {"op": "&", "left": e, "right": _hex(0x1FF)}}


def nested_condition(levels: int) -> dict[str, Any]:
    """(port != 500 and (port != 501 and ...)): true for every port we send on."""
    cond: dict[str, Any] = {"type": "bool", "value": True}
    for i in range(levels):
        ne = {
            "type": "expression",
            "value": {"op": "!=", "left": _field("standard_metadata", "ingress_port"), "right": _hex(500 - i % 10)},
        }
        cond = {"type": "expression", "value": {"op": "and", "left": ne, "right": cond}}
    return cond["value"]


def with_deep_action(levels: int) -> dict[str, Any]:
    doc = tiny()
    set_port = next(a for a in doc["actions"] if a["name"] == "MyIngress.set_port")
    set_port["primitives"][0]["parameters"][1] = nested(levels)  # egress_spec = ingress_port, the long way
    return doc


def with_deep_conditional(levels: int) -> dict[str, Any]:
    doc = tiny()
    ingress = doc["pipelines"][0]
    ingress["conditionals"] = [
        {
            "name": "node_deep",
            "id": 0,
            "expression": nested_condition(levels),
            "true_next": "MyIngress.fwd",
            "false_next": None,
        }
    ]
    ingress["init_table"] = "node_deep"
    return doc


@pytest.mark.parametrize("levels", [120, 160])
def test_a_deeply_nested_action_expression_runs(levels: int) -> None:
    sw = SoftSwitch()
    sw.load_program(json.dumps(with_deep_action(levels)))
    assert sw.process_packet(7, FRAME) == [(7, FRAME)]
    assert sw.stats["errors"] == 0


@pytest.mark.parametrize("levels", [120, 160])
def test_a_deeply_nested_condition_runs(levels: int) -> None:
    sw = SoftSwitch()
    sw.load_program(json.dumps(with_deep_conditional(levels)))
    assert sw.process_packet(7, FRAME) == [(1, FRAME)]  # fwd's default: set_port(1)
    assert sw.stats["errors"] == 0


def _register_size(doc: dict[str, Any], n: int) -> None:
    doc["register_arrays"][0]["size"] = n


def _counter_size(doc: dict[str, Any], n: int) -> None:
    doc["counter_arrays"][0]["size"] = n


def _many_registers(doc: dict[str, Any], n: int) -> None:
    doc["register_arrays"] = [{"name": f"r{i}", "id": i, "bitwidth": 8, "size": n} for i in range(8)]


def _field_width(doc: dict[str, Any], n: int) -> None:
    doc["header_types"][2]["fields"][0][1] = n


def _table_size(doc: dict[str, Any], n: int) -> None:
    doc["pipelines"][0]["tables"][0]["max_size"] = n


def _many_fields(doc: dict[str, Any], n: int) -> None:
    doc["header_types"][0]["fields"] = [[f"f{i}", 1, False] for i in range(n)]


def _deep_expression(doc: dict[str, Any], n: int) -> None:
    doc.update(with_deep_action(n))


def _long_constant(doc: dict[str, Any], n: int) -> None:
    set_port = next(a for a in doc["actions"] if a["name"] == "MyIngress.set_port")
    set_port["primitives"][0]["parameters"][1] = {"type": "hexstr", "value": "0x" + "f" * n}


LIMITED = [
    (_register_size, 10**9, "max_register_cells"),
    (_many_registers, 1 << 20, "max_register_cells"),
    (_counter_size, 10**9, "max_counter_cells"),
    (_field_width, 10**9, "max_field_bits"),
    (_table_size, 10**12, "max_table_entries"),
    (_many_fields, 100_000, "max_slots"),
    (_deep_expression, 200, "max_expression_depth"),
    (_long_constant, 1050, "max_constant_bits"),
]


@pytest.mark.parametrize("edit,n,limit", LIMITED, ids=[x[2] + ":" + x[0].__name__ for x in LIMITED])
def test_sizes_beyond_the_limits_are_refused_by_name(edit: Any, n: int, limit: str) -> None:
    doc = tiny()
    edit(doc, n)
    sw = SoftSwitch()
    with pytest.raises(ProgramLimitError, match=limit):
        sw.load_program(json.dumps(doc))
    assert not sw.program_loaded


def test_a_json_nested_beyond_the_parser_is_refused() -> None:
    # (built as text: json.dumps would recurse as deep as the parser does)
    text = json.dumps(tiny()).replace('"program": "tiny.p4"', '"program": ' + "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ProgramLimitError, match="nested deeper"):
        SoftSwitch().load_program(text)


@pytest.fixture
def server() -> Iterator[P4RuntimeServer]:
    srv = P4RuntimeServer({1: SoftSwitch(device_id=1)}, "127.0.0.1:0")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def _push(srv: P4RuntimeServer, device_config: bytes) -> None:
    with grpc.insecure_channel(srv.address, options=[("grpc.max_send_message_length", -1)]) as channel:
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=1, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        )
        req.config.p4info.CopyFrom(fake_switch.tiny_p4info())
        req.config.p4_device_config = device_config
        p4runtime_pb2_grpc.P4RuntimeStub(channel).SetForwardingPipelineConfig(req, timeout=120)


def test_limits_are_resource_exhausted_over_p4runtime(server: P4RuntimeServer) -> None:
    doc = tiny()
    _register_size(doc, 10**9)
    with pytest.raises(grpc.RpcError) as info:
        _push(server, json.dumps(doc).encode())
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_register_cells" in info.value.details()


def test_a_deep_expression_pushed_over_p4runtime_loads(server: P4RuntimeServer) -> None:
    _push(server, json.dumps(with_deep_action(120)).encode())


def test_an_oversized_pipeline_message_is_resource_exhausted(server: P4RuntimeServer) -> None:
    assert MAX_MESSAGE_BYTES <= 64 << 20
    with pytest.raises(grpc.RpcError) as info:
        _push(server, b" " * (MAX_MESSAGE_BYTES + 1024) + fake_switch.TINY_JSON.encode())
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
