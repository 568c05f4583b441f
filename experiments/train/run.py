"""Run the training experiment on the emulated fabric (root, Mininet): `p4ina train`.

    result = run_training(TrainingConfig.make(ExperimentConfig(topology="leaf-spine:2x1x2", host_counts=(4,))))
    print(training.table(training.summarize(result)))

The network, the controller and the agents are the measurement experiment's
(experiments.harness): per host count the controller installs one job per
in-network method and one agent per host starts and stays. Then, method after
method, the runner posts the training run as numbered "train" commands of
`segment` steps each (all of them at once, so the agents go from one segment
to the next without waiting for the runner); each agent keeps its replica of
the model between segments and runs hosts.training.run_segment over the
worker that method's measurement steps would use (no process is started per
step). After each segment the runner checks that every rank reported, that
the digests of their parameters agree at every step, and keeps the rows. The
checker rank (0) sends its parameters at every evaluation step; the runner
evaluates them here, off the clock. Link byte counters and CPU times are read
at the start and the end of each method's run, so the summary can say
whether the all-reduces were link-bound. The exact run, the mis-scaled
control and the seed spread run in this process before the network starts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from experiments import bounds
from experiments.harness import (
    ExperimentError,
    Runner,
    StepFailed,
    check_program,
    emulated_fabric,
    environment,
    open_results,
    select_hosts,
)
from experiments.train import results as training
from experiments.train.results import EvalRow, RankStep, RunRow, TrainingConfig, TrainingResult
from hosts import clock
from hosts import training as model
from hosts.coordination import CoordinatorServer
from hosts.methods import METHODS, Method
from hosts.ring import topology_order
from hosts.tickets import JobTicket, RingSettings

LOG = logging.getLogger(__name__)

ProgressFn = Callable[[str, int], None]  # (what, steps just completed)
CHECKER = 0


class TrainingRunner(Runner):
    """The measurement runner's network, jobs and agents, driving training runs instead of single all-reduces."""

    def __init__(self, config: TrainingConfig, *args: Any) -> None:
        super().__init__(config.fabric, *args)
        self.training = config
        self.data = model.digits(config.train.test_fraction)
        self.mlp = model.model_for(config.train, self.data)

    def _on_release(self, tag: str) -> None:
        """No snapshot at a training step's barrier: counters are read per run, not per step
        (it would slow the steps)."""
        if not tag.startswith("train-"):
            super()._on_release(tag)

    def segment_timeout(self, count: int) -> float:
        wire = self.training.elements * 4 * 2 * 8 / self.rate_bps if self.rate_bps else 0.0
        return self.config.step_timeout_s + count * (2.0 + 20 * wire)

    def train_hosts(self, n: int, result: TrainingResult, progress: ProgressFn | None = None) -> None:
        hosts = select_hosts(self.model, n)
        jobs = self.install_jobs(hosts)
        ring_order = [hosts[i] for i in topology_order([self.model.host(h).switch for h in hosts])]
        try:
            with self.agents(hosts, f"train-n{n}") as server:
                for name in self.config.methods:
                    m = METHODS[name]
                    plan = jobs[name][0] if name in jobs else None
                    t_path = bounds.path_bound(
                        m,
                        elements=self.training.elements,
                        rate_bps=self.rate_bps,
                        delay_s=self.delay_s,
                        plan=plan,
                        slots=self.config.slots,
                        topo=self.model,
                        ring_order=ring_order,
                        exponent_rounds=False,
                    )  # from step 2 on, speculated (inc_worker)
                    run = RunRow(hosts=n, method=name, t_path_s=t_path)
                    result.runs.append(run)
                    try:
                        self.train_method(
                            server, m, hosts, jobs[name][1] if name in jobs else None, run, result, progress
                        )
                    except StepFailed as ex:
                        run.error = str(ex.args[0])
                        self.problems.append(
                            f"{n} hosts, {name}: {run.error}; the remaining methods of {n} hosts were skipped"
                        )
                        LOG.error("%s", self.problems[-1])
                        return
        finally:
            self.remove_jobs()

    def train_method(
        self,
        server: CoordinatorServer,
        m: Method,
        hosts: tuple[str, ...],
        job: JobTicket | None,
        run: RunRow,
        result: TrainingResult,
        progress: ProgressFn | None,
    ) -> None:
        cfg, n = self.training, len(hosts)
        steps, seg = cfg.train.steps, cfg.segment
        run_id = f"n{n}-{m.name}"
        base: dict[str, Any] = {
            "op": "train",
            "method": m.name,
            "run": run_id,
            "train": cfg.train.to_dict(),
            "checker": CHECKER,
            "ring": RingSettings(window=self.config.ring_window, timeout_s=self.tmo["ring"]).to_dict(),
        }
        if job is not None:
            base["job"] = job.to_dict()
        posted: list[tuple[int, int, int]] = []  # (runner step, first training step, count)
        for first in range(1, steps + 1, seg):
            count = min(seg, steps + 1 - first)
            self.step += 1
            server.post(self.step, {**base, "first": first, "count": count, "last": first + count > steps})
            posted.append((self.step, first, count))
        before = self.snapshot()
        for cmd_step, first, count in posted:
            reports = self._wait(server, cmd_step, self.segment_timeout(count))
            errors = [f"rank {r}: {rep['error']}" for r, rep in sorted(reports.items()) if "error" in rep]
            for rank, rep in sorted(reports.items()):
                for rec in rep.get("records", []):
                    result.ranks.append(_rank_step(n, m.name, rank, rec))
                for step, text in rep.get("snapshots", {}).items():
                    theta = model.decode_params(text)
                    e = model.evaluate(self.mlp, self.data, theta, int(step))
                    result.evals.append(
                        EvalRow(n, m.name, "emulation", cfg.train.seed, e.step, e.train_loss, e.test_loss, e.test_acc)
                    )
                if rep.get("t_end_release") is not None:
                    run.t_end_release = float(rep["t_end_release"])
            done = [r for r in result.ranks if r.hosts == n and r.method == m.name and first <= r.step < first + count]
            run.steps = first - 1 + (len(done) // n if len(done) == count * n else 0)
            if progress:
                progress(f"{n} hosts, {m.name}, step {first + count - 1}/{steps}", count)
            if errors or len(reports) < n:
                dead = [h for h, p in self._agents if p.poll() is not None]
                raise StepFailed(
                    f"steps {first}-{first + count - 1}: {len(reports)} of {n} agents reported"
                    + (f"; {'; '.join(errors[:3])}" if errors else "")
                    + (f"; agents on {', '.join(dead)} exited" if dead else "")
                    + f"; logs in {self.log_dir}"
                )
            # the digests of every step of the segment must agree: a divergence stops the run (it cannot heal)
            by_step: dict[int, set[str]] = {}
            for r in done:
                by_step.setdefault(r.step, set()).add(r.digest)
            bad = sorted(s for s, d in by_step.items() if len(d) > 1)
            if bad:
                raise StepFailed(f"ranks' parameters differ after step {bad[0]} (digests {sorted(by_step[bad[0]])})")
        after = self.snapshot()
        figures = self._figures(before, after, set(hosts))
        for key in ("wire_bytes", "wire_link", "t_wire_s", "switch_busy", "agents_busy", "cores_busy", "ours_busy"):
            if key in figures:
                setattr(run, key, figures[key])

    def _wait(self, server: CoordinatorServer, step: int, timeout_s: float) -> dict[int, dict[str, Any]]:
        """Every rank's report of `step`; returns early when an agent died or one rank reported an error."""
        deadline = clock.now() + timeout_s
        n = server.size
        while True:
            reports = server.step_reports(step, min(1.0, max(0.0, deadline - clock.now())), alive=self.alive)
            if (
                len(reports) == n
                or any("error" in r for r in reports.values())
                or not self.alive()
                or clock.now() >= deadline
            ):
                return reports


def _rank_step(n: int, method: str, rank: int, rec: dict[str, Any]) -> RankStep:
    return RankStep(
        hosts=n,
        method=method,
        step=int(rec["step"]),
        rank=rank,
        t_begin=float(rec["t_begin"]),
        t_ready=float(rec["t_ready"]),
        t_release=float(rec["t_release"]),
        t_done=float(rec["t_done"]),
        t_back=float(rec["t_back"]),
        t_end=float(rec["t_end"]),
        loss=float(rec["loss"]),
        correct=int(rec["correct"]),
        digest=str(rec["digest"]),
        sum_digest=str(rec["sum_digest"]),
        retransmissions=int(rec.get("retransmissions", 0)),
        bytes_sent=int(rec.get("bytes_sent", 0)),
    )


def run_training(
    config: TrainingConfig, *, out_dir: Path | None = None, progress: ProgressFn | None = None, write: bool = True
) -> TrainingResult:
    """The exact runs here, then the network up, every method's training through it, all torn down; rows written."""
    check_program()
    from controller.topospec import load_topology

    topo = load_topology(config.fabric.topology)
    for n in config.fabric.host_counts:
        select_hosts(topo, n)
    out, log_dir = open_results(config.fabric, out_dir)
    env = environment(config.fabric)
    try:
        env["packages"]["scikit-learn"] = metadata.version("scikit-learn")
    except metadata.PackageNotFoundError as ex:
        raise ExperimentError("scikit-learn is not installed (make setup installs it): the digits come with it") from ex
    result = TrainingResult(config, out_dir=out, environment=env)
    t0 = clock.now()
    runner: TrainingRunner | None = None
    try:
        for n in config.fabric.host_counts:
            t = clock.now()
            result.evals += training.reference_evals(config, n)
            LOG.info("%d hosts: exact run, control and seed spread in %.1f s", n, clock.now() - t)
        with emulated_fabric(config.fabric, topo, out, log_dir, result, t0) as (net, ctl, sock_dir):
            runner = TrainingRunner(config, net, ctl, log_dir, sock_dir)
            result.environment["worker_timeouts_s"] = runner.tmo
            for n in config.fabric.host_counts:
                runner.train_hosts(n, result, progress)
    finally:
        result.duration_s = clock.now() - t0
        if runner is not None:
            result.problems.extend(runner.problems)
        if write:
            training.write_all(result)
    return result


def total_steps(config: TrainingConfig) -> int:
    return len(config.fabric.host_counts) * len(config.fabric.methods) * config.train.steps
