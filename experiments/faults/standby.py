"""A controller crash over a running network (issue 36): the faults experiment's controller-crash phase.

The runner's own controller steps aside (its sessions closed) and two controller processes take the fabric, on
the runner's state file: the primary (`p4ina controller serve`) and the standby (`p4ina controller standby`,
an election id below the primary's). The primary is killed by PID; the switches promote the standby, which
reconciles with the state file and the switches (controller.standby). Measured: the kill to the standby being
primary on every switch, the spread of the promotions, the reconcile. Checked: the standby's state has the jobs
and tokens the primary had, and the switches hold exactly those (read back by a backup session below both).
Then, with `kill_switch`, a switch of the first job's tree (its root) dies and the standby moves the job (timed
and checked the same way). The standby is stopped at the end; the runner's controller adopts the state file
the standby left (jobs moved, switches failed) and opens its sessions again on use.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller import names as N
from controller.api import Controller
from controller.entities import TableEntry
from controller.installer import read_entities
from controller.service import ServiceReport
from controller.standby import DEFAULT_BOUND_S
from controller.state import State

LOG = logging.getLogger(__name__)

PRIMARY_ID, STANDBY_ID, OBSERVER_ID = 3, 2, 1  # the observer's reads: a backup below both controllers


class ControllerCrashError(RuntimeError):
    """The phase could not run (a controller process failed or did not get there in time); the log names why."""


class ControllerProcess:
    """`p4ina controller VERB` as a child process with its --report file and log; ended by its PID."""

    def __init__(self, verb: str, name: str, work_dir: Path, args: list[str]) -> None:
        self.name = name
        self.report_path, self.log = work_dir / f"{name}.json", work_dir / f"{name}.log"
        cmd = [sys.executable, "-m", "p4ina", "controller", verb, *args, "--report", str(self.report_path), "-v"]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)

    def wait_for(self, done: Callable[[ServiceReport], bool], what: str, timeout_s: float) -> ServiceReport:
        """Poll the report until done(report); ControllerCrashError (with the log's tail) when the process fails."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.report_path.exists():
                rep = ServiceReport.load(self.report_path)
                if done(rep):
                    return rep
                if rep.status == "failed":
                    raise ControllerCrashError(f"{self.name}: {what}: {rep.error} ({self.log})")
            if self.proc.poll() is not None:
                raise ControllerCrashError(f"{self.name} exited {self.proc.returncode} before {what}: {self.tail()}")
            if time.monotonic() > deadline:
                raise ControllerCrashError(f"{self.name}: no {what} within {timeout_s:.0f} s: {self.tail()}")
            time.sleep(0.02)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-1500:]

    def kill(self) -> float:
        """SIGKILL (no goodbye: the kernel closes its connections); when, on CLOCK_MONOTONIC."""
        at = time.monotonic()
        self.proc.kill()
        self.proc.wait(30)
        return at

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL if it lingers; its exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        return self.proc.returncode


def tokens_on_switches(observer: Controller, switches: list[str]) -> dict[int, dict[str, int]]:
    """job -> switch -> token of every job_config entry these switches hold."""
    out: dict[int, dict[str, int]] = {}
    for name in switches:
        for e in read_entities(observer.fabric.client(name), observer.schema, [N.T_JOB_CONFIG], groups=()):
            if isinstance(e, TableEntry):
                out.setdefault(int(e.exact(N.K_JOB_ID) or 0), {})[name] = int(dict(e.params)["token"])
    return out


@dataclass
class ControllerCrash:
    """The phase's figures (seconds) and what it found wrong (`problems`, empty when all held)."""

    kill_to_primary_s: float | None = None
    promotion_spread_s: float | None = None
    reconcile_s: float | None = None
    jobs_installed: dict[int, dict[str, int]] = field(default_factory=dict)  # the primary's, before the kill
    jobs_reconciled: dict[int, dict[str, int]] = field(default_factory=dict)  # the standby's, after its reconcile
    jobs_on_switches: dict[int, dict[str, int]] = field(default_factory=dict)  # read back after the takeover
    victim: str | None = None
    failover_s: float | None = None  # the victim's stream ending (signal) to the job moved
    kill_to_moved_s: float | None = None
    jobs_after_failover: dict[int, dict[str, int]] = field(default_factory=dict)  # read back from the survivors
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        def jobs(d: dict[int, dict[str, int]]) -> dict[str, dict[str, int]]:
            return {str(j): dict(sorted(t.items())) for j, t in sorted(d.items())}

        return {
            "kill_to_primary_s": self.kill_to_primary_s,
            "promotion_spread_s": self.promotion_spread_s,
            "reconcile_s": self.reconcile_s,
            "jobs_installed": jobs(self.jobs_installed),
            "jobs_reconciled": jobs(self.jobs_reconciled),
            "jobs_on_switches": jobs(self.jobs_on_switches),
            "victim": self.victim,
            "failover_s": self.failover_s,
            "kill_to_moved_s": self.kill_to_moved_s,
            "jobs_after_failover": jobs(self.jobs_after_failover),
            "problems": self.problems,
        }


