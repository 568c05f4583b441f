"""Load and isolation (the faults experiment's item 3): several in-network jobs at once on shared switches,
ring traffic between other hosts beside them, every sum exact and no job's cells touched by another.

Each job has its own hosts, its own agents and coordinator (its ranks 0..n-1), its own slot range on every
switch it shares (the planner's), and its own inputs (the "ones" kind at a job-specific iteration, so two
jobs never add the same numbers). A ring group of the remaining hosts runs the host ring beside them, its
packets forwarded by the same switches.

1. alone: every group runs `reps` all-reduces while the others wait: the latency each job has to itself,
   and what its switches count per all-reduce (completions, contributions);
2. together: every group's all-reduce posted at once, `reps` times: each job's latency under load, its
   slowdown (median together / median alone), exactness;
3. isolation, two ways:
   - the switch counters: on every switch of a job's tree, the together phase counted exactly the
     completions per all-reduce it counted alone (another job's contributions in its cells would close
     rounds early or leave them open), and no drops for a wrong slot, port or job;
   - a register read-back (P4Runtime on the embedded switch): every cell of a job's slot range holds that
     job's install token on that switch, and no cell outside every job's range holds any token.
"""

from __future__ import annotations

import logging
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller import names as N
from controller.api import Controller
from controller.planner import JobPlan
from controller.registers import read_register_all
from controller.topology import Topology
from emulation.network import EmulatedNetwork
from emulation.nodes import reap
from experiments.harness import Step, job_ticket
from hosts import clock
from hosts.coordination import CoordinatorServer
from hosts.tickets import JobTicket, RingSettings, StepCommand

LOG = logging.getLogger(__name__)

FIRST_JOB_ID = 21
# drops that would mean a packet reached a job's cells (or tables) it does not belong to
FOREIGN_DROPS = ("bad_slot", "bad_port", "unknown_job", "scale_mismatch")


class IsolationError(RuntimeError):
    """The isolation phase could not run (too few hosts, an agent gone); the message says which."""


def groups(
    model: Topology, jobs: int = 4, per_job: int = 3, ring: int = 4
) -> tuple[list[tuple[str, ...]], tuple[str, ...]]:
    """`jobs` host sets of `per_job` hosts spread over the pods (so their trees meet on edge, aggregation and
    core switches), and a ring of `ring` other hosts: every fourth host in model order, from the fourth."""
    names = [h.name for h in model.hosts]
    need = jobs * per_job + ring
    if len(names) < need:
        raise IsolationError(
            f"{jobs} jobs of {per_job} hosts and a ring of {ring} need {need} hosts; {model.kind} has {len(names)}"
        )
    stride = max(1, len(names) // ring)
    ring_hosts = tuple(names[stride - 1 :: stride][:ring])
    rest = [h for h in names if h not in ring_hosts]
    job_hosts = [tuple(rest[j::jobs][:per_job]) for j in range(jobs)]
    if any(len(h) < per_job for h in job_hosts):
        raise IsolationError(f"cannot deal {jobs} x {per_job} hosts out of {rest}")
    return job_hosts, ring_hosts


@dataclass
class Group:
    """One set of agents with its own coordinator: a job's, or the ring's (job None)."""

    name: str
    hosts: tuple[str, ...]
    server: CoordinatorServer
    procs: list[subprocess.Popen[Any]]
    plan: JobPlan | None = None
    job: JobTicket | None = None
    iteration_base: int = 0

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)


@contextmanager
def agent_group(
    net: EmulatedNetwork, model: Topology, name: str, hosts: tuple[str, ...], sock_dir: Path, log_dir: Path
) -> Iterator[Group]:
    """One agent per host (python -m hosts agent), driven by a coordinator on a Unix socket; stopped by PID."""
    sock = sock_dir / f"iso-{name}.sock"
    server = CoordinatorServer(f"unix:{sock}", len(hosts), timeout_s=600)
    server.start()
    peers = ",".join(model.host(h).ip for h in hosts)
    where = ",".join(model.host(h).switch for h in hosts)
    procs: list[subprocess.Popen[Any]] = []
    group = Group(name, hosts, server, procs)
    try:
        for rank, h in enumerate(hosts):
            cmd = [
                sys.executable,
                "-m",
                "hosts",
                "agent",
                "--rank",
                str(rank),
                "--workers",
                str(len(hosts)),
                "--coord",
                f"unix:{sock}",
                "--iface",
                net.host_iface(h),
                "--peers",
                peers,
                "--groups",
                where,
            ]
            procs.append(net.popen(h, cmd, log=log_dir / f"agent-iso-{name}-{h}.log"))
        yield group
    finally:
        server.post(10**9, {"op": "quit"})
        reap(procs)
        server.close()


