"""A tiny hand-written v1model program (BMv2 JSON + P4Info) for the P4Runtime and port tests.

(This file first also held a dict-backed stand-in for the interpreter, used until switch.py
landed; the tests now run the real interpreter on this program, so only the program remains.)

The program ("tiny"):
- `MyIngress.fwd`: exact `standard_metadata.ingress_port` (9) -> `set_port(port 9)` (counts
  `MyIngress.pkts[port]`), `set_mcast(grp 16)`, `drop`; default `set_port(1)`, so with no entries
  every frame leaves on port 1.
- `MyIngress.acl`: ternary `ether_type` (16) + range `src_addr` (48) -> `drop`, `NoAction`.
- `MyIngress.dmac`: lpm `dst_addr` (48) -> `set_src(mac 48)`, `NoAction` (default).
- counter `MyIngress.pkts` (8, packets and bytes), register `MyIngress.reg` (4 x bit<32>).
"""

from __future__ import annotations

import json

from google.protobuf import text_format

from p4proto import p4info_pb2

_STD_META = [
    ["ingress_port", 9, False],
    ["egress_spec", 9, False],
    ["egress_port", 9, False],
    ["instance_type", 32, False],
    ["packet_length", 32, False],
    ["enq_timestamp", 32, False],
    ["enq_qdepth", 19, False],
    ["deq_timedelta", 32, False],
    ["deq_qdepth", 19, False],
    ["ingress_global_timestamp", 48, False],
    ["egress_global_timestamp", 48, False],
    ["mcast_grp", 16, False],
    ["egress_rid", 16, False],
    ["checksum_error", 1, False],
    ["parser_error", 32, False],
    ["priority", 3, False],
    ["_padding", 3, False],
]


def _field(header: str, name: str) -> dict:
    return {"type": "field", "value": [header, name]}


def _table(
    name: str,
    tid: int,
    keys: list[dict],
    action_ids: list[int],
    action_names: list[str],
    nxt: str | None,
    default: tuple[int, list[str]],
    match_type: str,
) -> dict:
    return {
        "name": name,
        "id": tid,
        "source_info": {"filename": "tiny.p4", "line": 1, "column": 0, "source_fragment": name},
        "key": keys,
        "match_type": match_type,
        "type": "simple",
        "max_size": 64,
        "with_counters": False,
        "support_timeout": False,
        "direct_meters": None,
        "action_ids": action_ids,
        "actions": action_names,
        "base_default_next": nxt,
        "next_tables": {a: nxt for a in action_names},
        "default_entry": {
            "action_id": default[0],
            "action_const": False,
            "action_data": default[1],
            "action_entry_const": False,
        },
    }


def _key(match_type: str, header: str, field: str) -> dict:
    return {"match_type": match_type, "name": f"{header}.{field}", "target": [header, field], "mask": None}


TINY_JSON_DOC: dict = {
    "header_types": [
        {"name": "scalars_0", "id": 0, "fields": []},
        {"name": "standard_metadata", "id": 1, "fields": _STD_META},
        {
            "name": "ethernet_t",
            "id": 2,
            "fields": [["dst_addr", 48, False], ["src_addr", 48, False], ["ether_type", 16, False]],
        },
    ],
    "headers": [
        {"name": "scalars", "id": 0, "header_type": "scalars_0", "metadata": True, "pi_omit": True},
        {"name": "standard_metadata", "id": 1, "header_type": "standard_metadata", "metadata": True, "pi_omit": True},
        {"name": "ethernet", "id": 2, "header_type": "ethernet_t", "metadata": False, "pi_omit": True},
    ],
    "header_stacks": [],
    "header_union_types": [],
    "header_unions": [],
    "header_union_stacks": [],
    "field_lists": [],
    "errors": [
        ["NoError", 0],
        ["PacketTooShort", 1],
        ["NoMatch", 2],
        ["StackOutOfBounds", 3],
        ["HeaderTooShort", 4],
        ["ParserTimeout", 5],
        ["ParserInvalidArgument", 6],
    ],
    "enums": [],
    "parsers": [
        {
            "name": "parser",
            "id": 0,
            "init_state": "start",
            "parse_states": [
                {
                    "name": "start",
                    "id": 0,
                    "parser_ops": [{"parameters": [{"type": "regular", "value": "ethernet"}], "op": "extract"}],
                    "transitions": [{"type": "default", "value": None, "mask": None, "next_state": None}],
                    "transition_key": [],
                }
            ],
        }
    ],
    "parse_vsets": [],
    "deparsers": [{"name": "deparser", "id": 0, "order": ["ethernet"], "primitives": []}],
    "meter_arrays": [],
    "counter_arrays": [{"name": "MyIngress.pkts", "id": 0, "is_direct": False, "size": 8}],
    "register_arrays": [{"name": "MyIngress.reg", "id": 0, "bitwidth": 32, "size": 4}],
    "calculations": [],
    "learn_lists": [],
    "actions": [
        {"name": "NoAction", "id": 0, "runtime_data": [], "primitives": []},
        {
            "name": "MyIngress.drop",
            "id": 1,
            "runtime_data": [],
            "primitives": [
                {"op": "mark_to_drop", "parameters": [{"type": "header", "value": "standard_metadata"}]},
            ],
        },
        {
            "name": "MyIngress.set_port",
            "id": 2,
            "runtime_data": [{"name": "port", "bitwidth": 9}],
            "primitives": [
                {
                    "op": "assign",
                    "parameters": [_field("standard_metadata", "egress_spec"), {"type": "runtime_data", "value": 0}],
                },
                {
                    "op": "count",
                    "parameters": [
                        {"type": "counter_array", "value": "MyIngress.pkts"},
                        {"type": "runtime_data", "value": 0},
                    ],
                },
            ],
        },
        {
            "name": "MyIngress.set_mcast",
            "id": 3,
            "runtime_data": [{"name": "grp", "bitwidth": 16}],
            "primitives": [
                {
                    "op": "assign",
                    "parameters": [_field("standard_metadata", "mcast_grp"), {"type": "runtime_data", "value": 0}],
                },
            ],
        },
        {
            "name": "MyIngress.set_src",
            "id": 4,
            "runtime_data": [{"name": "mac", "bitwidth": 48}],
            "primitives": [
                {"op": "assign", "parameters": [_field("ethernet", "src_addr"), {"type": "runtime_data", "value": 0}]},
            ],
        },
        {"name": "NoAction", "id": 5, "runtime_data": [], "primitives": []},
    ],
    "pipelines": [
        {
            "name": "ingress",
            "id": 0,
            "init_table": "MyIngress.fwd",
            "tables": [
                _table(
                    "MyIngress.fwd",
                    0,
                    [_key("exact", "standard_metadata", "ingress_port")],
                    [2, 3, 1],
                    ["MyIngress.set_port", "MyIngress.set_mcast", "MyIngress.drop"],
                    "MyIngress.acl",
                    (2, ["0x0001"]),
                    "exact",
                ),
                _table(
                    "MyIngress.acl",
                    1,
                    [_key("ternary", "ethernet", "ether_type"), _key("range", "ethernet", "src_addr")],
                    [1, 0],
                    ["MyIngress.drop", "NoAction"],
                    "MyIngress.dmac",
                    (0, []),
                    "range",
                ),
                _table(
                    "MyIngress.dmac",
                    2,
                    [_key("lpm", "ethernet", "dst_addr")],
                    [4, 5],
                    ["MyIngress.set_src", "NoAction"],
                    None,
                    (5, []),
                    "lpm",
                ),
            ],
            "action_profiles": [],
            "conditionals": [],
        },
        {"name": "egress", "id": 1, "init_table": None, "tables": [], "action_profiles": [], "conditionals": []},
    ],
    "checksums": [],
    "force_arith": [],
    "extern_instances": [],
    "field_aliases": [],
    "program": "tiny.p4",
    "__meta__": {"version": [2, 23], "compiler": "hand-written for p4ina's tests"},
}
TINY_JSON = json.dumps(TINY_JSON_DOC, indent=1)

