"""The in-network worker's own CPU per round (quantize, frame, send, receive, check, bookkeeping).

The emulation's 16 Python host agents share two cores with the switches, so what a worker spends per round
(one chunk's contribution out, its result in) is what sets the link rate at which every point stays
link-bound. Measured here without a network: one worker against the in-memory model switch (hosts.fakeswitch)
in the same thread, the switch's CPU subtracted (thread CPU time around each of its calls), so the figure is
the worker's alone; a real transport adds a send and a receive system call per round (bench_host_send).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from bench.results import Figure, Figures
from hosts.fakeswitch import FakeSwitch, FakeTransport
from hosts.inc_worker import IncJob, IncWorker
from hosts.packets import Endpoint
from wireformat import AGG
from wireformat import fixedpoint as fxp
from wireformat.fixedpoint import LaneType

LOG = logging.getLogger(__name__)

ELEMENTS = 131072
CALLS = 12
SLOTS = 64


class _TimedTransport(FakeTransport):
    """FakeTransport that books the model switch's CPU (it runs inside send) apart."""

    switch_s = 0.0

    def send(self, frame: bytes | memoryview) -> None:
        t0 = time.thread_time()
        super().send(frame)
        self.switch_s += time.thread_time() - t0


def worker_cpu_per_round(lanes: LaneType, calls: int = CALLS, elements: int = ELEMENTS) -> float:
    """Seconds of the worker's CPU per round, over `calls` all-reduces of new tensors (after one warm-up);
    `lanes` both ways."""
    switch = FakeSwitch(job_id=7, n_workers=1, slot_count=SLOTS, result_type=fxp.lane_elem(lanes))
    transport = _TimedTransport(switch, 0)
    job = IncJob(
        job_id=7,
        rank=0,
        n_workers=1,
        slot_count=SLOTS,
        up_lanes=lanes,
        down_lanes=lanes,
        timeout_s=1.0,
        min_timeout_s=1.0,
    )
    worker = IncWorker(job, transport, Endpoint(mac="02:00:00:00:00:01", ip="10.0.0.1"))
    rng = np.random.default_rng(fxp.lane_elem(lanes))  # the seeds the figures were measured with
    tensors = [rng.standard_normal(elements).astype(np.float32) for _ in range(calls + 1)]
    worker.allreduce(tensors[0])
    transport.switch_s = 0.0
    rounds, total = 0, 0.0
    for x in tensors[1:]:
        t0 = time.thread_time()
        out = worker.allreduce(x)
        total += time.thread_time() - t0
        if not np.allclose(out, x, rtol=0, atol=float(np.abs(x).max()) * 2.0 ** -(fxp.bits_of(lanes) - 3)):
            raise AssertionError(f"{lanes} lanes: a one-worker all-reduce does not return its input")
        stats = worker.last_stats
        assert stats is not None
        rounds += stats.packets_received
    return (total - transport.switch_s) / rounds


def run() -> Figures:
    figures: Figures = {}
    for name in fxp.LANE_TYPES:
        per_round = worker_cpu_per_round(name)
        LOG.info("worker %s: %.1f us of CPU per round", name, per_round * 1e6)
        figures[f"host_worker_cpu_us_per_round_{name}"] = Figure(
            per_round * 1e6,
            "us/round",
            f"one worker, {ELEMENTS} elements, {AGG.num_lanes} lanes, against the in-memory model switch (its CPU "
            "subtracted); no system calls",
        )
    return figures
