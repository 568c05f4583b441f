"""Deterministic test tensors, so every worker (and the runner) can rebuild everyone's input.

A worker's input depends only on (kind, size, rank, seed, iteration): each
iteration all-reduces different tensors, so a stale result (an earlier
iteration's sum) cannot pass a check; and a checker needs no copy of the data:
it regenerates every worker's input and sums them in float64.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hosts.quantization import FLOAT32_REL_ERR, FixedPoint

KINDS = ("normal", "uniform", "ones", "zeros", "wide")
BF16_REL_ERR = 2.0**-8  # round to nearest even with 8 significand bits: |error| <= 2^-8 relative (half an ulp 2^-7)


def make_input(kind: str, size: int, rank: int, seed: int = 0, iteration: int = 0) -> np.ndarray:
    """float32 tensor of `size` elements; 'wide' spans 1e-20..1e20 with random signs (adversarial)."""
    rng = np.random.default_rng([seed, rank, iteration])
    if kind == "normal":
        x = rng.normal(0.0, rank + 1.0, size)
    elif kind == "uniform":
        x = rng.uniform(-1.0, 1.0, size)
    elif kind == "ones":
        x = np.full(size, rank + 1.0 + iteration)
    elif kind == "zeros":
        x = np.zeros(size)
    elif kind == "wide":
        x = rng.choice([-1.0, 1.0], size) * 10.0 ** rng.uniform(-20, 20, size)
    else:
        raise ValueError(f"unknown input kind {kind!r}; choose one of {KINDS}")
    return x.astype(np.float32)


def reference_sum(
    kind: str, size: int, n_workers: int, seed: int = 0, iteration: int = 0, ranks: Sequence[int] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(float64 sum of all workers' inputs, float64 sum of their magnitudes); with `ranks`, of those ranks' inputs
    only (the survivors of a dead host)."""
    total = np.zeros(size)
    magnitude = np.zeros(size)
    for rank in range(n_workers) if ranks is None else ranks:
        x = make_input(kind, size, rank, seed, iteration).astype(np.float64)
        total += x
        magnitude += np.abs(x)
    return total, magnitude


@dataclass(frozen=True)
class Accuracy:
    """How far a result is from the exact (float64) sum, four ways."""

    max_abs_error: float
    rel_l2_error: float  # ||result - exact|| / ||exact|| (0 when both are zero)
    snr_db: float  # 10 log10(||exact||^2 / ||error||^2); inf when exact
    max_error_ratio: float  # max over elements of error / the method's per-element bound; <= 1: within it
    error_bound: float  # the largest per-element bound

    def to_dict(self) -> dict[str, float]:
        return {
            "max_abs_error": self.max_abs_error,
            "rel_l2_error": self.rel_l2_error,
            "snr_db": self.snr_db,
            "max_error_ratio": self.max_error_ratio,
            "error_bound": self.error_bound,
        }


def accuracy(result: np.ndarray, reference: np.ndarray, bound: np.ndarray | float) -> Accuracy:
    err = np.abs(np.asarray(result, dtype=np.float64).ravel() - reference.ravel())
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64).ravel() if np.ndim(bound) else bound, err.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, err / bound, np.where(err > 0, np.inf, 0.0))
    e2 = float(np.dot(err, err))
    r2 = float(np.dot(reference.ravel(), reference.ravel()))
    rel = math.sqrt(e2 / r2) if r2 > 0 else (0.0 if e2 == 0 else math.inf)
    snr = math.inf if e2 == 0 else (10 * math.log10(r2 / e2) if r2 > 0 else -math.inf)
    return Accuracy(float(err.max(initial=0.0)), rel, snr, float(ratio.max(initial=0.0)), float(bound.max(initial=0.0)))


def inc_bound(reference: np.ndarray, fp: FixedPoint) -> np.ndarray:
    """Per element: the fixed-point bound of quantization.py (with each element's block exponent)."""
    return fp.tolerance(reference)


def ring_bound(magnitude: np.ndarray, n_workers: int, wire: str = "float32") -> np.ndarray:
    """Per element: n-1 roundings of partial sums bounded by sum|x|, plus the result's.

    float32 rounds each partial sum to 2^-24 relative; bfloat16 on the wire
    rounds each transmitted partial sum (and the final sum, once) to 2^-8.
    """
    rel = FLOAT32_REL_ERR if wire == "float32" else BF16_REL_ERR + FLOAT32_REL_ERR
    return n_workers * rel * magnitude * 1.01
