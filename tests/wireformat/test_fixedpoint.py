"""The switch's integer rules: which jobs can represent their sums (the controller's and the workers' check)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wireformat import fixedpoint as fxp


@pytest.mark.parametrize(
    ("n", "c", "r", "shift"),
    [
        (16, 32, 32, 0),
        (16, 32, 8, 24),
        (16, 32, 16, 16),
        (16, 8, 8, 4),
        (16, 16, 16, 4),
        (2, 8, 8, 1),
        (1, 8, 8, 0),
        (12, 8, 8, 4),
        (200, 32, 8, 24),
        (128, 16, 8, 15),
    ],
)
def test_default_shift(n: int, c: int, r: int, shift: int) -> None:
    assert fxp.default_shift(n, c, r) == shift
    fxp.check(n, c, r)  # the default is always accepted


@given(n=st.integers(1, 4096), c=st.sampled_from([8, 16, 32]), r=st.sampled_from([8, 16, 32]))
def test_default_plan_never_overflows_and_uses_the_result(n: int, c: int, r: int) -> None:
    plan = fxp.check(n, c, r)
    assert n * plan.q_limit <= 2**31 - 1  # the int32 sum never saturates
    assert (n * plan.q_limit) >> plan.shift <= 2 ** (r - 1) - 1  # the shifted sum never clamps
    # ceil(log2 n) bits of headroom: at most one bit of the result is left unused (n just above a power of two)
    assert plan.result_magnitude_bits >= min(r - 1, plan.contrib_magnitude_bits) - 1


@pytest.mark.parametrize(
    ("n", "c", "r", "shift", "message"),
    [
        (16, 8, 8, 24, r"16 x 127 >> 24, keeps 0 of the result's 7 magnitude bits where shift 4 keeps 7; use shift 4"),
        (16, 8, 8, 0, r"contributions keep 3 of their 7 magnitude bits \(\|q\| <= 7\) where shift 4 keeps 7"),
        (16, 32, 32, 1, "only narrowed results are shifted"),
        (16, 12, 8, None, "contribution lanes of 12 bits"),
        (0, 8, 8, None, "at least one worker"),
    ],
)
def test_refusals_name_the_numbers(n: int, c: int, r: int, shift: int | None, message: str) -> None:
    with pytest.raises(fxp.FixedPointConfigError, match=message):
        fxp.check(n, c, r, shift)


@pytest.mark.parametrize(
    ("n", "c", "r", "bits"),
    [
        (16, 8, 8, 16),
        (256, 8, 8, 16),
        (257, 8, 8, 32),
        (16, 16, 16, 32),
        (16, 32, 32, 32),
        (16, 32, 8, 32),
        (2, 8, 16, 16),
    ],
)
def test_partial_sums_go_up_as_narrow_as_the_job_allows(n: int, c: int, r: int, bits: int) -> None:
    plan = fxp.check(n, c, r)
    assert fxp.partial_bits(n, c, r, plan.shift) == bits
    assert n * plan.q_limit <= 2 ** (bits - 1) - 1  # any partial sum fits


def test_packets_may_not_outgrow_bmv2s_headroom() -> None:
    fxp.check_growth(16, 8, 8, 4)  # int8 both ways, int16 partials: +256 B at most
    fxp.check_growth(16, 16, 16, 4)  # int16 lanes, int32 partials: +512 B, exactly what BMv2 allows
    with pytest.raises(
        fxp.FixedPointConfigError, match=r"int8 contributions with int32 results grow each packet by 768 bytes"
    ):
        fxp.check_growth(16, 8, 32, 0)
    with pytest.raises(fxp.FixedPointConfigError, match="partial sums"):
        fxp.check_growth(300, 8, 8, fxp.default_shift(300, 8, 8))


def test_the_switches_shift_rounds_to_nearest_with_ties_to_even() -> None:
    import numpy as np

    for shift in range(0, 6):
        for x in range(-200, 201):
            exact = x / (1 << shift)
            got = fxp.shift_even(x, shift)
            assert abs(got - exact) <= 0.5, (x, shift)
            if abs(got - exact) == 0.5:
                assert got % 2 == 0, (x, shift)  # a tie goes to the even neighbour
            assert got <= fxp.round_shift(abs(x), shift) and -got <= fxp.round_shift(abs(x), shift)
    # numpy arrays alike, and unbiased: the mean error over every residue is zero (halves up would give +1/4 unit)
    xs = np.arange(-4096, 4096, dtype=np.int64)
    assert np.array_equal(fxp.shift_even(xs, 1), [fxp.shift_even(int(v), 1) for v in xs])
    for shift in (1, 2, 3):
        assert (fxp.shift_even(xs, shift) - xs / (1 << shift)).mean() == 0.0
