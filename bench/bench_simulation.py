"""Simulation speed (make simulate's budget) and the validation errors it records.

Measured: one 100,000-GPU point (a rail-optimised fat-tree of radix-128 switches, every scale method, five
message sizes; target < 5 min) and the quick sweep (the notebook's); recorded with them: the SHARP anchor's
error on the NDR preset as stored, and the largest closed-form error.  No SimGrid, no figures (logged).
"""

from __future__ import annotations

import logging
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
    return figs
