"""Float32 <-> fixed point for switches that add integers (pure numpy).

Scheme (SwitchML's, per block): the tensor is cut into blocks of NUM_LANES
elements, one block per packet. For each block every worker proposes the
largest exponent e with max|x_block| * scale(e) <= q_limit; the switches keep the
minimum of the proposals (the `next_exponent` field, agreed one round ahead in
the slot the block will use), so every worker quantizes the block with the same
e. The scale is scale(e) = 2^(e / STEPS), STEPS per octave by the contribution
lane width (wireformat.fixedpoint.EXPONENT_STEPS: 1 for int32, 2 for int16, 4 for
int8). With whole octaves a block whose largest value lies just above a power
of two uses barely half the lane range: for int32 lanes one bit of 31 hardly
matters, for int8 lanes it is one of the 3-4 significant bits the sum keeps, and
it doubled the error of such blocks (docs/results-history.md, Accuracy). Quarter octaves
waste at most 2^(1/4). The switches only compare and copy exponents, so the
step is the hosts' convention; the 8-bit field then spans 2^-32..2^32 for int8
(a block whose values all lie below about 3e-8 is quantized at the finest scale
the field allows, which its error bound accounts for) and 2^-64..2^64 for int16.
q_limit comes from wireformat.fixedpoint:

    q_limit = min(2^(c-1) - 1,  (2^H - 1) // n),   H = min(31, r - 1 + shift)

(n workers, c the width in bits of the lanes hosts send (a job's up_lanes), r
that of the lanes that come back (down_lanes), shift the root's right shift
before narrowing). Each quantized value then has
|q| <= q_limit, so the int32 sum of n contributions is at most 2^H - 1 in
magnitude: it never saturates, and after the root's arithmetic shift it fits
the r-bit result without clamping. The guarantee is worst case (all workers at
+M in the same lane); no sum can overflow, whatever the data.

Error bound per element of the summed tensor (absolute, against the exact sum
of the float32 inputs), with e the element's block exponent:

    n / (2 scale(e))             rounding of each contribution to an integer
  + sum over rounding switches   each switch that shifts a sum right rounds to
    of 2^(S_sw - 1) / scale(e)   nearest: half of 2^(its cumulative shift)
                                 (wireformat.fixedpoint.tree_shifts; the root
                                 alone: 2^(shift-1))
  + |sum| * 2^-24                rounding the result to float32

and 1 / scale(e) < 2^(1/STEPS) M_block / q_limit, so relative to the block's
largest input M_block the error is about n^2 / 2^H. A block whose values are small gets a fine scale
of its own: one large element costs precision only in its own block, not in the
whole tensor as with a single tensor-wide exponent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from wireformat import AGG
from wireformat import fixedpoint as fxp
from wireformat.fixedpoint import LaneType

ELEM_INT32 = AGG.elem_types["ELEM_INT32"]
ELEM_INT16 = AGG.elem_types["ELEM_INT16"]
ELEM_INT8 = AGG.elem_types["ELEM_INT8"]
ELEM_NONE = AGG.elem_types["ELEM_NONE"]
ELEM_BITS = dict(fxp.ELEM_BITS)
EXPONENT_STEPS = dict(fxp.EXPONENT_STEPS)  # exponent units per octave, by contribution lane type
ELEM_DTYPE: dict[int, np.dtype[np.signedinteger[Any]]] = {
    ELEM_INT32: np.dtype(np.int32),
    ELEM_INT16: np.dtype(np.int16),
    ELEM_INT8: np.dtype(np.int8),
}
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


def lane_bits(lanes: str) -> int:
    """'int32' | 'int16' | 'int8' -> its width, or a QuantizationError naming the lane types."""
    try:
        return fxp.bits_of(lanes)
    except fxp.FixedPointConfigError as ex:
        raise QuantizationError(str(ex)) from ex


def lane_elem(lanes: str) -> int:
    """The header's elem_type code of a lane type (QuantizationError for an unknown one)."""
    return fxp.BITS_ELEM[lane_bits(lanes)]


_FRACTIONS = {k: np.exp2(np.arange(k) / k) for k in set(EXPONENT_STEPS.values())}  # 2^(i/k), built once


