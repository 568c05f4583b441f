"""Entry encoding against a P4Info: ids, canonical bytes, round trips, errors that name the entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller import names as N
from controller.addressing import ip_to_int, mac_to_int
from controller.entities import Lpm, MulticastGroup, TableEntry, decode_entity
from controller.fattree import fat_tree
from controller.jobentries import job_entries
from controller.p4info import P4InfoError, P4Schema, decode_int, encode_int
from controller.planner import JobSpec, plan_job
from controller.routing import all_route_entries
from p4proto import p4runtime_pb2


def test_canonical_bytes() -> None:
    assert encode_int(0, 9) == b"\x00"
    assert encode_int(1, 9) == b"\x01"
    assert encode_int(256, 9) == b"\x01\x00"
    assert encode_int(0x0A000002, 32) == b"\x0a\x00\x00\x02"
    assert encode_int(0x0200_0A01_0003, 48) == bytes.fromhex("02000a010003")
    assert decode_int(b"\x00\x01\x00") == 256
    with pytest.raises(P4InfoError, match="does not fit in 9 bits"):
        encode_int(512, 9)
    with pytest.raises(P4InfoError):
        encode_int(-1, 8)


def test_golden_set_job(tiny_schema: P4Schema) -> None:
    e = TableEntry.make(
        N.T_JOB_CONFIG,
        {"job_id": 7},
        "set_job",
        dict(
            job_index=1,
            role=1,
            fan_in=4,
            slot_base=0,
            slot_count=128,
            mcast_grp=1,
            up_port=0,
            result_type=0,
            shift=0,
            token=3,
            up_type=0,
            up_shift=0,
            in_shift=0,
        ),
    )
    msg = e.encode(tiny_schema).table_entry
    table = tiny_schema.table(N.T_JOB_CONFIG)
    assert msg.table_id == table.id
    assert [(m.field_id, m.exact.value) for m in msg.match] == [(1, b"\x07")]
    assert msg.action.action.action_id == tiny_schema.action(table, "set_job").id
    got = {p.param_id: p.value for p in msg.action.action.params}
    assert got == {
        1: b"\x01",
        2: b"\x01",
        3: b"\x04",
        4: b"\x00",
        5: b"\x80",
        6: b"\x01",
        7: b"\x00",
        8: b"\x00",
        9: b"\x00",
        10: b"\x03",
        11: b"\x00",
        12: b"\x00",
        13: b"\x00",
    }


def test_lpm_masks_host_bits(tiny_schema: P4Schema) -> None:
    e = TableEntry.make(N.T_IPV4_LPM, {"dst_addr": Lpm(ip_to_int("10.1.2.3"), 16)}, "forward", {"port": 3})
    fm = e.encode(tiny_schema).table_entry.match[0]
    assert (fm.lpm.value, fm.lpm.prefix_len) == (b"\x0a\x01\x00\x00", 16)


def test_round_trip_all_entries(tiny_schema: P4Schema) -> None:
    t = fat_tree(4)
    plan = plan_job(t, JobSpec.make(300, [h.name for h in t.hosts], "int16"))
    everything = [e for ents in all_route_entries(t).values() for e in ents]
    everything += [e for ents in job_entries(plan).values() for e in ents]
    assert {type(e) for e in everything} == {TableEntry, MulticastGroup}
    for e in everything:
        msg = e.encode(tiny_schema)
        wire = p4runtime_pb2.Entity.FromString(msg.SerializeToString())
        assert decode_entity(wire, tiny_schema) == e


def test_host_port_entry(tiny_schema: P4Schema) -> None:
    t = fat_tree(4)
    hp = [e for e in all_route_entries(t)["e3"] if e.table == N.T_HOST_PORT]
    assert [dict(e.match)["egress_port"] for e in hp] == [1, 2]
    assert dict(hp[1].params) == {"mac": mac_to_int("02:00:0a:01:00:03"), "ip": ip_to_int("10.1.0.3")}
    assert not [e for e in all_route_entries(t)["a1"] if e.table == N.T_HOST_PORT]


def test_errors_name_the_entry(tiny_schema: P4Schema) -> None:
    with pytest.raises(P4InfoError, match=r"job_ports\[ingress_port=600, job_id=1\].*does not fit in 9 bits"):
        TableEntry.make(N.T_JOB_PORTS, {"job_id": 1, "ingress_port": 600}, "from_parent").encode(tiny_schema)
    with pytest.raises(P4InfoError, match="has no action 'set_host'"):
        TableEntry.make(N.T_JOB_PORTS, {"job_id": 1, "ingress_port": 1}, "set_host").encode(tiny_schema)
    with pytest.raises(P4InfoError, match=r"missing parameter\(s\) \['child_index'\]"):
        TableEntry.make(N.T_JOB_PORTS, {"job_id": 1, "ingress_port": 1}, "from_child").encode(tiny_schema)
    with pytest.raises(P4InfoError, match=r"missing match field\(s\) \['ingress_port'\]"):
        TableEntry.make(N.T_JOB_PORTS, {"job_id": 1}, "from_parent").encode(tiny_schema)
    with pytest.raises(P4InfoError, match="has no table"):
        TableEntry.make("Nope.table", {"x": 1}, "a").encode(tiny_schema)
    with pytest.raises(P4InfoError, match="group id must be"):
        MulticastGroup.make(0, [(1, 0)]).encode()


def test_multicast_encoding() -> None:
    g = MulticastGroup.make(3, [(4, 1), (2, 0)])
    mg = g.encode().packet_replication_engine_entry.multicast_group_entry
    assert mg.multicast_group_id == 3
    assert [(r.egress_port, r.instance) for r in mg.replicas] == [(2, 0), (4, 1)]
    # a target that answers with the bytes form of the port (P4Runtime 1.4 `port`) decodes the same
    alt = p4runtime_pb2.MulticastGroupEntry(multicast_group_id=3)
    alt.replicas.add(port=b"\x02", instance=0)
    alt.replicas.add(port=b"\x04", instance=1)
    assert MulticastGroup.decode(alt) == g


def test_action_names_resolve_within_their_table(tiny_schema: P4Schema) -> None:
    lpm = tiny_schema.table(N.T_IPV4_LPM)
    members = tiny_schema.table(N.T_ECMP_MEMBERS)
    assert tiny_schema.action(lpm, "forward").id == tiny_schema.action(members, "forward").id
    assert tiny_schema.action(lpm, "P4inaIngress.forwarding.ecmp").name == "P4inaIngress.forwarding.ecmp"


# -- against the committed P4Info (p4/build, compiled from p4/p4ina.p4) -------------------------
COMMITTED = Path(__file__).resolve().parents[2] / "p4" / "build" / "p4ina.p4info.txtpb"


@pytest.fixture(scope="module")
def real_schema() -> P4Schema:
    return P4Schema.load(COMMITTED)


def test_committed_p4info_has_what_the_controller_uses(real_schema: P4Schema, tiny_schema: P4Schema) -> None:
    """The test P4Info above mirrors the real one: same tables, keys, actions, params and widths."""
    for name in N.JOB_TABLES + N.ROUTE_TABLES:
        real, tiny = real_schema.table(name), tiny_schema.table(name)
        assert [(f.name, f.bitwidth, f.match_type) for f in real.match_fields] == [
            (f.name, f.bitwidth, f.match_type) for f in tiny.match_fields
        ], name
        for aid in tiny.action_ids:
            short = tiny_schema.action_by_id(aid).name.rsplit(".", 1)[-1]
            if short in ("unknown_job", "bad_port", "no_route", "NoAction"):
                continue  # default-only actions the controller never writes
            ra, ta = real_schema.action(real, short), tiny_schema.action(tiny, short)
            assert [(p.name, p.bitwidth) for p in ra.params] == [(p.name, p.bitwidth) for p in ta.params], short
    for name in (*N.JOB_COUNTERS.values(), N.C_DROPS):
        assert real_schema.counter(name).size == tiny_schema.counter(name).size, name


def test_every_entry_encodes_against_the_committed_p4info(real_schema: P4Schema) -> None:
    t = fat_tree(4)
    plans = []
    for j, (hosts, q) in enumerate(
        [(["h1", "h2"], "int32"), (["h1", "h3", "h9"], "int8"), ([h.name for h in t.hosts], "int16")], start=1
    ):
        plans.append(plan_job(t, JobSpec.make(j, hosts, q), plans))
    entries = [e for ents in all_route_entries(t).values() for e in ents]
    entries += [e for p in plans for ents in job_entries(p).values() for e in ents]
    for e in entries:
        msg = e.encode(real_schema)
        assert decode_entity(p4runtime_pb2.Entity.FromString(msg.SerializeToString()), real_schema) == e
    table = real_schema.table(N.T_JOB_CONFIG)
    assert table.size >= N.MAX_JOBS - 1
