"""A host that dies mid all-reduce, and the job goes on: shrink (the survivors' sum, said so) or spare (a standby
agent takes the dead rank's place and input, the full sum). The runner's part is played by the test: it names the
new members on the coordinator, re-installs the job (here: the fake switch's fan-in and token) and posts the step
again; the agents' part (seats, inputs, the sum they report and check) is the code under test."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest

from hosts import workload
from hosts.agent import Agent, AgentConfig
from hosts.coordination import CoordinationError, CoordinatorClient, CoordinatorServer, check_step
from hosts.fakeswitch import FakeSwitch, FakeTransport
from hosts.packets import Endpoint
from hosts.tickets import JobTicket, RingSettings, StepCommand, TicketError
from tests.hosts.test_agent import GROUPS, free_base_ports

N = 3
DEAD = 2  # the fake switch sends results to children 0..fan_in-1: the last rank is the one that can go
SPARE = N  # the standby agent's coordinator rank (size..size+standby-1)
JOB = JobTicket(
    job_id=3,
    slots=4,
    up_lanes="int32",
    down_lanes="int32",
    shift=0,
    install=0,
    timeout_s=0.02,
    min_timeout_s=0.02,
    failure_timeout_s=3600.0,  # only the notice ends the survivors' wait
)
REPLANNED = dataclasses.replace(JOB, install=1)


class Rig:
    """N agents and one standby on a fake switch; the standby sits on the dead rank's port (its place in the tree)."""

    def __init__(self, tmp_path: Path) -> None:
        self.server = CoordinatorServer(f"unix:{tmp_path / 'c.sock'}", N, timeout_s=60, standby=1).start()
        self.server.on_agent_lost = lambda rank: self.server.notify(
            {"job_id": JOB.job_id, "install": JOB.install, "kind": "host", "what": f"rank {rank}", "at": 1.0}
        )
        self.switch = FakeSwitch(job_id=JOB.job_id, n_workers=N, slot_count=JOB.slots)
        peers = tuple(f"127.0.0.1:{p}" for p in free_base_ports(N))
        self.agents = [
            Agent(
                AgentConfig(rank=r, workers=N, coord=self.server.address, peers=peers, groups=GROUPS),
                CoordinatorClient(self.server.address, r, N),
                transport=FakeTransport(self.switch, min(r, DEAD)),
                endpoint=Endpoint(f"02:00:00:00:00:0{r}", f"10.0.0.{r + 1}"),
            )
            for r in range(N + 1)
        ]
        self.threads = [threading.Thread(target=a.serve, daemon=True) for a in self.agents]
        for a, t in zip(self.agents, self.threads, strict=True):
            a.watch_notices()
            t.start()

    def command(self, step: int, job: JobTicket = JOB, **extra: Any) -> StepCommand:
        return StepCommand(
            step=step,
            method="inc-int32",
            size=40 * 256,
            iteration=1,  # every step of a test sums the same iteration's inputs: a redo is comparable
            input="ones",
            seed=2,
            checker=0,
            job=job,
            ring=RingSettings(timeout_s=0.05),
            **extra,
        )

    def run(self, cmd: StepCommand) -> dict[int, dict[str, Any]]:
        self.server.post(cmd.step, cmd.to_dict())
        return self.server.step_reports(cmd.step, 60)

    def kill_mid_allreduce(self, step: int) -> dict[int, dict[str, Any]]:
        """Rank DEAD's agent ends a dozen rounds in (its coordinator connection closes, as when it is killed)."""
        sw, dying = self.switch, self.agents[DEAD]

        def drop(direction: str, rank: int, fields: dict[str, int]) -> bool:
            if rank == DEAD and direction == "up" and sw.counters["results_sent"] >= N * 12:
                threading.Thread(target=dying.client.close, daemon=True).start()
                return True
            return False

        sw.drop = drop
        reports = self.run(self.command(step))
        assert self.server.lost == {DEAD}
        assert sorted(reports) == [0, 1] and all("rank 2's agent is gone" in r["error"] for r in reports.values())
        return reports

    def reinstall(self, fan_in: int) -> None:
        """The controller's re-plan, as far as the fake switch goes: a new token, the new tree's fan-in."""
        self.switch.drop, self.switch.token, self.switch.fan_in = None, 2, fan_in

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


