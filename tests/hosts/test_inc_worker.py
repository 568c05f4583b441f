"""The in-network worker against the in-memory model of the switch (hosts.fakeswitch)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

from hosts import quantization as qz
from hosts.coordination import LocalGroup, agree_max
from hosts.fakeswitch import DropRule, FakeSwitch, FakeTransport
from hosts.inc_worker import AllreduceTimeoutError, IncJob, IncWorker, JobMismatchError
from hosts.packets import Endpoint, frame_prefix
from hosts.stats import AllreduceStats
from wireformat import AGG

JOB = 5


# Short timeouts where packets are dropped on purpose (they only make recovery quicker); where
# nothing is lost, a long one, so a loaded machine cannot cause a retransmission the test counts.
LOSSY_TIMEOUT, LOSSLESS_TIMEOUT = 0.02, 10.0


def make_workers(switch: FakeSwitch, n: int, slot_count: int, timeout_s: float = LOSSY_TIMEOUT,
                 **job: object) -> list[IncWorker]:
    groups = LocalGroup.create(n, timeout_s=60)
    return [
        IncWorker(
            IncJob(job_id=JOB, rank=r, n_workers=n, slot_count=slot_count, timeout_s=timeout_s,
                   min_timeout_s=timeout_s,
                   result_type=switch.result_type, shift=switch.shift, **job),  # type: ignore[arg-type]
            FakeTransport(switch, r),
            frame_prefix(Endpoint(f"02:00:00:00:00:{r:02x}", f"10.0.0.{r + 1}"), job.get("contrib_type", 0)),  # type: ignore[arg-type]
            agree_max(groups[r]),
        )
        for r in range(n)
    ]


def run_all(workers: list[IncWorker], inputs: list[np.ndarray], calls: int = 1) -> list[list[np.ndarray]]:
    out: list[list[np.ndarray]] = [[] for _ in workers]
    errors: list[BaseException] = []

    def body(r: int) -> None:
        try:
            for _ in range(calls):
                out[r].append(workers[r].allreduce(inputs[r]))
        except BaseException as ex:  # reported below
            errors.append(ex)

    threads = [threading.Thread(target=body, args=(r,)) for r in range(len(workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return out


def check_sums(workers: list[IncWorker], inputs: list[np.ndarray], results: list[np.ndarray]) -> None:
    ref = np.sum([x.astype(np.float64) for x in inputs], axis=0)
    for w, res in zip(workers, results):
        assert res.dtype == np.float32 and res.shape == inputs[0].shape
        assert w.last_plan is not None
        assert (np.abs(res - ref) <= w.last_plan.tolerance(ref)).all()
        assert np.array_equal(res, results[0])  # every worker got the same sum


def once(*keys: tuple[str, int, int]) -> DropRule:
    """Drop the first copy of each (direction, rank, offset) packet, and count the drops."""
    left = set(keys)

    def rule(direction: str, rank: int, header: dict[str, int]) -> bool:
        key = (direction, rank, header["offset"])
        if key in left:
            left.discard(key)
            return True
        return False

    rule.left = left  # type: ignore[attr-defined]
    return rule


@pytest.mark.parametrize("n", [2, 3, 4])
def test_sums_are_correct_and_identical(n: int) -> None:
    switch = FakeSwitch(job_id=JOB, n_workers=n, slot_count=4)
    workers = make_workers(switch, n, 4, LOSSLESS_TIMEOUT)
    inputs = [np.random.default_rng(r).normal(0, r + 1, 1000).astype(np.float32) for r in range(n)]
    results = run_all(workers, inputs)
    check_sums(workers, inputs, [r[0] for r in results])
    chunks = -(-1000 // AGG.num_lanes)
    assert switch.counters["contributions"] == n * chunks
    assert switch.counters["completions"] == chunks
    stats = workers[0].last_stats
    assert isinstance(stats, AllreduceStats)
    assert stats.packets_sent == chunks and stats.retransmissions == 0 and stats.elements == 1000


def test_lost_contribution_is_retransmitted_and_counted_once() -> None:
    lost = once(("up", 1, 3 * AGG.num_lanes))
    switch = FakeSwitch(job_id=JOB, n_workers=3, slot_count=2, drop=lost)
    workers = make_workers(switch, 3, 2)
    inputs = [np.full(640, r + 1.0, dtype=np.float32) for r in range(3)]
    results = run_all(workers, inputs)
    assert not lost.left  # type: ignore[attr-defined]
    check_sums(workers, inputs, [r[0] for r in results])
    assert workers[1].last_stats is not None and workers[1].last_stats.retransmissions >= 1
    assert switch.counters["contributions"] == 3 * 10  # no double counting
    np.testing.assert_allclose(results[0][0], 6.0, rtol=1e-6)


def test_lost_result_is_recovered_from_the_stored_result() -> None:
    lost = once(("down", 2, 5 * AGG.num_lanes), ("down", 0, 0))
    switch = FakeSwitch(job_id=JOB, n_workers=3, slot_count=2, drop=lost)
    workers = make_workers(switch, 3, 2)
    inputs = [np.random.default_rng(r).uniform(-1, 1, 700).astype(np.float32) for r in range(3)]
    results = run_all(workers, inputs)
    assert not lost.left  # type: ignore[attr-defined]
    check_sums(workers, inputs, [r[0] for r in results])
    assert switch.counters["retransmissions"] >= 2  # answered from the FINAL cells
    assert switch.counters["contributions"] == 3 * 11


@pytest.mark.parametrize(("result_type", "shift"), [(qz.ELEM_INT8, 20), (qz.ELEM_INT16, 12), (qz.ELEM_INT8, 0)])
def test_narrow_results(result_type: int, shift: int) -> None:
    switch = FakeSwitch(job_id=JOB, n_workers=4, slot_count=3, result_type=result_type, shift=shift)
    workers = make_workers(switch, 4, 3)
    inputs = [np.random.default_rng(r).normal(0, 1, 500).astype(np.float32) for r in range(4)]
    results = run_all(workers, inputs)
    check_sums(workers, inputs, [r[0] for r in results])
    assert switch.counters["overflows"] == 0
    assert workers[0].last_stats is not None and workers[0].last_stats.overflows == 0


def test_int8_contributions() -> None:
    switch = FakeSwitch(job_id=JOB, n_workers=2, slot_count=2)
    workers = make_workers(switch, 2, 2, contrib_type=qz.ELEM_INT8)
    inputs = [np.linspace(-1, 1, 200, dtype=np.float32) * (r + 1) for r in range(2)]
    results = run_all(workers, inputs)
    check_sums(workers, inputs, [r[0] for r in results])


def test_repeated_allreduces_advance_the_epoch_and_reuse_slots() -> None:
    switch = FakeSwitch(job_id=JOB, n_workers=2, slot_count=3)
    workers = make_workers(switch, 2, 3)
    inputs = [np.arange(1000, dtype=np.float32) * (r + 1) for r in range(2)]
    results = run_all(workers, inputs, calls=3)
    for call in range(3):
        check_sums(workers, inputs, [r[call] for r in results])
    assert workers[0].epoch == 4
    assert switch.counters["contributions"] == 3 * 2 * 16


def test_duplicated_results_are_ignored() -> None:
    switch = FakeSwitch(job_id=JOB, n_workers=2, slot_count=2)
    original = switch._send

    def twice(rank: int, *args: object) -> None:
        original(rank, *args)  # type: ignore[arg-type]
        original(rank, *args)  # type: ignore[arg-type]

    switch._send = twice  # type: ignore[method-assign]
    workers = make_workers(switch, 2, 2)
    inputs = [np.ones(300, dtype=np.float32)] * 2
    results = run_all(workers, inputs, calls=2)
    check_sums(workers, inputs, [r[1] for r in results])
    assert workers[0].last_stats is not None and workers[0].last_stats.duplicates > 0


def test_nan_is_refused_before_anything_is_sent() -> None:
    switch = FakeSwitch(job_id=JOB, n_workers=1, slot_count=2)
    worker = IncWorker(IncJob(job_id=JOB, rank=0, n_workers=1, slot_count=2), FakeTransport(switch, 0),
                       frame_prefix(Endpoint("02:00:00:00:00:01", "10.0.0.1"), 0))
    with pytest.raises(qz.NonFiniteError):
        worker.allreduce(np.array([1.0, np.nan], dtype=np.float32))
    assert switch.counters["contributions"] == 0


def test_missing_worker_times_out_with_a_clear_error() -> None:
    switch = FakeSwitch(job_id=JOB, n_workers=2, slot_count=2)
    alone: Callable[[str, float, int], float] = lambda tag, m, size: m  # noqa: E731 (pretend the other agreed)
    worker = IncWorker(IncJob(job_id=JOB, rank=0, n_workers=2, slot_count=2, timeout_s=0.005, max_retries=3),
                       FakeTransport(switch, 0), frame_prefix(Endpoint("02:00:00:00:00:01", "10.0.0.1"), 0), alone)
    with pytest.raises(AllreduceTimeoutError, match="no result for slot 0 offset 0 after 3 retransmissions"):
        worker.allreduce(np.ones(10, dtype=np.float32))


def test_job_config_is_validated() -> None:
    with pytest.raises(ValueError, match="rank 4 not in"):
        IncJob(job_id=1, rank=4, n_workers=4, slot_count=8)
    with pytest.raises(qz.QuantizationError):
        IncJob(job_id=1, rank=0, n_workers=300, slot_count=8, result_type=qz.ELEM_INT8)


def test_result_type_other_than_configured_is_a_clear_error() -> None:
    switch = FakeSwitch(job_id=JOB, n_workers=1, slot_count=2, result_type=qz.ELEM_INT8, shift=24)
    worker = IncWorker(IncJob(job_id=JOB, rank=0, n_workers=1, slot_count=2), FakeTransport(switch, 0),
                       frame_prefix(Endpoint("02:00:00:00:00:01", "10.0.0.1"), 0))
    with pytest.raises(JobMismatchError, match="elem_type 2 shift 24"):
        worker.allreduce(np.ones(10, dtype=np.float32))
