"""A standby controller (issue 36): two controller processes on running embedded switches (no Mininet), the
primary (`p4ina controller serve`, election id 3) and the standby (`p4ina controller standby`, election id 2).
The primary is killed by PID; the switches promote the standby (arbitration), which reconciles with the
primary's state file and the switches (nothing lost, nothing duplicated: the tokens read back from the switches
are the ones the primary installed), then moves the job off a switch killed after it. The checker fails for a
standby that was primary before the primary died (an election id above the primary's), and for a reconciled
state that lost or changed a job's token."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller import names as N
from controller.api import DEFAULT_P4INFO, Controller
from controller.cli import main as cli_main
from controller.client import update
from controller.entities import TableEntry
from controller.installer import read_entities
from controller.leafspine import leaf_spine
from controller.service import Service, ServiceReport
from controller.standby import Standby, Takeover, TakeoverError, job_tokens
from controller.state import State
from controller.topology import Topology
from emulation.localnet import embedded_switches
from tests.controller.test_control_faults import stray_job

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 120.0  # a loaded machine makes RPCs slow; a bound on waiting, not a measurement
BOUND_S = 10.0  # the standby's bound: first promotion to the last (controller.standby.DEFAULT_BOUND_S)
PRIMARY_ID, STANDBY_ID, OBSERVER_ID = 3, 2, 1  # the observer (this test's reads) is a backup below both
JOB = 7


@pytest.fixture
def net(tmp_path: Path) -> Iterator[tuple[Topology, dict[str, Any], Path]]:
    """leaf_spine(2, 2, 1): leaves l1 (h1), l2 (h2), spines s1, s2, the pipeline pushed; its topology JSON."""
    try:
        cm = embedded_switches(leaf_spine(2, 2, 1))
        live, handles = cm.__enter__()
    except (OSError, RuntimeError) as ex:
        pytest.skip(f"the embedded switch cannot start here: {ex}")
    try:
        with Controller(live, election_id=10, timeout=TIMEOUT) as first:  # closed before the controllers start
            first.push_pipeline()
        topo_file = tmp_path / "topo.json"
        live.save(topo_file)
        yield live, handles, topo_file
    finally:
        cm.__exit__(None, None, None)


class Processes:
    """Controller processes this test started, ended by PID whatever happens."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, verb: str, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        report, log = self.tmp_path / f"{name}.json", self.tmp_path / f"{name}.log"
        cmd = [sys.executable, "-m", "p4ina", "controller", verb, *args, "--report", str(report), "-v"]
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())
        self.procs.append(proc)
        return proc, report

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    p = Processes(tmp_path)
    try:
        yield p
    finally:
        p.close()


def start_primary(
    procs: Processes, topo: Topology, topo_file: Path, tmp_path: Path
) -> tuple[list[str], subprocess.Popen[bytes], Path, dict[int, dict[str, int]]]:
    """`p4ina controller serve` with job JOB over every host, serving: the arguments a standby shares with it,
    the process, its report and the jobs (tokens) it installed."""
    common = ["--topology", str(topo_file), "--state", str(tmp_path / "state.json"), "--timeout", str(TIMEOUT)]
    hosts = ",".join(h.name for h in topo.hosts)
    primary, report = procs.start(
        "serve", "primary", *common, "--election-id", str(PRIMARY_ID), "--job", str(JOB), "--hosts", hosts
    )
    installed = wait_report(primary, report, lambda r: r.status == "serving", "the primary").jobs
    return common, primary, report, installed


def wait_report(proc: subprocess.Popen[bytes], path: Path, done: Any, what: str) -> ServiceReport:
    """Poll a controller's report until done(report); the process's log on failure."""
    log = path.with_suffix(".log")
    deadline = time.monotonic() + TIMEOUT
    while True:
        if path.exists():
            rep = ServiceReport.load(path)
            if done(rep):
                return rep
            assert rep.status != "failed", f"{what}: {rep.error}\n{log.read_text()[-3000:]}"
        assert proc.poll() is None, f"{what}: exited {proc.returncode}\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{what}: not within {TIMEOUT:.0f} s\n{log.read_text()[-3000:]}"
        time.sleep(0.05)