def full_sum(rig: Rig) -> dict[int, dict[str, Any]]:
    """The step without a failure: every rank's input summed (the standby takes no part)."""
    before = rig.run(rig.command(0))
    assert sorted(before) == [0, 1, 2] and check_step(before, [0, 1, 2], [0, 1, 2], 0).ok
    return before


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the dying agent's own thread
def test_shrink_the_survivors_redo_the_step_and_report_their_sum_as_theirs(rig: Rig) -> None:
    before = full_sum(rig)
    rig.kill_mid_allreduce(1)
    rig.server.set_members([0, 1])
    rig.reinstall(fan_in=2)
    after = rig.run(rig.command(2, job=REPLANNED, members=(0, 1)))
    assert sorted(after) == [0, 1]
    assert check_step(after, [0, 1], [0, 1], 0).ok
    # the checker compared with numpy's sum of ranks 0 and 1's inputs, exactly; it is not the full sum
    assert after[0]["max_abs_error"] == 0.0 and after[0]["sum_over"] == [0, 1]
    assert after[0]["digest"] != before[0]["digest"]
    survivors, _ = workload.reference_sum("ones", 40 * 256, 2, seed=2, iteration=1, ranks=[0, 1])
    full, _ = workload.reference_sum("ones", 40 * 256, N, seed=2, iteration=1)
    assert (survivors != full).all()
    assert not check_step(after, [0, 1], [0, 1, 2], 0).ok  # never taken for the full sum
    assert rig.agents[0]._workers[("inc", JOB.job_id, 1)].job.n_workers == 2


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_spare_takes_the_dead_rank_and_its_input_and_the_full_sum_comes_back(rig: Rig) -> None:
    before = full_sum(rig)
    assert SPARE not in before  # idle until called
    rig.kill_mid_allreduce(1)
    rig.server.set_members([0, 1, SPARE])
    rig.reinstall(fan_in=N)
    after = rig.run(rig.command(2, job=REPLANNED, members=(0, 1, SPARE), inputs=(0, 1, DEAD)))
    assert sorted(after) == [0, 1, SPARE]
    assert check_step(after, [0, 1, SPARE], [0, 1, 2], 0).ok
    assert after[SPARE]["input_rank"] == DEAD and after[0]["max_abs_error"] == 0.0
    assert {r["digest"] for r in after.values()} == {before[0]["digest"]}  # the very sum of the step without failure


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_survivors_sum_passed_off_as_the_full_sum_fails_the_check(rig: Rig, monkeypatch: Any) -> None:
    """Agents that claim the full sum after shrinking: the checker's numpy comparison and the runner's expected
    membership both catch it."""
    rig.kill_mid_allreduce(1)
    rig.server.set_members([0, 1])
    rig.reinstall(fan_in=2)
    monkeypatch.setattr(Agent, "_sum_over", lambda self, cmd: list(range(N)))
    after = rig.run(rig.command(2, job=REPLANNED, members=(0, 1)))
    assert after[0]["max_error_ratio"] > 1.0
    outcome = check_step(after, [0, 1], [0, 1], 0)
    assert not outcome.ok
    assert any("expected [0, 1]" in p for p in outcome.problems)
    assert any("exceeds its bound" in p for p in outcome.problems)


def test_members_are_checked_where_they_are_named(tmp_path: Path) -> None:
    with CoordinatorServer(f"unix:{tmp_path / 'c.sock'}", N, standby=1) as server:
        server.lost.add(DEAD)
        for bad in ([0, 1, DEAD], [0, 0], [], [0, N + 1]):
            with pytest.raises(CoordinationError, match="members"):
                server.set_members(bad)
        server.set_members([0, 1, SPARE])
        assert server.members == (0, 1, SPARE)


def test_a_barrier_waits_for_its_members_in_their_order_and_refuses_others(tmp_path: Path) -> None:
    with CoordinatorServer(f"unix:{tmp_path / 'c.sock'}", N, standby=1, timeout_s=10) as server:
        server.set_members([1, SPARE, 0])
        out: dict[int, Any] = {}

        def arrive(r: int) -> None:
            client = CoordinatorClient(server.address, r, N)
            try:
                out[r] = client.exchange("b", r * 10)
            except CoordinationError as ex:
                out[r] = str(ex)
            finally:
                client.close()

        threads = [threading.Thread(target=arrive, args=(r,)) for r in (0, 1, 2, SPARE)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert out[0] == out[1] == out[SPARE] == [10, 30, 0]
        assert "not a member" in out[2]


def test_step_command_members_and_inputs() -> None:
    cmd = StepCommand(
        step=1, method="inc-int32", size=8, iteration=0, job=JOB, members=(0, 1, SPARE), inputs=(0, 1, DEAD)
    )
    import json

    assert StepCommand.from_dict(json.loads(json.dumps(cmd.to_dict()))) == cmd
    assert cmd.seat(SPARE, N) == (2, 3, DEAD) and cmd.seat(DEAD, N) is None and cmd.seat(1, N) == (1, 3, 1)
    plain = dataclasses.replace(cmd, members=None, inputs=None)
    assert plain.seat(1, N) == (1, N, 1) and plain.seat(SPARE, N) is None  # a standby sits out ordinary steps
    for bad, match in (
        (dict(members=(0, 0)), "each agent once"),
        (dict(members=()), "each agent once"),
        (dict(members=None, inputs=(0,)), "members given"),
        (dict(members=(0, 1), inputs=(0,)), "one input rank per member"),
        (dict(members=(0, 1), inputs=(1, 1)), "each input once"),
        (dict(members=(0, -1)), "below 0"),
        (dict(method="ring", job=None, members=(0, 1)), "host method"),
    ):
        with pytest.raises(TicketError, match=match):
            dataclasses.replace(plain, **bad)
    with pytest.raises(TicketError, match="expected a list"):
        StepCommand.from_dict({**cmd.to_dict(), "members": 3})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rank", "1", "--workers", "3", "--standby"], "a standby agent's rank follows the workers'"),
        (["--rank", "3", "--workers", "3"], "ranks of 3 workers are 0..2"),
    ],
)
def test_the_agent_command_refuses_a_standby_among_the_workers(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from hosts.cli import main

    with pytest.raises(SystemExit) as ex:
        main(["agent", "--coord", "unix:/nonexistent", *argv])
    assert ex.value.code == 2 and message in capsys.readouterr().err
