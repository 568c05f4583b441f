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
from hosts.coordination import LocalGroup, agree_max
from hosts.inc_worker import IncJob, IncWorker
from hosts.packets import PREFIX_LEN, Endpoint, frame_prefix
from softswitch_job import JOB_ID, DropChosen, Processor, counter, real_switch

ADDRS = [(f"02:00:00:00:01:{r:02x}", f"10.66.0.{r + 1}") for r in range(4)]


class Wire:
    """Ports of one switch, as in-memory queues; the switch is called under one lock, like PortIO."""

    def __init__(self, processor: Processor, n: int) -> None:
        self.processor = processor
        self.queues: list[queue.Queue[bytes]] = [queue.Queue() for _ in range(n)]
        self.lock = threading.Lock()
        self.strays: list[tuple[int, bytes]] = []

    def transport(self, rank: int) -> Any:
        wire = self

        class Transport:
            def send(self, frame: bytes | memoryview) -> None:
                with wire.lock:
                    out = wire.processor.process_packet(rank + 1, bytes(frame))
                for port, data in out:
                    if 1 <= port <= len(wire.queues):
                        wire.queues[port - 1].put(data[PREFIX_LEN:])
                    else:
                        wire.strays.append((port, data))

            def recv(self, timeout: float) -> bytes | None:
                try:
                    return wire.queues[rank].get(timeout=max(timeout, 0.0))
                except queue.Empty:
                    return None

            def close(self) -> None:
                pass

        return Transport()


def allreduce(wire: Wire, n: int, inputs: list[np.ndarray], calls: int = 1, timeout_s: float = 0.1,
              **job: Any) -> list[IncWorker]:
    """timeout_s is short where packets are dropped on purpose, long where a retransmission would be a bug."""
    groups = LocalGroup.create(n, timeout_s=60)
    workers = [
        IncWorker(IncJob(job_id=JOB_ID, rank=r, n_workers=n, slot_count=4, timeout_s=timeout_s,
                         min_timeout_s=timeout_s, **job),
                  wire.transport(r),
                  frame_prefix(Endpoint(*ADDRS[r]), job.get("contrib_type", 0)), agree_max(groups[r]))
        for r in range(n)
    ]
    results: list[list[np.ndarray]] = [[] for _ in range(n)]
    errors: list[BaseException] = []

    def body(r: int) -> None:
        try:
            for _ in range(calls):
                results[r].append(workers[r].allreduce(inputs[r]))
        except BaseException as ex:
            errors.append(ex)

    threads = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]
    ref = np.sum([x.astype(np.float64) for x in inputs], axis=0)
    for call in range(calls):
        for w, res in zip(workers, results):
            assert w.last_plan is not None
            assert np.array_equal(res[call], results[0][call]), "workers got different sums"
            err = np.abs(res[call] - ref)
            assert (err <= w.last_plan.tolerance(ref)).all(), f"max error {err.max()} (call {call})"
    assert not wire.strays
    return workers


SIZE, CHUNKS = 1250, 20


@pytest.mark.parametrize("n", [2, 3, 4])
def test_sums_and_counters(n: int) -> None:
    switch = real_switch(ADDRS[:n], slot_count=4)
    inputs = [np.random.default_rng(r).normal(0, r + 1, SIZE).astype(np.float32) for r in range(n)]
    workers = allreduce(Wire(switch, n), n, inputs, calls=2, timeout_s=10.0)
    assert counter(switch, "contributions") == n * CHUNKS * 2
    assert counter(switch, "completions") == CHUNKS * 2, "a reused cell did not complete a new round"
    assert counter(switch, "retransmissions") == 0
    assert all(w.last_stats is not None and w.last_stats.retransmissions == 0 for w in workers)


def test_dropped_contribution_and_result_recovered_without_double_counting() -> None:
    n = 3
    switch = real_switch(ADDRS[:n], slot_count=4)
    lossy = DropChosen(switch, up={(2, 5 * 64)}, down={(3, 9 * 64), (1, 13 * 64)})
    inputs = [np.full(SIZE, r + 1.0, dtype=np.float32) for r in range(n)]
    workers = allreduce(Wire(lossy, n), n, inputs)
    assert sorted(lossy.dropped) == [("down", 1, 13 * 64), ("down", 3, 9 * 64), ("up", 2, 5 * 64)]
    assert counter(switch, "contributions") == n * CHUNKS
    assert counter(switch, "retransmissions") >= 2  # ranks 0 and 2 asked again for a stored result
    assert workers[1].last_stats is not None and workers[1].last_stats.retransmissions >= 1


@pytest.mark.parametrize(("result_type", "shift"), [(qz.ELEM_INT8, 24), (qz.ELEM_INT16, 16), (qz.ELEM_INT8, 4)])
def test_narrow_results(result_type: int, shift: int) -> None:
    n = 4
    switch = real_switch(ADDRS[:n], slot_count=4, result_type=result_type, shift=shift)
    inputs = [np.random.default_rng(r).uniform(-1, 1, SIZE).astype(np.float32) for r in range(n)]
    allreduce(Wire(switch, n), n, inputs, result_type=result_type, shift=shift)
    assert counter(switch, "overflows") == 0


def test_int8_contributions() -> None:
    n = 2
    switch = real_switch(ADDRS[:n], slot_count=4)
    inputs = [np.linspace(-3, 3, SIZE, dtype=np.float32) * (r + 1) for r in range(n)]
    allreduce(Wire(switch, n), n, inputs, contrib_type=qz.ELEM_INT8)
    assert counter(switch, "contributions") == n * CHUNKS


def test_packets_are_what_the_program_expects() -> None:
    """Nothing the worker sends is dropped by the program (drop counters stay 0 for the job)."""
    switch = real_switch(ADDRS[:2], slot_count=4)
    allreduce(Wire(switch, 2), 2, [np.ones(100, dtype=np.float32)] * 2)
    drops = [switch.counter_read("P4inaIngress.drops", 1 * 16 + reason)[0] for reason in range(16)]
    assert drops == [0] * 16, f"drops by reason: {drops}"
