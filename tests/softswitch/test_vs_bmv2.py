"""Differential check: the embedded switch and BMv2's simple_switch_grpc send byte-identical packets.

Each program gets the same configuration on both (table entries and multicast groups over
P4Runtime for BMv2) and the same traffic: well-formed packets plus seeded random mutations
(truncations, flipped bytes, appended junk). Fewer than 64 packets per run, so BMv2's
egress queues never overflow.
"""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from softswitch import ActionCall, Exact, Lpm, Range, SoftSwitch, TableEntry, Ternary, bmv2diff
from wireformat import AGG

pytestmark = pytest.mark.bmv2

PROGRAMS = Path(__file__).parent / "programs"
ROOT = Path(__file__).resolve().parents[2]
P4INA = Path(os.environ.get("P4INA_JSON", ROOT / "p4" / "build" / "p4ina.json"))


def mutate(seeds: list[tuple[int, bytes]], n: int, seed: int) -> list[tuple[int, bytes]]:
    rng = random.Random(seed)
    out = list(seeds)
    while len(out) < n:
        port, pkt = rng.choice(seeds)
        data = bytearray(pkt)
        for _ in range(rng.randint(1, 3)):
            kind = rng.randrange(3)
            if kind == 0 and data:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif kind == 1:
                data = data[: rng.randint(0, len(data))]
            else:
                data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        out.append((port, bytes(data)))
    return out


def compare(
    program: Path, p4info: Path, sw: SoftSwitch, traffic: list[tuple[int, bytes]], ports: set[int], ordered: bool = True
) -> None:
    """Same packets out of the same ports; `ordered=False` when BMv2's replica order is arbitrary.

    (simple_switch_grpc replicates a group's replicas in the iteration order of PI's
    unordered_map of replication ids, so several replicas to one port may come out in any order.)
    """
    mine: dict[int, list[bytes]] = {}
    for port, pkt in traffic:
        for eport, data in sw.process_packet(port, pkt):
            mine.setdefault(eport, []).append(data)
    assert sw.stats["errors"] == 0
    expect = sum(len(v) for v in mine.values())
    has_config = any(sw.table_entries(n) for n in sw.tables() if not sw.runtime().tables[n].immutable) or sw.mc_groups()
    res = bmv2diff.run(
        program,
        p4info,
        traffic,
        configure=(lambda client: client.copy_from(sw)) if has_config else None,
        ports=ports | set(mine),
        expect=expect,
    )
    theirs = {p: v for p, v in res.outputs.items() if v}
    for port in sorted(set(mine) | set(theirs)):
        a, b = mine.get(port, []), theirs.get(port, [])
        if not ordered:
            a, b = sorted(a), sorted(b)
        for i, (x, y) in enumerate(zip(a, b)):
            assert x == y, f"port {port}, packet {i}: embedded {x.hex()} != BMv2 {y.hex()}"
        assert len(a) == len(b), f"port {port}: embedded sent {len(a)}, BMv2 {len(b)}"


def load(path: Path) -> SoftSwitch:
    sw = SoftSwitch(name=path.stem)
    sw.load_program(path.read_bytes())
    return sw


def _ipv4_udp(extra: bytes) -> bytes:
    ip = bytearray(struct.pack(">BBHHHBBH4s4s", 0x45, 0, 28 + len(extra), 1, 0, 64, 17, 0, b"\n\0\0\1", b"\n\0\0\2"))
    total = sum(struct.unpack(">10H", bytes(ip)))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    struct.pack_into(">H", ip, 10, ~total & 0xFFFF)
    return bytes(12) + b"\x08\x00" + bytes(ip) + struct.pack(">HHHH", 1, 2, 8 + len(extra), 0) + extra


def test_arith_matches_bmv2() -> None:
    rng = random.Random(1)
    seeds = [(1, bytes(rng.randrange(256) for _ in range(10)) + b"pl") for _ in range(20)]
    compare(
        PROGRAMS / "arith.json",
        PROGRAMS / "arith.p4info.txtpb",
        load(PROGRAMS / "arith.json"),
        mutate(seeds, 50, 2),
        set(),
    )


def test_parser_and_checksums_match_bmv2() -> None:
    seeds = [(1, _ipv4_udp(b"\x7eab")), (1, _ipv4_udp(b"")), (2, _ipv4_udp(b"\x01")), (1, bytes(12) + b"\x88\x01zz")]
    compare(
        PROGRAMS / "parse_csum.json",
        PROGRAMS / "parse_csum.p4info.txtpb",
        load(PROGRAMS / "parse_csum.json"),
        mutate(seeds, 50, 3),
        set(),
    )


def test_hash_matches_bmv2() -> None:
    rng = random.Random(4)
    seeds = [(0, bytes(rng.randrange(256) for _ in range(34))) for _ in range(30)]
    compare(PROGRAMS / "hash.json", PROGRAMS / "hash.p4info.txtpb", load(PROGRAMS / "hash.json"), seeds, set())


def test_stack_union_matches_bmv2() -> None:
    seeds = [
        (0, bytes([1, 10, 2, 20, 0, 30, 0xAA, 0xBB, 1])),
        (0, bytes([0, 5, 1, 2, 3, 4, 5])),
        (0, bytes([1, 1] * 4)),
    ]
    compare(
        PROGRAMS / "stack_union.json",
        PROGRAMS / "stack_union.p4info.txtpb",
        load(PROGRAMS / "stack_union.json"),
        mutate(seeds, 50, 5),
        set(),
    )


