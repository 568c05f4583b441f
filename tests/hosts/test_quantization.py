"""Fixed-point properties: no overflow by construction, error within the documented bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hosts import quantization as qz
from wireformat import fixedpoint as fxp

WIDTH_CASES = [  # (up lanes, down lanes, shift)
    ("int32", "int32", 0),
    ("int32", "int16", 8),
    ("int32", "int8", 16),
    ("int32", "int8", 0),
    ("int16", "int16", 0),
    ("int8", "int32", 0),
]


def switch_sum(contributions: list[np.ndarray], down_lanes: str, shift: int) -> tuple[np.ndarray, bool]:
    """What the switch computes (DESIGN.md): int32 saturating sum, arithmetic shift rounding to nearest with ties
    to even (the rounding terms added saturating), saturating narrow."""
    total = np.sum([c.astype(np.int64) for c in contributions], axis=0)
    overflow = bool((total > 2**31 - 1).any() or (total < -(2**31)).any())
    total = np.clip(total, -(2**31), 2**31 - 1)
    if shift:
        terms = ((1 << (shift - 1)) - 1) + ((total >> shift) & 1)
        total = np.clip(total + terms, -(2**31), 2**31 - 1) >> shift
    bits = qz.lane_bits(down_lanes)
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    overflow |= bool((total > hi).any() or (total < lo).any())
    return np.clip(total, lo, hi), overflow


def run_allreduce(xs: list[np.ndarray], up: str, down: str, shift: int) -> tuple[np.ndarray, qz.FixedPoint, bool]:
    m = max(qz.max_abs(x) for x in xs)
    fp = qz.plan(m, len(xs), up_lanes=up, down_lanes=down, shift=shift)
    lanes, overflow = switch_sum([fp.quantize(x) for x in xs], down, shift)
    return fp.dequantize(lanes).astype(np.float32), fp, overflow


def assert_within_bound(xs: list[np.ndarray], out: np.ndarray, fp: qz.FixedPoint) -> None:
    ref = np.sum([x.astype(np.float64) for x in xs], axis=0)
    err = np.abs(out.astype(np.float64) - ref)
    tol = fp.tolerance(ref)
    worst = int(np.argmax(err - tol))
    assert (err <= tol).all(), f"element {worst}: error {err[worst]} > bound {tol[worst]} (exponent {fp.exponent})"


@settings(max_examples=300, deadline=None)
@given(
    m=st.floats(min_value=1e-30, max_value=3e38, allow_nan=False, allow_infinity=False),
    n=st.integers(1, 64),
    case=st.sampled_from(WIDTH_CASES),
)
def test_exponent_is_the_largest_that_cannot_overflow(m: float, n: int, case: tuple[str, str, int]) -> None:
    up, down, shift = case
    contrib = qz.lane_elem(up)
    try:
        limit = qz.q_limit(n, up_lanes=up, down_lanes=down, shift=shift)
    except qz.QuantizationError:
        assume(False)
    try:
        e = qz.choose_exponent(m, n, up_lanes=up, down_lanes=down, shift=shift)
    except qz.QuantizationError:
        assert m * qz.scale(qz.EXPONENT_MIN, contrib) > limit  # only refused when even the coarsest scale overflows
        return
    q = abs(int(np.rint(m * qz.scale(e, contrib))))
    headroom = min(31, qz.lane_bits(down) - 1 + shift)
    assert q <= limit and n * q <= 2**headroom - 1
    assert e == qz.EXPONENT_MAX or m * qz.scale(e + 1, contrib) > limit


@pytest.mark.parametrize(("contrib", "result", "shift"), WIDTH_CASES)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 16])
def test_random_tensors_within_bound_and_never_overflow(contrib: str, result: str, shift: int, n: int) -> None:
    rng = np.random.default_rng(n * 100 + shift)
    xs = [rng.normal(0, 10.0 ** rng.uniform(-3, 3), 2000).astype(np.float32) for _ in range(n)]
    out, fp, overflow = run_allreduce(xs, contrib, result, shift)
    assert not overflow
    assert_within_bound(xs, out, fp)


@pytest.mark.parametrize(("contrib", "result", "shift"), WIDTH_CASES)
def test_adversarial_all_equal_at_the_maximum_does_not_overflow(contrib: str, result: str, shift: int) -> None:
    """Every worker at +M (and -M) in every lane: the worst case the scale is chosen for."""
    n = 8
    for sign in (1.0, -1.0):
        xs = [np.full(300, sign * 3.3e7, dtype=np.float32) for _ in range(n)]
        out, fp, overflow = run_allreduce(xs, contrib, result, shift)
        assert not overflow
        assert_within_bound(xs, out, fp)


@pytest.mark.parametrize(("contrib", "result", "shift"), WIDTH_CASES)
def test_adversarial_large_dynamic_range(contrib: str, result: str, shift: int) -> None:
    """1e-20..1e20 in one tensor (1e-9..1e9 for int8 contributions, whose quarter-octave exponent spans
    2^-32..2^32): small values lose relative precision, the absolute bound holds."""
    rng = np.random.default_rng(7)
    decades = 9 if contrib == "int8" else 20
    xs = [
        (rng.choice([-1.0, 1.0], 1000) * 10.0 ** rng.uniform(-decades, decades, 1000)).astype(np.float32)
        for _ in range(4)
    ]
    out, fp, overflow = run_allreduce(xs, contrib, result, shift)
    assert not overflow
    assert_within_bound(xs, out, fp)


def test_int8_scale_range_is_refused_beyond_the_header() -> None:
    """int8 contributions count exponents in quarter octaves: above 127 * 2^32 nothing fits, and it says so."""
    with pytest.raises(qz.QuantizationError, match="below the header's minimum"):
        qz.choose_exponent(1e12, 4, up_lanes="int8", down_lanes="int32")
    assert qz.choose_exponent(1e11, 4, up_lanes="int8", down_lanes="int32") >= qz.EXPONENT_MIN


@pytest.mark.parametrize("contrib", [qz.ELEM_INT32, qz.ELEM_INT16, qz.ELEM_INT8])
def test_finer_steps_waste_less_of_the_lane(contrib: int) -> None:
    """The chosen scale uses more than 2^(-1/steps) of the lane limit for any block maximum (whole octaves: half)."""
    lanes = fxp.elem_lanes(contrib)
    limit = qz.q_limit(16, up_lanes=lanes, down_lanes=lanes, shift=0 if lanes == "int32" else 4)
    maxima = np.geomspace(0.01, 100.0, 2001)
    used = maxima * qz.scale(qz.block_exponents(maxima, limit, contrib), contrib) / limit
    assert (used <= 1.0).all()
    assert used.min() > 2.0 ** (-1.0 / qz.steps(contrib)) * 0.999
    assert qz.steps(contrib) == {qz.ELEM_INT32: 1, qz.ELEM_INT16: 2, qz.ELEM_INT8: 4}[contrib]


def test_extremes_of_float32() -> None:
    big = np.finfo(np.float32).max / 2  # two of them still sum to a float32
    tiny = np.float32(1e-45)  # a denormal
    xs = [np.array([big, -big, tiny, 0.0], dtype=np.float32), np.array([big, big, -tiny, 0.0], dtype=np.float32)]
    out, fp, overflow = run_allreduce(xs, "int32", "int32", 0)
    assert not overflow
    assert fp.exponent < 0
    assert_within_bound(xs, out, fp)


def test_zeros_give_exact_zeros() -> None:
    xs = [np.zeros(100, dtype=np.float32) for _ in range(3)]
    out, fp, overflow = run_allreduce(xs, "int32", "int8", 4)
    assert fp.exponent == qz.EXPONENT_MAX and not overflow
    # zeros stay zeros, also through a rounding shift
    assert (out == 0).all() and fp.error_bound() > 0
    out32, _, _ = run_allreduce(xs, "int32", "int32", 0)
    assert (out32 == 0).all()


def test_int32_error_is_tiny_relative_to_the_maximum() -> None:
    rng = np.random.default_rng(1)
    xs = [rng.uniform(-1, 1, 5000).astype(np.float32) for _ in range(4)]
    out, fp, _ = run_allreduce(xs, "int32", "int32", 0)
    assert fp.error_bound() < 1e-8  # 4 workers: 2^-(e+1) * 4 with 2^e ~ 2^29
    ref = np.sum([x.astype(np.float64) for x in xs], axis=0)
    assert np.abs(out - ref).max() < 1e-6


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_refused_with_a_clear_error(bad: float) -> None:
    x = np.ones(10, dtype=np.float32)
    x[3] = bad
    with pytest.raises(qz.NonFiniteError, match=r"1 non-finite value.*index 3"):
        qz.max_abs(x)
    with pytest.raises(qz.NonFiniteError):
        qz.quantize(x, 0)


def test_exponent_too_large_for_the_data_is_refused() -> None:
    with pytest.raises(qz.QuantizationError, match="beyond int8"):
        qz.quantize(np.array([1.0], dtype=np.float32), 28, qz.ELEM_INT8)  # 2^(28/4) = 128


def test_too_many_workers_for_a_narrow_result_is_refused() -> None:
    with pytest.raises(qz.QuantizationError, match="raise the job's shift"):
        qz.q_limit(200, down_lanes="int8", shift=0)
    assert qz.q_limit(200, down_lanes="int8", shift=8) == (2**15 - 1) // 200


def test_dequantize_scales_a_rounded_lane_back() -> None:
    # lane 3 with shift 2 is the integer sum 12 rounded to nearest (10..13 -> 3): decoded as 12 (times 2^-e)
    assert qz.dequantize(np.array([3, -1]), exponent=1, shift=2).tolist() == [12 / 2, -4 / 2]
    assert qz.dequantize(np.array([3]), exponent=-2).tolist() == [12.0]
    assert qz.dequantize(np.array([3, 5]), exponent=np.array([1, 2])).tolist() == [1.5, 1.25]  # per block


@settings(max_examples=200, deadline=None)
@given(
    maxima=st.lists(st.one_of(st.just(0.0), st.floats(min_value=1e-38, max_value=3e38)), min_size=1, max_size=40),
    n=st.integers(1, 64),
)
def test_block_exponents_equal_the_scalar_choice(maxima: list[float], n: int) -> None:
    limit = qz.q_limit(n)
    got = qz.block_exponents(np.array(maxima), limit)
    assert got.tolist() == [qz.choose_exponent(m, n) for m in maxima]


def test_block_max_abs_pads_the_last_block_and_refuses_nan() -> None:
    x = np.arange(-5, 600, dtype=np.float32)
    m = qz.block_max_abs(x, lanes=256)
    assert m.tolist() == [250.0, 506.0, 599.0]
    with pytest.raises(qz.NonFiniteError):
        qz.block_max_abs(np.array([1.0, np.inf], dtype=np.float32))