def tokens_on_switches(topo: Topology, dead: set[str] = frozenset()) -> dict[int, dict[str, int]]:
    """job -> switch -> token of every job_config entry the live switches hold, read by a backup session."""
    out: dict[int, dict[str, int]] = {}
    with Controller(topo, p4info=DEFAULT_P4INFO, election_id=OBSERVER_ID, timeout=TIMEOUT, backup_ok=True) as obs:
        for sw in topo.switches:
            if sw.name in dead:
                continue
            assert not obs.fabric.client(sw.name).is_primary, f"the observer became primary on {sw.name}"
            for e in read_entities(obs.fabric.client(sw.name), obs.schema, [N.T_JOB_CONFIG], groups=()):
                assert isinstance(e, TableEntry)
                out.setdefault(int(e.exact(N.K_JOB_ID) or 0), {})[sw.name] = int(dict(e.params)["token"])
    return out


def check_takeover(
    takeover: Takeover | None,
    killed_at: float,
    switches: set[str],
    installed: dict[int, dict[str, int]],
    on_switches: dict[int, dict[str, int]],
    bound_s: float = BOUND_S,
) -> None:
    """The standby became primary on every switch only after the primary died, within the bound, and its state
    holds exactly the jobs and tokens the primary installed and the switches hold (none lost, none duplicated)."""
    assert takeover is not None, "no takeover"
    assert set(takeover.promoted) == switches, f"primary on {sorted(takeover.promoted)}, not on every switch"
    early = sorted(s for s, t in takeover.promoted.items() if t < killed_at) + list(takeover.primary_from_start)
    assert not early, f"primary on {sorted(set(early))} before the primary was killed"
    took = takeover.all_primary_at - killed_at
    assert took <= bound_s, f"primary everywhere {took:.2f} s after the kill (bound {bound_s} s)"
    rec = takeover.reconciliation
    assert rec["clean"] and not rec["unknown"] and not rec["drifted"], rec
    assert takeover.tokens == installed, f"reconciled {takeover.tokens}, the primary installed {installed}"
    assert on_switches == installed, f"the switches hold {on_switches}, the primary installed {installed}"


def test_the_standby_takes_over_reconciles_and_fails_the_job_over(
    net: tuple[Topology, dict[str, Any], Path], procs: Processes, tmp_path: Path
) -> None:
    topo, handles, topo_file = net
    common, primary, p_report, installed = start_primary(procs, topo, topo_file, tmp_path)
    assert set(installed) == {JOB}
    standby, s_report = procs.start("standby", "standby", *common, "--election-id", str(STANDBY_ID))
    wait_report(standby, s_report, lambda r: r.status == "backup", "the standby")
    time.sleep(0.5)  # still backup while the primary lives
    assert ServiceReport.load(s_report).status == "backup"

    killed_at = time.monotonic()
    primary.kill()  # SIGKILL: no goodbye, the kernel closes its connections
    primary.wait(10)
    rep = wait_report(standby, s_report, lambda r: r.status == "serving", "the takeover")
    names = {s.name for s in topo.switches}
    check_takeover(rep.takeover, killed_at, names, installed, tokens_on_switches(topo))
    assert rep.takeover is not None

    # a switch of the job's tree dies: the standby, now the controller, moves the job off it
    old = installed[JOB]
    root = next(s for s in old if topo.switch(s).role == "spine")
    handles[root].stop()
    rep = wait_report(standby, s_report, lambda r: r.failovers, "the fail-over")
    (moved,) = rep.failovers
    assert moved.moved and moved.job_id == JOB and moved.failed == (root,), moved
    assert root not in moved.tokens and moved.root != root, moved
    assert rep.jobs == {JOB: moved.tokens}
    assert tokens_on_switches(topo, dead={root}) == {JOB: moved.tokens}  # the surviving switches hold the new tree
    for sw in set(old) & set(moved.tokens):  # a new install on every switch it stayed on
        assert moved.tokens[sw] != old[sw], (sw, old, moved.tokens)
    assert State.load(tmp_path / "state.json").failed == {root}  # the state file is the standby's now

    standby.send_signal(signal.SIGTERM)
    assert standby.wait(30) == 0
    assert ServiceReport.load(s_report).status == "stopped"


