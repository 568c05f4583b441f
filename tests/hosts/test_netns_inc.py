"""The in-network worker (`python -m hosts inc`) in network namespaces against the embedded switch.

Topology: one switch namespace, n host namespaces, one veth per host; the
embedded switch runs in this process (softswitch: SoftSwitch +
PortIO on the switch's veth ends), loaded with p4/build/p4ina.json and
programmed through its Python API as the controller would for a one-switch
job.  A wrapper between the ports and the switch drops chosen packets.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from emulation.netns import NetnsLab, enter
from hosts.coordination import CoordinatorServer, check_reports
from tests.hosts.softswitch_job import JOB_ID, DropChosen, Processor, counter, real_switch
from wireformat import AGG

pytestmark = pytest.mark.netns


@dataclass
class Star:
    lab: NetnsLab
    hosts: list[str]
    addrs: list[tuple[str, str]]  # (mac, ip) per rank


def star(lab: NetnsLab, n: int) -> Star:
    sw = lab.ns("sw")
    hosts, addrs = [], []
    for r in range(n):
        h = lab.ns(f"h{r}")
        lab.veth(h, "eth0", sw, f"p{r + 1}")
        ip = f"10.66.0.{r + 1}"
        lab.address(h, "eth0", f"{ip}/24")
        hosts.append(h)
        addrs.append((lab.mac(h, "eth0"), ip))
    return Star(lab, hosts, addrs)


def attach(lab: NetnsLab, processor: Processor, n: int) -> Any:
    """PortIO on the switch namespace's veths; its sockets are opened from a thread inside that namespace."""
    from softswitch.runtime.ports import PortIO

    io = PortIO(processor, {r + 1: f"p{r + 1}" for r in range(n)}, name="p4ina-test")
    box: dict[str, BaseException] = {}

    def start() -> None:
        try:
            enter(f"p4ina-{lab.tag}-sw")
            io.start()
        except BaseException as ex:  # noqa: BLE001 - handed to the test thread, which re-raises it
            box["error"] = ex

    t = threading.Thread(target=start)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return io


def run_workers(
    net: Star, tmp: Path, slot_count: int, size: int, iterations: int, extra: list[str]
) -> list[dict[str, Any]]:
    n = len(net.hosts)
    with CoordinatorServer(f"unix:{tmp / 'coord.sock'}", n) as server:
        procs = [
            net.lab.popen(
                net.hosts[r],
                [
                    sys.executable,
                    "-m",
                    "hosts",
                    "inc",
                    "--iface",
                    "eth0",
                    "--job-id",
                    str(JOB_ID),
                    "--rank",
                    str(r),
                    "--workers",
                    str(n),
                    "--slot-count",
                    str(slot_count),
                    "--coord",
                    server.address,
                    "--elements",
                    str(size),
                    "--iterations",
                    str(iterations),
                    "--timeout",
                    "0.3",
                    "--json",
                    *extra,
                ],
                stdout=subprocess.PIPE,
            )
            for r in range(n)
        ]
        lines = [p.communicate(timeout=240)[0] for p in procs]
        reports = server.wait_reports(10)
    for r, (proc, line) in enumerate(zip(procs, lines)):
        assert proc.returncode == 0, f"rank {r}: {line}"
    outcome = check_reports([reports[r] for r in range(n)], n)
    assert outcome.ok, outcome.problems
    return [json.loads(line) for line in lines]


@pytest.fixture
def lab() -> Iterator[NetnsLab]:
    with NetnsLab() as lab:
        yield lab


L = AGG.num_lanes
SIZE = 5 * L - 30  # 5 chunks (the last one padded) in 4 slots
CHUNKS = 5 + 4  # rounds per worker and all-reduce: the chunks plus one exponent round per slot


@pytest.mark.parametrize("n", [2, 3, 4])
def test_sums_through_the_embedded_switch(lab: NetnsLab, tmp_path: Path, n: int) -> None:
    net = star(lab, n)
    switch = real_switch(net.addrs, slot_count=4)
    io = attach(lab, switch, n)
    try:
        reports = run_workers(net, tmp_path, 4, SIZE, 2, [])
    finally:
        io.stop()
    assert counter(switch, "contributions") == n * CHUNKS * 2  # every contribution added exactly once
    assert counter(switch, "completions") == CHUNKS * 2, "a reused cell did not complete a new round"
    assert all(r["packets_sent"] == CHUNKS * 2 + r["retransmissions"] for r in reports)


def test_plain_udp_sockets_receive_results(lab: NetnsLab, tmp_path: Path) -> None:
    """Results come from the aggregation address, so the host's kernel delivers them to a UDP socket."""
    n = 2
    net = star(lab, n)
    switch = real_switch(net.addrs, slot_count=4)
    io = attach(lab, switch, n)
    try:
        reports = run_workers(net, tmp_path, 4, SIZE, 1, ["--recv-mode", "udp"])
    finally:
        io.stop()
    assert counter(switch, "completions") == CHUNKS
    assert all(r["retransmissions"] == 0 for r in reports), "results reached the UDP sockets the first time"


def test_dropped_contribution_and_result_are_recovered_once(lab: NetnsLab, tmp_path: Path) -> None:
    n = 3
    net = star(lab, n)
    switch = real_switch(net.addrs, slot_count=4)
    lossy = DropChosen(switch, up={(2, 4 * L)}, down={(3, 2 * L)})
    io = attach(lab, lossy, n)
    try:
        reports = run_workers(net, tmp_path, 4, SIZE, 1, [])
    finally:
        io.stop()
    assert sorted(lossy.dropped) == [("down", 3, 2 * L), ("up", 2, 4 * L)]
    assert reports[1]["retransmissions"] >= 1 and reports[2]["retransmissions"] >= 1
    assert counter(switch, "contributions") == n * CHUNKS  # the retransmitted one counted once
    assert counter(switch, "retransmissions") >= 1  # rank 2's resend found its bit set: stored result


@pytest.mark.parametrize(("lanes", "shift"), [("int8", 2), ("int16", 2)])
def test_narrow_results(lab: NetnsLab, tmp_path: Path, lanes: str, shift: int) -> None:
    n = 4
    code = AGG.elem_types[f"ELEM_{lanes.upper()}"]
    net = star(lab, n)
    switch = real_switch(net.addrs, slot_count=4, result_type=code, shift=shift)
    io = attach(lab, switch, n)
    try:
        reports = run_workers(
            net,
            tmp_path,
            4,
            SIZE,
            1,
            ["--down-lanes", lanes, "--up-lanes", lanes, "--shift", str(shift)],
        )
    finally:
        io.stop()
    assert counter(switch, "overflows") == 0
    assert all(r["up_lanes"] == r["down_lanes"] == lanes for r in reports)
