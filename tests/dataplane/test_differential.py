"""The embedded switch against BMv2: the same packets in, the same packets and counters out."""

from __future__ import annotations

import random

import pytest

from controller.entities import Lpm
from tests.dataplane.backends import PORTS, Dut, open_dut
from tests.dataplane.frames import INT8, INT16, INT32, RETRANSMIT, contribution, host_mac, udp_frame
from tests.dataplane.program import INNER, Job, install_hosts, install_job
from wireformat import AGG

pytestmark = [pytest.mark.bmv2, pytest.mark.netns]

JOBS = (
    Job(job_id=7, job_index=1, children=(1, 2, 3), slot_count=4, mcast_grp=1, result_type=INT8, shift=6),
    Job(
        job_id=9,
        job_index=2,
        children=(4, 5),
        role=INNER,
        up_port=1,
        slot_base=4,
        slot_count=4,
        mcast_grp=2,
        result_type=INT16,
        shift=2,
        up_type=INT16,
    ),
)
COUNTERS = [f"P4inaIngress.aggregation.{c}" for c in ("contributions", "retransmissions", "completions", "overflows")]


def program(dut: Dut) -> None:
    install_hosts(dut)
    for job in JOBS:
        install_job(dut, job)
    dut.insert("P4inaIngress.forwarding.ipv4_lpm", {"dst_addr": Lpm(0x0A000000, 8)}, "ecmp", {"group": 1, "size": 3})
    for i, port in enumerate((2, 3, 4)):
        dut.insert("P4inaIngress.forwarding.ecmp_members", {"group": 1, "index": i}, "forward", {"port": port})


def traffic(seed: int, count: int) -> list[tuple[int, bytes]]:
    """A random mix: contributions (some retransmitted, some narrow), results, routed UDP, corrupted frames."""
    rng = random.Random(seed)
    out: list[tuple[int, bytes]] = []
    for _ in range(count):
        kind = rng.random()
        job = rng.choice(JOBS)
        if kind < 0.55:
            port = rng.choice(job.children)
            big = rng.choice([100, 1 << 20, 1 << 31])
            lanes = [rng.randrange(-big, big) for _ in range(AGG.num_lanes)]
            elem = rng.choice([INT32, INT32, INT16, INT8])
            if elem != INT32:
                lanes = [v % 128 - 64 for v in lanes]
            out.append(
                (
                    port,
                    contribution(
                        port,
                        lanes,
                        job=job.job_id,
                        slot=rng.randrange(job.slot_count),
                        shadow=rng.randrange(2),
                        epoch=rng.choice([1, 1, 1, 2]),
                        elem_type=elem,
                        flags=RETRANSMIT if rng.random() < 0.2 else 0,
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
                        slot=rng.randrange(4),
                        shadow=rng.randrange(2),
                        epoch=1,
                        op=2,
                        elem_type=INT16,
                        shift=2,
                    ),
                )
            )
        elif kind < 0.85:
            dst = bytes([10, rng.randrange(4), rng.randrange(256), rng.randrange(1, 255)])
            out.append(
                (
                    rng.choice(PORTS),
                    udp_frame(
                        1,
                        host_mac(9),
                        dst,
                        b"p" * rng.randrange(0, 64),
                        sport=rng.randrange(1024, 65535),
                        dport=rng.randrange(1, 65535),
                    ),
                )
            )
        else:
            port = rng.choice(PORTS)
            frame = bytearray(
                contribution(port, [rng.randrange(-99, 99) for _ in range(AGG.num_lanes)], job=job.job_id)
            )
            for _ in range(rng.randrange(1, 4)):
                frame[rng.randrange(len(frame))] = rng.randrange(256)
            if rng.random() < 0.3:
                frame = frame[: rng.randrange(len(frame))]
            out.append((port, bytes(frame)))
    return out


def test_same_outputs_and_counters_on_both_back_ends() -> None:
    with open_dut("embedded") as emb, open_dut("bmv2") as bm:
        for dut in (emb, bm):
            program(dut)
        for i, (port, frame) in enumerate(traffic(seed=20261129, count=250)):
            emb.send(port, frame)
            want = sorted(emb.receive(0))
            bm.send(port, frame)
            got = sorted(bm.receive(len(want), timeout=3.0, grace=0.1))
            assert got == want, f"packet {i} (port {port}, {len(frame)} B): BMv2 {len(got)} out, embedded {len(want)}"
        for name in COUNTERS + ["P4inaEgress.results_sent"]:
            for index in range(3):
                assert emb.counter(name, index) == bm.counter(name, index), f"{name}[{index}]"
        for index in range(3 * 16):
            assert emb.counter("P4inaIngress.drops", index) == bm.counter("P4inaIngress.drops", index), (
                f"drops[{index}]"
            )
