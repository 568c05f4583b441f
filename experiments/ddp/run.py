"""Run the PyTorch DDP experiment on the emulated fabric (root, Mininet): `p4ina ddp`.

    result = run_ddp(DdpConfig.from_dict({"topology": "leaf-spine:2x1x2", "host_counts": [4]}))
    print(results.table(results.summarize(result)))

The network and the controller are the other experiments' (experiments.harness). Per host count the
controller installs one job per in-network method; the runner writes the plan (torchddp.train.Plan: the
runs, the jobs' tickets, the peers) and starts one PyTorch process per host in its namespace (`python -m
torchddp rank`), which joins a Gloo group over the host's link (rank 0's address is the rendezvous) and trains
the plan's runs one after the other through the hook. The ranks meet at the coordinator's barriers: at each
run's start and end barrier the runner reads every link's byte counters (what the run put on the busiest link)
and, at a lossy run's start, turns the random loss on for every link. The ranks append their rows to the
results folder; the runner reads them when the processes have exited (or stops them by PID after the timeout).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from experiments.ddp import results as R
from experiments.ddp.results import DdpConfig, DdpResult, EvalRow, RunRow, StepRow
from experiments.harness import (
    ExperimentError,
    Runner,
    Snapshot,
    check_program,
    emulated_fabric,
    environment,
    open_results,
    select_hosts,
)
from hosts import clock
from hosts.coordination import CoordinatorServer
from hosts.tickets import RingSettings
from torchddp import models
from torchddp.train import Plan, RunSpec, rows_path

LOG = logging.getLogger(__name__)

ProgressFn = Callable[[str, int], None]
GLOO_PORT = 29500
_RUN_TAG = re.compile(r"run-(\d+)-(start|end|\d+)$")


class DdpRunner(Runner):
    def __init__(self, config: DdpConfig, *args: Any) -> None:
        super().__init__(config.fabric, *args)
        self.ddp = config
        self.runs: list[RunSpec] = []
        self.marks: dict[tuple[int, str], Snapshot] = {}
        self.loss = 0.0
        self.progress: ProgressFn | None = None

    def _on_release(self, tag: str) -> None:
        """At a run's start: its loss on every link, then the counters; at its end the counters; per step:
        the progress bar."""
        m = _RUN_TAG.match(tag)
        if m is None:
            return
        i, what = int(m.group(1)), m.group(2)
        if what == "start":
            want = self.runs[i].loss_pct / 100.0
            if want != self.loss:
                self.net.set_loss(want)  # an EmulatedNetwork (emulated_fabric): it has set_loss
                self.loss = want
            self.marks[(i, "start")] = self.snapshot()
        elif what == "end":
            self.marks[(i, "end")] = self.snapshot()
        elif self.progress is not None:
            self.progress(self.runs[i].run, 1)

    def train_hosts(self, n: int, result: DdpResult, out: Path) -> None:
        hosts = select_hosts(self.model, n)
        jobs = self.install_jobs(hosts)
        folder = out / f"ranks-n{n}"
        folder.mkdir(parents=True, exist_ok=True)
        self.runs = self.ddp.runs()
        ip0 = self.model.host(hosts[0]).ip
        sock = self.sock_dir / f"ddp-n{n}.sock"
        server = CoordinatorServer(f"unix:{sock}", n, timeout_s=self.ddp.barrier_timeout_s, on_release=self._on_release)
        server.start()
        plan = Plan(
            workers=n,
            coord=server.address,
            master=f"{ip0}:{GLOO_PORT}",
            out=str(folder),
            peers=tuple(self.model.host(h).ip for h in hosts),
            groups=tuple(self.model.host(h).switch for h in hosts),
            jobs={name: ticket.to_dict() for name, (_plan, ticket) in jobs.items()},
            ring=RingSettings(window=self.config.ring_window, timeout_s=self.tmo["ring"]).to_dict(),
            runs=tuple(self.runs),
        )
        plan_path = folder / "plan.json"
        plan.save(plan_path)
        for f in folder.glob("rank*.jsonl"):
            f.unlink()
        self._agents = []
        try:
            for rank, h in enumerate(hosts):
                cmd = [sys.executable, "-m", "torchddp", "rank", "--plan", str(plan_path), "--rank", str(rank)]
                cmd += ["--iface", self.net.host_iface(h)]
                self._agents.append((h, self.net.popen(h, cmd, log=self.log_dir / f"ddp-n{n}-{h}.log")))
            deadline = clock.now() + self.ddp.timeout_s()
            while clock.now() < deadline:
                reports = dict(server.reports)
                if any("error" in r for r in reports.values()) or len(reports) == n:
                    break
                if all(p.poll() is not None for _h, p in self._agents):
                    time.sleep(1.0)  # a report sent just before the exit
                    break
                time.sleep(0.5)
            reports = dict(server.reports)
            errors = [f"rank {r}: {rep['error']}" for r, rep in sorted(reports.items()) if "error" in rep]
            if len(reports) < n or errors:
                self.problems.append(
                    f"{n} hosts: {len(reports)} of {n} ranks finished"
                    + (f"; {'; '.join(errors[:3])}" if errors else "")
                    + f"; logs in {self.log_dir}"
                )
                LOG.error("%s", self.problems[-1])
        finally:
            from emulation.nodes import reap

            reap([p for _h, p in self._agents])
            self._agents = []
            server.close()
            if self.loss:
                self.net.set_loss(0.0)
                self.loss = 0.0
            self.remove_jobs()
        self._collect(n, hosts, folder, result)

    def _collect(self, n: int, hosts: tuple[str, ...], folder: Path, result: DdpResult) -> None:
        rows: dict[str, list[dict[str, Any]]] = {}
        for rank in range(n):
            path = rows_path(folder, rank)
            if path.exists():
                for line in path.read_text().splitlines():
                    row = json.loads(line)
                    rows.setdefault(row["run"], []).append(row)
        for i, spec in enumerate(self.runs):
            got = rows.get(spec.run, [])
            run = RunRow(
                hosts=n,
                run=spec.run,
                model=spec.model.name,
                method=spec.method,
                seed=spec.seed,
                steps=spec.steps,
                error_feedback=spec.error_feedback,
                fault=spec.fault or "",
                loss_pct=spec.loss_pct,
                parameters=models.parameter_count(spec.model),
            )
            before, after = self.marks.pop((i, "start"), None), self.marks.pop((i, "end"), None)
            if before is not None and after is not None:
                fig = self._figures(before, after, set(hosts))
                run.wire_bytes, run.wire_link = int(fig["wire_bytes"]), str(fig["wire_link"])
                run.t_wire_s = float(fig["t_wire_s"])
                run.cores_busy = float(fig.get("cores_busy", float("nan")))
                run.duration_s = after.t - before.t
            if len(got) < n:
                run.error = f"{len(got)} of {n} ranks reported this run"
            result.runs.append(run)
            for row in got:
                for rec in row["records"]:
                    result.steps.append(StepRow(hosts=n, run=spec.run, rank=int(row["rank"]), **rec))
                for e in row["evals"]:
                    result.evals.append(
                        EvalRow(n, spec.run, int(e["step"]), float(e["test_loss"]), float(e["test_acc"]))
                    )


def run_ddp(
    config: DdpConfig, *, out_dir: Path | None = None, progress: ProgressFn | None = None, write: bool = True
) -> DdpResult:
    """The network up, every host count's runs through it, all torn down; rows written."""
    check_program()
    from controller.topospec import load_topology

    topo = load_topology(config.fabric.topology)
    for n in config.fabric.host_counts:
        select_hosts(topo, n)
    out, log_dir = open_results(config.fabric, out_dir)
    env = environment(config.fabric)
    try:
        env["packages"]["torch"] = metadata.version("torch")
    except metadata.PackageNotFoundError as ex:
        raise ExperimentError("PyTorch is not installed: pip install 'p4ina[torch]' (make setup installs it)") from ex
    result = DdpResult(config, out_dir=out, environment=env)
    t0 = clock.now()
    runner: DdpRunner | None = None
    try:
        with emulated_fabric(config.fabric, topo, out, log_dir, result, t0) as (net, ctl, sock_dir):
            runner = DdpRunner(config, net, ctl, log_dir, sock_dir)
            runner.progress = progress
            result.environment["worker_timeouts_s"] = runner.tmo
            for n in config.fabric.host_counts:
                t = clock.now()
                runner.train_hosts(n, result, out)
                LOG.info("%d hosts: %d runs in %.0f s", n, len(runner.runs), clock.now() - t)
    finally:
        result.duration_s = clock.now() - t0
        if runner is not None:
            result.problems.extend(runner.problems)
        if write:
            R.write_all(result)
    return result
