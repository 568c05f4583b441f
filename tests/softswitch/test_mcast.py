"""Packet replication engine of the embedded switch (simple_switch multicast semantics).

Program: tests/softswitch/programs/mcast.p4.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from softswitch import EntryNotFoundError, InvalidEntryError, SoftSwitch

PROGRAMS = Path(__file__).parent / "programs"
MC = struct.Struct(">HHHIBBI")
INSTANCE_NORMAL = 0
INSTANCE_REPLICATION = 5


def load(name: str) -> SoftSwitch:
    sw = SoftSwitch(name=name)
    sw.load_program((PROGRAMS / f"{name}.json").read_bytes())
    return sw


def send(sw: SoftSwitch, group: int, port: int = 0, ingress: int = 4) -> list[tuple[int, dict[str, int]]]:
    pkt = MC.pack(group, port, 0, 0, 0, 0, 0) + b"xyz"
    out = []
    for eport, data in sw.process_packet(ingress, pkt):
        assert data.endswith(b"xyz")
        names = "group port rid itype tag ingress_port length".split()
        out.append((eport, dict(zip(names, MC.unpack_from(data)))))
    return out


@pytest.fixture
def sw() -> SoftSwitch:
    return load("mcast")


def test_replicas_get_port_rid_instance_type_and_metadata(sw: SoftSwitch) -> None:
    sw.mc_group_set(5, [(1, 10), (2, 20), (3, 99), (1, 11)])
    out = send(sw, 5)
    assert [p for p, _ in out] == [1, 2, 1]  # group order; the rid-99 replica is dropped in egress
    for (port, f), rid in zip(out, (10, 20, 11)):
        assert f["port"] == port
        assert f["rid"] == rid
        assert f["itype"] == INSTANCE_REPLICATION
        assert f["tag"] == 0xAB  # user metadata set in ingress reaches every replica
        assert f["ingress_port"] == 4
        assert f["length"] == MC.size + 3
    assert sw.stats == {"rx": 1, "tx": 3, "dropped": 1, "errors": 0, "assertions": 0, "packet_in": 0, "packet_out": 0}


def test_unicast_unknown_group_and_drop(sw: SoftSwitch) -> None:
    out = send(sw, 0, port=7)
    assert [(p, f["itype"], f["rid"]) for p, f in out] == [(7, INSTANCE_NORMAL, 0)]
    assert send(sw, 6) == []  # no such group: no replicas
    assert send(sw, 0xFFFF) == []  # mark_to_drop also clears mcast_grp
    assert send(sw, 0, port=511) == []  # egress_spec 511 is the drop port
    assert sw.stats["dropped"] == 3 and sw.stats["errors"] == 0


def test_group_management(sw: SoftSwitch) -> None:
    sw.mc_group_set(1, [(1, 1)])
    sw.mc_group_set(1, [(2, 2), (3, 3)])  # replaces
    assert sw.mc_groups() == {1: [(2, 2), (3, 3)]}
    assert [p for p, _ in send(sw, 1)] == [2, 3]
    sw.mc_group_delete(1)
    assert sw.mc_groups() == {}
    with pytest.raises(EntryNotFoundError):
        sw.mc_group_delete(1)
    for bad in ((0, [(1, 1)]), (1, [(512, 1)]), (1, [(1, 1 << 16)]), (1, [(1,)])):
        with pytest.raises(InvalidEntryError):
            sw.mc_group_set(*bad)  # type: ignore[arg-type]
