"""The four validations, run together for a simulate run's summary.json (and one by one by the tests).

1. emulation: fit the per-packet costs to an emulation results folder, the error table's largest error;
2. closed forms: ring, double binary tree and in-network on non-blocking fabrics (simulation/closedform.py);
3. published figure: NVIDIA's SHARP result for 128 hosts on the NDR preset as stored (simulation/anchors.py);
4. phase composition against actor-per-rank SimGrid runs of the same algorithms (simulation/fullsim.py);
5. published nccl-tests bus bandwidths against the NCCL model (simulation/nccl_anchors.py).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from simulation.anchors import sharp_anchor
from simulation.calibrate import Calibration, check, fit
from simulation.closedform import checks
from simulation.engine import Engine
from simulation.fullsim import compare
from simulation.model import Scenario
from simulation.nccl_anchors import check as nccl_check
from simulation.params import NDR, Preset

LOG = logging.getLogger(__name__)

# the committed emulation runs: test data of the checkout (an installed package has none: validated without them)
FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "simulation" / "data" / "emulation-k4"
HELD_OUT = (
    FIXTURE.parent / "emulation-k4-held-out"
)  # later runs of the sweep preset, never fitted: predicted with the fit
KIB, MIB = 1 << 10, 1 << 20


def full_cases(large: bool = False) -> list[tuple[str, Scenario, str, int, Preset]]:
    """(name, scenario, method, bytes, preset) compared phase model against full simulation.

    Contention is the point: oversubscribed and scattered cases make flows of a phase share links, where
    the phase model's all-at-once rates could differ from what flows starting and ending at different
    times get.  Host byte costs are off (the full simulation moves messages, it does not add numbers).
    """
    p = NDR.with_(host_byte_cost=0.0)
    lock = p.with_(pipeline_chunk=1 << 40)
    tree = p.with_(pipeline_chunk=128 * KIB)
    inc = p.with_(inc_slots=32)
    n = 256 if large else 64
    r = 16 if large else 8  # radix-8 fabrics hold 128 GPUs; radix 16 makes 256 span 4 pods (groups)
    return [
        (
            f"ring, {n} GPUs, fat-tree 2:1, scattered",
            Scenario(topology=f"clos:radix={r},oversub=2", gpus=n, placement="scattered"),
            "ring-1nic",
            MIB,
            lock,
        ),
        (
            f"ring, {n} GPUs, Dragonfly+, scattered",
            Scenario(topology=f"dragonfly+:radix={r}", gpus=n, placement="scattered"),
            "ring-1nic",
            MIB,
            lock,
        ),
        (
            f"tree, {n} GPUs, fat-tree, 32 chunks",
            Scenario(topology=f"clos:radix={r}", gpus=n),
            "tree-1nic",
            8 * MIB,
            tree,
        ),
        (
            f"tree, {n} GPUs, fat-tree 2:1, scattered, 64 chunks",
            Scenario(topology=f"clos:radix={r},oversub=2", gpus=n, placement="scattered"),
            "tree-1nic",
            16 * MIB,
            tree,
        ),
        (
            f"inc-int32, {n} GPUs, fat-tree 2:1, scattered, window 32",
            Scenario(topology=f"clos:radix={r},oversub=2", gpus=n, placement="scattered"),
            "inc-int32",
            16 * KIB,
            inc,
        ),
        (
            f"inc-int8, {n} GPUs, Dragonfly+, window 32",
            Scenario(topology=f"dragonfly+:radix={r}", gpus=n),
            "inc-int8",
            16 * KIB,
            inc,
        ),
    ]


def phase_vs_full(large: bool = False, workers: int = 2) -> list[dict[str, Any]]:
    """Every full case, `workers` at a time (each full simulation is a process of its own)."""

    def one(case: tuple[str, Scenario, str, int, Preset]) -> dict[str, Any]:
        name, sc, method, size, preset = case
        t0 = time.perf_counter()
        model, full = compare(sc, method, size, preset)
        row = {
            "name": name,
            "model_s": model,
            "full_s": full,
            "rel_error": (model - full) / full,
            "seconds": time.perf_counter() - t0,
        }
        LOG.info("phase vs full: %s: %.3g s vs %.3g s (%+.2f%%)", name, model, full, row["rel_error"] * 100)
        return row

    with ThreadPoolExecutor(max(1, workers)) as pool:
        return list(pool.map(one, full_cases(large)))


def run_all(
    emulation_results: Path | None = None, large: bool = False, engine: Engine | None = None
) -> tuple[dict[str, Any], Calibration | None]:
    """The validation object for summary.json, and the calibration (for the emulation scenarios' preset)."""
    engine = engine or Engine()
    folder = emulation_results or FIXTURE
    calib = None
    details: dict[str, Any] = {}
    if folder.exists():
        calib = fit(folder, engine=engine)
        if emulation_results is None and HELD_OUT.exists():  # the committed runs: predict the ones not fitted
            check(calib, HELD_OUT, engine=engine)
        details["emulation"] = calib.to_dict()
    else:
        # the committed runs are test data of the checkout, not in an installed package: --emulation-results then
        LOG.warning("no emulation results at %s: no emulation validation (--emulation-results FOLDER)", folder)
    cf = checks(engine=engine)
    anchor = sharp_anchor(fit=False, engine=engine)
    fitted = sharp_anchor(fit=True, engine=engine)
    full = phase_vs_full(large)
    nccl = nccl_check()
    details.update(
        closed_forms=[c.to_dict() for c in cf],
        sharp_anchor=anchor.to_dict(),
        sharp_anchor_refitted=fitted.to_dict(),
        phase_vs_full=full,
        nccl_busbw=nccl,
    )
    validation = {
        "emulation_max_rel_error": calib.max_rel_error if calib else None,
        "emulation_results": str(folder) if calib else None,
        "emulation_held_out_max_rel_error": calib.held_out_max_rel_error if calib and calib.held_out else None,
        "closed_form_max_rel_error": max(abs(c.rel_error) for c in cf),
        "sharp_anchor_rel_error": anchor.max_rel_error,
        "sharp_anchor_parameters": anchor.fitted,
        "phase_vs_full_max_rel_error": max(abs(x["rel_error"]) for x in full),
        "nccl_busbw_max_rel_error": nccl["nccl_busbw_max_rel_error"],
        "details": details,
    }
    return validation, calib
