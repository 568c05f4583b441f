"""Agents through a switch failure: the runner's verdict (new job, the ring, or a named error) reaches every rank."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hosts import quantization as qz
from hosts.agent import Agent, AgentConfig, pack_mask
from hosts.coordination import CoordinatorClient, CoordinatorServer
from hosts.fakeswitch import FakeSwitch, FakeTransport
from hosts.packets import Endpoint
from hosts.tickets import JobTicket, RingSettings, StepCommand
from tests.hosts.test_agent import GROUPS, free_base_ports

N = 3
JOB = JobTicket(
    job_id=3,
    slots=4,
    up_lanes="int32",
    down_lanes="int32",
    shift=0,
    install=0,
    timeout_s=0.02,
    min_timeout_s=0.02,
    failure_timeout_s=0.3,
)
REINSTALLED = dataclasses.replace(JOB, install=1)  # the job re-planned: a new install, a new worker


class Rig:
    def __init__(self, tmp_path: Path) -> None:
        self.verdict: Any = None
        self.decided: list[list[Any]] = []
        self.alive = False  # the runner's answer to a stalled worker's "is my tree alive?"
        self.server = CoordinatorServer(
            f"unix:{tmp_path / 'c.sock'}",
            N,
            timeout_s=60,
            decide=self.decide,
            ask=lambda topic, rank, value: {"alive": self.alive},
        ).start()
        self.switch = FakeSwitch(job_id=3, n_workers=N, slot_count=4)
        peers = tuple(f"127.0.0.1:{p}" for p in free_base_ports(N))
        self.agents = [
            Agent(
                AgentConfig(rank=r, workers=N, coord=self.server.address, peers=peers, groups=GROUPS),
                CoordinatorClient(self.server.address, r, N),
                transport=FakeTransport(self.switch, r),
                endpoint=Endpoint(f"02:00:00:00:00:0{r}", f"10.0.0.{r + 1}"),
            )
            for r in range(N)
        ]
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

    def die_once_rank0_has(self, chunks: int) -> None:
        """The switch dies the moment rank 0 holds every chunk's result: ranks 1 and 2 lack the last one."""
        got: set[int] = set()

        def dies(direction: str, rank: int, fields: dict[str, int]) -> bool:
            if len(got) == chunks:
                return True  # dead: nothing in, nothing out
            if direction == "down" and rank == 0 and fields["elem_type"] != qz.ELEM_NONE:
                got.add(fields["offset"])
            return False

        self.switch.drop = dies

    def revived(self) -> dict[str, Any]:
        """A verdict hook: the "controller" re-installs the job (new token) on a working tree."""
        self.switch.token, self.switch.drop = 2, None
        return {"job": REINSTALLED.to_dict(), "failed": ["c1"], "root": "c2"}

    def step(
        self, step: int, size: int = 40 * 256, job: JobTicket = JOB, kind: str = "ones"
    ) -> dict[int, dict[str, Any]]:
        cmd = StepCommand(
            step=step,
            method="inc-int32",
            size=size,
            iteration=step,
            input=kind,
            seed=2,
            checker=0,
            job=job,
            ring=RingSettings(timeout_s=0.05),
        )
        self.server.post(step, cmd.to_dict())
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
    return (
        not any("error" in r for r in reports.values())
        and len({r["digest"] for r in reports.values()}) == 1
        and reports[0]["max_abs_error"] == 0.0
    )


def test_a_re_planned_job_finishes_the_interrupted_allreduce_and_runs_the_next(rig: Rig) -> None:
    rig.die_after(N * 12)

    rig.verdict = rig.revived
    reports = rig.step(1)
    assert exact(reports), reports
    assert len(rig.decided) == 1 and len(rig.decided[0]) == N  # every rank reported, once
    for r in reports.values():
        (event,) = r["failovers"]
        assert event["failed"] == ["c1"] and event["root"] == "c2" and 0 < event["redo"] <= event["chunks"]
        assert JOB.failure_timeout_s is not None and event["stalled_s"] >= JOB.failure_timeout_s
    again = rig.step(2, job=REINSTALLED)  # later steps carry the new job: the same worker goes on
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


