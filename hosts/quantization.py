"""Float32 <-> fixed point for switches that add integers (pure numpy).

Scheme (job-wide scale, chosen per all-reduce): every worker computes max|x| of
its tensor; the workers agree on the maximum M over all of them (at the
barrier); all use the same exponent e, the largest integer with

    M * 2^e <= q_limit,   q_limit = min(2^(c-1) - 1,  (2^H - 1) // n)
    H = min(31, r - 1 + shift)

where n is the number of workers, c the contribution lane width in bits, r the
result lane width and shift the switch's right shift before narrowing.  Each
quantized value then has |q| <= q_limit, so the int32 sum of n contributions
is at most 2^H - 1 in magnitude: it never saturates in int32, and after the
switch's arithmetic shift by `shift` it fits the r-bit result without
clamping.  The guarantee is worst case (all workers at +M in the same lane);
no sum can overflow, whatever the data.

Error bound per element of the summed tensor (absolute, against the exact sum
of the float32 inputs):

    n * 2^-(e+1)                 rounding of each contribution to an integer
  + (2^shift - 1) / 2 * 2^-e     the switch's floor shift; the host decodes the
                                 midpoint of the 2^shift integers it stands for
  + |sum| * 2^-24                rounding the result to float32

and 2^-e < 2 M / q_limit, so relative to M the error is about
n^2 / 2^H (int32: n^2 * 2^-31; int8 with shift s: n^2 * 2^-(7+s)).
SwitchML instead agrees an exponent per packet (from each chunk's maximum);
that is tighter for tensors whose magnitude varies by chunk but needs one
agreement per chunk; here one agreement per all-reduce suffices, at the price
that values far below M lose relative precision (absolute error is what is
bounded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wireformat import AGG

ELEM_INT32 = AGG.elem_types["ELEM_INT32"]
ELEM_INT16 = AGG.elem_types["ELEM_INT16"]
ELEM_INT8 = AGG.elem_types["ELEM_INT8"]
ELEM_BITS = {ELEM_INT32: 32, ELEM_INT16: 16, ELEM_INT8: 8}
ELEM_DTYPE = {ELEM_INT32: np.dtype(np.int32), ELEM_INT16: np.dtype(np.int16), ELEM_INT8: np.dtype(np.int8)}
EXPONENT_MIN = AGG.field("exponent").min_value
EXPONENT_MAX = AGG.field("exponent").max_value
FLOAT32_REL_ERR = 2.0**-24


class QuantizationError(ValueError):
    """A tensor or a configuration cannot be represented in the fixed-point format."""


class NonFiniteError(QuantizationError):
    """The tensor holds NaN or infinity, which have no fixed-point value."""


def _bits(elem_type: int) -> int:
    try:
        return ELEM_BITS[elem_type]
    except KeyError as ex:
        raise QuantizationError(f"unknown elem_type {elem_type}; known: {sorted(ELEM_BITS)}") from ex


def check_finite(x: np.ndarray) -> None:
    """Raise NonFiniteError naming how many values are not finite and where the first is."""
    bad = ~np.isfinite(x)
    if bad.any():
        idx = int(np.flatnonzero(bad.ravel())[0])
        raise NonFiniteError(
            f"tensor has {int(bad.sum())} non-finite value(s) (first at flat index {idx}: {x.ravel()[idx]}); "
            "NaN/inf cannot be aggregated in fixed point: check the gradients (loss scaling?) before the all-reduce"
        )


def max_abs(x: np.ndarray) -> float:
    """max|x| of a finite tensor (0.0 for an empty one)."""
    arr = np.asarray(x)
    check_finite(arr)
    return float(np.max(np.abs(arr))) if arr.size else 0.0


def q_limit(n_workers: int, *, contrib_type: int = ELEM_INT32, result_type: int = ELEM_INT32, shift: int = 0) -> int:
    """Largest |q| a worker may contribute so that no sum of n_workers overflows."""
    if n_workers < 1:
        raise QuantizationError(f"n_workers must be >= 1, got {n_workers}")
    if not 0 <= shift <= 31:
        raise QuantizationError(f"shift must be in 0..31, got {shift}")
    headroom = min(31, _bits(result_type) - 1 + shift)
    limit = min((1 << (_bits(contrib_type) - 1)) - 1, ((1 << headroom) - 1) // n_workers)
    if limit < 1:
        raise QuantizationError(
            f"{n_workers} workers cannot share a {_bits(result_type)}-bit result with shift {shift}: "
            f"even |q| = 1 each could overflow (need n <= 2^{headroom} - 1); raise the job's shift"
        )
    return limit


@dataclass(frozen=True)
class FixedPoint:
    """The scale a job uses for one all-reduce: value = lane * 2^shift * 2^-exponent."""

    exponent: int
    n_workers: int
    contrib_type: int = ELEM_INT32
    result_type: int = ELEM_INT32
    shift: int = 0

    def error_bound(self) -> float:
        """Absolute error per element of the decoded sum, before float32 rounding."""
        return (self.n_workers / 2.0 + ((1 << self.shift) - 1) / 2.0) * 2.0 ** (-self.exponent)

    def tolerance(self, reference: np.ndarray) -> np.ndarray:
        """Per-element bound on |float32 result - exact sum|, including float32 rounding."""
        return self.error_bound() + np.abs(reference) * 2 * FLOAT32_REL_ERR

    def quantize(self, x: np.ndarray) -> np.ndarray:
        return quantize(x, self.exponent, self.contrib_type)

    def dequantize(self, lanes: np.ndarray, shift: int | None = None) -> np.ndarray:
        return dequantize(lanes, self.exponent, self.shift if shift is None else shift)


def choose_exponent(
    global_max_abs: float,
    n_workers: int,
    *,
    contrib_type: int = ELEM_INT32,
    result_type: int = ELEM_INT32,
    shift: int = 0,
) -> int:
    """The largest exponent for which no sum of n_workers contributions can overflow."""
    if not math.isfinite(global_max_abs) or global_max_abs < 0:
        raise QuantizationError(f"max|x| must be finite and >= 0, got {global_max_abs}")
    limit = q_limit(n_workers, contrib_type=contrib_type, result_type=result_type, shift=shift)
    if global_max_abs == 0.0:
        return EXPONENT_MAX
    m, ex = math.frexp(global_max_abs)  # M = m * 2^ex, 0.5 <= m < 1
    e = math.floor(math.log2(limit)) - ex
    # log2 rounding: settle on the exact largest e with M * 2^e <= limit.
    while math.ldexp(global_max_abs, e) > limit:
        e -= 1
    while math.ldexp(global_max_abs, e + 1) <= limit:
        e += 1
    if e < EXPONENT_MIN:
        raise QuantizationError(
            f"max|x| = {global_max_abs:g} needs exponent {e}, below the header's minimum {EXPONENT_MIN}"
        )
    return min(e, EXPONENT_MAX)


def plan(
    global_max_abs: float,
    n_workers: int,
    *,
    contrib_type: int = ELEM_INT32,
    result_type: int = ELEM_INT32,
    shift: int = 0,
) -> FixedPoint:
    e = choose_exponent(global_max_abs, n_workers, contrib_type=contrib_type, result_type=result_type, shift=shift)
    return FixedPoint(e, n_workers, contrib_type, result_type, shift)


def quantize(x: np.ndarray, exponent: int, elem_type: int = ELEM_INT32) -> np.ndarray:
    """round(x * 2^exponent) as the lane dtype; refuses NaN/inf and values that do not fit."""
    arr = np.asarray(x)
    check_finite(arr)
    scaled = np.rint(np.ldexp(arr.astype(np.float64), exponent))
    dtype = ELEM_DTYPE.get(elem_type)
    if dtype is None:
        raise QuantizationError(f"unknown elem_type {elem_type}")
    info = np.iinfo(dtype)
    if scaled.size and (scaled.max() > info.max or scaled.min() < info.min):
        raise QuantizationError(
            f"exponent {exponent} scales max|x| = {np.abs(arr).max():g} beyond {dtype}; "
            "use choose_exponent() with the maximum over all workers"
        )
    return scaled.astype(dtype)


def dequantize(lanes: np.ndarray, exponent: int, shift: int = 0) -> np.ndarray:
    """Decode summed lanes to float64: the midpoint of the integers a shifted lane stands for."""
    sums = np.asarray(lanes, dtype=np.float64)
    if shift:
        sums = sums * float(1 << shift) + ((1 << shift) - 1) / 2.0
    return np.ldexp(sums, -exponent)