def steps(elem_type: int) -> int:
    """Exponent units per octave for contributions of this lane type."""
    _bits(elem_type)
    return EXPONENT_STEPS[elem_type]


def scale(exponent: int | np.ndarray, elem_type: int = ELEM_INT32) -> np.ndarray:
    """2^(exponent / steps) as float64, computed the same way everywhere (an exact power of two times one of
    `steps` fixed fractions), so that every worker quantizes and decodes alike."""
    k = steps(elem_type)
    whole, frac = np.divmod(np.asarray(exponent, dtype=np.int64), k)
    return np.ldexp(_FRACTIONS[k][frac], whole)


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


def q_limit(n_workers: int, *, up_lanes: str = "int32", down_lanes: str = "int32", shift: int = 0) -> int:
    """Largest |q| a worker may contribute so that no sum of n_workers overflows (the formula above)."""
    if n_workers < 1:
        raise QuantizationError(f"n_workers must be >= 1, got {n_workers}")
    if not 0 <= shift <= 31:
        raise QuantizationError(f"shift must be in 0..31, got {shift}")
    down = lane_bits(down_lanes)
    headroom = min(31, down - 1 + shift)
    limit = fxp.q_limit(n_workers, lane_bits(up_lanes), down, shift)
    if limit < 1:
        raise QuantizationError(
            f"{n_workers} workers cannot share a {down}-bit result with shift {shift}: "
            f"even |q| = 1 each could overflow (need n <= 2^{headroom} - 1); raise the job's shift"
        )
    return limit


def check_job(n_workers: int, *, up_lanes: str, down_lanes: str, shift: int) -> fxp.FixedPointPlan:
    """The controller's check (wireformat.fixedpoint.check), as a QuantizationError for the worker."""
    up, down = lane_bits(up_lanes), lane_bits(down_lanes)
    try:
        plan = fxp.check(n_workers, up, down, shift)
        fxp.check_growth(n_workers, up, down, shift)
        return plan
    except fxp.FixedPointConfigError as ex:
        raise QuantizationError(str(ex)) from ex


@dataclass(frozen=True)
class FixedPoint:
    """The scale of one all-reduce: value = lane * 2^shift * 2^-exponent.

    `exponent` is one int (a tensor-wide scale) or an array with the exponent of each element's block.
    """

    exponent: int | np.ndarray  # in 1/steps(up_elem) octaves
    n_workers: int
    up_lanes: LaneType = "int32"
    down_lanes: LaneType = "int32"
    shift: int = 0
    error_lsb: float | None = None

    @property
    def up_elem(self) -> int:
        """The header's elem_type code of the contributions: the scale's steps follow it."""
        return lane_elem(self.up_lanes)

    def error_bound(self) -> float | np.ndarray:
        """Absolute error per element of the decoded sum, before float32 rounding.

        In units of a contribution's last bit 1/scale(e): each host's rounding (1/2 each), and half of 2^shift for
        every switch that shifted with rounding on the way; the controller computes that total for a tree
        (error_lsb, wireformat.fixedpoint.tree_shifts), and one root switch is the default.
        """
        lsb = self.error_lsb if self.error_lsb is not None else single_switch_error_lsb(self.n_workers, self.shift)
        return lsb / scale(self.exponent, self.up_elem)

    def tolerance(self, reference: np.ndarray) -> np.ndarray:
        """Per-element bound on |float32 result - exact sum|, including float32 rounding."""
        return self.error_bound() + np.abs(reference) * 2 * FLOAT32_REL_ERR

    def quantize(self, x: np.ndarray) -> np.ndarray:
        return quantize(x, self.exponent, self.up_elem)

    def dequantize(self, lanes: np.ndarray, shift: int | None = None) -> np.ndarray:
        return dequantize(lanes, self.exponent, self.shift if shift is None else shift, self.up_elem)


