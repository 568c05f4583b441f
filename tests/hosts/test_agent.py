"""Agents take the runner's steps in order, interleaving methods, and report sums that are checked."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hosts import clock
from hosts.agent import HOST_METHOD_PORTS, Agent, AgentConfig
from hosts.coordination import CoordinatorClient, CoordinatorServer
from hosts.fakeswitch import FakeSwitch, FakeTransport
from hosts.packets import Endpoint
from hosts.tickets import JobTicket, StepCommand

N = 3


SPAN = max(HOST_METHOD_PORTS.values()) + 1  # one UDP port per host method, from the base up
GROUPS = ("e1", "e1", "e2")  # edge switch of each rank: hier's groups, the ring's and the tree's order


def free_base_ports(n: int) -> list[int]:
    """n base ports, each with the SPAN - 1 ports above it free too, none overlapping another's."""
    out: list[int] = []
    while len(out) < n:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            try:
                for p in range(port + 1, port + SPAN):
                    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
                        b.bind(("127.0.0.1", p))
            except OSError:
                continue
        if all(abs(port - other) >= SPAN for other in out):
            out.append(port)
    return out


@pytest.fixture
def agents(tmp_path: Path) -> Any:
    releases: list[tuple[str, float]] = []
    server = CoordinatorServer(
        f"unix:{tmp_path / 'c.sock'}", N, timeout_s=60, on_release=lambda tag: releases.append((tag, clock.now()))
    )
    server.start()
    switch = FakeSwitch(job_id=3, n_workers=N, slot_count=4)
    peers = tuple(f"127.0.0.1:{p}" for p in free_base_ports(N))
    threads, agents_ = [], []
    for r in range(N):
        client = CoordinatorClient(server.address, r, N)
        agent = Agent(
            AgentConfig(rank=r, workers=N, coord=server.address, peers=peers, groups=GROUPS),
            client,
            transport=FakeTransport(switch, r),
            endpoint=Endpoint(f"02:00:00:00:00:0{r}", f"10.0.0.{r + 1}"),
        )
        agents_.append(agent)
        threads.append(threading.Thread(target=agent.serve, daemon=True))
    for t in threads:
        t.start()
    yield server, switch, releases
    server.post(10_000, {"op": "quit"})
    for t in threads:
        t.join(30)
    for a in agents_:
        a.close()
    server.close()


JOB = JobTicket(
    job_id=3, slots=4, up_lanes="int32", down_lanes="int32", shift=0, install=0, timeout_s=5.0, min_timeout_s=5.0
)


def run_steps(
    server: Any, releases: list[tuple[str, float]], order: list[tuple[str, int]], size: int = 3000
) -> dict[str, list[str]]:
    """Post the steps in order; each must be reported by every rank, agree and pass the checker's test."""
    seen: dict[str, list[str]] = {}
    for step, (method, iteration) in enumerate(order, start=1):
        cmd = StepCommand(
            step=step,
            method=method,
            size=size,
            iteration=iteration,
            input="normal",
            seed=4,
            checker=0,
            job=JOB if method.startswith("inc") else None,
        )
        server.post(step, cmd.to_dict())
        reports = server.step_reports(step, 60)
        assert sorted(reports) == list(range(N)), reports
        assert not any("error" in r for r in reports.values()), reports
        assert len({r["digest"] for r in reports.values()}) == 1  # the same sum on every rank
        if not method.startswith("inc"):
            assert {r["method"] for r in reports.values()} == {method}  # the stats of the method asked for
        check = reports[0]
        assert check["rel_l2_error"] <= check["rel_l2_target"] and check["max_error_ratio"] <= 1.0
        # one clock: every rank's latency is from the same release to its own end
        released = {r["t_release"] for r in reports.values()}
        assert len(released) == 1 and released.pop() == pytest.approx(dict(releases)[f"step-{step}"], abs=0.05)
        assert all(r["latency_s"] >= r["t_done"] - r["t_start"] > 0 for r in reports.values())
        seen.setdefault(method, []).append(check["digest"])
    # a new iteration all-reduces new tensors: an old sum would not pass for a new one
    assert all(len(set(d)) == len(d) for d in seen.values())
    return seen


def test_interleaved_methods_every_iteration_checked(agents: Any) -> None:
    server, switch, releases = agents
    order = [("ring", 0), ("inc-int32", 0), ("ring-bf16", 0), ("inc-int32", 1), ("ring", 1), ("ring-bf16", 1)]
    run_steps(server, releases, order)
    assert switch.counters["completions"] > 0


def test_hier_and_tree_between_ring_steps(agents: Any) -> None:
    """hier and tree on their own ports, interleaved with the rings, each iteration checked against numpy."""
    server, _switch, releases = agents
    order = [
        ("hier", 0),
        ("ring", 0),
        ("tree", 0),
        ("hier", 1),
        ("ring-bf16", 0),
        ("tree", 1),
        ("ring", 1),
        ("tree", 2),
        ("hier", 2),
    ]
    seen = run_steps(server, releases, order, size=5000)
    assert len(seen["hier"]) == len(seen["tree"]) == 3


def test_a_failing_step_is_reported_and_the_agent_goes_on(agents: Any) -> None:
    server, _switch, _ = agents
    bad = {**StepCommand(step=1, method="ring", size=10, iteration=0, checker=0).to_dict(), "method": "no-such-method"}
    server.post(1, bad)
    reports = server.step_reports(1, 30)
    assert all(
        "TicketError: StepCommand.method: unknown method 'no-such-method'" in r["error"] for r in reports.values()
    )
    # a command of another version (a field this agent does not know, one it misses) is refused by name
    newer = {**StepCommand(step=2, method="ring", size=10, iteration=0).to_dict(), "priority": 1}
    del newer["seed"]
    server.post(2, newer)
    reports = server.step_reports(2, 30)
    assert all("missing field(s) seed; unknown field(s) priority" in r["error"] for r in reports.values())
    server.post(3, StepCommand(step=3, method="ring", size=100, iteration=0, checker=0).to_dict())
    reports = server.step_reports(3, 30)
    assert not any("error" in r for r in reports.values())


