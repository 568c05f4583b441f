"""A controller process that keeps its sessions and moves jobs off failed switches until it is stopped.

`p4ina controller serve` (the primary) and `p4ina controller standby` (once it took over) run one: a
FailureMonitor (controller.monitor) holds a stream to every switch; each failure it signals is handled on the
service's own thread (the monitor calls back from gRPC reader threads, which must not block on writes): every job
whose tree holds the failed switch or link moves to a tree without it (Controller.fail_over: new tokens). What it
did goes into a ServiceReport, rewritten (atomically) after each event for whoever watches the process.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from controller.api import Controller
from controller.client import SwitchError
from controller.fabric import FabricError
from controller.installer import InstallError
from controller.monitor import FailureMonitor, FailureSignal
from controller.planner import JobPlan, PlanError
from controller.standby import Takeover, job_tokens
from controller.topology import link_key

LOG = logging.getLogger(__name__)

Role = Literal["primary", "standby"]
# connecting -> (standby: backup ->) serving -> stopped; failed: the error says why
Status = Literal["connecting", "backup", "serving", "stopped", "failed"]


@dataclass(frozen=True)
class Failover:
    """One job moved (or dropped) because a switch or link of its tree failed."""

    job_id: int
    failed: tuple[str, ...]  # the failed switch or link ("a-b") that was signalled
    signalled_at: float  # CLOCK_MONOTONIC (the monitor's clock)
    done_at: float
    moved: bool  # False: no tree is left for it (cut-off hosts, no room) or the move failed: it is off the switches
    root: str | None  # the new tree's root
    tokens: dict[str, int]  # switch -> install token of the new tree
    detail: str = ""  # why it was dropped
    phases: dict[str, float] = field(default_factory=dict)  # Controller.fail_over's timings

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "failed": list(self.failed),
            "signalled_at": self.signalled_at,
            "done_at": self.done_at,
            "moved": self.moved,
            "root": self.root,
            "tokens": dict(sorted(self.tokens.items())),
            "detail": self.detail,
            "phases": self.phases,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Failover:
        return cls(
            int(d["job_id"]),
            tuple(str(x) for x in d["failed"]),
            float(d["signalled_at"]),
            float(d["done_at"]),
            bool(d["moved"]),
            None if d.get("root") is None else str(d["root"]),
            {str(k): int(v) for k, v in d["tokens"].items()},
            str(d.get("detail", "")),
            {str(k): float(v) for k, v in d.get("phases", {}).items()},
        )


@dataclass
class ServiceReport:
    """What a controller process did, for whoever started it (written as JSON to its --report file)."""

    role: Role
    election_id: int
    pid: int
    status: Status = "connecting"
    takeover: Takeover | None = None  # a standby's, once it took over
    jobs: dict[int, dict[str, int]] = field(default_factory=dict)  # job -> switch -> token, as the state says now
    failovers: list[Failover] = field(default_factory=list)
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "election_id": self.election_id,
            "pid": self.pid,
            "status": self.status,
            "takeover": None if self.takeover is None else self.takeover.to_dict(),
            "jobs": {str(j): dict(sorted(t.items())) for j, t in sorted(self.jobs.items())},
            "failovers": [f.to_dict() for f in self.failovers],
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServiceReport:
        role, status = d["role"], d["status"]
        if role not in ("primary", "standby") or status not in ("connecting", "backup", "serving", "stopped", "failed"):
            raise ValueError(f"not a controller report: role {role!r}, status {status!r}")
        return cls(
            role,
            int(d["election_id"]),
            int(d["pid"]),
            status,
            None if d.get("takeover") is None else Takeover.from_dict(d["takeover"]),
            {int(j): {str(s): int(t) for s, t in per.items()} for j, per in d.get("jobs", {}).items()},
            [Failover.from_dict(f) for f in d.get("failovers", [])],
            str(d.get("error", "")),
        )

    def save(self, path: Path | None) -> None:
        """Atomic: a reader polling the file sees the old report or the new one."""
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> ServiceReport:
        return cls.from_dict(json.loads(Path(path).read_text()))


def _tree(plan: JobPlan) -> tuple[set[str], set[tuple[str, str]]]:
    """A job tree's switches and switch-to-switch links."""
    return (
        {sp.switch for sp in plan.switches},
        {link_key(sp.switch, sp.parent) for sp in plan.switches if sp.parent is not None},
    )