def choose_exponent(
    global_max_abs: float,
    n_workers: int,
    *,
    up_lanes: str = "int32",
    down_lanes: str = "int32",
    shift: int = 0,
) -> int:
    """The largest exponent for which no sum of n_workers contributions can overflow."""
    if not math.isfinite(global_max_abs) or global_max_abs < 0:
        raise QuantizationError(f"max|x| must be finite and >= 0, got {global_max_abs}")
    limit = q_limit(n_workers, up_lanes=up_lanes, down_lanes=down_lanes, shift=shift)
    return int(block_exponents(np.array([global_max_abs]), limit, lane_elem(up_lanes))[0])


def block_max_abs(x: np.ndarray, lanes: int = AGG.num_lanes) -> np.ndarray:
    """max|x| of each block of `lanes` elements (the last block zero-padded); refuses NaN/inf."""
    flat = np.asarray(x, dtype=np.float32).ravel()
    check_finite(flat)
    n_blocks = max(1, -(-flat.size // lanes))
    padded = np.zeros(n_blocks * lanes, dtype=np.float32)
    padded[: flat.size] = np.abs(flat)
    return padded.reshape(n_blocks, lanes).max(axis=1)


def block_exponents(maxima: np.ndarray, limit: int, elem_type: int = ELEM_INT32) -> np.ndarray:
    """Per block, the largest exponent e with max * scale(e) <= limit (EXPONENT_MAX for an all-zero block, and
    for a block so small that even the finest scale the header allows fits it).

    A float64 estimate from log2, then settled with the same products quantize() computes, so that no value of
    the block lands above `limit`.
    """
    m = np.asarray(maxima, dtype=np.float64)
    if limit < 1:
        raise QuantizationError(f"q_limit {limit} < 1: no exponent can avoid overflow")
    k = steps(elem_type)
    out = np.full(m.shape, EXPONENT_MAX, dtype=np.int64)
    nz = m > 0
    if nz.any():
        e = np.floor(k * (np.log2(limit) - np.log2(m[nz]))).astype(np.int64)
        e = np.clip(e, EXPONENT_MIN - 4 * k, EXPONENT_MAX)  # beyond the header's range either way
        for _ in range(2):  # log2 rounding: settle on the exact largest e
            e = np.where(m[nz] * scale(e, elem_type) > limit, e - 1, e)
            e = np.where((m[nz] * scale(e + 1, elem_type) <= limit) & (e < EXPONENT_MAX), e + 1, e)
        if (e < EXPONENT_MIN).any():
            worst = float(m[nz][np.argmin(e)])
            raise QuantizationError(
                f"max|x| = {worst:g} needs exponent {int(e.min())}, below the header's minimum {EXPONENT_MIN}"
            )
        out[nz] = np.minimum(e, EXPONENT_MAX)
    return out


def plan(
    global_max_abs: float,
    n_workers: int,
    *,
    up_lanes: str = "int32",
    down_lanes: str = "int32",
    shift: int = 0,
) -> FixedPoint:
    e = choose_exponent(global_max_abs, n_workers, up_lanes=up_lanes, down_lanes=down_lanes, shift=shift)
    return FixedPoint(e, n_workers, fxp.lane_type(up_lanes), fxp.lane_type(down_lanes), shift)


def quantize(x: np.ndarray, exponent: int | np.ndarray, elem_type: int = ELEM_INT32) -> np.ndarray:
    """round(x * scale(exponent)) as the lane dtype; refuses NaN/inf and values that do not fit."""
    arr = np.asarray(x)
    check_finite(arr)
    scaled = np.rint(arr.astype(np.float64) * scale(exponent, elem_type))
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


def dequantize(
    lanes: np.ndarray, exponent: int | np.ndarray, shift: int = 0, elem_type: int = ELEM_INT32
) -> np.ndarray:
    """Decode summed lanes to float64: lane * 2^shift / scale(exponent) (the switches' shifts round to nearest);
    elem_type is the contributions' (their exponent's steps)."""
    return np.ldexp(np.asarray(lanes, dtype=np.float64), shift) / scale(exponent, elem_type)


def single_switch_error_lsb(n_workers: int, shift: int) -> float:
    """error_lsb of a job whose root alone shifts: n hosts' roundings, then the root's."""
    return n_workers / 2.0 + ((1 << shift) / 2.0 if shift else 0.0)
