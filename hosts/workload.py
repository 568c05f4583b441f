"""Deterministic test tensors, so every worker (and the runner) can rebuild everyone's input.

A worker's input depends only on (kind, size, rank, seed); the runner therefore
needs no copy of the data to check a sum, and each worker can compare its own
result with the float64 numpy sum of all inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hosts.quantization import FLOAT32_REL_ERR, FixedPoint

KINDS = ("normal", "uniform", "ones", "zeros", "wide")


def make_input(kind: str, size: int, rank: int, seed: int = 0) -> np.ndarray:
    """float32 tensor of `size` elements; 'wide' spans 1e-20..1e20 with random signs (adversarial)."""
    rng = np.random.default_rng([seed, rank])
    if kind == "normal":
        x = rng.normal(0.0, rank + 1.0, size)
    elif kind == "uniform":
        x = rng.uniform(-1.0, 1.0, size)
    elif kind == "ones":
        x = np.full(size, rank + 1.0)
    elif kind == "zeros":
        x = np.zeros(size)
    elif kind == "wide":
        x = rng.choice([-1.0, 1.0], size) * 10.0 ** rng.uniform(-20, 20, size)
    else:
        raise ValueError(f"unknown input kind {kind!r}; choose one of {KINDS}")
    return x.astype(np.float32)


def reference_sum(kind: str, size: int, n_workers: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(float64 sum of all workers' inputs, float64 sum of their magnitudes)."""
    total = np.zeros(size)
    magnitude = np.zeros(size)
    for rank in range(n_workers):
        x = make_input(kind, size, rank, seed).astype(np.float64)
        total += x
        magnitude += np.abs(x)
    return total, magnitude


@dataclass(frozen=True)
class Accuracy:
    max_abs_error: float
    max_error_ratio: float  # max over elements of error / bound; <= 1 means within the bound
    error_bound: float  # the largest per-element bound

    def to_dict(self) -> dict[str, float]:
        return {"max_abs_error": self.max_abs_error, "max_error_ratio": self.max_error_ratio, "error_bound": self.error_bound}


def _accuracy(result: np.ndarray, reference: np.ndarray, bound: np.ndarray) -> Accuracy:
    err = np.abs(result.astype(np.float64) - reference)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bound > 0, err / bound, np.where(err > 0, np.inf, 0.0))
    return Accuracy(float(err.max(initial=0.0)), float(ratio.max(initial=0.0)), float(bound.max(initial=0.0)))


def inc_accuracy(result: np.ndarray, reference: np.ndarray, fp: FixedPoint) -> Accuracy:
    """Against the fixed-point bound of quantization.py."""
    return _accuracy(result, reference, fp.tolerance(reference))


def ring_accuracy(result: np.ndarray, reference: np.ndarray, magnitude: np.ndarray, n_workers: int) -> Accuracy:
    """Against float32 summation: n-1 roundings of partial sums bounded by sum|x|, plus the result's."""
    bound = n_workers * FLOAT32_REL_ERR * magnitude * 1.01
    return _accuracy(result, reference, bound)
