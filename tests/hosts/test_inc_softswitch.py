"""The in-network worker against the real embedded switch running p4/build/p4ina.json, in-process.

No namespaces: each worker's transport hands its frames to SoftSwitch.process_packet
(worker rank r on port r + 1) and takes the results the switch sends to its
port.  This is the same switch and program as in test_netns_inc.py, without
needing root, so the protocol between worker and P4 program is checked on
every run.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import numpy as np
import pytest

from hosts import quantization as qz
from hosts.fakeswitch import SocketPairTransport
from hosts.inc_worker import SPEC_GUARD, IncJob, IncWorker
from hosts.packets import PREFIX_LEN, Endpoint
from tests.hosts.softswitch_job import JOB_ID, DropChosen, Processor, counter, real_switch
from tests.hosts.stream_loops import PAIRS
from wireformat import AGG
from wireformat import fixedpoint as fxp

# every test here runs on both stream loops (tests/hosts/conftest.py)
pytestmark = pytest.mark.usefixtures("stream_loop")

L = AGG.num_lanes

ADDRS = [(f"02:00:00:00:01:{r:02x}", f"10.66.0.{r + 1}") for r in range(4)]


class Wire:
    """Ports of one switch, as in-memory queues; the switch is called under one lock, like PortIO."""

    def __init__(self, processor: Processor, n: int) -> None:
        self.processor = processor
        self.queues: list[queue.Queue[bytes]] = [queue.Queue() for _ in range(n)]
        self.lock = threading.Lock()
        self.strays: list[tuple[int, bytes]] = []

    def deliver(self, rank: int, frame: bytes | memoryview) -> None:
        """A frame from worker `rank` through the switch, its results onto the ports' queues."""
        with self.lock:
            out = self.processor.process_packet(rank + 1, bytes(frame))
        for port, data in out:
            if 1 <= port <= len(self.queues):
                self.queues[port - 1].put(data[PREFIX_LEN:])
            else:
                self.strays.append((port, data))

    def transport(self, rank: int) -> Any:
        wire = self

        class Transport:
            def send(self, frame: bytes | memoryview) -> None:
                wire.deliver(rank, frame)

            def recv(self, timeout: float) -> bytes | None:
                try:
                    return wire.queues[rank].get(timeout=max(timeout, 0.0))
                except queue.Empty:
                    return None

            def close(self) -> None:
                pass

        return Transport()


