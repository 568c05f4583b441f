"""Packet-in and packet-out through the P4Runtime StreamChannel, as simple_switch_grpc --cpu-port does (item 14).

The program ("punt", the tiny program plus controller headers): frames from the CPU port carry a
`packet_out` header (egress_port:9, pad:7) that ingress turns into egress_spec and removes; frames
of ether_type 0x88B5 are punted: egress_spec = CPU port and a `packet_in` header (ingress_port:9,
pad:7) is added. As in BMv2 with PI, a packet sent to the CPU port reaches the primary controller
as a PacketIn with the packet_in header's fields as metadata (canonical byte strings), and a
PacketOut gets a packet_out header built from its metadata (per the P4Info's
controller_packet_metadata) and enters ingress on the CPU port.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from p4proto import code_pb2, p4runtime_pb2
from softswitch import SoftSwitch
from softswitch.p4runtime.server import P4RuntimeServer
from tests.softswitch import fake_switch
from tests.softswitch.test_p4runtime import DEVICE, Client
from tests.softswitch.test_ports import veth_ns

CPU_PORT = 64
PUNT_TYPE = 0x88B5
PKT_IN, PKT_OUT = 0x44000001, 0x44000002


def _field(h: str, f: str) -> dict[str, Any]:
    return {"type": "field", "value": [h, f]}


def _hex(v: int) -> dict[str, Any]:
    return {"type": "hexstr", "value": hex(v)}


def _valid(h: str) -> dict[str, Any]:
    return {"op": "d2b", "left": None, "right": _field(h, "$valid$")}


def punt_json() -> str:
    doc = copy.deepcopy(fake_switch.TINY_JSON_DOC)
    doc["header_types"] += [
        {"name": "packet_out_t", "id": 3, "fields": [["egress_port", 9, False], ["_pad", 7, False]]},
        {"name": "packet_in_t", "id": 4, "fields": [["ingress_port", 9, False], ["_pad", 7, False]]},
    ]
    doc["headers"] += [
        {"name": "packet_out", "id": 3, "header_type": "packet_out_t", "metadata": False, "pi_omit": True},
        {"name": "packet_in", "id": 4, "header_type": "packet_in_t", "metadata": False, "pi_omit": True},
    ]

    def extract(h: str) -> dict[str, Any]:
        return {"parameters": [{"type": "regular", "value": h}], "op": "extract"}

    doc["parsers"][0]["parse_states"] = [
        {
            "name": "start",
            "id": 0,
            "parser_ops": [],
            "transition_key": [_field("standard_metadata", "ingress_port")],
            "transitions": [
                {"type": "hexstr", "value": hex(CPU_PORT), "mask": None, "next_state": "parse_packet_out"},
                {"type": "default", "value": None, "mask": None, "next_state": "parse_ethernet"},
            ],
        },
        {
            "name": "parse_packet_out",
            "id": 1,
            "parser_ops": [extract("packet_out")],
            "transition_key": [],
            "transitions": [{"type": "default", "value": None, "mask": None, "next_state": "parse_ethernet"}],
        },
        {
            "name": "parse_ethernet",
            "id": 2,
            "parser_ops": [extract("ethernet")],
            "transition_key": [],
            "transitions": [{"type": "default", "value": None, "mask": None, "next_state": None}],
        },
    ]

    def assign(d: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
        return {"op": "assign", "parameters": [d, s]}

    doc["actions"] += [
        {
            "name": "from_cpu",
            "id": 10,
            "runtime_data": [],
            "primitives": [
                assign(_field("standard_metadata", "egress_spec"), _field("packet_out", "egress_port")),
                {"op": "remove_header", "parameters": [{"type": "header", "value": "packet_out"}]},
            ],
        },
        {
            "name": "to_cpu",
            "id": 11,
            "runtime_data": [],
            "primitives": [
                assign(_field("standard_metadata", "egress_spec"), _hex(CPU_PORT)),
                {"op": "add_header", "parameters": [{"type": "header", "value": "packet_in"}]},
                assign(_field("packet_in", "ingress_port"), _field("standard_metadata", "ingress_port")),
            ],
        },
    ]
    ingress = doc["pipelines"][0]
    ingress["init_table"] = "node_out"
    ingress["conditionals"] = [
        {
            "name": "node_out",
            "id": 0,
            "expression": {"type": "expression", "value": _valid("packet_out")},
            "true_next": "act_from_cpu",
            "false_next": "node_punt",
        },
        {
            "name": "node_punt",
            "id": 1,
            "expression": {
                "type": "expression",
                "value": {"op": "==", "left": _field("ethernet", "ether_type"), "right": _hex(PUNT_TYPE)},
            },
            "true_next": "act_to_cpu",
            "false_next": "MyIngress.fwd",
        },
    ]
    ingress["action_calls"] = [
        {"name": "act_from_cpu", "id": 0, "action_id": 10, "next_node": None},
        {"name": "act_to_cpu", "id": 1, "action_id": 11, "next_node": None},
    ]
    doc["deparsers"][0]["order"] = ["packet_in", "ethernet"]
    return json.dumps(doc)


def punt_p4info() -> Any:
    info = fake_switch.tiny_p4info()
    for pid, name, field in ((PKT_IN, "packet_in", "ingress_port"), (PKT_OUT, "packet_out", "egress_port")):
        m = info.controller_packet_metadata.add()
        m.preamble.id, m.preamble.name = pid, name
        m.metadata.add(id=1, name=field, bitwidth=9)
        m.metadata.add(id=2, name="_pad", bitwidth=7)
    return info


def frame(ether_type: int, body: bytes = b"hello") -> bytes:
    return bytes.fromhex("020000000002020000000001") + ether_type.to_bytes(2, "big") + body + bytes(40)


@pytest.fixture
def punt() -> Iterator[tuple[SoftSwitch, Client, list[tuple[int, bytes]]]]:
    """A switch with CPU port 64 behind its server, a primary client that pushed `punt`, and what it transmits."""
    sw = SoftSwitch(device_id=DEVICE, name="punt", cpu_port=CPU_PORT)
    sent: list[tuple[int, bytes]] = []
    done = threading.Event()

    def transmit(port: int, data: bytes) -> None:
        sent.append((port, data))
        done.set()

    sw.transmit = transmit
    with P4RuntimeServer({DEVICE: sw}, "127.0.0.1:0") as srv:
        c = Client(srv.port, election_id=10)
        try:
            assert c.arbitrate().status.code == code_pb2.OK
            c.set_pipeline(punt_json(), p4info=punt_p4info())
            yield sw, c, sent
        finally:
            c.close()


def packet_out(payload: bytes, metadata: list[tuple[int, bytes]]) -> p4runtime_pb2.StreamMessageRequest:
    req = p4runtime_pb2.StreamMessageRequest()
    req.packet.payload = payload
    for mid, value in metadata:
        req.packet.metadata.add(metadata_id=mid, value=value)
    return req


def wait_for(cond: Any, timeout: float = 10.0) -> None:
    ev = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if cond():
            return
        ev.wait(0.01)
    raise AssertionError("timed out")


def test_a_packet_to_the_cpu_port_is_a_packet_in(punt: tuple[SoftSwitch, Client, list[tuple[int, bytes]]]) -> None:
    sw, c, _ = punt
    pkt = frame(PUNT_TYPE)
    assert sw.process_packet(3, pkt) == []  # nothing leaves on a data port
    msg = c.next_message()
    assert not isinstance(msg, grpc.RpcError) and msg.WhichOneof("update") == "packet", msg
    assert msg.packet.payload == pkt  # the packet_in header stripped
    assert [(m.metadata_id, m.value) for m in msg.packet.metadata] == [(1, b"\x03"), (2, b"\x00")]
    assert sw.stats["packet_in"] == 1
    assert sw.process_packet(3, frame(0x0800)) == [(1, frame(0x0800))]  # other traffic is forwarded


def test_a_packet_out_enters_ingress_on_the_cpu_port(punt: tuple[SoftSwitch, Client, list[tuple[int, bytes]]]) -> None:
    sw, c, sent = punt
    payload = frame(0x0800, b"from the controller")
    c.send(packet_out(payload, [(1, b"\x02"), (2, b"\x00")]))
    wait_for(lambda: sent)
    assert sent == [(2, payload)]  # packet_out.egress_port chose the port, the header was removed
    c.send(packet_out(payload, [(1, b"\x01\x05")]))  # 261 in full-width form; missing _pad is zero
    wait_for(lambda: len(sent) == 2)
    assert sent[1] == (261, payload)


def test_a_packet_out_with_unknown_metadata_is_a_stream_error(
    punt: tuple[SoftSwitch, Client, list[tuple[int, bytes]]],
) -> None:
    sw, c, sent = punt
    c.send(packet_out(frame(0x0800), [(9, b"\x01")]))
    msg = c.next_message()
    assert not isinstance(msg, grpc.RpcError) and msg.WhichOneof("update") == "error"
    assert msg.error.canonical_code == code_pb2.INVALID_ARGUMENT
    assert msg.error.packet_out.packet_out.payload == frame(0x0800)
    c.send(packet_out(frame(0x0800), [(1, b"\x7f\xff")]))  # does not fit 9 bits
    msg = c.next_message()
    assert msg.WhichOneof("update") == "error" and msg.error.canonical_code == code_pb2.INVALID_ARGUMENT
    assert sent == []


def test_a_backup_gets_no_packet_in_and_its_packet_out_is_ignored(
    punt: tuple[SoftSwitch, Client, list[tuple[int, bytes]]],
) -> None:
    sw, primary, sent = punt
    port = int(primary.channel._channel.target().decode().rsplit(":", 1)[1])  # type: ignore[attr-defined]
    backup = Client(port, election_id=3)
    try:
        assert backup.arbitrate().status.code == code_pb2.ALREADY_EXISTS
        backup.send(packet_out(frame(0x0800), [(1, b"\x02")]))
        sw.process_packet(5, frame(PUNT_TYPE))
        msg = primary.next_message()
        assert msg.WhichOneof("update") == "packet"
        assert backup.responses.empty()
        assert sent == []
    finally:
        backup.close()


def test_the_cpu_port_cannot_also_be_a_data_port() -> None:
    from softswitch.cli import UsageError, parse_options

    with pytest.raises(UsageError, match="CPU port 64"):
        parse_options(["--no-p4", "-i", "64@veth0", "--", "--cpu-port", "64"])
    assert parse_options(["--no-p4", "-i", "1@veth0", "--", "--cpu-port", "64"]).cpu_port == 64


@pytest.mark.netns
def test_a_packet_out_leaves_on_a_real_port(veth_ns: str) -> None:
    """The outputs of a packet-out are sent by the port loop (PortIO.inject), out of the interface."""
    import socket

    from softswitch.runtime.ports import ETH_P_ALL, PortIO
    from tests.softswitch.test_ports import HOST_END, SWITCH_END, _receive, in_netns

    sw = SoftSwitch(device_id=DEVICE, name="punt-ports", cpu_port=CPU_PORT)
    with P4RuntimeServer({DEVICE: sw}, "127.0.0.1:0") as srv:
        c = Client(srv.port, election_id=10)
        try:
            assert c.arbitrate().status.code == code_pb2.OK
            c.set_pipeline(punt_json(), p4info=punt_p4info())
            with in_netns(veth_ns):
                io = PortIO(sw, {2: SWITCH_END}, name="punt-ports")
                io.start()
                host = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
                host.bind((HOST_END, ETH_P_ALL))
            try:
                payload = frame(0x0800, b"packet-out over a veth")
                c.send(packet_out(payload, [(1, b"\x02")]))
                assert _receive(host, b"packet-out over a veth") == payload
                assert io.stats[2].tx == 1
            finally:
                host.close()
                io.stop()
        finally:
            c.close()
