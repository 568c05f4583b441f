"""Sweeps: lists of scenarios, run in parallel processes with a progress bar.

`default_sweep()` is what `make simulate` runs: the scaling study (16 to
100,000 GPUs on a fat-tree, a rail-optimised fat-tree and Dragonfly+, every
method, from 64 KiB to 1 GiB), the placement study (eight jobs sharing a
cluster, contiguous against scattered, with and without background
traffic, on a non-blocking and a 2:1 oversubscribed fat-tree), failures (a
tree's root switch down, the tree re-planned) and the emulation's own
fat-tree at its link rate.  `quick_sweep()` is the same on small fabrics,
for the notebook and the tests.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace

from simulation.engine import Engine
from simulation.methods import EMULATION_METHODS
from simulation.model import Outcome, Scenario, evaluate

LOG = logging.getLogger(__name__)

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SCALE_GPUS = (16, 64, 256, 1024, 4096, 16384, 65536, 100_000)
SCALE_SIZES = (64 * KIB, MIB, 16 * MIB, 256 * MIB, GIB)
SCALE_METHODS = (
    "ring-1nic",
    "ring-1nic-bf16",
    "hier",
    "hier-rail",
    "tree-1nic",
    "nccl-ring",
    "nccl-tree",
    "nccl",
    "inc-int32",
    "inc-int16",
    "inc-int8",
    "hier-inc",
    "adaptive",
)
SCALE_TOPOLOGIES = ("clos:radix=128", "rail:radix=128", "dragonfly+:radix=128")
PLACEMENT_METHODS = ("ring-1nic", "ring-addr", "hier-rail", "tree-1nic", "inc-int32", "hier-inc")


def scaling(
    gpus: Sequence[int] = SCALE_GPUS,
    topologies: Sequence[str] = SCALE_TOPOLOGIES,
    sizes: Sequence[int] = SCALE_SIZES,
    methods: Sequence[str] = SCALE_METHODS,
    preset: str = "h100",
) -> list[Scenario]:
    return [
        Scenario(topology=t, gpus=n, preset=preset, methods=tuple(methods), sizes=tuple(sizes), label="scaling")
        for t in topologies
        for n in gpus
    ]


def placement(
    topologies: Sequence[str] = ("clos:radix=64", "clos:radix=64,oversub=2", "dragonfly+:radix=64"),
    jobs: int = 8,
    job_gpus: int = 1024,
    backgrounds: Sequence[float] = (0.0, 0.5),
    preset: str = "h100",
    sizes: Sequence[int] = (MIB, 256 * MIB),
    methods: Sequence[str] = PLACEMENT_METHODS,
) -> list[Scenario]:
    return [
        Scenario(
            topology=t,
            gpus=job_gpus,
            jobs=jobs,
            placement=pl,
            background=bg,
            preset=preset,
            methods=tuple(methods),
            sizes=tuple(sizes),
            label="placement",
        )
        for t in topologies
        for pl in ("contiguous", "scattered")
        for bg in backgrounds
    ]


def failures(preset: str = "h100") -> list[Scenario]:
    """A healthy fabric, then its job's tree root down, then a switch the tree and the rings use down."""
    out = []
    for fail in ((), ("tree-root",), ("switch:a1",)):  # a1: pod 0's aggregation switch in the planner's tree
        out.append(
            Scenario(
                topology="fat-tree:4",
                gpus=16,
                preset="emulation",
                methods=("ring-1nic", "inc-int32"),
                sizes=(4 * KIB, 256 * KIB),
                fail=fail,
                label="failure",
            )
        )
    for fail in ((), ("tree-root",), ("switch:p0.s0",)):  # p0.s0: a spine of pod 0, on D-mod-k paths of the rings
        out.append(
            Scenario(
                topology="rail:radix=64",
                gpus=4096,
                preset=preset,
                methods=("ring-1nic", "hier-rail", "inc-int32", "hier-inc"),
                sizes=(MIB, 256 * MIB),
                fail=fail,
                label="failure",
            )
        )
    return out


def emulation(preset: str = "emulation") -> list[Scenario]:
    """The emulation's sweep preset (its calibration input): k=4, 4/8/16 hosts, 1K/16K/128K float32 elements,
    seven methods."""
    return [
        Scenario(
            topology="fat-tree:4",
            gpus=n,
            preset=preset,
            methods=EMULATION_METHODS,
            sizes=(4 * KIB, 64 * KIB, 512 * KIB),
            label="emulation",
        )
        for n in (4, 8, 16)
    ]


def default_sweep(emulation_preset: str = "emulation") -> list[Scenario]:
    return scaling() + placement() + failures() + emulation(emulation_preset)


def quick_sweep(emulation_preset: str = "emulation") -> list[Scenario]:
    """The default sweep's shape on fabrics small enough for a notebook (about a minute)."""
    return (
        scaling(
            gpus=(16, 64, 256, 1024),
            topologies=("clos:radix=16", "rail:radix=16", "dragonfly+:radix=16"),
            sizes=(64 * KIB, MIB, 256 * MIB),
        )
        + placement(
            topologies=("clos:radix=16", "clos:radix=16,oversub=2"),
            jobs=4,
            job_gpus=64,
            backgrounds=(0.0,),
            sizes=(MIB, 256 * MIB),
        )
        + [replace(s, gpus=256, topology="rail:radix=16") if s.topology.startswith("rail") else s for s in failures()]
        + emulation(emulation_preset)
    )


def _cost(s: Scenario) -> float:
    """A rough ordering key (largest first) so the parallel workers finish together."""
    n = (s.gpus or 16) * s.jobs
    return n * len(s.methods)


def _run_one(scenario: Scenario, simgrid_jobs: int) -> Outcome:
    return evaluate(scenario, Engine(simgrid_jobs))


def run(
    scenarios: Sequence[Scenario], jobs: int | None = None, progress: Callable[[Outcome], None] | None = None
) -> list[Outcome]:
    """Evaluate every scenario; `jobs` processes side by side (default: the cores, at most 2)."""
    jobs = max(1, jobs or min(2, os.cpu_count() or 1))
    order = sorted(range(len(scenarios)), key=lambda i: -_cost(scenarios[i]))
    out: dict[int, Outcome] = {}
    if jobs == 1:
        engine = Engine(1)
        for i in order:
            out[i] = evaluate(scenarios[i], engine)
            if progress:
                progress(out[i])
    else:
        with ProcessPoolExecutor(jobs) as pool:
            futs = {pool.submit(_run_one, scenarios[i], 1): i for i in order}
            for fut in as_completed(futs):
                out[futs[fut]] = fut.result()
                if progress:
                    progress(out[futs[fut]])
    return [out[i] for i in range(len(scenarios))]
