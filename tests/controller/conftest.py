"""Fixtures of the controller tests: a P4Info with the names and widths of docs/DESIGN.md."""

from __future__ import annotations

import pytest

from controller import names as N
from controller.p4info import P4Schema
from p4proto import p4info_pb2

# (table, [(key, bits, match)], [actions]); action -> [(param, bits)]
TABLES = [
    (
        N.T_JOB_CONFIG,
        [("job_id", 16, "exact")],
        ["P4inaIngress.aggregation.set_job", "P4inaIngress.aggregation.unknown_job"],
    ),
    (
        N.T_JOB_PORTS,
        [("job_id", 16, "exact"), ("ingress_port", 9, "exact")],
        [
            "P4inaIngress.aggregation.from_child",
            "P4inaIngress.aggregation.from_parent",
            "P4inaIngress.aggregation.bad_port",
        ],
    ),
    (
        N.T_IPV4_LPM,
        [("dst_addr", 32, "lpm")],
        ["P4inaIngress.forwarding.forward", "P4inaIngress.forwarding.ecmp", "P4inaIngress.forwarding.no_route"],
    ),
    (
        N.T_ECMP_MEMBERS,
        [("group", 16, "exact"), ("index", 16, "exact")],
        ["P4inaIngress.forwarding.forward", "P4inaIngress.forwarding.no_route"],
    ),
    (N.T_HOST_PORT, [("egress_port", 9, "exact")], ["P4inaEgress.set_host", "NoAction"]),
]
ACTIONS = {
    "P4inaIngress.aggregation.set_job": [
        ("job_index", 8),
        ("role", 8),
        ("fan_in", 8),
        ("slot_base", 16),
        ("slot_count", 16),
        ("mcast_grp", 16),
        ("up_port", 9),
        ("result_type", 8),
        ("shift", 8),
        ("token", 8),
        ("up_type", 8),
        ("up_shift", 8),
        ("in_shift", 8),
    ],
    "P4inaIngress.aggregation.unknown_job": [],
    "P4inaIngress.aggregation.from_child": [("child_index", 8)],
    "P4inaIngress.aggregation.from_parent": [],
    "P4inaIngress.aggregation.bad_port": [],
    "P4inaIngress.forwarding.forward": [("port", 9)],
    "P4inaIngress.forwarding.ecmp": [("group", 16), ("size", 16)],
    "P4inaIngress.forwarding.no_route": [],
    "P4inaEgress.set_host": [("mac", 48), ("ip", 32)],
    "NoAction": [],
}
COUNTERS = {
    N.C_CONTRIBUTIONS: N.MAX_JOBS,
    N.C_RETRANSMISSIONS: N.MAX_JOBS,
    N.C_COMPLETIONS: N.MAX_JOBS,
    N.C_OVERFLOWS: N.MAX_JOBS,
    N.C_CORRUPT: N.MAX_JOBS,
    N.C_DROPS: N.MAX_JOBS * N.NUM_DROP_REASONS,
    N.C_RESULTS_SENT: N.MAX_JOBS,
}
MATCH = {"exact": p4info_pb2.MatchField.EXACT, "lpm": p4info_pb2.MatchField.LPM}


def tiny_p4info() -> p4info_pb2.P4Info:
    info = p4info_pb2.P4Info()
    action_ids = {}
    for i, (name, params) in enumerate(ACTIONS.items()):
        a = info.actions.add()
        a.preamble.id = 0x01000001 + i
        a.preamble.name = name
        a.preamble.alias = name.rsplit(".", 1)[-1]
        for j, (pname, bits) in enumerate(params):
            a.params.add(id=j + 1, name=pname, bitwidth=bits)
        action_ids[name] = a.preamble.id
    for i, (name, keys, actions) in enumerate(TABLES):
        t = info.tables.add()
        t.preamble.id = 0x02000001 + i
        t.preamble.name = name
        t.size = 1024
        for j, (kname, bits, match) in enumerate(keys):
            t.match_fields.add(id=j + 1, name=kname, bitwidth=bits, match_type=MATCH[match])
        for a in actions:
            t.action_refs.add(id=action_ids[a])
    for i, (name, size) in enumerate(COUNTERS.items()):
        c = info.counters.add()
        c.preamble.id = 0x12000001 + i
        c.preamble.name = name
        c.size = size
        c.spec.unit = p4info_pb2.CounterSpec.BOTH
    return info


@pytest.fixture
def tiny_schema() -> P4Schema:
    return P4Schema(tiny_p4info())
