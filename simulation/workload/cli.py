"""`p4ina simulate --model NAME --layout SPEC`: one training step's breakdown, per gradient-reduction method.

The options are added to `p4ina simulate`'s parser (simulation.cli); every value is checked before anything
runs, and a bad one is refused in one line naming it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from simulation.topologies import controller_topology, parse_scale_spec
from simulation.workload.costs import A2A_METHODS, CollectiveError
from simulation.workload.hardware import GPUS, HardwareError, get_gpu, network_for
from simulation.workload.layout import LayoutError, parse_layout
from simulation.workload.models import MODELS, ModelError, get_model
from simulation.workload.simcosts import SimCollectives
from simulation.workload.step import prepare, simulate_step

LOG = logging.getLogger(__name__)
ERRORS = (LayoutError, ModelError, HardwareError, CollectiveError)
DEFAULT_TOPOLOGY = "clos:radix=128"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("training step (the workload layer)")
    g.add_argument("--model", help=f"simulate one training step of this model: {', '.join(MODELS)}")
    g.add_argument(
        "--layout",
        default="",
        help="with --model: KEY=VALUE,... e.g. tp=8,pp=16,dp=64,schedule=interleaved,vpp=4,gbs=2048,sharding=zero2 "
        "(keys: see simulation/workload/layout.py; tp x pp x dp GPUs)",
    )
    g.add_argument("--gpu", default="h100", help=f"with --model: {', '.join(GPUS)} (default h100)")
    g.add_argument(
        "--dp-methods",
        default=None,
        help="with --model: gradient-reduction methods to compare, comma-separated (default: the layout's "
        "dp_method); any simulation method or adaptive",
    )


def check(args: argparse.Namespace) -> dict[str, Any]:
    """Everything --model needs, checked; raises one of ERRORS (or the simulator's) naming the value."""
    model = get_model(args.model)
    layout = parse_layout(args.layout)
    layout.check(model)
    gpu = get_gpu(args.gpu)
    methods = tuple(x.strip() for x in args.dp_methods.split(",") if x.strip()) if args.dp_methods else ()
    methods = methods or (layout.dp_method,)
    from simulation.methods import METHODS, canonical_method

    canon = []
    for m in methods:
        new, deprecated = canonical_method(m)
        if deprecated:
            print(f"p4ina simulate: warning: --dp-methods: {deprecated}", file=sys.stderr)
        canon.append(new)
    methods = tuple(canon)
    bad = [m for m in methods if m not in METHODS or m in A2A_METHODS]
    if bad:
        raise CollectiveError(
            f"--dp-methods {', '.join(bad)}: choose from {', '.join(m for m in METHODS if m not in A2A_METHODS)}"
        )
    if layout.a2a_method not in A2A_METHODS:
        raise LayoutError(f"layout: a2a_method={layout.a2a_method!r}: choose from {', '.join(A2A_METHODS)}")
    if layout.gpus < 2:
        raise LayoutError("layout: tp x pp x dp must be >= 2 GPUs")
    topology = (args.topology or (DEFAULT_TOPOLOGY,))[0]
    if controller_topology(topology) is None:
        parse_scale_spec(topology)  # refuses an unknown kind or key, naming it
    placement = (args.placement or ("contiguous",))[0]
    return {
        "model": model,
        "layout": layout,
        "gpu": gpu,
        "methods": methods,
        "topology": topology,
        "placement": placement,
    }


def run(args: argparse.Namespace, checked: dict[str, Any]) -> int:
    t0 = time.perf_counter()
    model, layout, gpu = checked["model"], checked["layout"], checked["gpu"]
    costs = SimCollectives(checked["topology"], network_for(gpu.name), layout.gpus, checked["placement"], args.seed)
    prepare(costs, model, layout, checked["methods"])
    results = []
    for method in checked["methods"]:
        try:
            results.append(simulate_step(model, replace(layout, dp_method=method), gpu, costs))
        except CollectiveError as ex:
            print(f"{method}: not applicable: {ex}")
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=1))
        return 0
    print(
        f"{model.name} ({model.params() / 1e9:.0f}B parameters, {model.active_params() / 1e9:.0f}B active) on "
        f"{layout.gpus:,} {gpu.name.upper()} GPUs, {checked['topology']} ({costs.fabric.name}), "
        f"{checked['placement']}; tp={layout.tp} pp={layout.pp} dp={layout.dp} ep={layout.ep} "
        f"{layout.schedule}{f' vpp={layout.vpp}' if layout.vpp > 1 else ''} {layout.microbatches} microbatches, "
        f"{layout.sharding}, recompute {layout.recompute}; sustained {gpu.sustained(model.hidden) / 1e12:.0f} of "
        f"{gpu.peak_flops / 1e12:.0f} TFLOP/s a GPU"
    )
    keys = list(dict.fromkeys(k for r in results for k in r.breakdown))
    head = f"{'dp method':<10} {'step s':>8} {'MFU':>6} " + " ".join(f"{k:>17}" for k in keys)
    print(head)
    for r in results:
        print(
            f"{r.layout['dp_method']:<10} {r.step_s:>8.3f} {r.mfu * 100:>5.1f}% "
            + " ".join(f"{r.breakdown.get(k, 0.0):>17.4f}" for k in keys)
        )
    print(
        "(seconds; exposed communication per collective, the bubble's idle slots; see docs/workload.md) "
        f"[{time.perf_counter() - t0:.1f} s]"
    )
    return 0


def study(folder: Path, workers: int | None, no_validate: bool) -> str:
    """make simulate's training-step study and its validation, written into the results folder; one line to print."""
    from simulation.workload import report, runs
    from simulation.workload import study as st

    t0 = time.perf_counter()
    v = None
    if not no_validate:
        LOG.info("workload: validating against published training runs")
        v = runs.validate()
    pts = st.points()
    LOG.info("workload: %d study points (dense and MoE, 10k and 100k GPUs, four fabrics, two placements)", len(pts))

    def progress(p: dict[str, Any]) -> None:
        LOG.info(
            "workload: %s %s GPUs %s %s: %.0f s", p["model"], p["gpus"], p["topology"], p["placement"], p["seconds"]
        )

    points = st.run(pts, max(1, workers or 2), progress)
    report.write(folder, points, v, time.perf_counter() - t0)
    line = f"workload: {len(points)} training-step points in {time.perf_counter() - t0:.0f} s (workload_table.txt)"
    if v is not None:
        line += (
            f"; validation against published runs: held-out max {v.max_rel_error * 100:.1f}% "
            f"(tolerance {v.tolerance * 100:.0f}%)"
        )
    return line
