"""The in-network worker against the in-memory model of the switch (hosts.fakeswitch)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from hosts import quantization as qz
from hosts.fakeswitch import DropRule, FakeSwitch, FakeTransport
from hosts.inc_worker import AllreduceTimeoutError, IncJob, IncWorker, JobMismatchError, ProtocolError
from hosts.packets import Endpoint
from hosts.stats import AllreduceStats
from wireformat import AGG
from wireformat import fixedpoint as fxp
from wireformat.fixedpoint import LaneType

# every test here runs on both stream loops (tests/hosts/conftest.py)
pytestmark = pytest.mark.usefixtures("stream_loop")

JOB = 5
NONE = AGG.elem_types["ELEM_NONE"]
L = AGG.num_lanes


def endpoint(r: int) -> Endpoint:
    return Endpoint(f"02:00:00:00:00:{r:02x}", f"10.0.0.{r + 1}")


def rounds(elements: int, slot_count: int) -> int:
    """Contributions per worker per all-reduce: one per chunk plus one exponent round per slot used."""
    chunks = -(-elements // L)
    return chunks + min(chunks, slot_count)


# Short timeouts where packets are dropped on purpose (they only make recovery quicker); where
# nothing is lost, a long one, so a loaded machine cannot cause a retransmission the test counts.
LOSSY_TIMEOUT, LOSSLESS_TIMEOUT = 0.02, 10.0


def make_workers(
    switch: FakeSwitch, n: int, slot_count: int, timeout_s: float = LOSSY_TIMEOUT, **job: object
) -> list[IncWorker]:
    return [
        IncWorker(
            IncJob(
                job_id=JOB,
                rank=r,
                n_workers=n,
                slot_count=slot_count,
                timeout_s=timeout_s,
                min_timeout_s=timeout_s,
                down_lanes=fxp.elem_lanes(switch.result_type),
                shift=switch.shift,
                **job,
            ),  # type: ignore[arg-type]
            FakeTransport(switch, r),
            endpoint(r),
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
        except BaseException as ex:  # noqa: BLE001 - handed to the test thread, which re-raises it
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
    """Drop the first copy of each (direction, rank, offset) data packet, and count the drops."""
    left = set(keys)

    def rule(direction: str, rank: int, header: dict[str, int]) -> bool:
        if header["elem_type"] == NONE:
            return False
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
    per = rounds(1000, 4)
    assert switch.counters["contributions"] == n * per
    assert switch.counters["completions"] == per
    stats = workers[0].last_stats
    assert isinstance(stats, AllreduceStats)
    assert stats.packets_sent == per and stats.retransmissions == 0 and stats.elements == 1000
    assert stats.t_start <= stats.t_start + stats.parts["agree"] <= stats.t_done
    assert set(stats.parts) >= {"agree", "quantize", "dequantize"}


def test_lost_contribution_is_retransmitted_and_counted_once() -> None:
    lost = once(("up", 1, 3 * L))
    switch = FakeSwitch(job_id=JOB, n_workers=3, slot_count=2, drop=lost)
    workers = make_workers(switch, 3, 2)
    inputs = [np.full(5 * L, r + 1.0, dtype=np.float32) for r in range(3)]
    results = run_all(workers, inputs)
    assert not lost.left  # type: ignore[attr-defined]
    check_sums(workers, inputs, [r[0] for r in results])
    assert workers[1].last_stats is not None and workers[1].last_stats.retransmissions >= 1
    assert switch.counters["contributions"] == 3 * rounds(5 * L, 2)  # no double counting
    np.testing.assert_allclose(results[0][0], 6.0, rtol=1e-6)


@pytest.mark.parametrize("direction, rank", [("up", 1), ("down", 2)])
def test_a_round_answered_out_of_order_is_sent_again_before_its_timeout(direction: str, rank: int) -> None:
    """A later round's result arriving first shows a loss: the round is resent early (RACK), not after the RTO.

    The timeout is 10 s and the test waits at most 60, so a recovery by timeout would show as a retransmission
    that is not an early one; the check fails if early retransmission is off (the next test)."""
    lost = once((direction, rank, 0))
    switch = FakeSwitch(job_id=JOB, n_workers=3, slot_count=4, drop=lost)
    workers = make_workers(switch, 3, 4, LOSSLESS_TIMEOUT)
    inputs = [np.random.default_rng(r + 7).normal(0, 1, 12 * L).astype(np.float32) for r in range(3)]
    results = run_all(workers, inputs)
    assert not lost.left  # type: ignore[attr-defined]
    check_sums(workers, inputs, [r[0] for r in results])
    st = workers[rank].last_stats
    assert st is not None and st.fast_retransmissions >= 1
    assert st.retransmissions == st.fast_retransmissions  # no timeout expired
    assert switch.counters["contributions"] == 3 * rounds(12 * L, 4)  # resent rounds are not counted twice


def test_without_early_retransmission_only_the_timeout_recovers() -> None:
    lost = once(("up", 1, 0))
    switch = FakeSwitch(job_id=JOB, n_workers=3, slot_count=4, drop=lost)
    workers = make_workers(switch, 3, 4, early_window=0.0)
    inputs = [np.random.default_rng(r + 7).normal(0, 1, 12 * L).astype(np.float32) for r in range(3)]
    results = run_all(workers, inputs)
    check_sums(workers, inputs, [r[0] for r in results])
    st = workers[1].last_stats
    assert st is not None and st.retransmissions >= 1 and st.fast_retransmissions == 0


def test_lost_result_is_recovered_from_the_stored_result() -> None:
    lost = once(("down", 2, 5 * L), ("down", 0, 0))
    switch = FakeSwitch(job_id=JOB, n_workers=3, slot_count=2, drop=lost)
    workers = make_workers(switch, 3, 2)
    inputs = [np.random.default_rng(r).uniform(-1, 1, 6 * L + 10).astype(np.float32) for r in range(3)]
    results = run_all(workers, inputs)
    assert not lost.left  # type: ignore[attr-defined]
    check_sums(workers, inputs, [r[0] for r in results])
    assert switch.counters["retransmissions"] >= 2  # answered from the FINAL cells
    assert switch.counters["contributions"] == 3 * rounds(6 * L + 10, 2)


def test_lost_exponent_round_is_recovered() -> None:
    """An exponent round is a round like any other: lost up or down, it is retransmitted and answered."""
    left = {("up", 1, 0), ("down", 2, L)}

    def rule(direction: str, rank: int, header: dict[str, int]) -> bool:
        key = (direction, rank, header["offset"])
        if header["elem_type"] == NONE and key in left:
            left.discard(key)
            return True
        return False

    switch = FakeSwitch(job_id=JOB, n_workers=3, slot_count=2, drop=rule)
    workers = make_workers(switch, 3, 2)
    inputs = [np.random.default_rng(r).normal(0, 1, 3 * L).astype(np.float32) for r in range(3)]
    results = run_all(workers, inputs)
    assert not left
    check_sums(workers, inputs, [r[0] for r in results])
    assert switch.counters["contributions"] == 3 * rounds(3 * L, 2)


def test_each_block_gets_its_own_exponent() -> None:
    """One huge element costs precision only in its own block (the per-tensor scale spread it everywhere)."""
    switch = FakeSwitch(job_id=JOB, n_workers=2, slot_count=4)
    workers = make_workers(switch, 2, 4, LOSSLESS_TIMEOUT)
    rng = np.random.default_rng(3)
    inputs = [rng.normal(0, 1e-3, 4 * L).astype(np.float32) for _ in range(2)]
    inputs[0][5] = 1e6  # block 0 only
    results = run_all(workers, inputs)
    check_sums(workers, inputs, [r[0] for r in results])
    plan = workers[0].last_plan
    assert plan is not None
    exps = np.asarray(plan.exponent)[::L]
    assert exps[0] < exps[1] - 20 and len(set(exps[1:].tolist())) <= 2
    ref = np.sum([x.astype(np.float64) for x in inputs], axis=0)
    rel = np.abs(results[0][0][L:] - ref[L:]).max() / np.abs(ref[L:]).max()
    assert rel < 1e-6, rel


@pytest.mark.parametrize(
    ("up", "down", "shift"),
    [("int32", "int8", 24), ("int32", "int16", 16), ("int8", "int8", 2), ("int16", "int16", 2)],
)
def test_narrow_results(up: str, down: str, shift: int) -> None:
    switch = FakeSwitch(job_id=JOB, n_workers=4, slot_count=3, result_type=fxp.lane_elem(down), shift=shift)
    workers = make_workers(switch, 4, 3, up_lanes=up)
    inputs = [np.random.default_rng(r).normal(0, 1, 5 * L).astype(np.float32) for r in range(4)]
    results = run_all(workers, inputs)
    check_sums(workers, inputs, [r[0] for r in results])
    assert switch.counters["overflows"] == 0
    assert workers[0].last_stats is not None and workers[0].last_stats.overflows == 0


def test_int8_contributions_with_int16_results() -> None:
    switch = FakeSwitch(job_id=JOB, n_workers=2, slot_count=2, result_type=qz.ELEM_INT16)
    workers = make_workers(switch, 2, 2, up_lanes="int8")
    inputs = [np.linspace(-1, 1, 3 * L, dtype=np.float32) * (r + 1) for r in range(2)]
    results = run_all(workers, inputs)
    check_sums(workers, inputs, [r[0] for r in results])


def test_repeated_allreduces_advance_the_epoch_and_reuse_slots() -> None:
    switch = FakeSwitch(job_id=JOB, n_workers=2, slot_count=3)
    workers = make_workers(switch, 2, 3)
    inputs = [np.arange(4000, dtype=np.float32) * (r + 1) for r in range(2)]
    results = run_all(workers, inputs, calls=3)
    for call in range(3):
        check_sums(workers, inputs, [r[call] for r in results])
    assert workers[0].epoch == 4
    assert switch.counters["contributions"] == 3 * 2 * rounds(4000, 3)


def test_duplicated_results_are_ignored() -> None:
    switch = FakeSwitch(job_id=JOB, n_workers=2, slot_count=2)
    original = switch._send

    def twice(rank: int, *args: object) -> None:
        original(rank, *args)  # type: ignore[arg-type]
        original(rank, *args)  # type: ignore[arg-type]

    switch._send = twice  # type: ignore[method-assign]
    workers = make_workers(switch, 2, 2)
    inputs = [np.ones(3 * L, dtype=np.float32)] * 2
    results = run_all(workers, inputs, calls=2)
    check_sums(workers, inputs, [r[1] for r in results])
    assert workers[0].last_stats is not None and workers[0].last_stats.duplicates > 0


def test_nan_is_refused_before_anything_is_sent() -> None:
    switch = FakeSwitch(job_id=JOB, n_workers=1, slot_count=2)
    worker = IncWorker(IncJob(job_id=JOB, rank=0, n_workers=1, slot_count=2), FakeTransport(switch, 0), endpoint(0))
    with pytest.raises(qz.NonFiniteError):
        worker.allreduce(np.array([1.0, np.nan], dtype=np.float32))
    assert switch.counters["contributions"] == 0


def test_missing_worker_times_out_with_a_clear_error() -> None:
    switch = FakeSwitch(job_id=JOB, n_workers=2, slot_count=2)
    worker = IncWorker(
        IncJob(job_id=JOB, rank=0, n_workers=2, slot_count=2, timeout_s=0.005, max_retries=3),
        FakeTransport(switch, 0),
        endpoint(0),
    )
    with pytest.raises(AllreduceTimeoutError, match=r"no result for slot 0 \(exponent round\) after 3 retransmissions"):
        worker.allreduce(np.ones(10, dtype=np.float32))


def test_job_config_is_validated() -> None:
    with pytest.raises(ValueError, match="rank 4 not in"):
        IncJob(job_id=1, rank=4, n_workers=4, slot_count=8)
    with pytest.raises(qz.QuantizationError):
        IncJob(job_id=1, rank=0, n_workers=300, slot_count=8, down_lanes="int8")
    with pytest.raises(qz.QuantizationError, match=r"lane type 'none': choose one of int32, int16, int8"):
        IncJob(job_id=1, rank=0, n_workers=4, slot_count=8, up_lanes="none")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("up", "down", "shift", "why"),
    [
        # int8 contributions of 16 workers shifted by 24 (the int32 default) leave no bit of the int8 result
        ("int8", "int8", 24, "keeps 0 of the result's 7 magnitude bits"),
        # no shift: each of 16 workers may only send |q| <= 7 of its 127
        ("int8", "int8", 0, "contributions keep 3 of their 7 magnitude bits"),
        ("int32", "int32", 3, "only narrowed results are shifted"),
        # int8 lanes answered in int32 grow each packet by 768 B: BMv2 allows 512
        ("int8", "int32", 0, "grow each packet by 768 bytes, more than the 512 bytes BMv2"),
    ],
)
def test_configurations_that_cannot_represent_the_sum_are_refused(
    up: LaneType, down: LaneType, shift: int, why: str
) -> None:
    with pytest.raises(qz.QuantizationError, match=why):
        IncJob(job_id=1, rank=0, n_workers=16, slot_count=8, up_lanes=up, down_lanes=down, shift=shift)
    if "grow" not in why:  # the right shift is accepted (no shift makes int8 -> int32 packets fit BMv2)
        IncJob(
            job_id=1,
            rank=0,
            n_workers=16,
            slot_count=8,
            up_lanes=up,
            down_lanes=down,
            shift=0 if down == "int32" else 4 if up == down else 24,
        )


def test_result_type_other_than_configured_is_a_clear_error() -> None:
    switch = FakeSwitch(job_id=JOB, n_workers=1, slot_count=2, result_type=qz.ELEM_INT8, shift=24)
    worker = IncWorker(IncJob(job_id=JOB, rank=0, n_workers=1, slot_count=2), FakeTransport(switch, 0), endpoint(0))
    with pytest.raises(JobMismatchError, match="elem_type 2 shift 24"):
        worker.allreduce(np.ones(10, dtype=np.float32))


def test_an_exponent_above_the_proposal_is_a_protocol_error() -> None:
    """A switch that returned the maximum (or garbage) instead of the minimum must not be trusted."""
    switch = FakeSwitch(job_id=JOB, n_workers=1, slot_count=2)
    real = switch._send

    def lying(rank: int, slot: int, shadow: int, cell: object, offset: int) -> None:
        cell.next_exponent = 127  # type: ignore[attr-defined]
        real(rank, slot, shadow, cell, offset)  # type: ignore[arg-type]

    switch._send = lying  # type: ignore[method-assign]
    worker = IncWorker(IncJob(job_id=JOB, rank=0, n_workers=1, slot_count=2), FakeTransport(switch, 0), endpoint(0))
    with pytest.raises(ProtocolError, match="above this worker's proposal"):
        worker.allreduce(np.full(10, 5.0, dtype=np.float32))


def test_a_result_of_an_older_epoch_is_ignored() -> None:
    """A late result of the previous all-reduce (same slot and shadow, older epoch) is not taken for this one."""
    switch = FakeSwitch(job_id=JOB, n_workers=1, slot_count=2)
    worker = IncWorker(
        IncJob(
            job_id=JOB, rank=0, n_workers=1, slot_count=2, timeout_s=LOSSLESS_TIMEOUT, min_timeout_s=LOSSLESS_TIMEOUT
        ),
        FakeTransport(switch, 0),
        endpoint(0),
    )
    first = worker.allreduce(np.full(L, 1.0, dtype=np.float32))
    stale: list[bytes] = []
    real_send = switch._send

    def record(rank: int, slot: int, shadow: int, cell: object, offset: int) -> None:
        real_send(rank, slot, shadow, cell, offset)
        stale.append(switch.queues[rank].queue[-1])

    switch._send = record  # type: ignore[method-assign]
    worker.allreduce(np.full(L, 2.0, dtype=np.float32))
    switch._send = real_send  # type: ignore[method-assign]
    for payload in stale:  # replay epoch-2 results into epoch 3
        switch.queues[0].put(payload)
    third = worker.allreduce(np.full(L, 3.0, dtype=np.float32))
    assert first[0] == 1.0 and third[0] == 3.0
    assert worker.last_stats is not None and worker.last_stats.duplicates >= len(stale)
