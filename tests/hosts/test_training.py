"""The training workload without a network: the model's gradient, the data order, the exact run and its checks."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from hosts import training as T

SHORT = T.TrainConfig(steps=120, eval_every=40)  # about 5 epochs: ~95% in float64, a second of CPU


@pytest.fixture(scope="module")
def data() -> T.Dataset:
    return T.digits()


@pytest.fixture(scope="module")
def exact(data: T.Dataset) -> T.History:
    return T.simulate(SHORT, 4, data=data)


def test_the_digits_split_is_fixed_and_scaled(data: T.Dataset) -> None:
    assert data.x_train.shape == (1438, 64) and data.x_test.shape == (359, 64)
    assert data.features == 64 and data.classes == 10
    assert 0.0 <= data.x_train.min() and data.x_train.max() <= 1.0
    assert set(np.unique(data.y_test)) == set(range(10))
    again = T.digits.__wrapped__(0.2)  # recomputed, not cached: the split depends on SPLIT_SEED alone
    assert np.array_equal(again.y_test, data.y_test) and np.array_equal(again.x_train, data.x_train)


@pytest.mark.parametrize("hidden", [(7,), (6, 5)])
def test_gradient_matches_finite_differences(hidden: tuple[int, ...], data: T.Dataset) -> None:
    """Backprop against central differences on every parameter of a small net (float64, relative error < 1e-6)."""
    model = T.MLP(data.features, hidden, data.classes)
    theta = model.init(seed=3)
    theta += np.random.default_rng(0).normal(0, 0.05, theta.shape)  # nonzero biases too
    x, y = data.x_train[:9], data.y_train[:9]
    _loss, grad, _ = model.loss_and_grad(theta, x, y)
    h = 1e-6
    numeric = np.empty_like(theta)
    for i in range(theta.size):
        e = np.zeros_like(theta)
        e[i] = h
        numeric[i] = (model.loss(theta + e, x, y) - model.loss(theta - e, x, y)) / (2 * h)
    assert np.linalg.norm(grad - numeric) <= 1e-6 * np.linalg.norm(numeric)
    assert np.abs(grad - numeric).max() < 1e-7


def test_loss_and_grad_agrees_with_loss_and_counts_correct(data: T.Dataset) -> None:
    model = T.MLP(data.features, (32,), data.classes)
    theta = model.init(0)
    x, y = data.x_train[:50], data.y_train[:50]
    loss, grad, correct = model.loss_and_grad(theta, x, y)
    assert loss == pytest.approx(model.loss(theta, x, y), rel=1e-12)
    assert correct == round(model.accuracy(theta, x, y) * 50)
    assert grad.shape == (model.size,) == (64 * 32 + 32 + 32 * 10 + 10,)
    assert 1.5 < loss < 3.5  # near log(10) = 2.3 at initialisation


def test_init_is_the_seeds_alone() -> None:
    model = T.MLP(64, (32,), 10)
    assert np.array_equal(model.init(5), model.init(5))
    assert not np.array_equal(model.init(5), model.init(6))
    w1 = model.init(5)[: 64 * 32]
    assert w1.std() == pytest.approx(math.sqrt(2 / 64), rel=0.1)


def test_every_rank_gets_its_own_slice_of_one_global_batch() -> None:
    cfg = T.TrainConfig(batch=64)
    n_train = 1438
    for step in (1, 2, 22, 23, 300):
        slices = [T.batch_indices(cfg, n_train, step, r, 8) for r in range(8)]
        assert all(len(s) == 8 for s in slices)
        whole = np.concatenate(slices)
        assert len(set(whole.tolist())) == 64  # disjoint
        # the same global batch whatever the number of workers: the exact run is the same training for any n
        assert np.array_equal(whole, np.concatenate([T.batch_indices(cfg, n_train, step, r, 4) for r in range(4)]))
    per_epoch = n_train // 64
    epoch0 = np.concatenate([T.batch_indices(cfg, n_train, s, 0, 1) for s in range(1, per_epoch + 1)])
    assert len(set(epoch0.tolist())) == per_epoch * 64  # an epoch visits each sample at most once
    assert not np.array_equal(
        T.batch_indices(cfg, n_train, 1, 0, 1), T.batch_indices(cfg, n_train, per_epoch + 1, 0, 1)
    )
    with pytest.raises(T.TrainingError, match="does not split evenly"):
        T.batch_indices(cfg, n_train, 1, 0, 3)
    with pytest.raises(T.TrainingError, match="count from 1"):
        T.batch_indices(cfg, n_train, 0, 0, 4)


def test_replicas_given_the_same_sum_stay_bit_identical(data: T.Dataset) -> None:
    a, b = T.Replica(SHORT, 0, 2, data), T.Replica(SHORT, 1, 2, data)
    assert a.digest() == b.digest()
    for _ in range(5):
        ga, gb = a.gradient(), b.gradient()
        assert ga.grad.dtype == np.float32 and not np.array_equal(ga.grad, gb.grad)  # different data
        total = ga.grad + gb.grad
        a.apply(total)
        b.apply(total)
        assert a.digest() == b.digest() and a.step == b.step
    before = a.digest()
    a.apply(total)
    assert a.digest() != before
    with pytest.raises(T.TrainingError, match="shape"):
        a.apply(total[:-1])


def test_the_exact_run_trains(exact: T.History) -> None:
    assert [e.step for e in exact.evals] == [0, 40, 80, 120]
    assert exact.evals[0].test_acc < 0.3 and exact.final.test_acc > 0.93
    assert exact.final.train_loss < 0.25 * exact.evals[0].train_loss
    losses = [s["loss"] for s in exact.steps]
    assert np.mean(losses[-20:]) < 0.3 * np.mean(losses[:5])
    assert exact.diverged_at() is None  # one sum for every rank: identical parameters after every step


def test_the_exact_run_is_reproducible_and_the_same_training_for_any_worker_count(
    exact: T.History, data: T.Dataset
) -> None:
    again = T.simulate(SHORT, 4, data=data)
    assert [s["digests"][0] for s in again.steps] == [s["digests"][0] for s in exact.steps]
    eight = T.simulate(SHORT, 8, data=data)
    # the same global batches; only the float32 rounding of each shard's gradient differs
    assert abs(eight.final.test_acc - exact.final.test_acc) * 100 <= T.ACCURACY_TOLERANCE_PP
    assert eight.final.train_loss == pytest.approx(exact.final.train_loss, rel=1e-3)


def float32_ring(grads: Sequence[np.ndarray]) -> list[np.ndarray]:
    """A float32 sum in one order for every rank, as the ring delivers it."""
    total = np.zeros_like(grads[0])
    for g in grads:
        total = total + g
    return [total] * len(grads)


def test_an_inexact_but_honest_allreduce_passes_the_check(exact: T.History, data: T.Dataset) -> None:
    ring = T.simulate(SHORT, 4, float32_ring, data=data)
    assert T.within_tolerance(ring.final.test_acc, exact.final.test_acc)
    assert ring.diverged_at() is None


def test_a_mis_scaled_allreduce_misses_the_tolerance(exact: T.History, data: T.Dataset) -> None:
    """The control: the exact sum times 2^-7 (a fixed-point exponent off by seven) trains far worse."""
    broken = T.simulate(SHORT, 4, T.mis_scaled(T.exact_allreduce), data=data)
    assert not T.within_tolerance(broken.final.test_acc, exact.final.test_acc)
    assert (exact.final.test_acc - broken.final.test_acc) * 100 > 5 * T.ACCURACY_TOLERANCE_PP
    assert broken.diverged_at() is None  # wrong, but wrong alike everywhere: only the accuracy check catches it


def test_the_digest_check_catches_ranks_that_got_different_sums(data: T.Dataset) -> None:
    def one_rank_off(grads: Sequence[np.ndarray]) -> list[np.ndarray]:
        sums = T.exact_allreduce(grads)
        return [sums[0], np.nextafter(sums[1], np.inf), *sums[2:]]  # one ulp, one rank

    history = T.simulate(T.TrainConfig(steps=3), 4, one_rank_off, data=data)
    assert history.diverged_at() == 1


def test_within_tolerance_is_two_sided_and_refuses_nan() -> None:
    assert T.within_tolerance(0.955, 0.97) and T.within_tolerance(0.985, 0.97)
    assert not T.within_tolerance(0.94, 0.97) and not T.within_tolerance(0.995, 0.97)
    assert not T.within_tolerance(math.nan, 0.97)
    assert T.within_tolerance(0.94, 0.97, tolerance_pp=3.5)


def test_parameters_travel_as_text_bit_for_bit(data: T.Dataset) -> None:
    theta = T.Replica(SHORT, 0, 1, data).theta
    back = T.decode_params(T.encode_params(theta))
    assert back.dtype == np.float64 and np.array_equal(back, theta) and T.params_digest(back) == T.params_digest(theta)


@pytest.mark.parametrize(
    "bad", [dict(hidden=()), dict(steps=0), dict(lr=0.0), dict(momentum=1.0), dict(test_fraction=1.0)]
)
def test_bad_configurations_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(T.TrainingError):
        T.TrainConfig(**bad)  # type: ignore[arg-type]


def test_config_round_trip_and_eval_steps() -> None:
    cfg = T.TrainConfig(hidden=(16, 8), steps=25, eval_every=10)
    assert T.TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.eval_steps() == [0, 10, 20, 25]
    with pytest.raises(T.TrainingError, match="split evenly"):
        T.Replica(T.TrainConfig(batch=10), 0, 4)