def controller_crash(
    ctl: Controller,
    topology_file: Path,
    work_dir: Path,
    kill_switch: Callable[[str], object] | None = None,
    timeout_s: float = 120.0,
    bound_s: float = DEFAULT_BOUND_S,
) -> ControllerCrash:
    """Run the phase on the network `ctl` controls (its state file shared with the controller processes, its
    topology as `topology_file`, with every switch's grpc_addr). `kill_switch(name)` kills a switch (the first
    job's root) once the standby has taken over; None: no switch is killed."""
    if ctl.state.path is None:
        raise ControllerCrashError("the runner's controller has no state file to share with the controller processes")
    work_dir.mkdir(parents=True, exist_ok=True)
    ctl.state.save()
    ctl.fabric.close()  # the runner's sessions (its election id is the observer's) step aside until the end
    common = ["--topology", str(topology_file), "--state", str(ctl.state.path), "--timeout", str(timeout_s)]
    out = ControllerCrash()
    started: list[ControllerProcess] = []
    names = [s.name for s in ctl.topo.switches if s.name not in ctl.state.failed]

    def observe(switches: list[str]) -> dict[int, dict[str, int]]:
        with Controller(ctl.topo, p4info=ctl.schema, election_id=OBSERVER_ID, timeout=timeout_s, backup_ok=True) as o:
            return tokens_on_switches(o, switches)

    try:
        primary = ControllerProcess("serve", "primary", work_dir, [*common, "--election-id", str(PRIMARY_ID)])
        started.append(primary)
        out.jobs_installed = primary.wait_for(lambda r: r.status == "serving", "serving", timeout_s).jobs
        standby = ControllerProcess(
            "standby", "standby", work_dir, [*common, "--election-id", str(STANDBY_ID), "--bound", str(bound_s)]
        )
        started.append(standby)
        standby.wait_for(lambda r: r.status == "backup", "backup sessions", timeout_s)
        killed_at = primary.kill()
        rep = standby.wait_for(lambda r: r.status == "serving", "the takeover", timeout_s)
        tk = rep.takeover
        assert tk is not None  # "serving" is written after the takeover
        out.kill_to_primary_s = tk.all_primary_at - killed_at
        out.promotion_spread_s = tk.all_primary_at - tk.first_promoted
        out.reconcile_s = tk.reconcile_s
        out.jobs_reconciled = tk.tokens
        out.jobs_on_switches = observe(names)
        if tk.primary_from_start or tk.first_promoted < killed_at:
            out.problems.append(f"the standby was primary before the kill: {tk.to_dict()['promoted']}")
        if not tk.reconciliation.get("clean"):
            out.problems.append(f"the switches differed from the primary's state: {tk.reconciliation}")
        if not out.jobs_installed == out.jobs_reconciled == out.jobs_on_switches:
            out.problems.append(
                f"jobs and tokens differ: installed {out.jobs_installed}, reconciled {out.jobs_reconciled}, "
                f"on the switches {out.jobs_on_switches}"
            )
        if kill_switch is not None and out.jobs_reconciled:
            job = min(out.jobs_reconciled)
            out.victim = State.load(ctl.state.path).jobs[job].root  # the standby's state: the primary's plans
            t_kill = time.monotonic()
            kill_switch(out.victim)
            rep = standby.wait_for(lambda r: bool(r.failovers), "the fail-over", timeout_s)
            moved = rep.failovers[0]
            out.failover_s = moved.done_at - moved.signalled_at
            out.kill_to_moved_s = moved.done_at - t_kill
            out.jobs_after_failover = observe([n for n in names if n != out.victim])
            if not moved.moved or out.victim in moved.tokens:
                out.problems.append(f"job {job} not moved off {out.victim}: {moved.to_dict()}")
            elif out.jobs_after_failover != rep.jobs:
                out.problems.append(f"after the fail-over the switches hold {out.jobs_after_failover}, not {rep.jobs}")
        if standby.stop() != 0:
            out.problems.append(f"the standby exited {standby.proc.returncode}: {standby.tail()}")
    finally:
        for p in started:
            p.stop()
        ctl.adopt(State.load(ctl.state.path))  # what the standby left: its moves, the failed switch
    LOG.warning(
        "controller crash: primary on all switches %.1f ms after the kill, reconcile %.1f ms; %s",
        1e3 * (out.kill_to_primary_s or 0.0),
        1e3 * (out.reconcile_s or 0.0),
        "; ".join(out.problems) or "jobs and tokens as installed",
    )
    return out
