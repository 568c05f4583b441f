"""Agents through a switch failure: the runner's verdict (new job, the ring, or a named error) reaches every rank."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from hosts import quantization as qz
from hosts.agent import Agent, AgentConfig
from hosts.coordination import CoordinatorClient, CoordinatorServer
from hosts.fakeswitch import FakeSwitch, FakeTransport
from hosts.packets import Endpoint
from tests.hosts.test_agent import GROUPS, free_base_ports

N = 3
JOB = {"job_id": 3, "slots": 4, "contrib_type": qz.ELEM_INT32, "result_type": qz.ELEM_INT32, "shift": 0,
       "timeout_s": 0.02, "failure_timeout_s": 0.3, "install": 0}


class Rig:
    def __init__(self, tmp_path: Path) -> None:
        self.verdict: Any = None
        self.decided: list[list[Any]] = []
        self.server = CoordinatorServer(f"unix:{tmp_path / 'c.sock'}", N, timeout_s=60, decide=self.decide).start()
        self.switch = FakeSwitch(job_id=3, n_workers=N, slot_count=4)
        peers = tuple(f"127.0.0.1:{p}" for p in free_base_ports(N))
        self.agents = [Agent(AgentConfig(rank=r, workers=N, coord=self.server.address, peers=peers, groups=GROUPS),
                             CoordinatorClient(self.server.address, r, N), transport=FakeTransport(self.switch, r),
                             endpoint=Endpoint(f"02:00:00:00:00:0{r}", f"10.0.0.{r + 1}")) for r in range(N)]
        self.threads = [threading.Thread(target=a.serve, daemon=True) for a in self.agents]
        for t in self.threads:
            t.start()

    def decide(self, tag: str, values: list[Any]) -> Any:
        if not tag.startswith("failover-"):
            return None
        self.decided.append(values)
        return self.verdict() if callable(self.verdict) else self.verdict

    def die_after(self, results: int) -> None:
        sw = self.switch
        sw.drop = lambda *_: sw.counters["results_sent"] >= results

    def step(self, step: int, size: int = 40 * 256, job: dict[str, Any] = JOB) -> dict[int, dict[str, Any]]:
        self.server.post(step, {"method": "inc-int32", "size": size, "iteration": step, "input": "ones", "seed": 2,
                                "checker": 0, "job": job, "ring": {"timeout_s": 0.05}})
        reports = self.server.step_reports(step, 60)
        assert sorted(reports) == list(range(N)), reports
        return reports

    def close(self) -> None:
        self.server.post(10_000, {"op": "quit"})
        for t in self.threads:
            t.join(30)
        for a in self.agents:
            a.close()
        self.server.close()


@pytest.fixture
def rig(tmp_path: Path) -> Any:
    r = Rig(tmp_path)
    yield r
    r.close()


def exact(reports: dict[int, dict[str, Any]]) -> bool:
    return (not any("error" in r for r in reports.values()) and len({r["digest"] for r in reports.values()}) == 1
            and reports[0]["max_abs_error"] == 0.0)


def test_a_re_planned_job_finishes_the_interrupted_allreduce_and_runs_the_next(rig: Rig) -> None:
    rig.die_after(N * 12)

    def revive() -> dict[str, Any]:  # the "controller": a new install (new token) on a working tree
        rig.switch.token, rig.switch.drop = 2, None
        return {"job": {**JOB, "install": 1}, "failed": ["c1"], "root": "c2"}

    rig.verdict = revive
    reports = rig.step(1)
    assert exact(reports), reports
    assert len(rig.decided) == 1 and len(rig.decided[0]) == N  # every rank reported, once
    for r in reports.values():
        (event,) = r["failovers"]
        assert event["failed"] == ["c1"] and event["root"] == "c2" and 0 < event["redo"] <= event["chunks"]
        assert event["stalled_s"] >= JOB["failure_timeout_s"]
    again = rig.step(2, job={**JOB, "install": 1})  # later steps carry the new job: the same worker goes on
    assert exact(again) and not any("failovers" in r for r in again.values())


def test_no_tree_left_falls_back_to_the_ring(rig: Rig) -> None:
    rig.die_after(N * 5)
    rig.verdict = {"fallback": "ring", "failed": ["s1"]}
    reports = rig.step(1)
    assert exact(reports), reports
    assert all(r["fallback"] == "ring" for r in reports.values())


def test_a_cut_off_edge_is_reported_by_name_on_every_rank(rig: Rig) -> None:
    rig.die_after(0)
    rig.verdict = {"error": "job 3: edge switch e1 is down, cutting off h1, h2", "failed": ["e1"]}
    reports = rig.step(1)
    for r in reports.values():
        assert "SwitchFailureError" in r["error"] and "edge switch e1 is down, cutting off h1, h2" in r["error"]
