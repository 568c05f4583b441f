"""Medians with bootstrap confidence intervals (seeded, so a report is reproducible from raw.csv).

Five repetitions do not make a normal distribution: the interval is the
percentile bootstrap of the median (2,000 resamples), and a ratio of two
medians (a speed-up) resamples both sides independently.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np

RESAMPLES = 2000
LEVEL = 0.95


def median_ci(values: Sequence[float], seed: int = 0) -> tuple[float, float, float]:
    """(median, low, high) of a 95% percentile-bootstrap interval; one value gives a zero-width interval."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("no values")
    med = float(statistics.median(x.tolist()))
    if x.size == 1:
        return med, med, med
    rng = np.random.default_rng(seed)
    boot = np.median(rng.choice(x, size=(RESAMPLES, x.size), replace=True), axis=1)
    lo, hi = np.quantile(boot, [(1 - LEVEL) / 2, 1 - (1 - LEVEL) / 2])
    return med, float(lo), float(hi)


def ratio_ci(numerator: Sequence[float], denominator: Sequence[float], seed: int = 0) -> tuple[float, float, float]:
    """median(numerator) / median(denominator) with a 95% bootstrap interval."""
    a, b = np.asarray(numerator, dtype=float), np.asarray(denominator, dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("no values")
    value = float(statistics.median(a.tolist()) / statistics.median(b.tolist()))
    if a.size == 1 and b.size == 1:
        return value, value, value
    rng = np.random.default_rng(seed)
    ra = np.median(rng.choice(a, size=(RESAMPLES, a.size), replace=True), axis=1)
    rb = np.median(rng.choice(b, size=(RESAMPLES, b.size), replace=True), axis=1)
    lo, hi = np.quantile(ra / rb, [(1 - LEVEL) / 2, 1 - (1 - LEVEL) / 2])
    return value, float(lo), float(hi)