def test_a_rank_that_finished_before_the_failure_is_called_back_to_redo_the_others_chunks(rig: Rig) -> None:
    """The switch dies just after rank 0 got every result, before ranks 1 and 2 got the last one: rank 0 has
    reported the step and waits for the next; the others' fail-over barrier calls it back instead of waiting
    for it until the coordinator's timeout (60 s here), and all three redo the missing chunks."""
    chunks = 40
    rig.die_once_rank0_has(chunks)
    rig.verdict = rig.revived
    t0 = time.monotonic()
    reports = rig.step(1, size=chunks * 256)
    assert time.monotonic() - t0 < 30  # not the coordinator's 60 s timeout
    assert exact(reports), reports
    (values,) = rig.decided
    assert [v["rejoined"] for v in values] == [True, False, False]
    assert values[0]["missing"] == pack_mask(np.zeros(chunks, dtype=bool))  # rank 0 held everything
    (event,) = reports[0]["failovers"]
    assert event["rejoined"] and event["detected_at"] is None and event["redo"] >= 1
    assert reports[0]["rejoined"] == 1 and "error" not in reports[0]
    for r in (1, 2):
        (event,) = reports[r]["failovers"]
        assert not event["rejoined"] and event["missing"] >= 1 and event["redo"] == reports[0]["failovers"][0]["redo"]
    again = rig.step(2, size=chunks * 256, job=REINSTALLED)  # every rank on the new install
    assert exact(again) and not any("failovers" in r for r in again.values())


def test_a_rejoined_rank_whose_redone_chunks_differ_reports_an_error(rig: Rig, monkeypatch: Any) -> None:
    """The comparison can fail: rank 0's kept result is altered (as a corrupted memory would), so its redo of
    the others' chunks no longer matches what it returned, and its report says so."""
    chunks = 40
    rig.die_once_rank0_has(chunks)
    rig.verdict = rig.revived
    real = Agent.rejoin

    def tampered(self: Agent, call: dict[str, Any]) -> dict[str, Any]:
        assert self._finished is not None
        self._finished["report"] = {**self._finished["report"], "digest": "0" * 16}
        return real(self, call)

    monkeypatch.setattr(Agent, "rejoin", tampered)
    reports = rig.step(1, size=chunks * 256)
    assert "differ from the result this rank returned" in reports[0]["error"]
    assert all("error" not in reports[r] for r in (1, 2))


def test_a_lost_round_on_a_live_tree_is_redone_by_every_rank_and_the_next_step_runs_aligned(rig: Rig) -> None:
    """Rank 2 never gets the last result of slot 1 (a cell that cannot complete: the corrupted stored result
    of the faults experiment), while the tree answers: ranks 0 and 1 finish. Rank 2 goes to the fail-over after
    its stalls, ranks 0 and 1 are called back, the verdict is the same tree (a false alarm), and all three redo
    the chunk under the next epoch. The next step needs no fail-over: every rank starts from the same shadow
    copies (without realign() the finished ranks would be a round ahead on every slot)."""
    chunks = 40
    last_of_slot1 = (chunks - 4 + 1) * 256
    rig.alive = True
    rig.switch.drop = lambda direction, rank, h: direction == "down" and rank == 2 and h["offset"] == last_of_slot1

    def same_tree() -> dict[str, Any]:
        rig.switch.drop = None
        return {"job": JOB.to_dict(), "failed": []}

    rig.verdict = same_tree
    reports = rig.step(1, size=chunks * 256)
    assert exact(reports), reports
    (values,) = rig.decided
    assert [v["rejoined"] for v in values] == [True, True, False]
    assert "presumably lost" in values[2]["why"]
    for r in range(N):
        (event,) = reports[r]["failovers"]
        assert event["redo"] == 1 and event["failed"] == []
    again = rig.step(2, size=chunks * 256)
    assert exact(again) and not any("failovers" in r for r in again.values()), again


def test_a_rejoined_rank_of_a_speculated_allreduce_redoes_at_the_same_guesses(rig: Rig) -> None:
    """A small all-reduce (4 chunks on 4 slots) guesses its exponents from the one before; the guess is kept
    below the agreed exponent, so a redo at the agreed exponents would round differently from what rank 0
    returned. The redo guesses the same (Partial.guess): every rank ends with rank 0's bits, and rank 0's check
    of its redone chunks passes. Normal inputs, so a different rounding would change the digest."""
    chunks = 4
    assert exact_digests(rig.step(1, size=chunks * 256, kind="normal"))  # the history the guesses come from
    rig.die_once_rank0_has(chunks)
    rig.verdict = rig.revived
    reports = rig.step(2, size=chunks * 256, kind="normal")
    assert exact_digests(reports), reports
    # every rank's redo guessed too (no exponent round), rank 0's report is its first call's
    assert reports[0]["rejoined"] == 1 and all(r["exponent_rounds"] == 0 for r in reports.values()), reports


def exact_digests(reports: dict[int, dict[str, Any]]) -> bool:
    """No error, one digest, and the checker's result within its bound (inputs that are not integers)."""
    return (
        not any("error" in r for r in reports.values())
        and len({r["digest"] for r in reports.values()}) == 1
        and reports[0]["max_error_ratio"] <= 1.0
    )


