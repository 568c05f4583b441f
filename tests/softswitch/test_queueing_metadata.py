"""Queueing metadata as simple_switch sets it, and a refusal for what the embedded switch cannot know (item 8).

simple_switch stamps enq_timestamp when a packet enters its egress queue and deq_timedelta when it
leaves it (microseconds since the switch started), and drops a packet whose `priority` selects a
queue it does not have (one per port unless started with --priority-queues). The embedded switch
has no egress queue of its own (links are shaped by the kernel, after it), so a program that
reads enq_qdepth or deq_qdepth is refused at load rather than silently reading 0.
"""

from __future__ import annotations

import copy
import json
import struct
from typing import Any

import pytest

from softswitch import SoftSwitch, UnsupportedProgramError
from tests.softswitch import fake_switch

FRAME = bytes.fromhex("0200000000020200000000010800") + bytes(50)
REPORT = struct.Struct(">IIHIB")  # enq_timestamp, deq_timedelta, egress ts (high 16, low 32), priority


def _field(h: str, f: str) -> dict[str, Any]:
    return {"type": "field", "value": [h, f]}


def _assign(dst: dict[str, Any], src: dict[str, Any]) -> dict[str, Any]:
    return {"op": "assign", "parameters": [dst, src]}


def _shr(e: dict[str, Any], n: int, mask: int) -> dict[str, Any]:
    shifted = {"type": "expression", "value": {"op": ">>", "left": e, "right": {"type": "hexstr", "value": hex(n)}}}
    return {
        "type": "expression",
        "value": {"op": "&", "left": shifted, "right": {"type": "hexstr", "value": hex(mask)}},
    }


def program(egress_reads: list[str], ingress_priority: int | None = None) -> str:
    """The tiny program with a `report` header filled in egress from standard_metadata's `egress_reads`."""
    doc = copy.deepcopy(fake_switch.TINY_JSON_DOC)
    doc["header_types"].append(
        {
            "name": "report_t",
            "id": 3,
            "fields": [
                ["enq", 32, False],
                ["deq", 32, False],
                ["ts_hi", 16, False],
                ["ts_lo", 32, False],
                ["prio", 8, False],
                ["other", 32, False],
            ],
        }
    )
    doc["headers"].append({"name": "report", "id": 3, "header_type": "report_t", "metadata": False, "pi_omit": True})
    sm = "standard_metadata"
    prims: list[dict[str, Any]] = [{"op": "add_header", "parameters": [{"type": "header", "value": "report"}]}]
    sources = {
        "enq_timestamp": ("enq", _field(sm, "enq_timestamp")),
        "deq_timedelta": ("deq", _field(sm, "deq_timedelta")),
        "egress_global_timestamp": ("ts_lo", _shr(_field(sm, "egress_global_timestamp"), 0, 0xFFFFFFFF)),
        "priority": ("prio", _field(sm, "priority")),
        "enq_qdepth": ("other", _field(sm, "enq_qdepth")),
        "deq_qdepth": ("other", _field(sm, "deq_qdepth")),
    }
    for name in egress_reads:
        dst, src = sources[name]
        prims.append(_assign(_field("report", dst), src))
        if name == "egress_global_timestamp":
            prims.append(_assign(_field("report", "ts_hi"), _shr(_field(sm, name), 32, 0xFFFF)))
    doc["actions"].append({"name": "MyEgress.report", "id": 7, "runtime_data": [], "primitives": prims})
    egress = doc["pipelines"][1]
    egress["action_calls"] = [{"name": "act_report", "id": 0, "action_id": 7, "next_node": None}]
    egress["init_table"] = "act_report"
    doc["deparsers"][0]["order"] = ["ethernet", "report"]
    if ingress_priority is not None:
        set_port = next(a for a in doc["actions"] if a["name"] == "MyIngress.set_port")
        set_port["primitives"].append(
            _assign(_field(sm, "priority"), {"type": "hexstr", "value": hex(ingress_priority)})
        )
    return json.dumps(doc)


