"""The seeds' question: what utilisation does a dense and an MoE model get at 10k and 100k GPUs, by fabric,
gradient-reduction method, all-to-all method and placement?

A study point is one model at one scale on one fabric and placement: its cluster is built and every parallel
dimension solved once (simcosts.SimCollectives), then the step is composed for each gradient-reduction method
(the all-to-all fixed at `a2a-direct`) and for each all-to-all method (the reduction fixed at `nccl`).  The layouts
scale the published ones by data parallelism: Llama 3 405B as its paper trained it (TP 8, PP 16, interleaved,
ZeRO-2) and DeepSeek-V3 as its report did (PP 16, EP 64, ZeRO-1, no TP), each data-parallel rank running as
many microbatches of one sequence as in the published run (Llama 3's 16,384-GPU row: 16; DeepSeek-V3: 15,360
sequences over 128 data-parallel ranks, 120), whatever the scale (weak scaling: the batch grows with the GPUs).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from typing import Any

from simulation.engine import Engine
from simulation.fabric import FabricError
from simulation.workload.costs import A2A_METHODS, CollectiveError
from simulation.workload.hardware import get_gpu, network_for
from simulation.workload.layout import Layout
from simulation.workload.models import get_model
from simulation.workload.simcosts import SimCollectives
from simulation.workload.step import prepare, simulate_step

LOG = logging.getLogger(__name__)

# NCCL as it runs (its tuner, and its ring and tree forced) first: the baseline every other method is compared with
DP_METHODS = ("nccl", "nccl-ring", "nccl-tree", "ring-1nic", "hier-rail")
DP_METHODS += ("inc-int32", "inc-int16", "inc-int8", "hier-inc", "adaptive")
TOPOLOGIES = ("clos:radix=128", "rail:radix=128", "rail-only:radix=128", "dragonfly+:radix=128")
PLACEMENTS = ("contiguous", "scattered")
# (model, its layout without dp, microbatches a data-parallel rank): dp fills the GPUs
DENSE = ("llama3-405b", dict(tp=8, pp=16, schedule="interleaved", vpp=4, sharding="zero2", pp_fewer_layers=1), 16)
MOE = ("deepseek-v3", dict(tp=1, pp=16, ep=64, sharding="zero1"), 120)
SCALES = {"10k": 10_240, "100k": 98_304}  # multiples of 16 x 64 x 8 (stages, experts, a server) near 10^4 and 10^5


def layout_for(kind: tuple[str, dict[str, Any], int], gpus: int) -> Layout:
    _, base, microbatches = kind
    dp = gpus // (base["tp"] * base["pp"])
    return Layout(dp=dp, microbatch=1, global_batch=dp * microbatches, **base)


@dataclass(frozen=True)
class Point:
    model: str
    gpus: int
    topology: str
    placement: str
    dp_methods: tuple[str, ...] = DP_METHODS
    a2a_methods: tuple[str, ...] = A2A_METHODS
    seed: int = 0


def run_point(point: Point, engine: Engine | None = None) -> dict[str, Any]:
    """Every method of one study point: rows of step time, MFU and breakdown, or why the point is not there."""
    t0 = time.perf_counter()
    kind = DENSE if point.model == DENSE[0] else MOE
    model = get_model(kind[0])
    layout = layout_for(kind, point.gpus)
    head = {"model": model.name, "gpus": point.gpus, "topology": point.topology, "placement": point.placement}
    try:
        costs = SimCollectives(
            point.topology, network_for("h100"), point.gpus, point.placement, point.seed, engine=engine
        )
    except FabricError as ex:
        return {**head, "rows": [], "skipped": {"topology": str(ex)}, "seconds": time.perf_counter() - t0}
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    dp_methods = tuple(m for m in point.dp_methods if m != "adaptive")
    if layout.sharding != "ddp" and "nccl-tree" in dp_methods:  # reduce-scatter: NCCL's tree has none
        dp_methods = tuple(m for m in dp_methods if m != "nccl-tree")
        skipped["nccl-tree"] = "NCCL has no tree reduce-scatter (ZeRO reduce-scatters the gradients): nccl-ring's row"
    prepare(costs, model, layout, dp_methods)
    gpu = get_gpu("h100")
    a2a = point.a2a_methods if model.moe else ("a2a-direct",)
    combos = [(m, "a2a-direct") for m in point.dp_methods if m not in skipped]
    combos += [(layout.dp_method, a) for a in a2a if a != "a2a-direct"]
    for dp_method, a2a_method in combos:
        lo = replace(layout, dp_method=dp_method, a2a_method=a2a_method)
        try:
            r = simulate_step(model, lo, gpu, costs, {"topology": point.topology, "placement": point.placement})
        except CollectiveError as ex:
            skipped[dp_method] = str(ex)
            continue
        rows.append(
            {
                **head,
                "dp_method": dp_method,
                "a2a_method": a2a_method,
                "step_s": r.step_s,
                "mfu": r.mfu,
                "breakdown": r.breakdown,
                "fabric": costs.fabric.name,
            }
        )
    return {**head, "rows": rows, "skipped": skipped, "seconds": time.perf_counter() - t0}


def points(
    scales: Sequence[int] = tuple(SCALES.values()),
    topologies: Sequence[str] = TOPOLOGIES,
    placements: Sequence[str] = PLACEMENTS,
    models: Sequence[str] = (DENSE[0], MOE[0]),
) -> list[Point]:
    return [Point(m, n, t, p) for n in scales for m in models for t in topologies for p in placements]


def run(
    pts: Sequence[Point], workers: int = 1, progress: Callable[[dict[str, Any]], None] | None = None
) -> list[dict[str, Any]]:
    """Every point, largest first, `workers` processes side by side."""
    order = sorted(range(len(pts)), key=lambda i: -pts[i].gpus)
    out: dict[int, dict[str, Any]] = {}
    if workers <= 1:
        engine = Engine(1)
        for i in order:
            out[i] = run_point(pts[i], engine)
            if progress:
                progress(out[i])
    else:
        with ProcessPoolExecutor(workers) as pool:
            futs = {pool.submit(run_point, pts[i]): i for i in order}
            for fut in as_completed(futs):
                out[futs[fut]] = fut.result()
                if progress:
                    progress(out[futs[fut]])
    return [out[i] for i in range(len(pts))]