class IsolationRun:
    def __init__(
        self,
        net: EmulatedNetwork,
        ctl: Controller,
        sock_dir: Path,
        log_dir: Path,
        *,
        size: int,
        slots: int,
        reps: int,
        timeout_s: float,
        ring_timeout_s: float,
        jobs: int = 4,
        per_job: int = 3,
        ring: int = 4,
        seed: int = 0,
    ) -> None:
        self.net, self.ctl, self.sock_dir, self.log_dir = net, ctl, sock_dir, log_dir
        self.size, self.slots, self.reps, self.seed = size, slots, reps, seed
        self.timeout_s, self.ring_timeout_s = timeout_s, ring_timeout_s
        self.job_hosts, self.ring_hosts = groups(net.model, jobs, per_job, ring)
        self.step = 0
        self.groups: list[Group] = []

    # -- steps ---------------------------------------------------------------------------------
    def _post(self, g: Group, rep: int) -> int:
        self.step += 1
        cmd = StepCommand(
            step=self.step,
            method="inc-int32" if g.job else "ring",
            size=self.size,
            iteration=g.iteration_base + rep,
            input="ones",
            seed=self.seed,
            checker=0,
            ring=RingSettings(window=64, timeout_s=self.ring_timeout_s),
            job=g.job,
        )
        g.server.post(self.step, cmd.to_dict())
        return self.step

    def _collect(self, g: Group, step: int, phase: str) -> dict[str, Any]:
        reports = g.server.step_reports(step, 300.0, alive=g.alive)
        s = Step(step, phase, reports, len(g.hosts))
        if len(reports) < len(g.hosts):
            raise IsolationError(
                f"{g.name}, step {step} ({phase}): ranks {sorted(reports)} of {len(g.hosts)} "
                f"reported; agent logs in {self.log_dir}"
            )
        return {
            "exact": s.exact,
            "latency_s": s.latency_s,
            "errors": s.errors,
            "retransmissions": s.total("retransmissions"),
            "duplicates": s.total("duplicates"),
        }

    def _counters(self) -> dict[str, dict[str, dict[str, int]]]:
        """job group -> switch -> its counters for the job (packets and drops by reason)."""
        out = {}
        for g in self.groups:
            if g.plan is None:
                continue
            per = self.ctl.counters(g.plan.job_id)
            out[g.name] = {sw: {**c.packets, **{f"drops.{k}": v for k, v in c.drops.items()}} for sw, c in per.items()}
        return out

    # -- the phase -------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        plans = []
        for j, hosts in enumerate(self.job_hosts):
            plan = self.ctl.install_job(FIRST_JOB_ID + j, hosts, "int32", slots=self.slots)
            plans.append(plan)
        try:
            with ExitStack() as stack:
                for j, (plan, hosts) in enumerate(zip(plans, self.job_hosts)):
                    g = stack.enter_context(
                        agent_group(self.net, self.net.model, f"job{plan.job_id}", hosts, self.sock_dir, self.log_dir)
                    )
                    g.plan, g.iteration_base = plan, 1000 * (j + 1)
                    g.job = job_ticket(plan, install=1, timeout_s=self.timeout_s)
                    self.groups.append(g)
                ring = stack.enter_context(
                    agent_group(self.net, self.net.model, "ring", self.ring_hosts, self.sock_dir, self.log_dir)
                )
                self.groups.append(ring)
                return self._measure(plans)
        finally:
            for plan in plans:
                self.ctl.remove_job(plan.job_id)

    def _measure(self, plans: list[JobPlan]) -> dict[str, Any]:
        alone: dict[str, list[dict[str, Any]]] = {g.name: [] for g in self.groups}
        per_allreduce: dict[str, dict[str, dict[str, int]]] = {}  # job group -> switch -> counts of `reps` alone
        for g in self.groups:  # one group at a time; the first all-reduce of each warms its agents up
            self._collect(g, self._post(g, 0), "warmup")
            before = self._counters()
            for rep in range(self.reps):
                alone[g.name].append(self._collect(g, self._post(g, rep + 1), "alone"))
            after = self._counters()
            if g.name in after:
                per_allreduce[g.name] = {
                    sw: {k: v - before[g.name][sw].get(k, 0) for k, v in c.items()} for sw, c in after[g.name].items()
                }
        before = self._counters()
        together: dict[str, list[dict[str, Any]]] = {g.name: [] for g in self.groups}
        t0 = clock.now()
        for rep in range(self.reps):
            steps = [(g, self._post(g, self.reps + 1 + rep)) for g in self.groups]  # all at once
            for g, step in steps:
                together[g.name].append(self._collect(g, step, "together"))
        took = clock.now() - t0
        after = self._counters()
        out: dict[str, Any] = {"jobs": {}, "ring": {}, "together_s": took, "reps": self.reps, "size": self.size}
        counters_ok = True
        for g in self.groups:
            lat_alone = statistics.median(r["latency_s"] for r in alone[g.name])
            lat_load = statistics.median(r["latency_s"] for r in together[g.name])
            entry: dict[str, Any] = {
                "hosts": list(g.hosts),
                "exact": all(r["exact"] for r in alone[g.name] + together[g.name]),
                "errors": [e for r in alone[g.name] + together[g.name] for e in r["errors"]][:5],
                "latency_alone_s": lat_alone,
                "latency_loaded_s": lat_load,
                "slowdown": lat_load / lat_alone,
                "retransmissions_loaded": sum(r["retransmissions"] for r in together[g.name]),
            }
            if g.plan is None:
                out["ring"] = entry
                continue
            sp = {s.switch: s for s in g.plan.switches}
            entry.update(
                root=g.plan.root,
                switches=sorted(sp),
                slots={sw: [s.slot_base, s.slot_base + s.slot_count] for sw, s in sp.items()},
            )
            # per switch: the together phase counted what the same number of all-reduces counted alone
            mismatch, foreign = [], {}
            for sw, c in after[g.name].items():
                d = {k: v - before[g.name][sw].get(k, 0) for k, v in c.items()}
                want = per_allreduce[g.name][sw].get("completions", 0)
                if d.get("completions", 0) != want or want == 0:
                    mismatch.append(f"{sw}: {d.get('completions', 0)} completions together, {want} expected")
                for reason in FOREIGN_DROPS:
                    if d.get(f"drops.{reason}", 0):
                        foreign[f"{sw}.{reason}"] = d[f"drops.{reason}"]
            entry.update(
                completions_per_allreduce={
                    sw: c.get("completions", 0) / self.reps for sw, c in per_allreduce[g.name].items()
                },
                counter_mismatches=mismatch,
                foreign_drops=foreign,
            )
            counters_ok = counters_ok and not mismatch and not foreign
            out["jobs"][str(g.plan.job_id)] = entry
        shared = self._shared(plans)
        cells = self._registers(plans)
        out.update(shared_switches=shared, counters_isolated=counters_ok, **cells)
        out["exact"] = all(v["exact"] for v in out["jobs"].values()) and bool(out["ring"].get("exact"))
        out["isolated"] = counters_ok and cells["foreign_cells"] == 0 and cells["stray_cells"] == 0
        out["slowdowns"] = {k: v["slowdown"] for k, v in out["jobs"].items()} | {"ring": out["ring"]["slowdown"]}
        return out

    @staticmethod
    def _shared(plans: list[JobPlan]) -> dict[str, list[int]]:
        """switch -> the jobs whose trees use it, for switches of two or more trees."""
        users: dict[str, list[int]] = {}
        for p in plans:
            for sp in p.switches:
                users.setdefault(sp.switch, []).append(p.job_id)
        return {sw: jobs for sw, jobs in sorted(users.items()) if len(jobs) > 1}

    def _registers(self, plans: list[JobPlan]) -> dict[str, Any]:
        """Read every switch's slot_token back: a job's cells hold its token, no other cell holds one."""
        schema = self.ctl.schema
        other = [p for p in self.ctl.jobs() if p.job_id not in {q.job_id for q in plans}]
        switches = sorted({sp.switch for p in plans for sp in p.switches})
        checked = foreign = stray = unused = 0
        examples: list[str] = []
        for sw in switches:
            tokens = read_register_all(self.ctl.fabric.client(sw), schema, N.R_SLOT_TOKEN)
            owner: dict[int, tuple[int, int]] = {}  # cell -> (job, its token here)
            for p in plans:
                for sp in p.switches:
                    if sp.switch == sw:
                        for cell in range(
                            sp.slot_base * N.CELLS_PER_SLOT, (sp.slot_base + sp.slot_count) * N.CELLS_PER_SLOT
                        ):
                            owner[cell] = (p.job_id, sp.token)
            elsewhere = {
                cell
                for p in other
                for sp in p.switches
                if sp.switch == sw
                for cell in range(sp.slot_base * N.CELLS_PER_SLOT, (sp.slot_base + sp.slot_count) * N.CELLS_PER_SLOT)
            }
            for cell, token in enumerate(tokens):
                checked += 1
                if cell in owner:
                    job, want = owner[cell]
                    if token == 0:
                        unused += 1
                    elif token != want:
                        foreign += 1
                        if len(examples) < 5:
                            examples.append(f"{sw} cell {cell} (job {job}, token {want}) holds token {token}")
                elif cell not in elsewhere and token != 0:
                    stray += 1
                    if len(examples) < 5:
                        examples.append(f"{sw} cell {cell} (no job's) holds token {token}")
        return {
            "register_switches": len(switches),
            "register_cells_checked": checked,
            "foreign_cells": foreign,
            "stray_cells": stray,
            "unused_cells": unused,
            "register_examples": examples,
        }


__all__ = ["IsolationError", "IsolationRun", "groups"]