def report(sw: SoftSwitch) -> dict[str, int]:
    out = sw.process_packet(3, FRAME)
    assert sw.stats["errors"] == 0
    assert len(out) == 1
    enq, deq, ts_hi, ts_lo, prio = REPORT.unpack_from(out[0][1], 14)
    return {"enq": enq, "deq": deq, "egress_ts": ts_hi << 32 | ts_lo, "priority": prio}


def test_enq_timestamp_and_deq_timedelta_are_set_as_simple_switch_sets_them() -> None:
    sw = SoftSwitch()
    sw.load_program(program(["enq_timestamp", "deq_timedelta", "egress_global_timestamp"]))
    for _ in range(3):
        r = report(sw)
        assert r["enq"] != 0 or r["egress_ts"] < 1 << 32
        # deq_timedelta is the time from enqueue to egress, on the same clock as egress_global_timestamp
        assert r["deq"] == ((r["egress_ts"] & 0xFFFFFFFF) - r["enq"]) & 0xFFFFFFFF
        assert r["deq"] < 1 << 31


@pytest.mark.parametrize("field", ["enq_qdepth", "deq_qdepth"])
def test_a_program_reading_queue_depth_is_refused_by_name(field: str) -> None:
    sw = SoftSwitch()
    with pytest.raises(UnsupportedProgramError, match=field):
        sw.load_program(program([field]))
    assert not sw.program_loaded


def test_writing_queue_depth_is_harmless() -> None:
    doc = json.loads(program([]))
    act = next(a for a in doc["actions"] if a["name"] == "MyEgress.report")
    act["primitives"].append(_assign(_field("standard_metadata", "enq_qdepth"), {"type": "hexstr", "value": "0x5"}))
    sw = SoftSwitch()
    sw.load_program(json.dumps(doc))
    assert len(sw.process_packet(3, FRAME)) == 1


def test_a_priority_without_its_queue_drops_the_packet_as_simple_switch_does() -> None:
    sw = SoftSwitch()
    sw.load_program(program(["priority"], ingress_priority=1))
    assert sw.process_packet(3, FRAME) == []
    assert sw.stats["dropped"] == 1 and sw.stats["errors"] == 0


def test_a_priority_within_the_queues_reaches_egress() -> None:
    sw = SoftSwitch(priority_queues=8)
    sw.load_program(program(["priority"], ingress_priority=5))
    assert report(sw)["priority"] == 5


def test_copying_queue_depth_through_metadata_is_not_a_read() -> None:
    """p4c copies standard_metadata field by field into an action's inout parameter and back: allowed."""
    doc = json.loads(program([]))
    doc["header_types"][0]["fields"] = [
        ["smeta_enq_qdepth", 19, False],
        ["smeta_deq_qdepth", 19, False],
        ["_pad", 2, False],
    ]
    act = next(a for a in doc["actions"] if a["name"] == "MyEgress.report")
    sm, sc = "standard_metadata", "scalars"
    act["primitives"] += [
        _assign(_field(sc, "smeta_enq_qdepth"), _field(sm, "enq_qdepth")),
        _assign(_field(sc, "smeta_deq_qdepth"), _field(sm, "deq_qdepth")),
        _assign(_field(sm, "enq_qdepth"), _field(sc, "smeta_enq_qdepth")),
    ]
    sw = SoftSwitch()
    sw.load_program(json.dumps(doc))
    assert len(sw.process_packet(3, FRAME)) == 1
    # but computing with the copy is a read
    act["primitives"].append(_assign(_field("report", "other"), _shr(_field(sc, "smeta_deq_qdepth"), 1, 0xFFFF)))
    with pytest.raises(UnsupportedProgramError, match="deq_qdepth"):
        SoftSwitch().load_program(json.dumps(doc))


def test_emitting_a_copy_of_queue_depth_is_a_read() -> None:
    with pytest.raises(UnsupportedProgramError, match="enq_qdepth"):
        SoftSwitch().load_program(program(["enq_qdepth"]))  # report.other = enq_qdepth, then deparsed