@pytest.fixture(autouse=True)
def _sockets_for_the_c_loop(stream_loop: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the C loop, each worker reaches the Wire through a socket pair (closed by stream_loop)."""
    if stream_loop != "c":
        return
    made = request.node.stash[PAIRS]

    def paired(wire: Wire, rank: int) -> SocketPairTransport:
        t = SocketPairTransport(lambda frame: wire.deliver(rank, frame), wire.queues[rank], str(rank))
        made.append(t)
        return t

    monkeypatch.setattr(Wire, "transport", paired)


def workers_on(wire: Wire, n: int, timeout_s: float, **job: Any) -> list[IncWorker]:
    return [
        IncWorker(
            IncJob(
                job_id=JOB_ID, rank=r, n_workers=n, slot_count=4, timeout_s=timeout_s, min_timeout_s=timeout_s, **job
            ),
            wire.transport(r),
            Endpoint(*ADDRS[r]),
        )
        for r in range(n)
    ]


def run_ranks(workers: list[IncWorker], calls: list[list[np.ndarray]]) -> list[list[Any]]:
    """Every rank in a thread of its own, the calls one after the other (no barrier between them): per call and
    rank, (result, stats, plan); the first error of any rank is raised."""
    out: list[list[Any]] = [[None] * len(workers) for _ in calls]
    errors: list[BaseException] = []

    def body(r: int) -> None:
        try:
            for c, inputs in enumerate(calls):
                res = workers[r].allreduce(inputs[r])
                out[c][r] = (res, workers[r].last_stats, workers[r].last_plan)
        except BaseException as ex:  # noqa: BLE001 - handed to the test thread, which re-raises it
            errors.append(ex)

    threads = [threading.Thread(target=body, args=(r,)) for r in range(len(workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]
    return out


def allreduce(
    wire: Wire, n: int, inputs: list[np.ndarray], calls: int = 1, timeout_s: float = 0.1, **job: Any
) -> list[IncWorker]:
    """timeout_s is short where packets are dropped on purpose, long where a retransmission would be a bug."""
    workers = workers_on(wire, n, timeout_s, **job)
    out = run_ranks(workers, [inputs] * calls)
    results = [[out[c][r][0] for c in range(calls)] for r in range(n)]
    ref = np.sum([x.astype(np.float64) for x in inputs], axis=0)
    for call in range(calls):
        for w, res in zip(workers, results):
            assert w.last_plan is not None
            assert np.array_equal(res[call], results[0][call]), "workers got different sums"
            err = np.abs(res[call] - ref)
            assert (err <= w.last_plan.tolerance(ref)).all(), f"max error {err.max()} (call {call})"
    assert not wire.strays
    return workers


SIZE = 5 * L - 30
CHUNKS = 5
ROUNDS = CHUNKS + 4  # one contribution per chunk, plus the exponent round of each of the 4 slots


@pytest.mark.parametrize("n", [2, 3, 4])
def test_sums_and_counters(n: int) -> None:
    switch = real_switch(ADDRS[:n], slot_count=4)
    inputs = [np.random.default_rng(r).normal(0, r + 1, SIZE).astype(np.float32) for r in range(n)]
    workers = allreduce(Wire(switch, n), n, inputs, calls=2, timeout_s=10.0)
    assert counter(switch, "contributions") == n * ROUNDS * 2
    assert counter(switch, "completions") == ROUNDS * 2, "a reused cell did not complete a new round"
    assert counter(switch, "retransmissions") == 0
    assert all(w.last_stats is not None and w.last_stats.retransmissions == 0 for w in workers)
    # 5 chunks in 4 slots: a slot carries two, so the second call has its exponent rounds too (no speculation)
    assert all(w.last_stats.exponent_rounds == 4 for w in workers)


def run_calls(
    switch: Processor, n: int, calls: list[list[np.ndarray]], timeout_s: float = 10.0, **job: Any
) -> list[list[Any]]:
    """Each call's inputs (one per rank) through n workers of one job: per call, every rank's (result, stats)."""
    wire = Wire(switch, n)
    out = run_ranks(workers_on(wire, n, timeout_s, **job), calls)
    assert not wire.strays
    return out


SPEC_SIZE = 4 * L - 30  # 4 chunks in 4 slots: one round each, the case where speculation pays


def test_int8_contributions_do_not_guess() -> None:
    n = 2
    job = {"up_lanes": "int8", "down_lanes": "int8", "shift": 1}
    sw = {"result_type": qz.ELEM_INT8, "shift": 1}
    rng = np.random.default_rng(2)
    base = [rng.normal(0, 1, SPEC_SIZE).astype(np.float32) for _ in range(n)]
    out = run_calls(real_switch(ADDRS[:n], slot_count=4, **sw), n, [base, base], **job)
    assert [out[c][0][1].exponent_rounds for c in range(2)] == [4, 4]


@pytest.mark.parametrize("contrib", ["int32", "int16"])
def test_speculated_exponents(contrib: str) -> None:
    """The same tensor again (the guess holds), scaled by 16 (too fine a guess: clipped, sent again), by 1/64 (far
    too coarse: sent again), and the same again: each sum within its bound, and where every chunk was either kept
    at the agreed exponent or sent again at it, equal bit for bit to the exponent rounds' sum; misses counted."""
    n = 3
    job: dict[str, Any] = {} if contrib == "int32" else {"up_lanes": "int16", "down_lanes": "int16", "shift": 2}
    rng = np.random.default_rng(7)
    base = [rng.normal(0, r + 1, SPEC_SIZE).astype(np.float32) for r in range(n)]
    calls = [[x * np.float32(sc) for x in base] for sc in (1.0, 1.0, 16.0, 16.0, 1 / 64, 1 / 64)]
    sw = {"result_type": fxp.lane_elem(job.get("down_lanes", "int32")), "shift": job.get("shift", 0)}
    spec = run_calls(real_switch(ADDRS[:n], slot_count=4, **sw), n, calls, **job)
    plain = run_calls(real_switch(ADDRS[:n], slot_count=4, **sw), n, calls, speculate=False, **job)
    chunks = 4
    guard = SPEC_GUARD[contrib]
    for c, inputs in enumerate(calls):
        ref = np.sum([x.astype(np.float64) for x in inputs], axis=0)
        for r in range(n):
            res, stats, plan = spec[c][r]
            assert (np.abs(res - ref) <= plan.tolerance(ref)).all(), f"call {c} rank {r}"
            assert plain[c][r][1].exponent_rounds == 4 and plain[c][r][1].missed_exponents == 0
            assert stats.exponent_rounds == (4 if c == 0 else 0)
            if guard == 0 or c in (0, 2, 4):  # kept at the agreed exponent, or sent again at it: the same sum
                assert np.array_equal(res, plain[c][r][0]), f"call {c} rank {r}: speculation changed the sum"
    missed = [spec[c][0][1].missed_exponents for c in range(len(calls))]
    assert missed == [0, 0, chunks, 0, chunks, 0], missed


def test_a_guess_within_the_window_is_kept_and_checked() -> None:
    """Halved inputs: the agreed int32 exponent is one above last call's, so the guess (one guard step below) is
    two steps coarse, the most the window keeps; the sum is within the bound computed with the exponent used."""
    n = 2
    rng = np.random.default_rng(5)
    base = [rng.normal(0, 1, SPEC_SIZE).astype(np.float32) for _ in range(n)]
    calls = [base, [x * np.float32(0.5) for x in base]]
    out = run_calls(real_switch(ADDRS[:n], slot_count=4), n, calls)
    res, stats, plan = out[1][0]
    assert stats.exponent_rounds == 0 and stats.missed_exponents == 0
    first_plan = out[0][0][2]
    assert np.array_equal(plan.exponent, first_plan.exponent - SPEC_GUARD["int32"]), "the guess was not used"
    ref = np.sum([x.astype(np.float64) for x in calls[1]], axis=0)
    assert (np.abs(res - ref) <= plan.tolerance(ref)).all()


def test_a_new_tensor_size_goes_back_to_exponent_rounds() -> None:
    n = 2
    rng = np.random.default_rng(3)
    sizes = (SPEC_SIZE, SPEC_SIZE, 2 * L, SPEC_SIZE, SIZE, SIZE)
    calls = [[rng.normal(0, 1, size).astype(np.float32) for _ in range(n)] for size in sizes]
    out = run_calls(real_switch(ADDRS[:n], slot_count=4), n, calls)
    # SIZE has 5 chunks for 4 slots: no speculation even after a call of the same size
    assert [out[c][0][1].exponent_rounds for c in range(len(sizes))] == [4, 0, 2, 4, 4, 4]


def test_dropped_contribution_and_result_recovered_without_double_counting() -> None:
    n = 3
    switch = real_switch(ADDRS[:n], slot_count=4)
    lossy = DropChosen(switch, up={(2, 4 * L)}, down={(3, 2 * L), (1, 4 * L)})
    inputs = [np.full(SIZE, r + 1.0, dtype=np.float32) for r in range(n)]
    workers = allreduce(Wire(lossy, n), n, inputs)
    assert sorted(lossy.dropped) == [("down", 1, 4 * L), ("down", 3, 2 * L), ("up", 2, 4 * L)]
    assert counter(switch, "contributions") == n * ROUNDS
    assert counter(switch, "retransmissions") >= 2  # ranks 0 and 2 asked again for a stored result
    assert workers[1].last_stats is not None and workers[1].last_stats.retransmissions >= 1


@pytest.mark.parametrize(
    ("up", "down", "shift"),
    [("int32", "int8", 24), ("int32", "int16", 16), ("int8", "int8", 2), ("int16", "int16", 2)],
)
def test_narrow_results(up: str, down: str, shift: int) -> None:
    n = 4
    switch = real_switch(ADDRS[:n], slot_count=4, result_type=fxp.lane_elem(down), shift=shift)
    inputs = [np.random.default_rng(r).uniform(-1, 1, SIZE).astype(np.float32) for r in range(n)]
    allreduce(Wire(switch, n), n, inputs, up_lanes=up, down_lanes=down, shift=shift)
    assert counter(switch, "overflows") == 0


def test_int8_contributions_with_int16_results() -> None:
    n = 2
    switch = real_switch(ADDRS[:n], slot_count=4, result_type=qz.ELEM_INT16)
    inputs = [np.linspace(-3, 3, SIZE, dtype=np.float32) * (r + 1) for r in range(n)]
    allreduce(Wire(switch, n), n, inputs, up_lanes="int8", down_lanes="int16")
    assert counter(switch, "contributions") == n * ROUNDS


def test_packets_are_what_the_program_expects() -> None:
    """Nothing the worker sends is dropped by the program (drop counters stay 0 for the job)."""
    switch = real_switch(ADDRS[:2], slot_count=4)
    allreduce(Wire(switch, 2), 2, [np.ones(100, dtype=np.float32)] * 2)
    drops = [switch.counter_read("P4inaIngress.drops", 1 * 16 + reason)[0] for reason in range(16)]
    assert drops == [0] * 16, f"drops by reason: {drops}"


def test_the_switches_agree_the_smallest_exponent() -> None:
    """Each block gets the minimum of the workers' proposals: the worker with the largest values decides."""
    n = 3
    switch = real_switch(ADDRS[:n], slot_count=4)
    rng = np.random.default_rng(9)
    inputs = [rng.normal(0, 1, 4 * L).astype(np.float32) * (10.0**r) for r in range(n)]
    workers = allreduce(Wire(switch, n), n, inputs, timeout_s=10.0)
    plans = [w.last_plan for w in workers]
    exps = np.asarray(plans[0].exponent)[::L]  # type: ignore[union-attr]
    q = workers[0].job.q_limit
    expected = qz.block_exponents(np.max([qz.block_max_abs(x) for x in inputs], axis=0), q)
    assert exps.tolist() == expected.tolist()
    assert all(np.array_equal(np.asarray(p.exponent), np.asarray(plans[0].exponent)) for p in plans)  # type: ignore[union-attr]


def test_the_guess_follows_the_agreed_exponents_not_the_used_ones() -> None:
    """The same tensor five times: each guess is the agreed exponent less the guard, every time (a guess taken
    from the exponents used would grow one guard coarser per call until it missed)."""
    n = 2
    rng = np.random.default_rng(11)
    base = [rng.normal(0, 1, SPEC_SIZE).astype(np.float32) for _ in range(n)]
    out = run_calls(real_switch(ADDRS[:n], slot_count=4), n, [base] * 5)
    first = np.asarray(out[0][0][2].exponent)
    for c in range(1, 5):
        res, stats, plan = out[c][0]
        assert stats.exponent_rounds == 0 and stats.missed_exponents == 0, f"call {c}"
        assert np.array_equal(plan.exponent, first - SPEC_GUARD["int32"]), f"call {c}: the guess drifted"


class EveryNth:
    """Between the ports and the switch: drops every nth frame each way (contributions, results, both)."""

    def __init__(self, inner: Processor, nth: int) -> None:
        self.inner, self.nth, self.seen, self.dropped = inner, nth, 0, 0

    def _drop(self) -> bool:
        self.seen += 1
        if self.seen % self.nth == 0:
            self.dropped += 1
            return True
        return False

    def process_packet(self, ingress_port: int, data: bytes) -> list[tuple[int, bytes]]:
        if self._drop():
            return []
        return [(port, frame) for port, frame in self.inner.process_packet(ingress_port, data) if not self._drop()]


def test_guesses_that_miss_under_loss_still_sum_exactly_once() -> None:
    """Lost contributions and results while guesses hold and miss (a x16 and a x1/64 jump): every sum within its
    bound and the same on every rank, the switch's contributions counted once per round, misses counted."""
    n = 3
    rng = np.random.default_rng(13)
    base = [rng.normal(0, r + 1, SPEC_SIZE).astype(np.float32) for r in range(n)]
    calls = [[x * np.float32(sc) for x in base] for sc in (1.0, 1.0, 16.0, 16.0, 1 / 64)]
    switch = real_switch(ADDRS[:n], slot_count=4)
    lossy = EveryNth(switch, 7)
    out = run_calls(lossy, n, calls, timeout_s=0.05)
    assert lossy.dropped > 10
    rounds = 0
    for c, inputs in enumerate(calls):
        ref = np.sum([x.astype(np.float64) for x in inputs], axis=0)
        for r in range(n):
            res, stats, plan = out[c][r]
            assert np.array_equal(res, out[c][0][0]), f"call {c}: ranks disagree"
            assert (np.abs(res - ref) <= plan.tolerance(ref)).all(), f"call {c} rank {r}"
        stats = out[c][0][1]
        rounds += 4 + stats.exponent_rounds + stats.missed_exponents
    assert [out[c][0][1].missed_exponents for c in range(len(calls))] == [0, 0, 4, 0, 4]
    assert sum(out[c][r][1].retransmissions for c in range(len(calls)) for r in range(n)) > 0
    assert counter(switch, "contributions") == n * rounds  # every round's contributions added exactly once