def test_a_rank_that_cannot_rejoin_fails_the_barrier_at_once(rig: Rig, monkeypatch: Any) -> None:
    """A called-back rank that cannot take part (here it lost what it kept of the step) tells the barrier so:
    the others fail with its reason at once instead of waiting out the coordinator's 60 s."""
    chunks = 40
    rig.die_once_rank0_has(chunks)
    rig.verdict = {"job": REINSTALLED.to_dict(), "failed": ["c1"]}
    real = Agent.run_step

    def forgetful(self: Agent, cmd: StepCommand) -> dict[str, Any]:
        report = real(self, cmd)
        self._finished = None
        return report

    monkeypatch.setattr(Agent, "run_step", forgetful)
    t0 = time.monotonic()
    reports = rig.step(1, size=chunks * 256)
    assert time.monotonic() - t0 < 30
    assert "called back to step 1, but the last in-network step this agent finished was none" in reports[0]["error"]
    for r in (1, 2):
        assert "rank 0 could not rejoin the fail-over: StepError: called back" in reports[r]["error"], reports[r]


@pytest.mark.parametrize("notify", [True, False])
def test_a_failure_notice_from_the_runner_starts_the_fail_over_without_the_timeout(rig: Rig, notify: bool) -> None:
    """The runner hears the switch die and notifies (CoordinatorServer.notify): every agent's watcher interrupts
    its worker, so the fail-over's trigger is the notice on every rank. Without the notice (the detector off)
    the same failure is found by the failure timeout: the trigger says so, and the notice check fails."""
    for a in rig.agents:
        a.watch_notices()
    sw = rig.switch
    died = threading.Event()
    after = N * 12

    def drop(*_: object) -> bool:
        if sw.counters["results_sent"] >= after:
            died.set()
            return True
        return False

    sw.drop = drop

    def notifier() -> None:
        if died.wait(30):
            rig.server.notify({"job_id": JOB.job_id, "install": JOB.install, "kind": "switch", "what": "c1", "at": 1.0})

    if notify:
        threading.Thread(target=notifier, daemon=True).start()
    rig.verdict = rig.revived
    reports = rig.step(1)
    assert exact(reports), reports
    triggers = {r["failovers"][0]["trigger"] for r in reports.values()}
    assert triggers == ({"notice"} if notify else {"timeout"}), triggers
    assert all(len(a.notices) == (1 if notify else 0) for a in rig.agents)
    again = rig.step(2, job=REINSTALLED)  # the new install's worker is not interrupted by the old notice
    assert exact(again) and not any("failovers" in r for r in again.values())


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the dying agent's own thread
def test_an_agent_that_dies_mid_allreduce_fails_the_step_on_every_other_rank_by_name(rig: Rig) -> None:
    """Rank 2's agent ends mid all-reduce (its coordinator connection closes, as when its process is killed):
    the coordinator fails every barrier naming it and the runner's notice stops the others' data-plane wait, so
    ranks 0 and 1 report the step failed, naming rank 2, instead of waiting for a contribution that never
    comes (this job's failure timeout is an hour: only the notice ends the wait)."""
    for a in rig.agents:
        a.watch_notices()
    hour = dataclasses.replace(JOB, failure_timeout_s=3600.0)
    rig.server.on_agent_lost = lambda rank: rig.server.notify(
        {"job_id": JOB.job_id, "install": JOB.install, "kind": "host", "what": f"rank {rank}", "at": 1.0}
    )
    sw = rig.switch
    dying = rig.agents[2]

    def drop(direction: str, rank: int, fields: dict[str, int]) -> bool:
        if rank == 2 and direction == "up" and sw.counters["results_sent"] >= N * 12:
            if dying.client is not None:
                threading.Thread(target=dying.client.close, daemon=True).start()  # once: the connection ends
            return True
        return False

    sw.drop = drop
    cmd = StepCommand(
        step=1,
        method="inc-int32",
        size=40 * 256,
        iteration=1,
        input="ones",
        seed=2,
        checker=0,
        job=hour,
        ring=RingSettings(timeout_s=0.05),
    )
    rig.server.post(1, cmd.to_dict())
    reports = rig.server.step_reports(1, 60)
    assert rig.server.lost == {2}
    assert sorted(reports) == [0, 1], reports
    for r in (0, 1):
        assert "rank 2's agent is gone" in reports[r]["error"], reports[r]
    assert all(len(rig.agents[r].notices) == 1 for r in (0, 1))