def test_the_checker_catches_a_standby_that_was_primary_before_the_primary_died(
    net: tuple[Topology, dict[str, Any], Path], procs: Processes, tmp_path: Path
) -> None:
    """The wrong variant: the "standby" gets an election id above the primary's, so arbitration makes it
    primary at once; the primary, demoted while alive, stops and says why; the checker must fail."""
    topo, _, topo_file = net
    common, primary, p_report, installed = start_primary(procs, topo, topo_file, tmp_path)
    standby, s_report = procs.start("standby", "standby", *common, "--election-id", str(PRIMARY_ID + 1))
    # promoted at once: the primary, demoted on every switch, stops by itself and says why
    demoted = wait_report(primary, p_report, lambda r: r.status != "serving", "the demotion")
    assert demoted.status == "failed" and f"election id {PRIMARY_ID + 1} is primary now" in demoted.error, demoted
    assert primary.wait(30) == 1
    gone_at = time.monotonic()
    rep = wait_report(standby, s_report, lambda r: r.status == "serving", "the higher id's takeover")
    assert rep.takeover is not None and rep.takeover.primary_from_start
    with pytest.raises(AssertionError, match="before the primary was killed"):
        check_takeover(rep.takeover, gone_at, {s.name for s in topo.switches}, installed, tokens_on_switches(topo))


def test_the_checker_catches_a_lost_or_changed_token() -> None:
    """A takeover that is right but for its reconciled tokens: one token changed, one switch's entry lost."""
    installed = {JOB: {"l1": 1, "l2": 1, "s1": 1}}
    good = Takeover(
        STANDBY_ID,
        0.0,
        {"l1": 1.0, "l2": 1.001, "s1": 1.002},
        (),
        0.01,
        {"clean": True, "unknown": {}, "drifted": {}},
        installed,
    )
    check_takeover(good, 0.5, {"l1", "l2", "s1"}, installed, installed)
    changed = Takeover(**{**good.__dict__, "tokens": {JOB: {"l1": 2, "l2": 1, "s1": 1}}})
    with pytest.raises(AssertionError, match="reconciled"):
        check_takeover(changed, 0.5, {"l1", "l2", "s1"}, installed, installed)
    with pytest.raises(AssertionError, match="the switches hold"):
        check_takeover(good, 0.5, {"l1", "l2", "s1"}, installed, {JOB: {"l1": 1, "l2": 1}})
    with pytest.raises(AssertionError, match="after the kill"):
        check_takeover(good, 0.5, {"l1", "l2", "s1"}, installed, installed, bound_s=0.1)


def test_a_primary_alive_on_some_switches_is_named_and_nothing_is_taken_over(
    net: tuple[Topology, dict[str, Any], Path],
) -> None:
    """In one process: the primary gives up one switch only (its session there closed); that switch promotes the
    standby, the others do not within the bound, and the standby refuses to take over, naming them."""
    topo, _, _ = net
    with Controller(topo, election_id=PRIMARY_ID, timeout=TIMEOUT) as primary:
        primary.fabric.connect()
        with Controller(topo, election_id=STANDBY_ID, timeout=TIMEOUT, backup_ok=True) as ctl:
            standby = Standby(ctl, bound_s=0.5)
            standby.open()
            assert standby.promoted == {}
            assert all(not ctl.fabric.client(s.name).is_primary for s in topo.switches)
            primary.fabric.forget("l1")
            with pytest.raises(
                TakeoverError,
                match=r"primary on 1 of 4 live switches 0.5 s after .* l2, s1, s2 still name election id 3",
            ):
                standby.wait_primary(timeout=TIMEOUT)
            assert set(standby.promoted) == {"l1"} and ctl.fabric.client("l1").is_primary
            with pytest.raises(TakeoverError, match="not primary on l2, s1, s2"):
                standby.take_over(State())