# ids as p4c would number them: the top byte names the kind
FWD, ACL, DMAC = 0x02000001, 0x02000002, 0x02000003
NO_ACTION, DROP, SET_PORT, SET_MCAST, SET_SRC = 0x01000001, 0x01000002, 0x01000003, 0x01000004, 0x01000005
PKTS, REG = 0x12000001, 0x10000001

TINY_P4INFO_TXT = f"""
pkg_info {{ arch: "v1model" }}
tables {{
  preamble {{ id: {FWD} name: "MyIngress.fwd" alias: "fwd" }}
  match_fields {{ id: 1 name: "standard_metadata.ingress_port" bitwidth: 9 match_type: EXACT }}
  action_refs {{ id: {SET_PORT} }}
  action_refs {{ id: {SET_MCAST} }}
  action_refs {{ id: {DROP} }}
  size: 64
}}
tables {{
  preamble {{ id: {ACL} name: "MyIngress.acl" alias: "acl" }}
  match_fields {{ id: 1 name: "ethernet.ether_type" bitwidth: 16 match_type: TERNARY }}
  match_fields {{ id: 2 name: "ethernet.src_addr" bitwidth: 48 match_type: RANGE }}
  action_refs {{ id: {DROP} }}
  action_refs {{ id: {NO_ACTION} }}
  size: 64
}}
tables {{
  preamble {{ id: {DMAC} name: "MyIngress.dmac" alias: "dmac" }}
  match_fields {{ id: 1 name: "ethernet.dst_addr" bitwidth: 48 match_type: LPM }}
  action_refs {{ id: {SET_SRC} }}
  action_refs {{ id: {NO_ACTION} }}
  size: 64
}}
actions {{ preamble {{ id: {NO_ACTION} name: "NoAction" alias: "NoAction" }} }}
actions {{ preamble {{ id: {DROP} name: "MyIngress.drop" alias: "drop" }} }}
actions {{
  preamble {{ id: {SET_PORT} name: "MyIngress.set_port" alias: "set_port" }}
  params {{ id: 1 name: "port" bitwidth: 9 }}
}}
actions {{
  preamble {{ id: {SET_MCAST} name: "MyIngress.set_mcast" alias: "set_mcast" }}
  params {{ id: 1 name: "grp" bitwidth: 16 }}
}}
actions {{
  preamble {{ id: {SET_SRC} name: "MyIngress.set_src" alias: "set_src" }}
  params {{ id: 1 name: "mac" bitwidth: 48 }}
}}
counters {{
  preamble {{ id: {PKTS} name: "MyIngress.pkts" alias: "pkts" }}
  spec {{ unit: BOTH }}
  size: 8
}}
registers {{
  preamble {{ id: {REG} name: "MyIngress.reg" alias: "reg" }}
  type_spec {{ bitstring {{ bit {{ bitwidth: 32 }} }} }}
  size: 4
}}
"""


def tiny_p4info() -> p4info_pb2.P4Info:
    return text_format.Parse(TINY_P4INFO_TXT, p4info_pb2.P4Info())