def test_tables_match_bmv2() -> None:
    sw = load(PROGRAMS / "tables.json")
    sw.table_insert(
        "TIngress.t_exact", TableEntry((Exact(0x1234), Exact(0x12)), ActionCall("TIngress.set_exact", (7,)))
    )
    for prefix, plen, v in ((0x0A000000, 8, 1), (0x0A010000, 16, 2), (0x0A010200, 24, 3)):
        sw.table_insert("TIngress.t_lpm", TableEntry((Lpm(prefix, plen),), ActionCall("TIngress.set_lpm", (v,))))
    sw.table_insert(
        "TIngress.t_tern", TableEntry((Ternary(0x10, 0xF0), Exact(0x1234)), ActionCall("TIngress.set_tern", (1,)), 10)
    )
    sw.table_insert(
        "TIngress.t_tern", TableEntry((Ternary(0x12, 0xFF), Exact(0x1234)), ActionCall("TIngress.set_tern", (2,)), 20)
    )
    sw.table_insert("TIngress.t_range", TableEntry((Range(100, 200),), ActionCall("TIngress.set_range", (1,)), 1))
    sw.table_insert("TIngress.t_range", TableEntry((Range(150, 160),), ActionCall("TIngress.set_range", (2,)), 5))
    sw.table_insert("TIngress.t_switch", TableEntry((Exact(0x1234),), ActionCall("TIngress.path_a")))
    probe = struct.Struct(">HIBHBBBBBBB")
    seeds = []
    for key16 in (0x1234, 0x1235):
        for addr in (0x0A010203, 0x0A010909, 0x0A090909, 0x0B000000):
            for tern, port in ((0x12, 155), (0x15, 120), (0x05, 300)):
                seeds.append((1, probe.pack(key16, addr, tern, port, 0, 0, 0, 0, 0, 0, 0)))
    compare(PROGRAMS / "tables.json", PROGRAMS / "tables.p4info.txtpb", sw, mutate(seeds, 60, 6)[:60], set())


def test_multicast_matches_bmv2() -> None:
    sw = load(PROGRAMS / "mcast.json")
    sw.mc_group_set(5, [(1, 10), (2, 20), (3, 99), (1, 11)])
    mc = struct.Struct(">HHHIBBI")
    seeds = [
        (4, mc.pack(5, 0, 0, 0, 0, 0, 0) + b"x"),
        (4, mc.pack(0, 7, 0, 0, 0, 0, 0)),
        (2, mc.pack(0xFFFF, 0, 0, 0, 0, 0, 0)),
    ]
    compare(
        PROGRAMS / "mcast.json", PROGRAMS / "mcast.p4info.txtpb", sw, mutate(seeds, 20, 7), {1, 2, 3, 7}, ordered=False
    )


def test_p4ina_matches_bmv2() -> None:
    sw = load(P4INA)
    c = AGG.constants()
    names = {n.rsplit(".", 1)[-1]: n for n in list(sw.actions()) + list(sw.tables())}
    sw.table_insert(
        names["job_config"],
        TableEntry(
            (Exact(1),),
            ActionCall(names["set_job"], (1, 1, 2, 0, 16, 1, 0, c["ELEM_INT32"], 0, 1, c["ELEM_INT32"], 0, 0)),
        ),
    )
    for child, port in enumerate((1, 2)):
        sw.table_insert(
            names["job_ports"], TableEntry((Exact(1), Exact(port)), ActionCall(names["from_child"], (child,)))
        )
        sw.table_insert(
            names["ipv4_lpm"], TableEntry((Lpm(0x0A000001 + child, 32),), ActionCall(names["forward"], (port,)))
        )
        sw.table_insert(
            names["host_port"],
            TableEntry((Exact(port),), ActionCall(names["set_host"], (0x020000000001 + child, 0x0A000001 + child))),
        )
    sw.mc_group_set(1, [(1, 0), (2, 1)])
    seeds = []
    for slot in range(4):
        for child, port in enumerate((1, 2)):
            agg = AGG.pack_header(
                version=c["AGG_VERSION"],
                op=c["OP_CONTRIB"],
                flags=0,
                elem_type=c["ELEM_INT32"],
                shift=0,
                job_id=1,
                shadow=0,
                slot=slot,
                contributor=child,
                exponent=0,
                epoch=1,
                offset=0,
                checksum=AGG.checksum(sum((child + 1) * (i - 32) * 1000003 for i in range(AGG.num_lanes)), 0, 1, 1),
            )
            lanes = AGG.lane_struct(c["ELEM_INT32"]).pack(
                *[(child + 1) * (i - 32) * 1000003 for i in range(AGG.num_lanes)]
            )
            udp = struct.pack(">HHHH", c["UDP_PORT_AGG"], c["UDP_PORT_AGG"], 8 + len(agg) + len(lanes), 0)
            ip = bytearray(
                struct.pack(
                    ">BBHHHBBHII", 0x45, 0, 28 + len(agg) + len(lanes), 0, 0, 64, 17, 0, 0x0A000001 + child, 0x0AFFFFFE
                )
            )
            total = sum(struct.unpack(">10H", bytes(ip)))
            while total >> 16:
                total = (total & 0xFFFF) + (total >> 16)
            struct.pack_into(">H", ip, 10, ~total & 0xFFFF)
            seeds.append(
                (
                    port,
                    bytes.fromhex("027034696e61")
                    + bytes(5)
                    + bytes([child + 1])
                    + b"\x08\x00"
                    + bytes(ip)
                    + udp
                    + agg
                    + lanes,
                )
            )
    seeds.append((1, _ipv4_udp(b"hello")))
    traffic = seeds + [(1, seeds[0][1])] + mutate(seeds, 50, 8)[len(seeds) :]
    compare(P4INA, P4INA.with_name("p4ina.p4info.txtpb"), sw, traffic, {1, 2})