def test_the_takeover_reports_a_job_the_state_lacks_and_deletes_it_only_with_repair(
    net: tuple[Topology, dict[str, Any], Path], tmp_path: Path
) -> None:
    """In one process: the primary dies halfway through installing job 9 (its job_config on l1, not in the state
    file). The takeover names it; without repair it stays on the switch (it could be another controller's job),
    with repair it is taken off; job 7, in the state, keeps its tokens either way."""
    topo, _, _ = net
    path = tmp_path / "state.json"
    hosts = [h.name for h in topo.hosts]
    for repair in (False, True):
        with Controller(topo, state=State.load(path), election_id=PRIMARY_ID, timeout=TIMEOUT) as primary:
            primary.fabric.connect()
            if not repair:
                primary.install_job(JOB, hosts)
                primary.fabric.client("l1").write([update("insert", stray_job(9, 200).encode(primary.schema))])
            with Controller(topo, election_id=STANDBY_ID, timeout=TIMEOUT, backup_ok=True) as ctl:
                standby = Standby(ctl, bound_s=BOUND_S, repair=repair)
                standby.open()
                primary.close()  # its streams end: every switch promotes the standby
                assert standby.wait_primary(timeout=TIMEOUT)
                took = standby.take_over(State.load(path))
                assert took.reconciliation["unknown"] == {"9": ["l1"]}, took.reconciliation
                assert bool(took.reconciliation["repaired"]) == repair
                held = tokens_on_switches(topo)
                assert (9 in held) == (not repair), held
                assert took.tokens == {JOB: held[JOB]} == job_tokens(State.load(path))


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["standby"], "a standby needs --election-id, below the primary's"),
        (["serve", "--job", "7"], "--job and --hosts go together"),
    ],
)
def test_controller_verbs_refuse_what_cannot_be_by_name(
    argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    st = ["--topology", "leaf-spine:2x2x1", "--state", str(tmp_path / "state.json")]
    assert cli_main(["controller", *argv, *st]) == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "state.json").exists()  # nothing was started, nothing saved


def test_a_switch_dead_before_the_takeover_is_marked_failed_and_its_job_moved(
    net: tuple[Topology, dict[str, Any], Path], tmp_path: Path
) -> None:
    """In one process: the job's root dies while the standby waits and the primary dies before it did anything
    about it. The standby takes over the live switches (the dead one is not waited for), reconcile finds the job
    drifted there, and its service moves the job off it."""
    topo, handles, _ = net
    path = tmp_path / "state.json"
    with Controller(topo, state=State.load(path), election_id=PRIMARY_ID, timeout=TIMEOUT) as primary:
        primary.fabric.connect()
        plan = primary.install_job(JOB, [h.name for h in topo.hosts])
        with Controller(topo, election_id=STANDBY_ID, timeout=TIMEOUT, backup_ok=True) as ctl:
            standby = Standby(ctl, bound_s=BOUND_S)
            standby.open()
            handles[plan.root].stop()
            deadline = time.monotonic() + TIMEOUT
            while plan.root not in standby.lost:
                assert time.monotonic() < deadline, "the standby's stream to the dead root did not end"
                time.sleep(0.01)
            primary.close()
            assert standby.wait_primary(timeout=TIMEOUT)
            took = standby.take_over(State.load(path))
            assert set(took.lost) == {plan.root}
            assert set(took.promoted) == {s.name for s in topo.switches} - {plan.root}
            assert took.reconciliation["drifted"] == {str(JOB): [plan.root]}, took.reconciliation
            report = ServiceReport("standby", STANDBY_ID, os.getpid(), takeover=took)
            service = Service(ctl, report)
            service.start()
            service.dead_before(plan.root, took.lost[plan.root])
            stop = threading.Event()
            runner = threading.Thread(target=service.run, args=(stop,))
            runner.start()
            try:
                while not report.failovers:
                    assert time.monotonic() < deadline and runner.is_alive(), "no fail-over"
                    time.sleep(0.01)
            finally:
                stop.set()
                runner.join(30)
            (moved,) = report.failovers
            assert moved.moved and plan.root not in moved.tokens and moved.failed == (plan.root,), moved
            assert tokens_on_switches(topo, dead={plan.root}) == {JOB: moved.tokens}
            assert State.load(path).failed == {plan.root}
