"""Recorded BMv2 runs of the interpreter's test programs and p4ina.p4: record with BMv2, replay without it.

Each case is a program, how to configure a switch for it (table entries, multicast groups) and
seed packets; every run mutates the seeds (seeded: truncations, flipped bytes, appended junk)
into RUN_PACKETS packets, few enough that BMv2's egress queues never overflow. A recording
(tests/dataplane/recorded/NAME.json) holds, per run, the inputs, what BMv2 sent on each port and
its counters afterwards, with the BMv2 version and the program's hash; the replay test runs the
same inputs through a freshly configured embedded switch and compares.

    python -m tests.dataplane.recorded [NAME ...]   # re-record (needs simple_switch_grpc)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import struct
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from softswitch import ActionCall, Exact, Lpm, Range, SoftSwitch, TableEntry, Ternary, bmv2diff
from wireformat import AGG

LOG = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "softswitch" / "programs"
P4INA = Path(os.environ.get("P4INA_JSON", ROOT / "p4" / "build" / "p4ina.json"))
RECORDINGS = Path(__file__).parent / "recorded"
RUNS = 4
RUN_PACKETS = 50


def mutate(seeds: list[tuple[int, bytes]], n: int, seed: int) -> list[tuple[int, bytes]]:
    rng = random.Random(seed)
    out = list(seeds)[:n]
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


@dataclass(frozen=True)
class Case:
    name: str
    program: Path
    configure: Callable[[SoftSwitch], None]
    seeds: Callable[[], list[tuple[int, bytes]]]
    ports: frozenset[int] = frozenset()
    ordered: bool = True  # False: BMv2's order of replicas to one port is arbitrary

    @property
    def p4info(self) -> Path:
        return self.program.with_name(self.program.stem + ".p4info.txtpb")

    def switch(self) -> SoftSwitch:
        sw = SoftSwitch(name=self.name)
        sw.load_program(self.program.read_bytes())
        self.configure(sw)
        return sw

    def traffic(self, run: int) -> list[tuple[int, bytes]]:
        seeds = self.seeds()
        rng = random.Random(run)
        rng.shuffle(seeds)
        return mutate(seeds, RUN_PACKETS, 1000 + run)


def _nothing(sw: SoftSwitch) -> None:
    pass


def _random_bytes(seed: int, count: int, size: int, port: int, suffix: bytes = b"") -> list[tuple[int, bytes]]:
    rng = random.Random(seed)
    return [(port, bytes(rng.randrange(256) for _ in range(size)) + suffix) for _ in range(count)]


def _ipv4_udp(extra: bytes) -> bytes:
    ip = bytearray(struct.pack(">BBHHHBBH4s4s", 0x45, 0, 28 + len(extra), 1, 0, 64, 17, 0, b"\n\0\0\1", b"\n\0\0\2"))
    total = sum(struct.unpack(">10H", bytes(ip)))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    struct.pack_into(">H", ip, 10, ~total & 0xFFFF)
    return bytes(12) + b"\x08\x00" + bytes(ip) + struct.pack(">HHHH", 1, 2, 8 + len(extra), 0) + extra


def _tables(sw: SoftSwitch) -> None:
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


def _tables_seeds() -> list[tuple[int, bytes]]:
    probe = struct.Struct(">HIBHBBBBBBB")
    return [
        (1, probe.pack(k, a, t, p, 0, 0, 0, 0, 0, 0, 0))
        for k in (0x1234, 0x1235)
        for a in (0x0A010203, 0x0A010909, 0x0A090909, 0x0B000000)
        for t, p in ((0x12, 155), (0x15, 120), (0x05, 300))
    ]


def _mcast(sw: SoftSwitch) -> None:
    sw.mc_group_set(5, [(1, 10), (2, 20), (3, 99), (1, 11)])


def _mcast_seeds() -> list[tuple[int, bytes]]:
    mc = struct.Struct(">HHHIBBI")
    return [
        (4, mc.pack(5, 0, 0, 0, 0, 0, 0) + b"x"),
        (4, mc.pack(0, 7, 0, 0, 0, 0, 0)),
        (2, mc.pack(0xFFFF, 0, 0, 0, 0, 0, 0)),
    ]


def _quirks_seeds() -> list[tuple[int, bytes]]:
    probe = struct.Struct(">BIBBHBBBBB")
    return [
        (1, probe.pack(t, a, s, p, 7, 0, 0, 0, 0, 0) + b"\x11\x11\x22\x22")
        for t in (0x1F, 0x3F, 0x00, 0x12)
        for a in (0x0AFFFFFF, 0x0B000000)
        for s in (0, 1)
        for p in (0, 1)
    ]


def _lanes_seeds() -> list[tuple[int, bytes]]:
    """lanes.p4: store, add (some lanes near the int32 limits, to saturate), widen-and-add and load, on cells in
    and out of the registers' range."""
    rng = random.Random(16)
    big = (0, 1, -1, 0x7FFFFFF0, -0x7FFFFFF0, 12345)
    out = []
    for op in (1, 0, 3, 0, 2):
        for cell in (0, 3, 7, 8, 200):
            lanes = struct.pack(
                ">16i",
                *(rng.choice(big) if rng.random() < 0.4 else rng.randrange(-1 << 31, 1 << 31) for _ in range(16)),
            )
            narrow = struct.pack(">16h", *(rng.randrange(-1 << 15, 1 << 15) for _ in range(16)))
            out.append((0, bytes([op, cell, rng.randrange(2), 0]) + lanes + narrow))
    return out


