"""The adaptive retransmission timeout (RFC 6298 estimator, per-packet backoff)."""

from __future__ import annotations

import pytest

from hosts.rto import RtoEstimator


def test_starts_at_the_initial_value_and_follows_samples() -> None:
    rto = RtoEstimator(0.05, min_s=0.001, max_s=1.0)
    assert rto.rto == 0.05
    rto.sample(0.010)
    assert rto.rto == pytest.approx(0.010 + 4 * 0.005)
    for _ in range(50):
        rto.sample(0.010)
    assert rto.rto == pytest.approx(0.010, rel=0.05)


def test_clamped_to_min_and_max() -> None:
    rto = RtoEstimator(0.05, min_s=0.01, max_s=0.2)
    rto.sample(0.0001)
    assert rto.rto == 0.01
    rto.sample(10.0)
    assert rto.rto == 0.2


def test_backoff_doubles_per_retransmission_up_to_max() -> None:
    rto = RtoEstimator(0.01, min_s=0.001, max_s=0.05)
    assert [rto.timeout(n) for n in (1, 2, 3, 4, 40)] == [0.01, 0.02, 0.04, 0.05, 0.05]


def test_bad_bounds_refused() -> None:
    with pytest.raises(ValueError, match="min_s <= max_s"):
        RtoEstimator(0.01, min_s=0.5, max_s=0.1)


def test_expiry_backs_off_once_per_period() -> None:
    rto = RtoEstimator(0.01, min_s=0.001, max_s=1.0)
    for _ in range(100):  # a whole window expiring at once is one event
        rto.expired(5.0)
    assert rto.rto == 0.02
    rto.expired(5.0 + 0.021)
    assert rto.rto == 0.04
