"""`p4ina faults`: what a fabric does to an all-reduce, and that every sum stays exact.

One network, one in-network job (int32 lanes, integer inputs: every sum must be
exact, checked against numpy's float64 sum), agents on every member host, then:

1. loss-free all-reduces: the latency baseline and the workers' measured round
   trips, from which the retransmission timer's floor is derived (SwitchML's
   ~1 ms timer is the same idea: a few round trips, not a fixed 0.5 s);
2. a loss sweep: random loss on both ends of every link (tc BPF), every sum
   exact, retransmissions counted, latency over the loss-free latency; then
   duplication and reordering (tc BPF: a copy mirrored back into the link, a
   packet held back in a slow low-priority HTB class): every sum exact, the
   copies and late packets counted by tc, the switches and the workers;
3. silent data corruption: single bit flips in the lanes of cells that are
   mid-round on the tree's switches (controller.registers over P4Runtime);
   a flip counts as injected once a read-back shows it landed in a live round;
   detected is what the switches' `corrupt` counters and the hosts' checks
   caught; every sum still exact;
4. load and isolation (before the main job's agents start; experiments.faults.isolation):
   four 3-host jobs at once on shared switches and a host ring beside them,
   every sum exact, each job's slowdown against running alone, and the switch
   counters and a slot_token read-back showing no job touched another's cells;
5. switch crashes (failures.switch_crash, `failure_runs` of them, each placed
   early, in the middle or late in an all-reduce in turn): the job's root is
   killed; its P4Runtime stream to the controller breaks at once and the
   controller's failure monitor (controller.monitor) notifies the job's
   workers through the coordinator, so they stop waiting and meet at the
   fail-over barrier (without the monitor, or for a failure nothing announces,
   `failure_timeout_s` without a result does it); the controller re-plans and
   re-installs the job around the dead switch (new tokens) and the workers
   redo the chunks anyone lacks; the killed switch is restarted after each run;
6. link failures (failures.link_down, as many): the root's link to a switch
   below it goes down with both switches running; P4Runtime still answers, the
   ports' oper-status (published by the switches ON_CHANGE) shows it, and the
   job moves the same way; the link comes back after each run;
7. an edge-switch failure (last: it cuts hosts off): reported by name.

Writes summary.json, reports.json (every agent report) and faults.png.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import statistics
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from controller import names as N
from controller.api import Controller
from controller.client import SwitchClient
from controller.counters import totals
from controller.evidence import StallEvidence, confirm, stall_evidence
from controller.fabric import FabricError
from controller.installer import RemoveError
from controller.monitor import FailureMonitor, FailureSignal
from controller.planner import HostsCutOffError, JobDoesNotFitError, JobPlan
from controller.registers import read_register, write_register
from controller.state import State
from controller.topology import link_key
from controller.topospec import load_topology
from emulation.network import EmulatedNetwork, NetworkConfig
from emulation.shaping import LinkShape
from experiments import harness as R
from experiments.config import ExperimentConfig
from experiments.faults.standby import controller_crash
from experiments.harness import Step
from hosts import clock
from hosts.coordination import CoordinatorServer, check_step
from hosts.inc_worker import IncJob
from hosts.tickets import JobTicket, RingSettings, StepCommand
from wireformat import AGG

LOG = logging.getLogger(__name__)

JOB_ID = 12
METHOD = "inc-int32"
AGG_PREFIX = "P4inaIngress.aggregation."


class FaultsError(RuntimeError):
    """The faults experiment could not run; the message says which part."""


# fail-overs answered "false alarm, same tree" in one step before the step fails: a stall that neither the
# signals, the probe nor the registers explain, again and again, is a failure nothing here localises
FALSE_ALARM_LIMIT = 4
# A gray failure is decided at the second stall: at most two failure timeouts after the last result, plus a
# retransmission timer each for the rounds in flight, plus this for the control plane's part (the first stall's
# probe and register reading, the barrier, the second reading): one TCP connect and four register Reads per
# tree switch, the switches in parallel
GRAY_READ_ALLOWANCE_S = 0.25
HOST_POLICIES = ("shrink", "spare")  # what a job does when a host dies (issue 36): failures.host_crash_<policy>


@dataclass(frozen=True)
class Reading:
    """One reading of the tree's registers at a stall: when, how long it took, on which install, at the stall's
    first question or at the fail-over barrier, and what it said."""

    t: float
    seconds: float
    install: int
    at: str
    evidence: StallEvidence

    def to_dict(self) -> dict[str, Any]:
        return {"t": self.t, "seconds": self.seconds, "install": self.install, "at": self.at, **self.evidence.to_dict()}


@dataclass(frozen=True)
class FaultsConfig:
    topology: str = "fat-tree:4"
    hosts: int = 16
    size: int = 16384  # float32 elements per all-reduce
    slots: int = 32
    bw_mbps: float = 10.0
    loss_rates: tuple[float, ...] = (0.001, 0.01, 0.05)  # fractions
    # all-reduces per loss rate (and loss-free, and with duplication and reordering): with loss the latency is
    # bimodal (an all-reduce whose last rounds lose a frame waits a timer floor, the others recover early),
    # so a median of 3 swung between 1.8x and 2.1x at 1% from run to run; every latency is in the summary
    reps: int = 7
    victim: str = "root"  # "root", "aggregation", or a switch name: killed mid all-reduce
    switch_failure: bool = True  # False: no switch is killed (the other phases alone)
    # a link of the job's tree (the root's to its first switch child) taken down mid all-reduce, both switches
    # running; after the switch failure, so on the tree that one left
    link_failure: bool = True
    edge_failure: bool = True
    # duplication and reordering (tc BPF on both ends of every link): the fraction of packets copied and the
    # fraction held back behind later ones, per link end (a packet crosses up to six ends on the fat-tree)
    dup_rate: float = 0.01
    reorder_rate: float = 0.02
    # load and isolation (experiments.faults.isolation): four 3-host jobs at once on shared switches plus a 4-host ring;
    # skipped (and said so in the summary) on a topology with fewer than 16 hosts
    isolation: bool = True
    isolation_reps: int = 3
    isolation_size: int | None = None  # elements per all-reduce; None: size
    sdc_flips: int = 20  # bit flips to land in live rounds
    sdc_loss: float = 0.01  # loss while flipping: a lost contribution holds its round open long enough to flip into
    failure_size_factor: int = 4  # the interrupted all-reduce is this many times `size` (so the kill lands mid-way)
    # switch crashes and link failures each, for failures.<kind>: the n-th lands early, in the middle or late in
    # the all-reduce (failure_points, fractions of the reference all-reduce's time), in turn; a killed switch is
    # restarted and a cut link restored between runs
    failure_runs: int = 10
    failure_points: tuple[float, ...] = (0.1, 0.5, 0.8)
    # the controller's failure monitor (controller.monitor): a broken P4Runtime stream or a port that goes down
    # notifies the workers at once; False: only the failure timeout finds a failure (the detector off)
    signals: bool = True
    # gray failures (failures.gray_switch, failures.gray_link), failure_runs of each after the link failures: the
    # root's frames dropped on arrival (process, P4Runtime and carriers fine), then one direction of the root's
    # link to a child switch dropping every frame; found from the tree's slot registers (controller.evidence)
    gray_failure: bool = True
    # the controller itself (failures.controller_crash, experiments.faults.standby): a primary controller process
    # killed, the standby's takeover and reconcile, then the root switch killed and moved off by the standby;
    # then an all-reduce on the job as the standby left it; this many runs, before the monitor starts
    controller_runs: int = 3
    gray_detection: bool = True  # False: the register evidence is not read (the detector off)
    # a host's agent killed mid all-reduce, host_runs times per policy: "shrink" (the survivors go on, their sum
    # reported as theirs) and/or "spare" (a standby host's agent takes the dead rank's place and input; a pool
    # of host_runs spares, the hosts after the job's). Each run leaves the job as it made it (one rank fewer, or
    # a spare in place), so these come after the switch and link failures
    host_policies: tuple[str, ...] = ()
    host_runs: int = 2
    # no result for this long (and >= 2 timeouts): a switch is suspected; None: failure_rtos timer floors (a
    # window of slots in flight returns results many times per round trip, so silence for 3 floors is loud), at
    # least failure_min_s (loss alone rarely stalls every slot that long; a false alarm costs one P4Runtime probe:
    # the tree answers, the worker waits on)
    failure_timeout_s: float | None = None
    failure_rtos: float = 3.0
    failure_min_s: float = 0.5
    rto_floor_rtts: float = 3.0  # the timer's floor: this many of the largest measured smoothed round trip
    backend: str = "embedded"
    results_root: Path = Path("results")
    seed: int = 0

    def __post_init__(self) -> None:
        if self.hosts < 2:
            raise FaultsError(f"hosts {self.hosts}: need at least 2")
        if any(not 0 < r < 1 for r in self.loss_rates):
            raise FaultsError(f"loss rates {self.loss_rates}: fractions in (0, 1)")
        if not (0 <= self.dup_rate < 1 and 0 <= self.reorder_rate < 1):
            raise FaultsError(f"duplication {self.dup_rate} and reorder {self.reorder_rate}: fractions in [0, 1)")
        if self.reps < 1 or self.sdc_flips < 0 or (self.failure_timeout_s is not None and self.failure_timeout_s <= 0):
            raise FaultsError("reps >= 1, sdc_flips >= 0 and failure_timeout_s > 0, please")
        if self.controller_runs < 0:
            raise FaultsError(f"controller_runs {self.controller_runs}: 0 (none) or more")
        if self.failure_runs < 1 or not self.failure_points or any(not 0 < p < 1 for p in self.failure_points):
            raise FaultsError(
                f"failure_runs {self.failure_runs} and failure_points {self.failure_points}: at least one run, "
                "points fractions in (0, 1)"
            )

        bad = [p for p in self.host_policies if p not in HOST_POLICIES]
        if bad or self.host_runs < 1:
            raise FaultsError(
                f"host policies {list(self.host_policies)} and host_runs {self.host_runs}: policies from "
                f"{', '.join(HOST_POLICIES)}, at least one run"
            )
        if "shrink" in self.host_policies and self.hosts - self.host_runs < 2:
            raise FaultsError(f"{self.host_runs} host crashes with shrink leave fewer than 2 of {self.hosts} hosts")
        if set(self.host_policies) == set(HOST_POLICIES) and self.hosts - 2 * self.host_runs < 2:
            raise FaultsError(
                f"{self.host_runs} host crashes of each policy, spares taken from the job where the fabric has no "
                f"more hosts, leave fewer than 2 of {self.hosts} hosts"
            )

    def label(self) -> str:
        return f"faults_{self.topology.replace(':', '')}_h{self.hosts}_bw{self.bw_mbps:g}"


@dataclass
class FaultsResult:
    config: FaultsConfig
    out_dir: Path
    summary: dict[str, Any] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class FaultsRun:
    """The experiment's phases on one running network, controller and set of agents."""

    def __init__(
        self, cfg: FaultsConfig, net: EmulatedNetwork, ctl: Controller, runner: R.Runner, hosts: tuple[str, ...]
    ) -> None:
        self.cfg, self.net, self.ctl, self.runner, self.hosts = cfg, net, ctl, runner, hosts
        # who takes part, after a host died: coordinator ranks in job order, each one's input rank, and the hosts
        # the job is installed on (None: every rank of `hosts`, its own input)
        self.members: tuple[int, ...] | None = None
        self.inputs: tuple[int, ...] | None = None
        self.job_hosts: tuple[str, ...] = hosts
        self.spares: list[tuple[int, str]] = []  # (coordinator rank, host) of the idle standby agents
        self.spares_all: list[tuple[int, str]] = []  # and those already seated
        self.server: CoordinatorServer | None = None
        self.installs = 0
        self.job: JobTicket | None = None  # the current install's (None: not installed yet)
        self.plan: JobPlan | None = None
        self.steps: list[Step] = []
        self.failover_events: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.reroute_pending = False
        self.stall_questions = 0
        self.false_alarms: dict[int, int] = {}  # step -> fail-overs answered "false alarm, same tree"
        self._probe: tuple[float, set[str], set[tuple[str, str]]] | None = None
        self.probes: list[tuple[float, float]] = []  # (start, seconds) of every probe made
        self._probe_lock = threading.Lock()
        self.tmo = runner.tmo
        self.failure_timeout_s = cfg.failure_timeout_s or 1.5  # until the timer floor is measured
        self.monitor: FailureMonitor | None = None
        self.signals: list[dict[str, Any]] = []  # every failure signal and what the run did with it
        # every reading of the slot registers at a stall a live tree did not explain
        self.evidence: list[Reading] = []
        self.gray_verdicts: list[dict[str, Any]] = []  # every fail-over decided on that evidence

    # -- signals -------------------------------------------------------------------------------
    def start_monitor(self) -> None:
        """Streams to every switch (controller.monitor): a failure of the job's tree notifies its workers."""
        self.monitor = FailureMonitor(self.ctl.fabric, self.on_signal, now=clock.now)
        self.monitor.watch()

    def tree_parts(self) -> tuple[set[str], set[tuple[str, str]]]:
        assert self.plan is not None
        switches = {sp.switch for sp in self.plan.switches}
        return switches, {link_key(sp.switch, sp.parent) for sp in self.plan.switches if sp.parent is not None}

    def on_signal(self, sig: FailureSignal) -> None:
        """A switch announced a failure (a reader thread: quick): if it is the job's tree's, tell its workers."""
        record: dict[str, Any] = {"kind": sig.kind, "what": sig.what, "at": sig.at, "how": sig.how}
        self.signals.append(record)
        if self.plan is None or self.job is None or self.server is None:
            return
        switches, links = self.tree_parts()
        if (sig.switch is not None and sig.switch in switches) or (sig.link is not None and sig.link in links):
            notice = {"job_id": JOB_ID, "install": self.job.install, "kind": sig.kind, "what": sig.what, "at": sig.at}
            record["notified"] = clock.now()
            record["seq"] = self.server.notify(notice)

    def on_agent_lost(self, rank: int) -> None:
        """A host's agent is gone (hosts.coordination): the job's other workers stop waiting for its contribution
        (the step fails, naming it; no shrink or spare policy yet)."""
        self.signals.append({"kind": "host", "what": self.host_of(rank), "at": clock.now()})
        if self.job is not None and self.server is not None:
            what = f"{self.host_of(rank)} (rank {rank})"
            notice = {"job_id": JOB_ID, "install": self.job.install, "kind": "host", "what": what, "at": clock.now()}
            self.server.notify(notice)

    def host_of(self, rank: int) -> str:
        """The host of a coordinator rank (a worker's, or a standby agent's)."""
        spare = dict(self.spares_all)
        return self.hosts[rank] if rank < len(self.hosts) else spare.get(rank, f"standby {rank}")

    # -- jobs ----------------------------------------------------------------------------------
    def install(self, timeout_s: float, min_timeout_s: float) -> None:
        if self.plan is not None:
            self.ctl.remove_job(JOB_ID)
        self.plan = self.ctl.install_job(JOB_ID, self.job_hosts, "int32", slots=self.cfg.slots)
        self.installs += 1
        self.job = R.job_ticket(
            self.plan,
            install=self.installs,
            timeout_s=timeout_s,
            min_timeout_s=min_timeout_s,
            failure_timeout_s=self.failure_timeout_s,
        )
        LOG.info("job %d: root %s, %d switches", JOB_ID, self.plan.root, len(self.plan.switches))

    def reticket(self) -> None:
        """The job's ticket for a new install of self.plan (a fail-over's, a standby's), with the timers (and
        early_window) the job had."""
        assert self.job is not None and self.plan is not None
        self.installs += 1
        self.job = R.job_ticket(
            self.plan,
            install=self.installs,
            timeout_s=self.job.timeout_s,
            min_timeout_s=self.job.min_timeout_s,
            failure_timeout_s=self.failure_timeout_s,
            early_window=self.job.early_window,
        )

    def failed_parts(self, max_age_s: float = 0.5) -> tuple[set[str], set[tuple[str, str]]]:
        """The switches of the job's tree whose P4Runtime refuses connections, and the links of the tree that
        are down (the switches' port status: emulation.network.down_links). One probe serves every rank that
        asked while it ran (or up to max_age_s before), so sixteen stalled ranks cost one probe, not sixteen."""
        assert self.plan is not None
        asked = clock.now()
        with self._probe_lock:
            if self._probe is None or self._probe[0] < asked - max_age_s:
                t0 = clock.now()
                tree = [sp.switch for sp in self.plan.switches]
                # One try: a switch of this running job that refuses connections has lost the job either way (a
                # process caught between its socket and its listen() is one starting afresh, with empty tables),
                # and every stalled rank waits on this probe
                found = self.ctl.unreachable(tree, timeout=1.0, attempts=1)
                edges = {link_key(sp.switch, sp.parent) for sp in self.plan.switches if sp.parent is not None}
                links = {ln for ln in self.net.down_links(tree) if ln in edges and not set(ln) & found}
                self._probe = (clock.now(), found, links)
                self.probes.append((t0, clock.now() - t0))
            return set(self._probe[1]), set(self._probe[2])

    def signalled_parts(self) -> tuple[set[str], set[tuple[str, str]]]:
        """The failures of the job's tree that the switches announced (the monitor's): no probe needed."""
        if self.monitor is None or self.plan is None:
            return set(), set()
        switches, links = self.tree_parts()
        failed = self.monitor.failed_switches & switches
        return failed, {ln for ln in self.monitor.down_links & links if not set(ln) & failed}

    def ask(self, topic: str, rank: int, value: Any) -> Any:
        """A worker saw no result for failure_timeout_s: is its tree alive (a loss burst) or is a switch dead?"""
        if topic != "stall":
            return None
        self.stall_questions += 1
        failed, links = self.failed_parts()
        if not failed and not links:
            self.read_evidence("stall")
        return {
            "alive": not failed and not links,
            "failed": sorted(failed),
            "links": ["-".join(ln) for ln in sorted(links)],
        }

    def read_evidence(self, at: str) -> StallEvidence | None:
        """The tree's slot registers and counters (controller.evidence), read at a stall's first question ("stall":
        once for all the ranks that ask, until the next decision) or at the fail-over barrier ("barrier"); None
        when the detector is off or the switches cannot say (BMv2 reads no registers)."""
        if not self.cfg.gray_detection or self.plan is None or self.job is None:
            return None
        with self._probe_lock:
            since = self.failover_events[-1]["t_reported"] if self.failover_events else 0.0
            first = self.stall_reading(since) if at == "stall" else None
            if first is not None:
                return first
            t0 = clock.now()
            try:
                ev = stall_evidence(self.ctl.fabric, self.plan)
            except (FabricError, LookupError, ValueError) as ex:  # no register reads (BMv2): stays a false alarm
                LOG.warning("stall evidence unavailable: %s", ex)
                return None
            self.evidence.append(Reading(t0, clock.now() - t0, self.job.install, at, ev))
            LOG.info("stall evidence (%s): %s", at, ev.why)
            return ev

    def stall_reading(self, since: float) -> StallEvidence | None:
        """This install's reading at the first stall after `since` (the last fail-over decision), if taken."""
        assert self.job is not None
        return next(
            (r.evidence for r in self.evidence if r.at == "stall" and r.t >= since and r.install == self.job.install),
            None,
        )

    def gray_suspect(self, since: float) -> tuple[StallEvidence, StallEvidence] | None:
        """A gray failure: the registers at the barrier, every rank stopped, point at the same place as at the
        stall's first question (a failure timeout earlier, every worker retransmitting in between)."""
        first = self.stall_reading(since)
        if first is None or self.plan is None:
            return None
        now = self.read_evidence("barrier")
        if now is None:
            return None
        self.failover_events[-1]["readings"] = {"first": first.to_dict(), "now": now.to_dict()}
        verdict = confirm(self.plan, first, now)
        return (first, verdict) if verdict is not None else None

    def decide(self, tag: str, values: list[Any]) -> Any:
        """The agents' switch-failure barrier: find the dead switch, re-plan around it, hand out the new job."""
        if not tag.startswith("failover-"):
            return None
        t0 = clock.now()
        assert self.plan is not None
        event: dict[str, Any] = {
            "tag": tag,
            "t_reported": t0,
            "ranks": len(values),
            "stalled_s": max(float(v.get("stalled_s", 0.0)) for v in values),
        }
        self.failover_events.append(event)
        failed, links = self.signalled_parts()
        event["evidence"] = "signalled" if failed or links else "probe"
        if not failed and not links:
            failed, links = self.failed_parts()
        phases: dict[str, float] = {}
        event["replan_phases"] = phases
        assert self.job is not None
        if not failed and not links:
            since = self.failover_events[-2]["t_reported"] if len(self.failover_events) > 1 else 0.0
            gray = self.gray_suspect(since)
            if gray is not None:
                _, now = gray
                event["evidence"] = "data plane"
                # the verdict (the readings behind it are the event's "readings")
                event["gray"] = {"now": now.to_dict(), "t_verdict": clock.now()}
                self.gray_verdicts.append({"t": clock.now(), "what": now.what, "tag": tag})
                failed = {now.switch} if now.switch else set()
                links = {now.link} if now.link else set()
                LOG.warning("gray failure: %s (%s)", now.what, now.why)
        event["failed"] = sorted(failed)
        event["failed_links"] = ["-".join(ln) for ln in sorted(links)]
        event["probe_s"] = clock.now() - t0
        if not failed and not links:  # a false alarm (a long loss burst, a lost round): redo the missing chunks
            step = int(tag.split("-")[1])
            self.false_alarms[step] = self.false_alarms.get(step, 0) + 1
            if self.false_alarms[step] > FALSE_ALARM_LIMIT:
                why = (
                    f"step {step} stalled {self.false_alarms[step]} times on a tree where every switch answers and "
                    "every link is up, and the switches' registers do not say where: a failure no detector here "
                    "localises (a gray edge switch, a host's link)"
                )
                event["verdict"] = why
                return {"error": why, "failed": []}
            event["verdict"] = "false alarm: every switch answers, every link is up; same tree"
            return {"job": self.job.to_dict(), "failed": []}
        failed_names = sorted(failed) + event["failed_links"]
        try:
            # the job first, the routes (which aggregation packets do not use) after the step: the workers wait
            self.plan = self.ctl.fail_over(JOB_ID, failed, reroute=False, timings=phases, failed_links=links)
            self.reroute_pending = True
        except HostsCutOffError as ex:
            event["verdict"] = str(ex)
            return {"error": str(ex), "failed": failed_names}
        except JobDoesNotFitError as ex:
            self.ctl.install_routes()  # the ring needs routes around the failed switch
            event["verdict"] = f"ring: {ex}"
            return {"fallback": "ring", "failed": failed_names, "reason": str(ex)}
        except RemoveError as ex:
            event["verdict"] = str(ex)
            return {"error": str(ex), "failed": failed_names}
        self.reticket()
        event.update(
            verdict=f"re-planned: root {self.plan.root}",
            root=self.plan.root,
            t_installed=clock.now(),
            replan_s=clock.now() - t0,
            tree=[sp.switch for sp in self.plan.switches],
        )
        LOG.warning(
            "%s failed: job %d re-planned on root %s in %.2f s",
            ", ".join(failed_names),
            JOB_ID,
            self.plan.root,
            clock.now() - t0,
        )
        return {"job": self.job.to_dict(), "failed": failed_names, "root": self.plan.root}

    # -- steps ---------------------------------------------------------------------------------
    def command(self, step: int, iteration: int, size: int) -> StepCommand:
        """Step `step` of the job as it stands (its install, members and inputs); a redo keeps its iteration."""
        return StepCommand(
            step=step,
            method=METHOD,
            size=size,
            iteration=iteration,
            input="ones",
            seed=self.cfg.seed,
            checker=0,
            ring=RingSettings(window=64, timeout_s=self.tmo["ring"]),
            job=self.job,
            members=self.members,
            inputs=self.inputs,
        )

    def post(self, phase: str, size: int | None = None) -> int:
        assert self.server is not None
        self.runner.step += 1
        step = self.runner.step
        self.server.post(step, self.command(step, step, size or self.cfg.size).to_dict())
        LOG.debug("step %d: %s", step, phase)  # the runner's label (Step.phase); the agents need none
        return step

    def collect(self, step: int, phase: str) -> Step:
        assert self.server is not None
        reports = self.server.step_reports(step, 300.0, alive=self.runner.alive)
        if self.reroute_pending:
            t0 = clock.now()
            self.ctl.install_routes()
            self.reroute_pending = False
            if self.failover_events:
                self.failover_events[-1]["reroute_s"] = clock.now() - t0
        snap = self.runner.take_snapshot(step)
        members = self.server.members
        s = Step(step, phase, reports, len(members), snap.t if snap else None)
        self.steps.append(s)
        if not set(members) <= set(reports) | self.server.lost:  # stuck: nothing after this can be measured
            raise FaultsError(
                f"step {step} ({phase}): only ranks {sorted(reports)} of {list(members)} reported; "
                f"agent logs in {self.runner.log_dir}"
            )
        if s.errors:
            LOG.warning("step %d (%s): %s", step, phase, "; ".join(s.errors[:3]))
        return s

    def run(self, phase: str, size: int | None = None) -> Step:
        return self.collect(self.post(phase, size), phase)

    def wait_release(self, step: int, timeout_s: float = 60.0) -> float:
        deadline = clock.now() + timeout_s
        while clock.now() < deadline:
            snap = self.runner.peek_snapshot(step)
            if snap is not None:
                return snap.t
            threading.Event().wait(0.005)
        raise FaultsError(f"step {step} was not released within {timeout_s} s")

    # -- phases --------------------------------------------------------------------------------
    def lossless(self) -> dict[str, Any]:
        warm = [self.run("warmup") for _ in range(2)]
        rtts = [float(r["srtt_s"]) for s in warm for r in s.reports.values() if r.get("srtt_s")]
        srtt = max(rtts) if rtts else self.tmo["inc"]
        floor = max(self.cfg.rto_floor_rtts * srtt, 0.005)
        self.failure_timeout_s = self.cfg.failure_timeout_s or max(
            self.cfg.failure_min_s, self.cfg.failure_rtos * floor
        )
        self.install(timeout_s=2 * floor, min_timeout_s=floor)  # fresh tokens, epochs from 1, the derived timer
        base = [self.run("lossless") for _ in range(self.cfg.reps)]
        return {
            "rto_floor_s": floor,
            "max_srtt_s": srtt,
            "fixed_floor_s": self.tmo["inc"],
            "failure_timeout_s": self.failure_timeout_s,
            "latency_s": statistics.median(s.latency_s for s in base),
            "exact": all(s.exact for s in base),
            "latencies_s": [s.latency_s for s in base],
            "retransmissions": sum(s.total("retransmissions") for s in base),
        }

    def loss_sweep(self, lossless_s: float) -> dict[str, Any]:
        out: dict[str, Any] = {}
        try:
            for rate in self.cfg.loss_rates:
                self.net.set_loss(rate)
                gray0, events0, readings0 = len(self.gray_verdicts), len(self.failover_events), len(self.evidence)
                steps = [self.run(f"loss-{rate:g}") for _ in range(self.cfg.reps)]
                lat = (
                    statistics.median(s.latency_s for s in steps if s.reports)
                    if all(s.reports for s in steps)
                    else None
                )
                out[f"{rate * 100:g}%"] = {
                    "loss": rate,
                    "exact": all(s.exact for s in steps),
                    "retransmissions": sum(s.total("retransmissions") for s in steps),
                    "early_retransmissions": sum(s.total("fast_retransmissions") for s in steps),
                    "packets_sent": sum(s.total("packets_sent") for s in steps),
                    "latency_s": lat,
                    "latency_over_lossless": lat / lossless_s if lat else None,
                    "latencies_s": [s.latency_s for s in steps if s.reports],
                    "false_alarms": sum(int(r.get("false_alarms", 0)) for s in steps for r in s.reports.values()),
                    # fail-overs with no failure: a tree moved because random loss looked like a gray failure
                    "gray_false_alarms": len(self.gray_verdicts) - gray0,
                    "failovers": len(self.failover_events) - events0,
                    "register_readings": len(self.evidence) - readings0,
                    "errors": [e for s in steps for e in s.errors][:5],
                }
        finally:
            self.net.set_loss(0.0)
        return out

    def dup_reorder(self, lossless_s: float) -> dict[str, Any]:
        """All-reduces with packets duplicated and held back on every link: every sum exact, and the copies and
        late packets seen where they land (the switches' retransmission and stale counters, the workers'
        duplicates)."""
        assert self.plan is not None
        before = totals(self.ctl.counters(JOB_ID))
        tc_before = self.net.dup_reorder_counts()
        self.net.set_dup_reorder(self.cfg.dup_rate, self.cfg.reorder_rate)
        try:
            steps = [self.run("dup-reorder") for _ in range(self.cfg.reps)]
            tc_after = self.net.dup_reorder_counts()  # before the filters (and their counters) go
        finally:
            self.net.set_dup_reorder(0.0, 0.0)
        after = totals(self.ctl.counters(JOB_ID))
        lat = statistics.median(s.latency_s for s in steps)
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        return {
            "dup": self.cfg.dup_rate,
            "reorder": self.cfg.reorder_rate,
            "allreduces": len(steps),
            "exact": all(s.exact for s in steps),
            "errors": [e for s in steps for e in s.errors][:5],
            "duplicated_packets": tc_after["duplicated"] - tc_before["duplicated"],
            "held_packets": tc_after["held"] - tc_before["held"],
            "switch_retransmissions": delta.get("retransmissions", 0),
            "switch_stale_drops": delta.get("drops.stale", 0),
            "switch_contributions": delta.get("contributions", 0),
            "worker_duplicates": sum(s.total("duplicates") for s in steps),
            "worker_retransmissions": sum(s.total("retransmissions") for s in steps),
            "packets_sent": sum(s.total("packets_sent") for s in steps),
            "latency_s": lat,
            "latency_over_lossless": lat / lossless_s if lossless_s else None,
        }

    def sdc(self) -> dict[str, Any]:
        """Flip lane bits of cells mid-round while all-reduces run; count what landed and what was caught."""
        assert self.plan is not None
        schema = self.ctl.schema
        before = {sw: c.packets.get("corrupt", 0) for sw, c in self.ctl.counters(JOB_ID).items()}
        rng = random.Random(self.cfg.seed)
        landed: list[dict[str, Any]] = []
        flipped: set[tuple[str, int, int]] = set()  # (switch, cell, epoch): one flip per round, so none cancel
        attempts = 0
        stop = threading.Event()
        plan = self.plan
        chunks = -(-self.cfg.size // AGG.num_lanes)  # an all-reduce uses the first min(slots, chunks) slots

        def live(cl: SwitchClient, cell: int, full: int) -> tuple[int, int] | None:
            """(bitmap, epoch) of the cell while a data round aggregates in it with some, not all, children in."""
            state = read_register(cl, schema, N.R_SLOT_STATE, cell)
            bitmap = read_register(cl, schema, N.R_SLOT_BITMAP, cell)
            epoch = read_register(cl, schema, N.R_SLOT_EPOCH, cell)
            if state & 3 == 0 and 0 < bitmap != full and not state & 0x20:
                return bitmap, epoch
            return None

        def same_round(a: tuple[int, int], b: tuple[int, int] | None) -> bool:
            # still open, same epoch, and only more children in (a new round would start from none)
            return b is not None and b[1] == a[1] and b[0] & a[0] == a[0]

        def flipper() -> None:
            nonlocal attempts
            while not stop.is_set() and len(landed) < self.cfg.sdc_flips:
                sp = rng.choice(plan.switches)
                cl = self.ctl.fabric.client(sp.switch)
                cell = (sp.slot_base + rng.randrange(min(sp.slot_count, chunks))) * 2 + rng.randrange(2)
                full = (1 << sp.fan_in) - 1
                try:
                    first = live(cl, cell, full)
                    if first is None or (sp.switch, cell, first[1]) in flipped:
                        continue
                    attempts += 1
                    lane = f"{AGG_PREFIX}lane_{rng.randrange(AGG.num_lanes):03d}"
                    bit = rng.randrange(31)
                    value = read_register(cl, schema, lane, cell)
                    write_register(cl, schema, lane, cell, value ^ (1 << bit))
                    after = live(cl, cell, full)
                    # the same round still open after the write, with nothing added in between: the flip is in it
                    flipped.add((sp.switch, cell, first[1]))
                    if same_round(first, after):
                        landed.append({"switch": sp.switch, "cell": cell, "register": lane, "bit": bit})
                except Exception:
                    LOG.debug("flip attempt failed", exc_info=True)

        thread = threading.Thread(target=flipper, name="sdc-flipper", daemon=True)
        steps: list[Step] = []
        events_before = len(self.failover_events)
        gray0, readings0 = len(self.gray_verdicts), len(self.evidence)
        if self.cfg.sdc_loss:
            self.net.set_loss(self.cfg.sdc_loss)
        # a lost contribution must hold its round open for a timer floor (the flipper's reads and write take a
        # few P4Runtime round trips): early retransmission, which closes it a round trip later, is off here
        assert self.job is not None
        early = self.job.early_window
        self.job = dataclasses.replace(self.job, early_window=0.0)
        thread.start()
        try:
            # at least 40 all-reduces and 10 s of them (short all-reduces close their rounds before the flipper's
            # P4Runtime reads find one open), at most 200 (the epoch is 8 bits)
            t0 = clock.now()
            while thread.is_alive() and len(steps) < 200 and (len(steps) < 40 or clock.now() - t0 < 10.0):
                steps.append(self.run("sdc"))
        finally:
            stop.set()
            thread.join(30)
            if self.cfg.sdc_loss:
                self.net.set_loss(0.0)
        self.job = dataclasses.replace(self.job, early_window=IncJob.early_window if early is None else early)
        steps.append(self.run("sdc-after"))  # anything still flipped is drained by one more round of every slot
        after = {sw: c.packets.get("corrupt", 0) for sw, c in self.ctl.counters(JOB_ID).items()}
        switch_caught = sum(after[sw] - before.get(sw, 0) for sw in after)
        host_caught = sum(s.total("corrupt") for s in steps)
        return {
            "injected": len(landed),
            "attempted": attempts,
            "detected": switch_caught + host_caught,
            "detected_by_switches": switch_caught,
            "detected_by_hosts": host_caught,
            "exact": all(s.exact for s in steps),
            "allreduces": len(steps),
            # fail-overs answered "false alarm, same tree" during the flips: a flip in a stored result that
            # some workers already took restarts a round the others left, and the stalled worker's fail-over
            # redoes that chunk with every worker; a long loss burst (sdc_loss) ends the same way
            "false_alarm_redos": sum(
                1 for e in self.failover_events[events_before:] if str(e.get("verdict", "")).startswith("false alarm")
            ),
            # the stalls the flips caused, read as a gray failure would be: a tree moved is a false alarm
            "register_readings": len(self.evidence) - readings0,
            "gray_false_alarms": len(self.gray_verdicts) - gray0,
            "flips": landed[:50],
        }

    def victim(self) -> str:
        assert self.plan is not None
        want = self.cfg.victim
        topo = self.ctl.topo
        if want == "root":
            return self.plan.root
        if want == "aggregation":
            aggs = [sp.switch for sp in self.plan.switches if topo.switch(sp.switch).tier == 1]
            if not aggs:
                raise FaultsError(f"job {JOB_ID}'s tree has no aggregation switch (root {self.plan.root})")
            return aggs[0]
        return want

    def _interrupted(
        self, phase: str, what: str, fail: Callable[[], object], point: float = 0.3, after_steps: int = 2
    ) -> dict[str, Any]:
        """A reference all-reduce of the failure size, then one that `fail` interrupts `point` of the way in: when
        the controller heard of it, when every rank stopped waiting, how long the re-plan took, the time from
        the failure to the completed all-reduce, and the interrupted all-reduce's time over the reference's."""
        assert self.plan is not None
        old_root = self.plan.root
        size = self.cfg.size * self.cfg.failure_size_factor
        reference = self.run("failure-size-lossless", size)
        step = self.post(phase, size)
        released = self.wait_release(step)
        threading.Event().wait(point * reference.latency_s)
        t_kill = clock.now()
        signals_before = len(self.signals)
        fail()
        LOG.warning("%s failed %.3f s into step %d", what, t_kill - released, step)
        s = self.collect(step, phase)
        events = [f for r in s.reports.values() for f in r.get("failovers", [])]
        # a rank called back after it had finished the step (hosts.agent rejoin) detected nothing
        detected = [float(f["detected_at"]) for f in events if f.get("detected_at") is not None]
        heard = [float(g["at"]) for g in self.signals[signals_before:] if "seq" in g]
        after = [self.run("after-failure") for _ in range(after_steps)]
        recovery = s.t_done() - t_kill if s.reports and not s.errors else None
        if not [e for e in self.failover_events if e.get("t_reported", 0) >= t_kill]:
            self.problems.append(f"the failure of {what} came after step {step} had finished: nothing to recover")
        decision = next((e for e in self.failover_events if e.get("t_reported", 0) >= t_kill), {})
        gray = StallEvidence.from_dict(decision["gray"]["now"]) if decision.get("gray") else None
        assert self.job is not None
        return {
            "old_root": old_root,
            "new_root": self.plan.root,
            "killed_after_s": t_kill - released,
            "recovery_s": recovery,
            "exact": s.exact,
            "errors": s.errors[:5],
            "failure_timeout_s": self.failure_timeout_s,
            "detect_bound_s": self.failure_timeout_s + 2 * self.job.min_timeout_s,
            "detected_s": (max(detected) - t_kill) if detected else None,
            "first_detected_s": (min(detected) - t_kill) if detected else None,
            "replan_s": decision.get("replan_s"),
            "verdict": decision.get("verdict"),
            "probe_s": decision.get("probe_s"),
            "replan_phases": decision.get("replan_phases"),
            # what every stalled rank waited on: the first probe after the kill, and the time from the last
            # rank's detection to the start of the decision (its ask, that probe, the barrier)
            "first_probe_s": next((d for t, d in self.probes if t >= t_kill), None),
            "barrier_s": (decision["t_reported"] - max(detected)) if detected and decision else None,
            "redone_chunks": max((int(f["redo"]) for f in events), default=0),
            "rejoined_ranks": sum(1 for r in s.reports.values() if r.get("rejoined")),
            "chunks": max((int(f["chunks"]) for f in events), default=0),
            "elements": size,
            "lossless_allreduce_s": reference.latency_s,
            "goal_s": self.failure_timeout_s + reference.latency_s,
            "signal_s": (min(heard) - t_kill) if heard else None,
            "triggers": sorted({str(f.get("trigger")) for f in events if not f.get("rejoined")}),
            "evidence": decision.get("evidence"),
            # a gray failure: where the registers pointed, and when the verdict came (failure to verdict)
            "gray_what": gray.what if gray else None,
            "gray_towards": gray.towards if gray else None,
            "verdict_s": decision["gray"]["t_verdict"] - t_kill if gray else None,
            "gray_bound_s": 2 * (self.failure_timeout_s + self.job.min_timeout_s) + GRAY_READ_ALLOWANCE_S,
            "step_s": s.latency_s,
            # what the failure cost the step: its time over the reference's, and what of it was the wait for
            # the last rank to stop (detection), its barrier, the re-plan, and the rest (the redo of what was in
            # flight, the new tree's first rounds)
            "over_s": s.latency_s - reference.latency_s,
            "step_over_lossless": s.latency_s / reference.latency_s if s.reports and not s.errors else None,
            "later_exact": all(a.exact for a in after),
            "later_on_new_tree": all(not any(r.get("failovers") for r in a.reports.values()) for a in after),
            "later_latency_s": statistics.median(a.latency_s for a in after) if all(a.reports for a in after) else None,
        }

    # -- repeated failures: failures.<kind> --------------------------------------------------------
    def failure_series(self, kind: str) -> dict[str, Any]:
        """failure_runs failures of one kind ("switch_crash": the root killed; "link_down": the root's link to
        its first switch child cut; "gray_switch": the root dropping every frame it receives; "gray_link": that
        link dropping every frame one way, up and down in turn), each placed early, in the middle or late in turn
        and repaired after."""
        runs: list[dict[str, Any]] = []
        if kind.startswith("gray"):
            self.net.ready_impairments()  # so that the failure strikes when it is made, not a few tc calls later
        for i in range(self.cfg.failure_runs):
            point = self.cfg.failure_points[i % len(self.cfg.failure_points)]
            if kind == "switch_crash":
                victim = self.victim()
                out = self._interrupted(
                    "switch-failure", f"switch {victim}", lambda v=victim: self.net.kill_switch(v), point, 1
                )
                out["victim"] = victim
                out["tier"] = self.ctl.topo.switch(victim).tier
                self.restore_switch(victim)
            elif kind == "link_down":
                link = self.tree_link()
                out = self._interrupted(
                    "link-failure", f"link {'-'.join(link)}", lambda ln=link: self.net.set_link(*ln, up=False), point, 1
                )
                out["link"] = "-".join(link)
                self.restore_link(link)
            elif kind == "gray_switch":
                victim = self.victim()
                out = self._interrupted(
                    "gray-switch",
                    f"switch {victim} (gray)",
                    lambda v=victim: self.net.set_gray_switch(v, True),
                    point,
                    1,
                )
                out["victim"] = victim
                out["localised"] = out.get("gray_what") == victim
                self.net.set_gray_switch(victim, False)
                self.restore_switch(victim, restart=True)  # replaced: its cells and entries start afresh
            elif kind == "gray_link":
                parent, child = self.tree_link_from_root()
                # every other run the frames up (child -> root) vanish, the others the results down
                a, b = (child, parent) if i % 2 == 0 else (parent, child)
                out = self._interrupted(
                    "gray-link", f"link {a}->{b} (gray)", lambda a=a, b=b: self.net.set_gray_link(a, b, True), point, 1
                )
                out["link"] = f"{a}->{b}"
                out["localised"] = out.get("gray_what") == "-".join(link_key(a, b)) and out.get("gray_towards") == b
                self.net.set_gray_link(a, b, False)
                self.ctl.revive(links=[link_key(a, b)])
                self.ctl.install_routes()
            else:
                raise FaultsError(f"failure kind {kind!r}: switch_crash, link_down, gray_switch or gray_link")
            out["point"] = point
            runs.append(out)
        return series_summary(runs)

    # -- a host that dies: failures.host_crash_<policy> ------------------------------------------------
    def host_crash_series(self, policy: str) -> dict[str, Any]:
        """host_runs agents killed (SIGKILL) mid all-reduce, each placed early, in the middle or late in turn; the
        job goes on by `policy` ("shrink" or "spare")."""
        runs = []
        for i in range(self.cfg.host_runs):
            point = self.cfg.failure_points[i % len(self.cfg.failure_points)]
            out = self._host_crash(policy, point)
            out["point"] = point
            runs.append(out)
        return series_summary(runs)

    def carve_spares(self, n: int) -> None:
        """The job's last n hosts become the standby pool: their agents take no step from now on, the job is
        re-installed over the others (a fabric with no host beyond the job's, as the k=4 fat-tree's 16)."""
        assert self.server is not None and self.job is not None
        members = self.members or tuple(range(len(self.hosts)))
        if len(members) - n < 2:
            raise FaultsError(f"{n} standby hosts from a job of {len(members)} leave fewer than 2 workers")
        keep, pool = members[:-n], members[-n:]
        self.spares = [(r, self.hosts[r]) for r in pool]
        self.spares_all = list(self.spares)
        self.members, self.inputs = keep, keep
        self.job_hosts = tuple(self.host_of(r) for r in keep)
        self.server.set_members(keep)
        self.install(self.job.timeout_s, self.job.min_timeout_s)
        LOG.info("hosts %s stand by; the job goes on over %d hosts", ", ".join(h for _, h in self.spares), len(keep))

    def _host_crash(self, policy: str, point: float) -> dict[str, Any]:
        """A reference all-reduce, then one whose victim's agent is killed `point` of the way in. Every survivor's
        step fails naming the host (the coordinator saw its connection close; the notice ended their wait); the
        runner re-plans the job over the survivors, or over them and a spare in the victim's place, names the new
        members on the coordinator and posts the step again (same iteration, same inputs). The redo's result must
        be the sum over exactly the inputs the policy says: the survivors', or everyone's (check_step)."""
        assert self.server is not None and self.job is not None
        members = self.members or tuple(range(len(self.hosts)))
        inputs = self.inputs or members
        # the last of the job's own hosts still in it: never the checker (rank 0), never a seated spare
        seated = {r for r, _ in self.spares_all}  # a spare lent by the job (carve_spares) has a job's rank
        victim = [r for r in members if 0 < r < len(self.hosts) and r not in seated][-1]
        size = self.cfg.size * self.cfg.failure_size_factor
        reference = self.run("host-crash-lossless", size)
        step = self.post(f"host-crash-{policy}", size)
        released = self.wait_release(step)
        threading.Event().wait(point * reference.latency_s)
        t_kill = clock.now()
        host = self.runner.kill_agent(victim)
        LOG.warning("host %s (rank %d) killed %.3f s into step %d", host, victim, t_kill - released, step)
        failed = self.collect(step, f"host-crash-{policy}")
        t_reported = clock.now()  # every survivor's failed report is in: each stopped waiting
        named = all(f"rank {victim}" in str(r.get("error", "")) for r in failed.reports.values())
        finished_anyway = [r for r, rep in failed.reports.items() if "error" not in rep]
        t0 = clock.now()
        slot = members.index(victim)
        if policy == "shrink":
            new_members = members[:slot] + members[slot + 1 :]
            new_inputs = inputs[:slot] + inputs[slot + 1 :]
            seated = None
        else:
            if not self.spares:
                raise FaultsError(f"no standby host left to take rank {victim}'s place")
            seated = self.spares.pop(0)
            new_members = members[:slot] + (seated[0],) + members[slot + 1 :]
            new_inputs = inputs  # the spare contributes the dead rank's input, rebuilt from seed and iteration
        self.job_hosts = tuple(self.host_of(r) for r in new_members)
        self.server.set_members(new_members)
        self.members, self.inputs = new_members, new_inputs
        self.install(self.job.timeout_s, self.job.min_timeout_s)  # the controller re-plans over the new hosts
        replan_s = clock.now() - t0
        # the step again: same iteration (so the same inputs) under a new step number
        self.runner.step += 1
        redo_step = self.runner.step
        self.server.post(redo_step, self.command(redo_step, step, size).to_dict())
        redo = self.collect(redo_step, f"host-crash-{policy}-redo")
        expected = sorted(new_inputs)
        outcome = check_step(redo.reports, new_members, expected, checker=0)
        if not outcome.ok:
            self.problems.extend(f"host crash ({policy}): {p}" for p in outcome.problems[:5])
        after = self.run("after-host-crash")
        after_ok = check_step(after.reports, new_members, expected, checker=0).ok
        t_done = redo.t_done()
        return {
            "victim": host,
            "victim_rank": victim,
            "spare": seated[1] if seated else None,
            "members": len(new_members),
            "sum_over": expected,
            "full_sum": expected == list(range(len(self.hosts))),
            "killed_after_s": t_kill - released,
            "named": named and not finished_anyway,
            "detected_s": t_reported - t_kill,
            "replan_s": replan_s,
            "recovery_s": t_done - t_kill if outcome.ok else None,
            "step_over_lossless": (t_done - released) / reference.latency_s if outcome.ok else None,
            "lossless_allreduce_s": reference.latency_s,
            "redo_s": redo.latency_s,
            "exact": outcome.ok and redo.exact,
            "problems": list(outcome.problems[:5]),
            "later_exact": after_ok and after.exact,
        }

    # -- the controller itself: failures.controller_crash ------------------------------------------------
    def controller_crash_series(self, topology_file: Path, work_dir: Path) -> dict[str, Any]:
        """controller_runs controller crashes (experiments.faults.standby), each followed by a switch failure the
        standby handles, then an all-reduce on what the standby installed: exact, and its time over a loss-free
        one before the crash."""
        runs: list[dict[str, Any]] = []
        for i in range(self.cfg.controller_runs):
            assert self.job is not None
            reference = self.run("controller-crash-lossless")
            crash = controller_crash(
                self.ctl, topology_file, work_dir / f"run{i}", kill_switch=self.net.kill_switch, bound_s=10.0
            )
            self.problems.extend(f"controller crash: {p}" for p in crash.problems)
            # the job as the standby left it (moved off the killed root): a new install for the workers
            self.plan = self.ctl.state.jobs[JOB_ID]
            self.reticket()
            after = self.run("after-controller-crash")
            if crash.victim is not None:
                self.restore_switch(crash.victim)
            d = crash.to_dict()
            recovery = (
                crash.kill_to_primary_s + crash.reconcile_s
                if crash.kill_to_primary_s is not None and crash.reconcile_s is not None
                else None
            )
            runs.append(
                {
                    **d,
                    "detected_s": crash.kill_to_primary_s,  # the primary's death to the standby primary everywhere
                    "recovery_s": recovery,  # ... and reconciled: controlling the fabric again
                    "switch_failover_s": crash.kill_to_moved_s,  # the switch killed next to the job moved
                    "lossless_allreduce_s": reference.latency_s,
                    "step_s": after.latency_s,
                    "step_over_lossless": after.latency_s / reference.latency_s if after.reports else None,
                    "exact": not crash.problems and after.exact,
                    "later_exact": after.exact,
                }
            )
        return {
            **series_summary(runs),
            "reconcile_s": _spread([float(r["reconcile_s"]) for r in runs if r.get("reconcile_s") is not None]),
            "switch_failover_s": _spread(
                [float(r["switch_failover_s"]) for r in runs if r.get("switch_failover_s") is not None]
            ),
        }

    def tree_link(self) -> tuple[str, str]:
        return link_key(*self.tree_link_from_root())

    def tree_link_from_root(self) -> tuple[str, str]:
        """(root, its first child switch) of the job's tree."""
        assert self.plan is not None
        root = self.plan.on(self.plan.root)
        switches = {sp.switch for sp in self.plan.switches}
        child = next((c.node for c in root.children if c.node in switches), None)
        if child is None:
            raise FaultsError(f"job {JOB_ID}'s root {root.switch} has no switch below it: no link to take down")
        return root.switch, child

    def restore_switch(self, name: str, restart: bool = False) -> None:
        """The killed switch back: restarted on its address, program and routes pushed, watched again.
        restart: kill it first (a live switch replaced)."""
        if restart:
            self.net.kill_switch(name)
        self.net.restart_switch(name)
        self.ctl.revive([name])
        if self.monitor is not None:
            self.monitor.revive([name])
        self.ctl.restore_pipelines()
        self.ctl.install_routes()
        if self.monitor is not None:
            self.monitor.watch([name])

    def restore_link(self, link: tuple[str, str], timeout_s: float = 30.0) -> None:
        """The cut link back up, once its ports say so (the monitor's view, or the carrier without it)."""
        self.net.set_link(*link, up=True)
        deadline = clock.now() + timeout_s
        while clock.now() < deadline:
            down = self.monitor.down_links if self.monitor is not None else self.net.down_links(list(link))
            if link not in down:
                break
            threading.Event().wait(0.01)
        else:
            raise FaultsError(f"link {'-'.join(link)} did not come back up within {timeout_s:.0f} s")
        self.ctl.revive(links=[link])
        self.ctl.install_routes()

    def edge_failure(self) -> dict[str, Any]:
        assert self.plan is not None
        edge = next(sp.switch for sp in self.plan.switches if self.ctl.topo.switch(sp.switch).tier == 0)
        cut = sorted(c.node for c in self.plan.on(edge).children if c.node in self.hosts)
        step = self.post("edge-failure")
        self.wait_release(step)
        t_kill = clock.now()
        self.net.kill_switch(edge)
        s = self.collect(step, "edge-failure")
        text = " ".join(s.errors)
        return {
            "switch": edge,
            "hosts": cut,
            "reported_after_s": clock.now() - t_kill,
            "reported": bool(s.errors) and edge in text and all(h in text for h in cut),
            "message": s.errors[0] if s.errors else None,
        }


def _spread(values: list[float]) -> dict[str, Any] | None:
    return {"median": statistics.median(values), "worst": max(values), "all": values} if values else None


GOAL_MEDIAN, GOAL_WORST = 1.5, 2.0  # the failed step over a loss-free one (issue 36): median, worst


def series_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """failures.<kind>: each figure's median and worst over the runs (and every value), exactness of all."""

    def values(key: str) -> list[float]:
        return [float(r[key]) for r in runs if r.get(key) is not None]

    ratio = _spread(values("step_over_lossless"))
    return {
        "runs": len(runs),
        "signal_s": _spread(values("signal_s")),  # failure to the controller's hearing it
        "detection_s": _spread(values("detected_s")),  # failure to the last rank's stopping its wait
        "barrier_s": _spread(values("barrier_s")),  # the last rank's detection to the decision's start
        "replan_s": _spread(values("replan_s")),
        "over_s": _spread(values("over_s")),  # the failed step's time over its loss-free reference
        "recovery_s": _spread(values("recovery_s")),  # failure to the completed all-reduce
        "step_over_lossless": ratio,
        "goal": {"median": GOAL_MEDIAN, "worst": GOAL_WORST},
        "goal_met": ratio is not None
        and len(ratio["all"]) == len(runs)
        and ratio["median"] <= GOAL_MEDIAN
        and ratio["worst"] <= GOAL_WORST,
        "triggers": sorted({t for r in runs for t in r.get("triggers", [])}),
        "exact": all(bool(r["exact"] and r["later_exact"]) for r in runs),
        **(
            {
                # gray failures: failure to the verdict, against the stated bound; every run named the right place
                "verdict_s": _spread(values("verdict_s")),
                "bound_s": max(values("gray_bound_s")),
                "bound_met": len(values("verdict_s")) == len(runs)
                and all(r["verdict_s"] <= r["gray_bound_s"] for r in runs),
                "localised": all(bool(r.get("localised")) for r in runs),
            }
            if any("localised" in r for r in runs)
            else {}
        ),
        "detail": runs,
    }


def isolation_phase(
    cfg: FaultsConfig, net: EmulatedNetwork, ctl: Controller, runner: R.Runner, sock_dir: Path, log_dir: Path
) -> dict[str, Any]:
    """Four jobs and a ring at once (experiments.faults.isolation), before the main job's agents start (they would share
    the hosts' interfaces); skipped, with the reason, where the topology has too few hosts."""
    from experiments.faults.isolation import IsolationError, IsolationRun

    try:
        iso = IsolationRun(
            net,
            ctl,
            sock_dir,
            log_dir,
            size=cfg.isolation_size or cfg.size,
            slots=cfg.slots,
            reps=cfg.isolation_reps,
            timeout_s=runner.tmo["inc"],
            ring_timeout_s=runner.tmo["ring"],
            seed=cfg.seed,
        )
    except IsolationError as ex:
        LOG.warning("isolation phase skipped: %s", ex)
        return {"skipped": str(ex)}
    return iso.run()


def summarize(
    cfg: FaultsConfig,
    lossless: dict[str, Any],
    loss: dict[str, Any],
    sdc: dict[str, Any] | None,
    failure: dict[str, Any] | None,
    edge: dict[str, Any] | None,
    problems: list[str],
    dup_reorder: dict[str, Any] | None = None,
    isolation: dict[str, Any] | None = None,
    link: dict[str, Any] | None = None,
    failures: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
        "lossless": lossless,
        "loss": loss,
        "problems": problems,
    }
    if dup_reorder is not None:
        out["dup_reorder"] = dup_reorder
    if isolation is not None:
        out["isolation"] = isolation
    if failure is not None:
        out["switch_failure"] = failure
    if link is not None:
        out["link_failure"] = link
    if failures:
        out["failures"] = failures
    if edge is not None:
        out["edge_failure"] = edge
    if sdc is not None:
        out["sdc"] = sdc
    out["ok"] = (
        not problems
        and lossless.get("exact", False)
        and all(v["exact"] for v in loss.values())
        and (failure is None or bool(failure["exact"] and failure["later_exact"]))
        and (link is None or bool(link["exact"] and link["later_exact"]))
        and (dup_reorder is None or dup_reorder["exact"])
        and (isolation is None or "skipped" in isolation or bool(isolation["exact"] and isolation["isolated"]))
        and (sdc is None or (sdc["exact"] and sdc["detected"] >= sdc["injected"] and not sdc["gray_false_alarms"]))
        and (edge is None or edge["reported"])
        and all(f["exact"] for f in (failures or {}).values())
        and all(f.get("localised", True) and f.get("bound_met", True) for f in (failures or {}).values())
        and all(v.get("gray_false_alarms", 0) == 0 for v in loss.values())
    )
    return out


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b, c) = plt.subplots(1, 3, figsize=(16, 4))
    loss = summary.get("loss", {})
    xs = [0.0] + [v["loss"] * 100 for v in loss.values()]
    ys = [summary["lossless"]["latency_s"] * 1e3] + [(v["latency_s"] or float("nan")) * 1e3 for v in loss.values()]
    a.plot(xs, ys, "o-", label="median")
    pts = [(0.0, t) for t in summary["lossless"].get("latencies_s", [])] + [
        (v["loss"] * 100, t) for v in loss.values() for t in v.get("latencies_s", [])
    ]
    if pts:
        a.scatter(
            [p[0] for p in pts], [p[1] * 1e3 for p in pts], s=10, color="grey", alpha=0.6, label="each all-reduce"
        )
    a.axhline(2 * ys[0], ls=":", color="grey", label="2x loss-free")
    a.set_xscale("symlog", linthresh=0.1)
    a.set_xlabel("random loss per link and direction (%)")
    a.set_ylabel("all-reduce latency (ms, median)")
    a.set_title(f"loss (timer floor {summary['lossless']['rto_floor_s'] * 1e3:.1f} ms)")
    a.set_xlim(-0.02, max(xs) * 1.5 if max(xs) > 0 else 1.0)
    a.legend()
    f = summary.get("switch_failure")
    if f and f.get("recovery_s") is not None:
        replanned = (f["detected_s"] + f["replan_s"]) if f.get("detected_s") is not None and f.get("replan_s") else None
        marks = [
            ("switch killed", 0.0),
            ("suspected (first)", f["first_detected_s"]),
            ("suspected (all)", f["detected_s"]),
            ("re-planned", replanned),
            ("all-reduce done", f["recovery_s"]),
        ]
        for i, (name, t) in enumerate(marks):
            if t is not None:
                b.barh(i, t, color="tab:green" if name == "all-reduce done" else "tab:blue")
                b.text(t, i, f" {t:.2f} s", va="center")
        if f.get("goal_s"):
            b.axvline(f["goal_s"], ls="--", color="grey", label=f"goal {f['goal_s']:.2f} s")
        b.axvline(f["detect_bound_s"], ls=":", color="red", label=f"detection bound {f['detect_bound_s']:.2f} s")
        b.set_yticks(range(len(marks)), [m[0] for m in marks])
        b.set_xlabel("seconds after the failure")
        b.set_title(f"{f['victim']} killed: re-planned on {f['new_root']}")
        b.legend(loc="lower right")
    failures = summary.get("failures") or {}
    for i, (kind, v) in enumerate(failures.items()):
        # failures placed within an all-reduce (a controller crash comes between them: not on this axis)
        runs = [r for r in v["detail"] if r.get("step_over_lossless") is not None and r.get("point") is not None]
        c.scatter(
            [r["point"] * 100 + 2 * i for r in runs],
            [r["step_over_lossless"] for r in runs],
            label=f"{kind.replace('_', ' ')} ({', '.join(v['triggers'])})",
        )
    if failures:
        c.axhline(GOAL_MEDIAN, ls="--", color="grey", label=f"goal: median {GOAL_MEDIAN:g}x")
        c.axhline(GOAL_WORST, ls=":", color="red", label=f"goal: worst {GOAL_WORST:g}x")
        c.set_xlabel("failure placed at (% of the loss-free all-reduce)")
        c.set_ylabel("failed all-reduce / loss-free one")
        c.set_title("each failure's step")
        c.set_ylim(bottom=0)
        c.legend(loc="lower right", fontsize=8)
    else:
        c.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_faults(cfg: FaultsConfig, out_dir: Path | None = None) -> FaultsResult:
    R.check_program()
    model = load_topology(cfg.topology)
    hosts = R.select_hosts(model, cfg.hosts)
    n_spares = cfg.host_runs if "spare" in cfg.host_policies else 0
    # the standby pool: hosts beyond the job's where the fabric has them; else the job's last hosts step aside
    # for the host-crash phases (FaultsRun.carve_spares), the other phases keeping the whole job
    spares = (
        R.select_hosts(model, cfg.hosts + n_spares)[cfg.hosts :]
        if n_spares and cfg.hosts + n_spares <= len(model.hosts)
        else ()
    )
    out = out_dir or cfg.results_root / f"{datetime.now():%Y-%m-%d_%H%M%S}_{cfg.label()}"
    out.mkdir(parents=True, exist_ok=True)
    log_dir = out / "logs"
    log_dir.mkdir(exist_ok=True)
    result = FaultsResult(cfg, out)
    exp = ExperimentConfig(
        topology=cfg.topology,
        host_counts=(cfg.hosts,),
        sizes=(cfg.size,),
        methods=(METHOD,),
        reps=1,
        warmup=0,
        backend=cfg.backend,
        shape=LinkShape(bw_mbps=cfg.bw_mbps),
        slots=cfg.slots,
        input_kind="ones",
        seed=cfg.seed,
        results_root=cfg.results_root,
    )
    lossless: dict[str, Any] = {}
    loss: dict[str, Any] = {}
    sdc = failure = edge = dup = iso = link = None
    failures: dict[str, dict[str, Any]] = {}
    t0 = clock.now()
    try:
        with (
            R.short_tmpdir() as sock_dir,
            EmulatedNetwork(model, NetworkConfig(run_dir=log_dir, backend=cfg.backend, shape=exp.shape)) as net,
        ):
            topo = net.topology
            topo.save(out / "topology.json")
            with Controller(topo, state=State(out / "controller-state.json")) as ctl:
                R.push_pipeline(ctl)
                ctl.install_routes()
                runner = R.Runner(exp, net, ctl, log_dir, sock_dir)
                run = FaultsRun(cfg, net, ctl, runner, hosts)
                runner.decide, runner.ask = run.decide, run.ask
                run.install(runner.tmo["inc"], runner.tmo["inc"])
                if cfg.isolation:
                    iso = isolation_phase(cfg, net, ctl, runner, sock_dir, log_dir)
                try:
                    with runner.agents(hosts, "faults", standby=spares) as server:
                        run.server = server
                        run.spares = [(len(hosts) + i, h) for i, h in enumerate(spares)]
                        run.spares_all = list(run.spares)
                        server.on_agent_lost = run.on_agent_lost
                        lossless = run.lossless()
                        loss = run.loss_sweep(lossless["latency_s"])
                        if cfg.dup_rate or cfg.reorder_rate:
                            dup = run.dup_reorder(lossless["latency_s"])
                        if cfg.sdc_flips:
                            sdc = run.sdc()
                        if cfg.controller_runs:
                            failures["controller_crash"] = run.controller_crash_series(
                                out / "topology.json", out / "controller-crash"
                            )
                        if cfg.signals:
                            run.start_monitor()
                        if cfg.switch_failure:
                            failures["switch_crash"] = run.failure_series("switch_crash")
                            failure = failures["switch_crash"]["detail"][0]
                        if cfg.link_failure:
                            failures["link_down"] = run.failure_series("link_down")
                            link = failures["link_down"]["detail"][0]
                        if cfg.gray_failure:
                            for kind in ("gray_switch", "gray_link"):
                                failures[kind] = run.failure_series(kind)
                                failures[kind]["false_alarms_under_loss"] = sum(
                                    v["gray_false_alarms"] for v in loss.values()
                                )
                        if n_spares and not spares:
                            run.carve_spares(n_spares)
                        for policy in cfg.host_policies:
                            failures[f"host_crash_{policy}"] = run.host_crash_series(policy)
                        if cfg.edge_failure:
                            edge = run.edge_failure()
                finally:
                    result.steps = run.steps
                    result.problems.extend(run.problems)
                    (out / "reports.json").write_text(
                        json.dumps(
                            [{"step": s.step, "phase": s.phase, "reports": s.reports} for s in run.steps], default=str
                        )
                        + "\n"
                    )
                    if run.monitor is not None:
                        run.monitor.close()
                    (out / "failovers.json").write_text(
                        json.dumps(
                            {
                                "failovers": run.failover_events,
                                "signals": run.signals,
                                # every register reading at a stall: when, on which install, what it said, how long
                                "stall_readings": [r.to_dict() for r in run.evidence],
                            },
                            indent=1,
                            default=str,
                        )
                        + "\n"
                    )
    except Exception as ex:
        result.problems.append(f"{type(ex).__name__}: {ex}")
        LOG.exception("faults experiment failed")
    result.summary = summarize(cfg, lossless, loss, sdc, failure, edge, result.problems, dup, iso, link, failures)
    result.summary["duration_s"] = clock.now() - t0
    (out / "summary.json").write_text(json.dumps(result.summary, indent=1, default=str) + "\n")
    if lossless:
        plot(result.summary, out / "faults.png")
    return result