def _p4ina(sw: SoftSwitch) -> None:
    c = AGG.constants()
    names = {n.rsplit(".", 1)[-1]: n for n in list(sw.actions()) + list(sw.tables())}
    job = dict(
        job_index=1,
        role=1,
        fan_in=2,
        slot_base=0,
        slot_count=16,
        mcast_grp=1,
        up_port=0,
        result_type=c["ELEM_INT32"],
        shift=0,
        token=1,
        up_type=c["ELEM_INT32"],
        up_shift=0,
        in_shift=0,
    )
    params = tuple(job[p] for p in sw.actions()[names["set_job"]].param_names)  # by name, in the program's order
    sw.table_insert(names["job_config"], TableEntry((Exact(1),), ActionCall(names["set_job"], params)))
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


def _p4ina_seeds() -> list[tuple[int, bytes]]:
    c = AGG.constants()
    seeds = []
    for slot in range(3):
        for child, port in enumerate((1, 2)):
            values = [(child + 1) * (i - 32) * 1000003 for i in range(AGG.num_lanes)]
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
                checksum=AGG.checksum(sum(values), 0, 1, 1),
            )
            lanes = AGG.lane_struct(c["ELEM_INT32"]).pack(*values)
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
    return seeds


CASES: dict[str, Case] = {
    c.name: c
    for c in (
        Case("arith", PROGRAMS / "arith.json", _nothing, lambda: _random_bytes(1, 20, 10, 1, b"pl")),
        Case(
            "parse_csum",
            PROGRAMS / "parse_csum.json",
            _nothing,
            lambda: [
                (1, _ipv4_udp(b"\x7eab")),
                (1, _ipv4_udp(b"")),
                (2, _ipv4_udp(b"\x01")),
                (1, bytes(12) + b"\x88\x01zz"),
            ],
        ),
        Case("hash", PROGRAMS / "hash.json", _nothing, lambda: _random_bytes(4, 30, 34, 0)),
        Case(
            "stack_union",
            PROGRAMS / "stack_union.json",
            _nothing,
            lambda: [
                (0, bytes([1, 10, 2, 20, 0, 30, 0xAA, 0xBB, 1])),
                (0, bytes([0, 5, 1, 2, 3, 4, 5])),
                (0, bytes([1, 1] * 4)),
            ],
        ),
        Case("tables", PROGRAMS / "tables.json", _tables, _tables_seeds),
        Case("mcast", PROGRAMS / "mcast.json", _mcast, _mcast_seeds, frozenset({1, 2, 3, 7}), ordered=False),
        Case("quirks", PROGRAMS / "quirks.json", _nothing, _quirks_seeds),
        Case(
            "csum_invalid",
            PROGRAMS / "csum_invalid.json",
            _nothing,
            lambda: [
                (0, bytes([0, 1, 2, 3])),
                (0, bytes([0xFF, 1, 0xFE, 0xFD])),
                (0, bytes([0xFF, 1, 0xFE, 0xFE])),
                (0, bytes([0xFF])),
            ],
        ),
        Case(
            "stack_ops",
            PROGRAMS / "stack_ops.json",
            _nothing,
            lambda: (
                [(0, bytes([op, n, 0x11, 0x22]) + b"tail") for op in (0, 1, 2, 3) for n in (1, 2)]
                + [(0, bytes([1, 1, 5]))]
            ),
        ),
        Case("lanes", PROGRAMS / "lanes.json", _nothing, _lanes_seeds, frozenset({1})),
        Case("p4ina", P4INA, _p4ina, _p4ina_seeds, frozenset({1, 2})),
    )
}


def program_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def record(case: Case) -> dict:
    """Run the case on BMv2: inputs, outputs per port and counters per run.

    The runs are separate BMv2 processes and mostly wait (for their --use-files start), so they run side
    by side: all at once for a small program, two at a time for p4ina (parsing its JSON is CPU work).
    """
    jobs = []
    for run in range(RUNS):
        traffic = case.traffic(run)
        ref = case.switch()
        ours = [o for p, d in traffic for o in ref.process_packet(p, d)]
        # every port either switch might send on gets a pcap file (a port without one loses its packets)
        ports = set(case.ports) | {p for p, _ in traffic} | {p for p, _ in ours}
        jobs.append((traffic, case.switch(), ports, len(ours)))  # fresh state for the configuration copied to BMv2

    def one(job: tuple) -> dict:
        traffic, ref, ports, expect = job
        res = bmv2diff.run(
            case.program,
            case.p4info,
            traffic,
            configure=lambda client: client.copy_from(ref),
            ports=ports,
            expect=expect,
            quiet_for=4.0,
        )  # a loaded machine slows BMv2 down
        return {
            "inputs": [[p, d.hex()] for p, d in traffic],
            "outputs": {str(p): [x.hex() for x in v] for p, v in sorted(res.outputs.items()) if v},
            "counters": {k: [list(x) for x in v] for k, v in sorted((res.counters or {}).items())},
        }

    side_by_side = RUNS if case.program.stat().st_size < 1_000_000 else 2
    with ThreadPoolExecutor(max_workers=side_by_side) as pool:
        runs = list(pool.map(one, jobs))
    return {
        "program": str(case.program.relative_to(ROOT)),
        "program_sha256": program_hash(case.program),
        "bmv2_version": bmv2diff.version(),
        "ordered": case.ordered,
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tests.dataplane.recorded",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("names", nargs="*", help=f"cases (default all: {', '.join(CASES)})")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    RECORDINGS.mkdir(exist_ok=True)
    for name in args.names or list(CASES):
        data = record(CASES[name])
        (RECORDINGS / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")
        LOG.info(
            "recorded %s: %d runs, %d outputs",
            name,
            len(data["runs"]),
            sum(len(v) for r in data["runs"] for v in r["outputs"].values()),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
