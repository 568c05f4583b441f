"""The all-reduce experiment (`p4ina emulate`): every method per host count and size, timed the same way.

    result = run_experiment(ExperimentConfig(topology="fat-tree:2", host_counts=(4,), sizes=(1024,)))
    print(report.table(analysis.summarize(result.config, result.samples)))

For each host count the sweep installs one job per in-network method and starts one agent per host
(experiments.harness.Runner), then runs every size and repetition with the methods in a shuffled order
(seeded, a new order per repetition, so no method always follows another).
"""

from __future__ import annotations

import logging
from pathlib import Path

from controller.topospec import load_topology
from experiments import bounds
from experiments.allreduce import report
from experiments.config import ConfigError, ExperimentConfig, ExperimentResult, Sample
from experiments.harness import (
    ProgressFn,
    Runner,
    StepFailed,
    check_program,
    emulated_fabric,
    environment,
    method_order,
    open_results,
    select_hosts,
    timeouts,
)
from hosts import clock
from hosts.alltoall import rail_layout
from hosts.methods import METHODS
from hosts.ring import topology_order

LOG = logging.getLogger(__name__)


class SweepRunner(Runner):
    """The harness's runner with the all-reduce sweep: host counts x sizes x repetitions x methods."""

    def run_hosts(self, n: int, out: list[Sample], progress: ProgressFn | None = None) -> None:
        cfg = self.config
        hosts = select_hosts(self.model, n)
        jobs = self.install_jobs(hosts)
        ring_order = [hosts[i] for i in topology_order([self.model.host(h).switch for h in hosts])]
        try:
            with self.agents(hosts, f"n{n}") as server:
                for size in cfg.sizes:
                    paths = {
                        name: tuple(
                            bounds.path_bound(
                                METHODS[name],
                                elements=size,
                                rate_bps=self.rate_bps,
                                delay_s=self.delay_s,
                                plan=jobs[name][0] if name in jobs else None,
                                slots=cfg.slots,
                                topo=self.model,
                                ring_order=ring_order,
                                exponent_rounds=rounds,
                            )
                            for rounds in (True, False)
                        )
                        for name in cfg.methods
                    }
                    for rep in range(cfg.iterations):
                        for order, name in enumerate(method_order(cfg, n, size, rep)):
                            if progress:
                                progress(f"{n} hosts, {size} elements, rep {rep}, {name}", None)
                            try:
                                rows = self.run_step(
                                    server,
                                    METHODS[name],
                                    hosts,
                                    size,
                                    rep,
                                    order,
                                    jobs[name][1] if name in jobs else None,
                                    paths[name],
                                )
                            except StepFailed as ex:
                                msg, rows = ex.args
                                out.extend(rows)
                                self.problems.append(f"{msg}; the remaining steps of {n} hosts were skipped")
                                LOG.error("%s", self.problems[-1])
                                return
                            out.extend(rows)
                            if progress:
                                progress(f"{n} hosts, {size} elements, rep {rep}, {name}", rows[0])
        finally:
            self.remove_jobs()

    def sweep(self, out: list[Sample], progress: ProgressFn | None = None) -> list[Sample]:
        """Appends to `out` as it goes, so an interrupted sweep still leaves what it measured."""
        for n in self.config.host_counts:
            self.run_hosts(n, out, progress)
        return out


def run_experiment(
    config: ExperimentConfig, *, out_dir: Path | None = None, progress: ProgressFn | None = None, write: bool = True
) -> ExperimentResult:
    """Start the network, run the sweep, tear everything down; write the results folder if `write`."""
    check_program()
    model = load_topology(config.topology)
    for n in config.host_counts:
        hosts = select_hosts(model, n)
        if "a2a-hier" in config.methods:
            try:
                rail_layout([model.host(h).switch for h in hosts])
            except ValueError as ex:
                raise ConfigError(f"{n} hosts on {config.topology}: {ex}") from ex
    out, log_dir = open_results(config, out_dir)
    result = ExperimentResult(config, out_dir=out, environment=environment(config))
    result.environment["worker_timeouts_s"] = timeouts(config)
    t0 = clock.now()
    runner: SweepRunner | None = None
    try:
        with emulated_fabric(config, model, out, log_dir, result, t0) as (net, ctl, sock_dir):
            runner = SweepRunner(config, net, ctl, log_dir, sock_dir)
            runner.sweep(result.samples, progress)
    except BaseException as ex:  # recorded in the folder, then raised as it was (Ctrl-C included)
        what = "interrupted" if isinstance(ex, KeyboardInterrupt) else f"failed: {type(ex).__name__}: {ex}"
        result.problems.append(f"the run {what} (after {len(result.samples)} samples)")
        raise
    finally:
        result.duration_s = clock.now() - t0
        if runner is not None:
            result.problems.extend(runner.problems)
        if write:
            report.write_all(result)
    return result
