"""Differential fuzz: tens of thousands of generated packets through both engines, and BMv2 where installed.

p4ina.p4 (two configurations: a root job with int32 results and, on the same switch, a root with
int8 results behind a rounding shift plus an inner node sending int16 partial sums up, with routes
and ECMP) gets 20,000 packets: contributions with random lanes, retransmissions, stale epochs,
results from the parent, exponent rounds, routed UDP and corrupted or truncated frames. Every test
program of the interpreter (tests/softswitch/programs) gets 2,500 packets mutated from its seeds
(tests/dataplane/recorded.py). Each packet goes through a C-engine and a Python-engine switch in
this process (no sockets, so the run takes seconds): identical outputs packet by packet, and at
the end identical counters, registers and statistics. Where simple_switch_grpc is installed, one
fresh run per program also goes through BMv2 (few enough packets for its queues).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from native import cbuild
from softswitch import ActionCall, Exact, Lpm, SoftSwitch, TableEntry, bmv2diff
from tests.dataplane.frames import (
    INT8,
    INT16,
    INT32,
    NONE,
    RESULT,
    RETRANSMIT,
    contribution,
    host_ip,
    host_mac,
    udp_frame,
)
from tests.dataplane.recorded import CASES, P4INA, Case, mutate
from wireformat import AGG

pytestmark = pytest.mark.skipif(cbuild.toolchain() is None, reason="[cc] no C compiler (cc) on PATH")

P4INA_PACKETS = 20_000
PROGRAM_PACKETS = 2_500
BMV2_PACKETS = 50
PORTS = (1, 2, 3, 4, 5)


def _names(sw: SoftSwitch) -> dict[str, str]:
    return {n.rsplit(".", 1)[-1]: n for n in list(sw.actions()) + list(sw.tables())}


def configure_p4ina(sw: SoftSwitch) -> None:
    """Job 1: root of ports 1, 2 (int32). Job 7: root of 1, 2, 3 with int8 results (shift 6). Job 9: inner
    node of 4, 5 under port 1, int16 both ways (shift 2). Routes: 10.0.0.0/8 by ECMP over 2..4, hosts /32."""
    n = _names(sw)
    param_names = sw.actions()[n["set_job"]].param_names
    jobs = (
        (1, 1, (1, 2), 1, 0, 0, INT32, 0, INT32, 0, 0, 1),
        (7, 2, (1, 2, 3), 1, 0, 16, INT8, 6, INT8, 0, 0, 2),
        (9, 3, (4, 5), 2, 1, 24, INT16, 2, INT16, 2, 0, 3),
    )
    for job_id, index, children, role, up, base, rtype, shift, utype, ushift, ishift, grp in jobs:
        job = dict(
            job_index=index,
            role=role,
            fan_in=len(children),
            slot_base=base,
            slot_count=8,
            mcast_grp=grp,
            up_port=up,
            result_type=rtype,
            shift=shift,
            token=1 + index,
            up_type=utype,
            up_shift=ushift,
            in_shift=ishift,
        )
        sw.table_insert(
            n["job_config"], TableEntry((Exact(job_id),), ActionCall(n["set_job"], tuple(job[p] for p in param_names)))
        )
        for i, p in enumerate(children):
            sw.table_insert(n["job_ports"], TableEntry((Exact(job_id), Exact(p)), ActionCall(n["from_child"], (i,))))
        if up:
            sw.table_insert(n["job_ports"], TableEntry((Exact(job_id), Exact(up)), ActionCall(n["from_parent"])))
        sw.mc_group_set(grp, [(p, i) for i, p in enumerate(children)])
    for p in PORTS:
        sw.table_insert(
            n["host_port"],
            TableEntry(
                (Exact(p),),
                ActionCall(n["set_host"], (int.from_bytes(host_mac(p), "big"), int.from_bytes(host_ip(p), "big"))),
            ),
        )
        sw.table_insert(
            n["ipv4_lpm"], TableEntry((Lpm(int.from_bytes(host_ip(p), "big"), 32),), ActionCall(n["forward"], (p,)))
        )
    sw.table_insert(n["ipv4_lpm"], TableEntry((Lpm(0x0A000000, 8),), ActionCall(n["ecmp"], (1, 3))))
    for i, p in enumerate((2, 3, 4)):
        sw.table_insert(n["ecmp_members"], TableEntry((Exact(1), Exact(i)), ActionCall(n["forward"], (p,))))


JOBS = {1: ((1, 2), 8, INT32), 7: ((1, 2, 3), 8, INT32), 9: ((4, 5), 8, INT16)}


def p4ina_traffic(seed: int, count: int) -> list[tuple[int, bytes]]:
    rng = random.Random(seed)
    out: list[tuple[int, bytes]] = []
    epochs = {j: 1 for j in JOBS}
    for _ in range(count):
        kind = rng.random()
        job = rng.choice(list(JOBS))
        children, slots, elem0 = JOBS[job]
        if rng.random() < 0.01:
            epochs[job] = (epochs[job] + rng.choice([1, 1, 2, 200])) % 256
        epoch = epochs[job] if rng.random() < 0.95 else (epochs[job] - 1) % 256
        if kind < 0.55:
            port = rng.choice(children) if rng.random() < 0.95 else rng.choice(PORTS)
            elem = elem0 if rng.random() < 0.85 else rng.choice([INT32, INT16, INT8, NONE, 7])
            big = {INT32: rng.choice([100, 1 << 20, 1 << 31]), INT16: 1 << 15, INT8: 1 << 7}.get(elem, 1)
            lanes = [rng.randrange(-big, big) for _ in range(AGG.num_lanes)]
            out.append(
                (
                    port,
                    contribution(
                        port,
                        lanes,
                        job=job,
                        slot=rng.randrange(slots + 1),
                        shadow=rng.randrange(2),
                        epoch=epoch,
                        elem_type=elem,
                        exponent=rng.choice([0, 0, 0, 3, -2]),
                        next_exponent=rng.choice([0, 1, 5, -3]),
                        flags=RETRANSMIT if rng.random() < 0.2 else 0,
                        shift=2 if job == 9 else 0,
                    ),
                )
            )
        elif kind < 0.65:
            lanes = [rng.randrange(-30000, 30000) for _ in range(AGG.num_lanes)]
            out.append(
                (
                    1,
                    contribution(
                        1,
                        lanes,
                        job=9,
                        slot=rng.randrange(8),
                        shadow=rng.randrange(2),
                        epoch=epochs[9],
                        op=RESULT,
                        elem_type=INT16,
                        shift=2,
                    ),
                )
            )
        elif kind < 0.85:
            dst = bytes([10, rng.randrange(4), rng.randrange(256), rng.randrange(1, 255)])
            if rng.random() < 0.3:
                dst = host_ip(rng.choice(PORTS))
            out.append(
                (
                    rng.choice(PORTS),
                    udp_frame(
                        rng.choice(PORTS),
                        host_mac(9),
                        dst,
                        b"p" * rng.randrange(0, 64),
                        sport=rng.randrange(1024, 65535),
                        dport=rng.randrange(1, 65535),
                        ttl=rng.choice([64, 64, 1, 0]),
                        bad_checksum=rng.random() < 0.05,
                    ),
                )
            )
        else:
            port = rng.choice(PORTS)
            frame = bytearray(contribution(port, [rng.randrange(-99, 99) for _ in range(AGG.num_lanes)], job=job))
            for _ in range(rng.randrange(1, 4)):
                frame[rng.randrange(len(frame))] = rng.randrange(256)
            if rng.random() < 0.3:
                frame = frame[: rng.randrange(len(frame))]
            out.append((port, bytes(frame)))
    return out


def pair(program: Path, configure: Callable[[SoftSwitch], None]) -> tuple[SoftSwitch, SoftSwitch]:
    raw = program.read_bytes()
    sws = []
    for engine in ("c", "python"):
        sw = SoftSwitch(name=f"diff-{engine}", engine=engine)
        sw.load_program(raw)
        assert sw.engine == engine
        configure(sw)
        sws.append(sw)
    return sws[0], sws[1]


def compare(c: SoftSwitch, py: SoftSwitch, traffic: list[tuple[int, bytes]], label: str) -> int:
    """Every packet through both; returns how many packets came out."""
    sent = 0
    for i, (port, pkt) in enumerate(traffic):
        want = py.process_packet(port, pkt)
        got = c.process_packet(port, pkt)
        assert got == want, (
            f"{label}: packet {i} (port {port}, {len(pkt)} B {pkt[:64].hex()}...): C sent "
            f"{[(p, d.hex()) for p, d in got]}, Python {[(p, d.hex()) for p, d in want]}"
        )
        sent += len(want)
    for name in py.counters():
        assert c.counter_read_all(name) == py.counter_read_all(name), f"{label}: counter {name}"
    for name in py.registers():
        assert c.register_read_all(name) == py.register_read_all(name), f"{label}: register {name}"
    assert c.stats == py.stats, label
    assert py.stats["errors"] == 0, label
    return sent


def test_p4ina_20k_packets_on_both_engines() -> None:
    c, py = pair(P4INA, configure_p4ina)
    traffic = p4ina_traffic(20261201, P4INA_PACKETS)
    sent = compare(c, py, traffic, "p4ina")
    counters = dict(c.counter_read_all("P4inaIngress.aggregation.completions")[:4])
    assert sent > P4INA_PACKETS // 4 and any(v for v in counters), "the traffic must complete cells"


@pytest.mark.parametrize("name", sorted(n for n in CASES if n != "p4ina"))
def test_every_test_program_on_both_engines(name: str) -> None:
    case = CASES[name]
    c, py = pair(case.program, case.configure)
    traffic = mutate(case.seeds(), PROGRAM_PACKETS, 4242)
    compare(c, py, traffic, name)


def _bmv2_outputs(
    case: Case, traffic: list[tuple[int, bytes]], ref: SoftSwitch, expect: int, ports: set[int]
) -> bmv2diff.PcapRun:
    return bmv2diff.run(
        case.program,
        case.p4info,
        traffic,
        configure=lambda client: client.copy_from(ref),
        ports=ports,
        expect=expect,
        quiet_for=4.0,
    )


@pytest.mark.bmv2
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_fresh_run_on_bmv2_and_both_engines(name: str) -> None:
    case = CASES[name]
    rng = random.Random(99)
    if name == "p4ina":
        traffic = [(p, d) for p, d in p4ina_traffic(7, 400) if p in (1, 2)][:BMV2_PACKETS]
        configure = case.configure
    else:
        seeds = case.seeds()
        rng.shuffle(seeds)
        traffic = mutate(seeds, BMV2_PACKETS, 77)
        configure = case.configure
    c, py = pair(case.program, configure)
    ours: dict[int, list[bytes]] = {}
    for port, pkt in traffic:
        got, want = c.process_packet(port, pkt), py.process_packet(port, pkt)
        assert got == want
        for p, d in want:
            ours.setdefault(p, []).append(d)
    ref = SoftSwitch(engine="python")
    ref.load_program(case.program.read_bytes())
    configure(ref)
    ports = set(case.ports) | {p for p, _ in traffic} | set(ours)
    res = _bmv2_outputs(case, traffic, ref, sum(len(v) for v in ours.values()), ports)
    for p in ports:
        a, b = ours.get(p, []), res.outputs.get(p, [])
        if not case.ordered:
            a, b = sorted(a), sorted(b)
        assert a == b, f"{name}: port {p}: BMv2 sent {len(b)}, the engines {len(a)}"
    for cname, cells in (res.counters or {}).items():
        assert [tuple(x) for x in cells] == c.counter_read_all(cname) == py.counter_read_all(cname), cname
