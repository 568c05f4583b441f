"""Embedded switch throughput on p4/build/p4ina.json, C and Python engines: aggregation and IPv4 forwarding, one core.

Aggregation: two children of a root switch (job 1, fan-in 2) send contributions (every lane of
the program, int32) to rotating slots, so every second packet completes a cell and multicasts the
result to both children (one packet in, 0 or 2 out). Forwarding: UDP packets routed by ipv4_lpm,
106-byte frames and, for the C engine, also frames as long as the aggregation packets (1,087 bytes).
The Python engine gets the packets through process_packet in a tight loop; the C engine gets the
same traffic, repeated, through its own batch loop (the one the C port loop calls: the packets
never enter Python). Neither includes socket I/O. Figures per wall-clock and per CPU second of
this process, and the same-run ratios `engine_c_over_python_agg` (C aggregation packets per
CPU-second over the Python engine's) and `engine_c_agg_over_fwd` (the C engine's CPU per
aggregation packet over its CPU per forwarded packet), and `engine_c_agg_over_fwd_same_size`, the same
at equal frame sizes. The second tells what aggregating costs beyond moving the bytes: with 1 kB
frames cycling through 72 MB, a good part of both packets' cost is reading the frame from memory
and writing it out, which a 106-byte forwarded frame does not pay. When simple_switch_grpc is on PATH, the
same entries and traffic go through BMv2 over pcap files (softswitch/bmv2diff.py) and its
sustained rate is reported beside both. Set P4INA_JSON to benchmark another compiled p4ina.json.

Control plane: CPU seconds to insert TERNARY_INSERTS entries one by one into a ternary table
(tests/softswitch/programs/tables.json, its size raised to fit), the bulk load a controller does.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.results import Figure, Figures
from controller.api import DEFAULT_BMV2_JSON
from native import cbuild
from softswitch import ActionCall, Exact, Lpm, SoftSwitch, TableEntry, Ternary, bmv2diff
from wireformat import AGG

LOG = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
# P4INA_JSON points the benchmark at another compiled p4ina.json (its .p4info.txtpb beside it); by default the
# committed one (p4/build, or the copy an installed package ships)
PROGRAM = Path(os.environ.get("P4INA_JSON", DEFAULT_BMV2_JSON))
AGG_PACKETS = 4000  # the Python engine's share of the traffic
FWD_PACKETS = 20000
# the C engine's: one whole cycle of (slot, shadow, epoch), so repeating it is seamless, run C_REPEAT times
C_AGG_PACKETS = 2 * 64 * 256 * 2
C_FWD_PACKETS = 100_000
C_REPEAT = 4
C_ROUNDS = 3  # alternating rounds of the C figures (median reported)
CHILD_PORTS = (1, 2)
HOST_MACS = {1: 0x020000000001, 2: 0x020000000002, 3: 0x020000000003}
HOST_IPS = {1: 0x0A000101, 2: 0x0A000102, 3: 0x0A000201}
JOB_ID = 1
MCAST_GRP = 1
SLOTS = 64
TERNARY_PROGRAM = ROOT / "tests" / "softswitch" / "programs" / "tables.json"  # a test program: in a checkout only
TERNARY_TABLE = "TIngress.t_tern"
TERNARY_INSERTS = 10000


def _checksum(header: bytes) -> int:
    total = sum(struct.unpack(f">{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _ipv4(src: int, dst: int, payload_len: int, proto: int = 17, ttl: int = 64) -> bytes:
    hdr = bytearray(struct.pack(">BBHHHBBHII", 0x45, 0, 20 + payload_len, 0, 0x4000, ttl, proto, 0, src, dst))
    struct.pack_into(">H", hdr, 10, _checksum(bytes(hdr)))
    return bytes(hdr)


def _eth(dst: int, src: int) -> bytes:
    return dst.to_bytes(6, "big") + src.to_bytes(6, "big") + b"\x08\x00"


def contribution(child: int, slot: int, shadow: int, epoch: int) -> bytes:
    c = AGG.constants()
    elem = c["ELEM_INT32"]
    values = [(child + 1) * (i - 32) for i in range(AGG.num_lanes)]
    lanes = AGG.lane_struct(elem).pack(*values)
    offset = slot * AGG.num_lanes
    agg = AGG.pack_header(
        version=c["AGG_VERSION"],
        op=c["OP_CONTRIB"],
        flags=0,
        elem_type=elem,
        shift=0,
        job_id=JOB_ID,
        shadow=shadow,
        slot=slot,
        contributor=child,
        exponent=0,
        epoch=epoch,
        offset=offset,
        checksum=AGG.checksum(sum(values), offset, JOB_ID, epoch),  # what hosts send: the sums check out
    )
    udp_len = 8 + len(agg) + len(lanes)
    udp = struct.pack(">HHHH", c["UDP_PORT_AGG"], c["UDP_PORT_AGG"], udp_len, 0)
    agg_ip = socket.inet_aton("10.255.255.254")
    return (
        _eth(0x027034696E61, HOST_MACS[CHILD_PORTS[child]])
        + _ipv4(HOST_IPS[CHILD_PORTS[child]], int.from_bytes(agg_ip, "big"), udp_len)
        + udp
        + agg
        + lanes
    )


def agg_traffic(n: int) -> list[tuple[int, bytes]]:
    """Contributions of both children, slot after slot; each pass over the slots is a new all-reduce
    (next epoch, other shadow copy), so every pair of contributions completes a cell."""
    out = []
    r = 0
    while len(out) < n:
        slot = r % SLOTS
        shadow = (r // SLOTS) % 2
        epoch = (1 + r // SLOTS) % 256
        for child, port in enumerate(CHILD_PORTS):
            out.append((port, contribution(child, slot, shadow, epoch)))
        r += 1
    return out[:n]


def fwd_traffic(n: int, frame_len: int = 106) -> list[tuple[int, bytes]]:
    """UDP packets that ipv4_lpm routes, `frame_len` bytes each (106: a 64-byte payload)."""
    if frame_len < 42:
        raise ValueError(f"a forwarded frame needs 42 bytes of headers, not {frame_len}")
    payload = bytes(frame_len - 42)
    udp = struct.pack(">HHHH", 5000, 6000, 8 + len(payload), 0)
    pkt = _eth(HOST_MACS[3], HOST_MACS[1]) + _ipv4(HOST_IPS[1], HOST_IPS[3], len(udp) + len(payload)) + udp + payload
    return [(1, pkt)] * n


def _action(sw: SoftSwitch, suffix: str) -> str:
    names = [n for n in sw.actions() if n.endswith(suffix)]
    if len(names) != 1:
        raise RuntimeError(f"expected one action ending in {suffix!r} in {PROGRAM}, found {names}")
    return names[0]


def _table(sw: SoftSwitch, suffix: str) -> str:
    names = [n for n in sw.tables() if n.endswith(suffix)]
    if len(names) != 1:
        raise RuntimeError(f"expected one table ending in {suffix!r} in {PROGRAM}, found {names}")
    return names[0]


def configure(sw: SoftSwitch) -> None:
    """The root of job 1 with children on ports 1 and 2, plus routes (docs/DESIGN.md tables)."""
    c = AGG.constants()
    sw.table_insert(
        _table(sw, "job_config"),
        TableEntry(
            (Exact(JOB_ID),),
            # job_index, role, fan_in, slot_base, slot_count, mcast_grp, up_port, result_type, shift, token
            ActionCall(
                _action(sw, "set_job"), (1, 1, 2, 0, SLOTS, MCAST_GRP, 0, c["ELEM_INT32"], 0, 1, c["ELEM_INT32"], 0, 0)
            ),
        ),
    )
    for child, port in enumerate(CHILD_PORTS):
        sw.table_insert(
            _table(sw, "job_ports"),
            TableEntry((Exact(JOB_ID), Exact(port)), ActionCall(_action(sw, "from_child"), (child,))),
        )
    sw.mc_group_set(MCAST_GRP, [(port, child) for child, port in enumerate(CHILD_PORTS)])
    for port in HOST_MACS:
        sw.table_insert(
            _table(sw, "host_port"),
            TableEntry((Exact(port),), ActionCall(_action(sw, "set_host"), (HOST_MACS[port], HOST_IPS[port]))),
        )
        sw.table_insert(
            _table(sw, "ipv4_lpm"), TableEntry((Lpm(HOST_IPS[port], 32),), ActionCall(_action(sw, "forward"), (port,)))
        )


@dataclass(frozen=True)
class Run:
    pps: float  # input packets per wall-clock second
    pps_cpu: float  # input packets per CPU second (less sensitive to other load on the machine)
    sent: int
    out_size: int  # length of an output packet
    packets: int = 0  # input packets timed


def _switch(engine: str) -> SoftSwitch:
    sw = SoftSwitch(name=f"bench-{engine}", engine=engine)
    sw.load_program(PROGRAM.read_bytes())
    if sw.engine != engine:
        raise RuntimeError(f"{PROGRAM} runs on the {sw.engine} engine, not the {engine} one (see the log)")
    configure(sw)
    return sw


def time_python(traffic: list[tuple[int, bytes]]) -> Run:
    """The Python engine, packet after packet through process_packet."""
    sw = _switch("python")
    process = sw.process_packet
    sent = 0
    size = 0
    cpu0, start = time.process_time(), time.perf_counter()
    for port, pkt in traffic:
        out = process(port, pkt)
        if out:
            sent += len(out)
            size = len(out[0][1])
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu0
    if sw.stats["errors"]:
        raise RuntimeError(f"embedded switch counted internal errors: {sw.stats}")
    return Run(len(traffic) / elapsed, len(traffic) / cpu, sent, size, len(traffic))


def time_c(
    traffics: dict[str, list[tuple[int, bytes]]], repeat: int = C_REPEAT, rounds: int = C_ROUNDS
) -> dict[str, Run]:
    """The C engine, each traffic `repeat` times through its batch loop (32 frames a batch, as the port loop),
    one switch per traffic. The kinds take turns, `rounds` times, so that each ratio compares the same minutes;
    each kind's figure is its median round."""
    switches: dict[str, tuple[SoftSwitch, Any, Any]] = {}
    for kind, traffic in traffics.items():
        sw = _switch("c")
        rt = sw.runtime()
        prepared = rt.prepare(traffic)  # type: ignore[attr-defined]
        rt.run(prepared)  # type: ignore[attr-defined]  # warm: pages touched, branch predictors trained
        switches[kind] = (sw, rt, prepared)
    timed: dict[str, list[Run]] = {kind: [] for kind in traffics}
    for _ in range(rounds):
        for kind, (_sw, rt, prepared) in switches.items():
            sent = 0
            cpu0, start = time.process_time(), time.perf_counter()
            for _ in range(repeat):
                outs, _ = rt.run(prepared)
                sent += outs
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu0
            n = prepared.n * repeat
            timed[kind].append(Run(n / elapsed, n / cpu, sent, 0, n))
    out: dict[str, Run] = {}
    for kind, (sw, _, _) in switches.items():
        if sw.stats["errors"]:
            raise RuntimeError(f"embedded switch (C) counted internal errors: {sw.stats}")
        first = sw.process_packet(*traffics[kind][0])
        median = sorted(timed[kind], key=lambda r: r.pps_cpu)[len(timed[kind]) // 2]
        out[kind] = Run(median.pps, median.pps_cpu, median.sent, len(first[0][1]) if first else 0, median.packets)
    return out


def time_ternary_inserts(n: int = TERNARY_INSERTS) -> float:
    """CPU seconds for n single-entry inserts into one ternary table (a controller's bulk load)."""
    doc = json.loads(TERNARY_PROGRAM.read_text())
    for pl in doc["pipelines"]:
        for t in pl["tables"]:
            if t["name"] == TERNARY_TABLE:
                t["max_size"] = max(int(t["max_size"]), n)
    sw = SoftSwitch(name="bench-ternary")
    sw.load_program(json.dumps(doc))
    entries = [
        TableEntry((Ternary(i & mask, mask), Exact(i >> 8)), ActionCall("TIngress.set_tern", (i & 0xFF,)), 1 + i)
        for i, mask in ((i, 0xFF if i & 1 else 0xF0) for i in range(n))
    ]
    cpu0 = time.process_time()
    for e in entries:
        sw.table_insert(TERNARY_TABLE, e)
    return time.process_time() - cpu0


def run() -> Figures:
    if not PROGRAM.exists():
        raise FileNotFoundError(f"{PROGRAM} is missing: run `make p4` first")
    load = os.getloadavg()[0]
    figures: Figures = {}
    if TERNARY_PROGRAM.exists():
        figures["softswitch_ternary_insert_10k_cpu_s"] = Figure(
            round(time_ternary_inserts(), 3), "CPU-s", f"{TERNARY_INSERTS} inserts into {TERNARY_TABLE}, one at a time"
        )
    else:
        LOG.warning("%s is missing (not a checkout): no ternary insert figure", TERNARY_PROGRAM)
    c_agg, c_fwd = agg_traffic(C_AGG_PACKETS), fwd_traffic(C_FWD_PACKETS)
    agg_frame = len(c_agg[0][1])
    agg, fwd = c_agg[:AGG_PACKETS], c_fwd[:FWD_PACKETS]
    traffic = {"agg": agg, "fwd": fwd}
    what = {
        "agg": f"p4ina.json, {AGG.num_lanes} x int32 lanes, fan-in 2, {agg_frame}-byte frames",
        "fwd": f"p4ina.json, IPv4 lpm forwarding, {len(c_fwd[0][1])}-byte frames",
        "fwd_same_size": f"p4ina.json, IPv4 lpm forwarding, {agg_frame}-byte frames (as aggregation's)",
    }
    runs: dict[str, dict[str, Run]] = {"python": {"agg": time_python(agg), "fwd": time_python(fwd)}}
    if cbuild.toolchain() is not None:
        runs["c"] = time_c({"agg": c_agg, "fwd": c_fwd, "fwd_same_size": fwd_traffic(C_AGG_PACKETS, agg_frame)})
    else:
        LOG.warning("no C compiler (cc) on PATH: the C engine's figures are skipped")
    how = {
        "python": "Python engine, process_packet per packet",
        "c": f"C engine, its batch loop, traffic x{C_REPEAT}, median of {C_ROUNDS} alternating rounds",
    }
    for engine, by_kind in runs.items():
        for kind, r in by_kind.items():
            note = f"{what[kind]}; {how[engine]}; {r.packets} in, {r.sent} out, load avg {load:.1f}"
            figures[f"engine_{engine}_{kind}_pps"] = Figure(round(r.pps, 1), "packets/s", note)
            figures[f"engine_{engine}_{kind}_pps_cpu"] = Figure(round(r.pps_cpu, 1), "packets/CPU-s", note)
    if "c" in runs:
        c, py = runs["c"], runs["python"]
        for kind in ("agg", "fwd"):
            if c[kind].sent * py[kind].packets != py[kind].sent * c[kind].packets:
                raise RuntimeError(
                    f"{kind}: the engines sent different numbers of packets for the same traffic "
                    f"(C {c[kind].sent} of {c[kind].packets}, Python {py[kind].sent} of {py[kind].packets})"
                )
            figures[f"engine_c_over_python_{kind}"] = Figure(
                round(c[kind].pps_cpu / py[kind].pps_cpu, 2),
                "ratio",
                f"C / Python engine, {kind} packets per CPU second",
            )
        figures["engine_c_agg_over_fwd"] = Figure(
            round(c["fwd"].pps_cpu / c["agg"].pps_cpu, 2),
            "ratio",
            f"C engine: CPU per aggregation packet / CPU per forwarded packet of {len(c_fwd[0][1])} bytes (an ASIC: 1)",
        )
        figures["engine_c_agg_over_fwd_same_size"] = Figure(
            round(c["fwd_same_size"].pps_cpu / c["agg"].pps_cpu, 2),
            "ratio",
            f"C engine: CPU per aggregation packet / CPU per forwarded packet, both {agg_frame}-byte frames: "
            "what aggregating costs beyond moving the same bytes (an ASIC: 1)",
        )
        figures["engine_python_agg_over_fwd"] = Figure(
            round(py["fwd"].pps_cpu / py["agg"].pps_cpu, 2),
            "ratio",
            "Python engine: CPU per aggregation packet / CPU per forwarded packet",
        )
    if not (bmv2diff.available() and P4INFO.exists()):
        LOG.info("simple_switch_grpc or %s missing: BMv2 comparison skipped", P4INFO)
        return figures
    for kind, r in runs["python"].items():
        try:
            b = time_bmv2(traffic[kind], expect=r.sent, out_size=r.out_size)
        except Exception as ex:  # noqa: BLE001 - BMv2 failing in any way must not lose the embedded figures
            LOG.warning("BMv2 comparison (%s) failed: %s", kind, ex)
            continue
        note = f"simple_switch_grpc --log-level off, pcap ports, same entries and traffic; {b.sent} of {r.sent} out"
        figures[f"bmv2_{kind}_pps"] = Figure(round(b.pps, 1), "packets/s", note)
        if b.pps_cpu:
            figures[f"bmv2_{kind}_pps_cpu"] = Figure(round(b.pps_cpu, 1), "packets/CPU-s", note + ", all BMv2 threads")
            for engine, by_kind in runs.items():
                figures[f"engine_{engine}_over_bmv2_{kind}_cpu"] = Figure(
                    round(by_kind[kind].pps_cpu / b.pps_cpu, 2), "ratio", f"{engine} engine / BMv2, per CPU second"
                )
    return figures


# ---- BMv2 side ----------------------------------------------------------------------------------

P4INFO = PROGRAM.with_name("p4ina.p4info.txtpb")


def time_bmv2(traffic: list[tuple[int, bytes]], expect: int, out_size: int) -> Run:
    """Input packets/s simple_switch_grpc sustains (wall clock and per CPU second of all its threads).

    Taken on its output files from the first output packet to the last (start-up excluded) and
    converted to input packets with the embedded switch's output/input ratio for the same traffic.
    """
    ref = _switch("python")
    res = bmv2diff.run(
        PROGRAM,
        P4INFO,
        traffic,
        configure=lambda client: client.copy_from(ref),
        ports=set(HOST_MACS),
        expect=expect,
        quiet_for=3.0,
        record_size=16 + out_size,
        read_counters=False,
    )
    if res.first_output is None or res.last_output is None or res.counted_last <= res.counted_first:
        raise RuntimeError(f"simple_switch_grpc sent too little to time ({res.total} packets)")
    outs = res.counted_last - res.counted_first
    per_in = len(traffic) / expect
    pps = outs / (res.last_output - res.first_output) * per_in
    cpu = (res.cpu_last or 0.0) - (res.cpu_first or 0.0)
    return Run(pps, outs / cpu * per_in if cpu > 0 else 0.0, res.total, out_size)