def test_a_stale_sum_is_caught_by_the_check(agents: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that handed back the previous iteration's sum (say, a late result of an older epoch taken
    for the new one) fails its repetition: every iteration all-reduces different tensors."""
    from hosts.inc_worker import IncWorker

    server, _switch, _ = agents
    real = IncWorker.allreduce
    previous: dict[int, np.ndarray] = {}

    def stale(self: IncWorker, tensor: np.ndarray) -> np.ndarray:
        out = real(self, tensor)
        old = previous.get(self.job.rank)
        previous[self.job.rank] = out
        return old if old is not None else out

    monkeypatch.setattr(IncWorker, "allreduce", stale)
    for step, iteration in ((1, 0), (2, 1)):
        cmd = StepCommand(step=step, method="inc-int32", size=2000, iteration=iteration, seed=1, checker=0, job=JOB)
        server.post(step, cmd.to_dict())
        reports = server.step_reports(step, 60)
        assert len({r["digest"] for r in reports.values()}) == 1  # the ranks even agree...
    assert reports[0]["rel_l2_error"] > reports[0]["rel_l2_target"]  # ...but the check is against this iteration
    assert reports[0]["max_error_ratio"] > 1.0


@pytest.mark.netns
def test_the_interface_is_found_in_a_network_namespace_entered_alone() -> None:
    """`nsenter -t PID -n` (setns for the network only) leaves the mount namespace, and with it /sys/class/net,
    the root namespace's: the interface is looked up through a socket of the namespace the agent is in, so it is
    found, with its MAC and address, and the agent opens its in-network transport on it."""
    from emulation.netns import NetnsLab, enter
    from hosts.transport import InterfaceError, interface_endpoint

    with NetnsLab() as lab:
        a, b = lab.ns("a"), lab.ns("b")
        lab.veth(a, "h1-eth0", b, "p4t-peer")
        lab.address(a, "h1-eth0", "10.77.0.1/24")
        mac = lab.mac(a, "h1-eth0")  # `ip netns exec` mounts the namespace's own sysfs
        assert not Path("/sys/class/net/h1-eth0").exists()  # what a lookup through /sys would see here
        box: dict[str, Any] = {}

        def inside() -> None:
            try:
                enter(a)  # the network namespace only: this thread keeps the root mount namespace
                box["endpoint"] = interface_endpoint("h1-eth0")
                with pytest.raises(InterfaceError, match="no interface 'h9-eth0' in this network namespace"):
                    interface_endpoint("h9-eth0")
                agent = Agent(AgentConfig(rank=0, workers=2, coord="unix:/nonexistent", iface="h1-eth0"), None)  # type: ignore[arg-type]
                try:
                    agent._inc_worker(JOB)  # opens the worker's sockets on the interface (talks to nobody)
                    box["agent"] = agent._endpoint
                finally:
                    agent.close()
            except BaseException as ex:  # noqa: BLE001 - re-raised in the test's thread
                box["error"] = ex

        t = threading.Thread(target=inside)
        t.start()
        t.join(30)
        if "error" in box:
            raise box["error"]
    assert box["endpoint"] == Endpoint(mac=mac, ip="10.77.0.1")
    assert box["agent"] == box["endpoint"]


def test_all_to_all_between_ring_steps_every_block_checked_by_every_rank(agents: Any) -> None:
    """a2a-direct on its own port between ring steps: every rank checks every block it received (its report
    says how many), ranks hold different blocks (different digests); a2a-hier refuses groups of unequal
    size (GROUPS here: two and one) by name."""
    server, _switch, releases = agents
    run_steps(server, releases, [("ring", 0)])
    for step, iteration in ((2, 0), (3, 1)):
        cmd = StepCommand(step=step, method="a2a-direct", size=3001, iteration=iteration, seed=4, checker=0)
        server.post(step, cmd.to_dict())
        reports = server.step_reports(step, 60)
        assert sorted(reports) == list(range(N)) and not any("error" in r for r in reports.values()), reports
        assert all(r["blocks_checked"] == N and r["max_abs_error"] == 0.0 for r in reports.values())
        assert len({r["digest"] for r in reports.values()}) == N
        assert {r["method"] for r in reports.values()} == {"a2a-direct"}
    server.post(4, StepCommand(step=4, method="a2a-hier", size=300, iteration=0, checker=0).to_dict())
    reports = server.step_reports(4, 30)
    assert all("a2a-hier" in r["error"] and "groups of one size" in r["error"] for r in reports.values())
    run_steps(server, releases, [("ring", 1)])


def test_a_wrong_block_fails_the_step_naming_its_source(agents: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from hosts.alltoall import AllToAllDirect

    server, _switch, _ = agents
    real = AllToAllDirect.alltoall

    def damaged(self: AllToAllDirect, send: np.ndarray, call: int | None = None) -> np.ndarray:
        out = real(self, send, call)
        if self.cfg.rank == 2:
            out[0] += 1.0  # the first element of the block from rank 0
        return out

    monkeypatch.setattr(AllToAllDirect, "alltoall", damaged)
    server.post(1, StepCommand(step=1, method="a2a-direct", size=999, iteration=0, checker=0).to_dict())
    reports = server.step_reports(1, 60)
    assert "received wrong blocks from ranks [0]" in reports[2]["error"]
    assert "error" not in reports[0] and "error" not in reports[1]
