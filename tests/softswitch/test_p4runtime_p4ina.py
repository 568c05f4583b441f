"""The P4Runtime server with p4ina's own program (p4/build): push, write every table, read back.

Runs against the embedded switch and, when installed, BMv2 (the same assertions hold for both).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import text_format

from p4proto import code_pb2, p4info_pb2, p4runtime_pb2
from softswitch.p4runtime.p4info_index import encode_int
from tests.softswitch.test_p4runtime import Backend, Client, server, update

BUILD = Path(__file__).resolve().parents[2] / "p4" / "build"
U = p4runtime_pb2.Update
DESIGN_TABLES = [
    "P4inaIngress.aggregation.job_config",
    "P4inaIngress.aggregation.job_ports",
    "P4inaIngress.forwarding.ipv4_lpm",
    "P4inaIngress.forwarding.ecmp_members",
    "P4inaEgress.host_port",
]
DESIGN_COUNTERS = [
    "P4inaIngress.aggregation.contributions",
    "P4inaIngress.aggregation.retransmissions",
    "P4inaIngress.aggregation.completions",
    "P4inaIngress.aggregation.overflows",
    "P4inaIngress.drops",
    "P4inaEgress.results_sent",
]


@pytest.fixture(scope="module")
def p4info() -> p4info_pb2.P4Info:
    return text_format.Parse((BUILD / "p4ina.p4info.txtpb").read_text(), p4info_pb2.P4Info())


@pytest.fixture
def client(server: Backend, p4info: p4info_pb2.P4Info) -> Iterator[Client]:
    c = Client(server.port, election_id=1)
    try:
        assert c.arbitrate().status.code == code_pb2.OK
        c.set_pipeline((BUILD / "p4ina.json").read_bytes(), p4info=p4info)
        yield c
    finally:
        c.close()


def _sample_entry(table: p4info_pb2.Table, actions: dict[int, p4info_pb2.Action]) -> p4runtime_pb2.TableEntry:
    """One valid entry for any table: each field matches 1 (lpm: the top bit, /1), the first entry action."""
    e = p4runtime_pb2.TableEntry(table_id=table.preamble.id)
    needs_priority = False
    for f in table.match_fields:
        m = e.match.add(field_id=f.id)
        if f.match_type == p4info_pb2.MatchField.EXACT:
            m.exact.value = encode_int(1)
        elif f.match_type == p4info_pb2.MatchField.LPM:
            m.lpm.value, m.lpm.prefix_len = encode_int(1 << (f.bitwidth - 1)), 1
        elif f.match_type == p4info_pb2.MatchField.TERNARY:
            m.ternary.value, m.ternary.mask = encode_int(1), encode_int(1)
            needs_priority = True
        elif f.match_type == p4info_pb2.MatchField.RANGE:
            m.range.low, m.range.high = encode_int(1), encode_int(2)
            needs_priority = True
        else:
            m.optional.value = encode_int(1)
            needs_priority = True
    if needs_priority:
        e.priority = 1
    ref = next(r for r in table.action_refs if r.scope != p4info_pb2.ActionRef.DEFAULT_ONLY)
    e.action.action.action_id = ref.id
    for p in actions[ref.id].params:
        e.action.action.params.add(param_id=p.id, value=encode_int(1))
    return e


def test_the_program_has_the_design_names(p4info: p4info_pb2.P4Info) -> None:
    tables = {t.preamble.name for t in p4info.tables}
    counters = {c.preamble.name for c in p4info.counters}
    assert set(DESIGN_TABLES) <= tables
    assert set(DESIGN_COUNTERS) <= counters


def test_every_table_round_trips_an_entry(client: Client, server: Backend, p4info: p4info_pb2.P4Info) -> None:
    actions = {a.preamble.id: a for a in p4info.actions}
    written = [_sample_entry(t, actions) for t in p4info.tables if not t.is_const_table]
    client.write(*(update(U.INSERT, table_entry=e) for e in written))
    read = [e.table_entry for e in client.read(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry()))]
    assert sorted(read, key=lambda e: e.table_id) == sorted(written, key=lambda e: e.table_id)
    if server.switch is not None:
        for t in p4info.tables:
            if not t.is_const_table:
                assert len(server.switch.table_entries(t.preamble.name)) == 1
    with pytest.raises(grpc.RpcError) as info:
        client.write(*(update(U.INSERT, table_entry=e) for e in written))
    assert info.value.code() == grpc.StatusCode.UNKNOWN  # every one a duplicate, reported per update


def test_default_actions_can_be_changed_and_read(client: Client, p4info: p4info_pb2.P4Info) -> None:
    actions = {a.preamble.id: a for a in p4info.actions}
    for t in p4info.tables:
        if t.const_default_action_id:
            continue
        ref = next(
            (r for r in t.action_refs if r.scope != p4info_pb2.ActionRef.TABLE_ONLY and not actions[r.id].params), None
        )
        if ref is None:
            continue
        e = p4runtime_pb2.TableEntry(table_id=t.preamble.id, is_default_action=True)
        e.action.action.action_id = ref.id
        client.write(update(U.MODIFY, table_entry=e))
        [got] = client.read(
            p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=t.preamble.id, is_default_action=True))
        )
        assert got.table_entry.action.action.action_id == ref.id


def test_counters_multicast_and_registers(client: Client, server: Backend, p4info: p4info_pb2.P4Info) -> None:
    every = client.read(p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry()))
    assert len(every) == sum(c.size for c in p4info.counters)
    assert all(e.counter_entry.data.packet_count == 0 for e in every)

    group = p4runtime_pb2.PacketReplicationEngineEntry()
    group.multicast_group_entry.multicast_group_id = 1
    group.multicast_group_entry.replicas.add(egress_port=1, instance=0)
    group.multicast_group_entry.replicas.add(egress_port=2, instance=1)
    client.write(update(U.INSERT, packet_replication_engine_entry=group))
    [got] = client.read(
        p4runtime_pb2.Entity(
            packet_replication_engine_entry=p4runtime_pb2.PacketReplicationEngineEntry(
                multicast_group_entry=p4runtime_pb2.MulticastGroupEntry(multicast_group_id=1)
            )
        )
    )
    got.packet_replication_engine_entry.multicast_group_entry.replicas.sort(key=lambda r: r.egress_port)
    assert got.packet_replication_engine_entry == group  # (replica order on read is the server's)

    if p4info.registers and server.kind == "embedded":  # register reads are our extension
        reg = p4info.registers[0]
        q = p4runtime_pb2.RegisterEntry(register_id=reg.preamble.id)
        q.index.index = 0
        [cell] = client.read(p4runtime_pb2.Entity(register_entry=q))
        assert cell.register_entry.data.bitstring == b"\x00"
