"""The ring baseline between network namespaces joined by a Linux bridge, via `python -m hosts ring`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from emulation.netns import NetnsLab
from hosts.coordination import CoordinatorServer, check_reports

pytestmark = pytest.mark.netns


@pytest.fixture
def lab() -> Iterator[NetnsLab]:
    with NetnsLab() as lab:
        yield lab


def bridged_hosts(lab: NetnsLab, n: int) -> list[str]:
    """n host namespaces, 10.77.0.(r+1)/24 on eth0, all on one bridge in a namespace of its own."""
    br = lab.ns("br")
    lab.run(br, "ip", "link", "add", "br0", "type", "bridge")
    lab.run(br, "ip", "link", "set", "br0", "up")
    hosts = []
    for r in range(n):
        h = lab.ns(f"h{r}")
        lab.veth(h, "eth0", br, f"p{r}")
        lab.run(br, "ip", "link", "set", f"p{r}", "master", "br0")
        lab.address(h, "eth0", f"10.77.0.{r + 1}/24")
        hosts.append(h)
    return hosts


def run_ring(lab: NetnsLab, hosts: list[str], tmp: Path, size: int, extra: list[str] = ()) -> list[dict[str, Any]]:
    n = len(hosts)
    peers = ",".join(f"10.77.0.{r + 1}" for r in range(n))
    with CoordinatorServer(f"unix:{tmp / 'coord.sock'}", n) as server:
        procs = [
            lab.popen(
                hosts[r],
                [
                    sys.executable,
                    "-m",
                    "hosts",
                    "ring",
                    "--rank",
                    str(r),
                    "--workers",
                    str(n),
                    "--coord",
                    server.address,
                    "--peers",
                    peers,
                    "--elements",
                    str(size),
                    "--iterations",
                    "2",
                    "--timeout",
                    "0.01",
                    "--json",
                    *extra,
                ],
                stdout=subprocess.PIPE,
            )
            for r in range(n)
        ]
        lines = [p.communicate(timeout=120)[0] for p in procs]
        reports = server.wait_reports(10)
    for r, (proc, line) in enumerate(zip(procs, lines)):
        assert proc.returncode == 0, f"rank {r}: {line}"
    printed = [json.loads(line) for line in lines]
    assert [p["digest"] for p in printed] == [reports[r]["digest"] for r in range(n)]
    outcome = check_reports([reports[r] for r in range(n)], n)
    assert outcome.ok, outcome.problems
    return printed


@pytest.mark.parametrize("n", [2, 4])
def test_ring_between_namespaces(lab: NetnsLab, tmp_path: Path, n: int) -> None:
    reports = run_ring(lab, bridged_hosts(lab, n), tmp_path, 50_000)
    assert all(r["iterations"] == 2 and r["elements"] == 50_000 for r in reports)


def test_ring_topology_order(lab: NetnsLab, tmp_path: Path) -> None:
    reports = run_ring(lab, bridged_hosts(lab, 4), tmp_path, 1000, ["--groups", "e1,e2,e1,e2"])
    assert reports[0]["order"] == [0, 2, 1, 3]


@pytest.mark.parametrize("n", [2, 4])
def test_ring_with_induced_loss(lab: NetnsLab, tmp_path: Path, n: int) -> None:
    hosts = bridged_hosts(lab, n)
    for h in hosts:
        lab.induce_loss(h, "eth0", 0.05)
    reports = run_ring(lab, hosts, tmp_path, 50_000)
    assert sum(r["retransmissions"] for r in reports) > 0


def test_coordinator_command_checks_the_workers(lab: NetnsLab, tmp_path: Path) -> None:
    """The runner's side as a command: barriers, reports, and the verdict as JSON."""
    hosts = bridged_hosts(lab, 2)
    sock = tmp_path / "c.sock"
    coord = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hosts",
            "coordinator",
            "--listen",
            f"unix:{sock}",
            "--workers",
            "2",
            "--wait",
            "60",
            "--json",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    lab.procs.append(coord)  # killed by the lab on failure
    for _ in range(1000):  # wait for readiness (the socket file), not a fixed time
        if sock.exists() or coord.poll() is not None:
            break
        time.sleep(0.01)
    assert sock.exists(), "the coordinator did not start listening"
    workers = [
        lab.popen(
            hosts[r],
            [
                sys.executable,
                "-m",
                "hosts",
                "ring",
                "--rank",
                str(r),
                "--workers",
                "2",
                "--coord",
                f"unix:{sock}",
                "--peers",
                "10.77.0.1,10.77.0.2",
                "--size",
                "3000elem",
                "--input",
                "wide",
                "--json",
            ],
            stdout=subprocess.PIPE,
        )
        for r in range(2)
    ]
    for w in workers:
        w.communicate(timeout=60)
        assert w.returncode == 0
    out, _ = coord.communicate(timeout=60)
    verdict = json.loads(out)
    assert coord.returncode == 0 and verdict["ok"], verdict["problems"]
    assert [r["rank"] for r in verdict["reports"]] == [0, 1]
