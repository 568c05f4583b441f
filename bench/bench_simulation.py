"""Simulation speed (make simulate's budget) and the validation errors it records.

Measured: one 100,000-GPU point (a rail-optimised fat-tree of radix-128 switches, every scale method, five
message sizes; target < 5 min), the quick sweep (the notebook's), and one 100,000-GPU training step of each
workload model with every gradient-reduction method (simulation.workload; target < 2 min each); recorded with
them: the SHARP anchor's error on the NDR preset as stored, the largest closed-form error, and the duration of
the newest `make simulate` default run found under results/ (target < 15 min).  No SimGrid, no figures (logged).
"""

from __future__ import annotations

import json
import logging
import resource
import time

from bench.results import Figure, Figures

LOG = logging.getLogger(__name__)


def run() -> Figures:
    from simulation.anchors import sharp_anchor
    from simulation.closedform import checks
    from simulation.engine import Engine, simgrid_available
    from simulation.model import Scenario, evaluate
    from simulation.sweep import SCALE_METHODS, SCALE_SIZES, quick_sweep
    from simulation.sweep import run as run_sweep

    missing = simgrid_available()
    if missing:
        LOG.warning("%s: no simulation figures", missing)
        return {}
    figs: Figures = {}
    engine = Engine(2)
    t0 = time.perf_counter()
    out = evaluate(
        Scenario(topology="rail:radix=128", gpus=100_000, preset="h100", methods=SCALE_METHODS, sizes=SCALE_SIZES),
        engine,
    )
    t1 = time.perf_counter()
    flows = sum(s.get("flows", 0) for s in out.flowsets.values())
    figs["simulation.point_100k_gpus"] = Figure(
        t1 - t0,
        "s",
        f"rail-optimised fat-tree, radix 128, {len(SCALE_METHODS)} methods, "
        f"{len(SCALE_SIZES)} sizes, {flows} flows; target < 300 s",
    )
    figs["simulation.simgrid_flows_100k"] = Figure(
        engine.simgrid_flows, "flows", "flows SimGrid rated at 100k GPUs after folding and symmetry"
    )
    scen = quick_sweep()
    t2 = time.perf_counter()
    run_sweep(scen)
    figs["simulation.quick_sweep"] = Figure(time.perf_counter() - t2, "s", f"{len(scen)} scenarios (notebook 04)")
    anchor = sharp_anchor(fit=False, engine=engine)
    figs["simulation.sharp_anchor_rel_error"] = Figure(
        anchor.max_rel_error * 100, "%", "NDR preset vs NVIDIA's SHARP figures, 128 hosts; limit 25%"
    )
    figs["simulation.closed_form_max_rel_error"] = Figure(
        max(abs(c.rel_error) for c in checks(engine=engine)) * 100, "%", "limit 2%"
    )
    figs.update(_workload())
    figs.update(_make_simulate())
    return figs


def _cpu() -> float:
    """CPU seconds of this process and its finished children (SimGrid runs in child processes)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _workload() -> Figures:
    from simulation.engine import Engine
    from simulation.workload import study

    figs: Figures = {}
    for model in (study.DENSE[0], study.MOE[0]):
        point = study.Point(model, study.SCALES["100k"], "rail:radix=128", "contiguous")
        t0, c0 = time.perf_counter(), _cpu()
        out = study.run_point(point, Engine(2))
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
        figs[f"simulation.workload_step_100k.{model}"] = Figure(
            wall,
            "s",
            f"{point.gpus:,} GPUs, rail-optimised radix 128, {len(out['rows'])} method combinations "
            f"(every gradient reduction and all-to-all); {cpu:.0f} CPU s; target < 120 s",
        )
    return figs


def _make_simulate() -> Figures:
    from bench.results import RESULTS

    runs = sorted(RESULTS.parent.glob("*_simulate_default/summary.json"))
    if not runs:
        LOG.warning("no make simulate default run under %s: its duration is not recorded", RESULTS.parent)
        return {}
    summary = json.loads(runs[-1].read_text())
    return {
        "simulation.make_simulate": Figure(
            summary.get("duration_s", 0.0),
            "s",
            f"the newest default run ({runs[-1].parent.name}), workload study included; target < 900 s",
        )
    }