class DemotedError(Exception):
    """A controller with a higher election id became primary on a switch: this one stops (its writes would be
    refused there), leaving the fabric to that one."""


class Service:
    """The controller's failure handling while the process lives: start() the monitor, run() until stopped."""

    def __init__(self, ctl: Controller, report: ServiceReport, report_path: Path | None = None) -> None:
        self.ctl = ctl
        self.report = report
        self.report_path = report_path
        self._signals: queue.Queue[FailureSignal | str] = queue.Queue()  # a str: the switch that demoted us
        self.monitor = FailureMonitor(ctl.fabric, self._signals.put)

    def start(self) -> None:
        """Watch every live switch from now on (failures signalled before run() wait in its queue), and whether
        this controller stays primary there."""
        names = [s.name for s in self.ctl.topo.switches if s.name not in self.ctl.state.failed]
        self.monitor.watch(names)
        for name in names:
            cl = self.ctl.fabric.client(name)
            cl.on_role_change = self._role
            if not cl.is_primary:
                self._signals.put(name)

    def dead_before(self, switch: str, at: float) -> None:
        """A switch found dead before the monitor watched it (a standby's stream to it ended while it waited):
        handled as if signalled then."""
        self._signals.put(FailureSignal("switch", switch, at, "P4Runtime stream ended before the takeover", switch))

    def _role(self, switch: str, primary: bool) -> None:
        if not primary:
            self._signals.put(switch)

    def publish(self, status: Status | None = None) -> None:
        if status is not None:
            self.report.status = status
        self.report.jobs = job_tokens(self.ctl.state)
        self.report.save(self.report_path)

    def run(self, stop: threading.Event) -> None:
        """Handle failures as they are signalled until `stop` is set."""
        self.publish("serving")
        try:
            while not stop.is_set():
                try:
                    sig = self._signals.get(timeout=0.1)
                except queue.Empty:
                    continue
                if isinstance(sig, str):
                    cl = self.ctl.fabric.client(sig)
                    raise DemotedError(
                        f"switch {sig}: election id {cl.primary_election_id} is primary now, above this controller's "
                        f"{cl.election_id}: stopping (that controller serves the fabric)"
                    )
                self.handle(sig)
        finally:
            self.monitor.close()

    def handle(self, sig: FailureSignal) -> list[Failover]:
        """Move every job whose tree holds the failed switch or link to a tree without it."""
        hit = [
            p
            for p in self.ctl.jobs()
            if (sig.switch is not None and sig.switch in _tree(p)[0])
            or (sig.link is not None and sig.link in _tree(p)[1])
        ]
        if not hit:
            LOG.warning("%s %s failed (%s): no job's tree uses it", sig.kind, sig.what, sig.how)
        failed = [sig.switch] if sig.switch is not None else []
        links = [sig.link] if sig.link is not None else []
        out = []
        for plan in hit:
            phases: dict[str, float] = {}
            try:
                new = self.ctl.fail_over(plan.job_id, failed, timings=phases, failed_links=links)
            except (PlanError, InstallError, FabricError, SwitchError) as ex:
                # fail_over takes a job it cannot move off the live switches before raising: it is gone
                LOG.error("job %d: %s %s failed and the job could not move: %s", plan.job_id, sig.kind, sig.what, ex)
                done = Failover(plan.job_id, (sig.what,), sig.at, time.monotonic(), False, None, {}, str(ex), phases)
            else:
                LOG.warning(
                    "job %d moved off %s %s to root %s (%d switches)",
                    plan.job_id,
                    sig.kind,
                    sig.what,
                    new.root,
                    len(new.switches),
                )
                tokens = {sp.switch: sp.token for sp in new.switches}
                done = Failover(plan.job_id, (sig.what,), sig.at, time.monotonic(), True, new.root, tokens, "", phases)
            out.append(done)
            self.report.failovers.append(done)
            self.publish()
        return out
