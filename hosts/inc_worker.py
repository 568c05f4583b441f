"""The in-network all-reduce worker (SwitchML-style, against the p4ina switch).

A tensor is quantized with the job's shared exponent, cut into chunks of
NUM_LANES elements (the last padded with zeros) and streamed through the job's
slot_count slots: chunk k uses slot k % slot_count and shadow copy
(k // slot_count) % 2, and a slot carries its next chunk only once the
previous chunk's result arrived.  A chunk whose result does not come within the
timeout is sent again with FLAG_RETRANSMIT; the switch either adds it (the
first copy was lost) or, if its bit is already set, answers with the stored
result, so lost contributions and lost results are both recovered without
double counting.  Results that do not match the outstanding chunk of their slot
(duplicates, a late copy from an earlier round or all-reduce) are counted and
ignored.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from hosts import quantization as qz
from hosts.packets import FLAG_OVERFLOW, OP_RESULT, ContributionFrames, ResultDecoder
from hosts.rto import RtoEstimator
from hosts.stats import AllreduceStats
from wireformat import AGG

LOG = logging.getLogger(__name__)


class Transport(Protocol):
    def send(self, frame: bytes | memoryview) -> None: ...

    def recv(self, timeout: float) -> bytes | None: ...

    def close(self) -> None: ...


# agree(tag, local max|x|, tensor size) -> max over all workers; it is also the per-call barrier
# (and refuses tensors whose sizes differ between workers).
Agreement = Callable[[str, float, int], float]


class AllreduceTimeoutError(TimeoutError):
    """A chunk got no result after the configured number of retransmissions."""


class AggregationOverflowError(ArithmeticError):
    """The switch flagged a saturated sum although the exponent was chosen not to overflow."""


class JobMismatchError(ValueError):
    """Results carry another result type or shift than the worker was configured with."""


@dataclass(frozen=True)
class IncJob:
    """A worker's job configuration (as installed by the controller)."""

    job_id: int
    rank: int
    n_workers: int
    slot_count: int
    result_type: int = qz.ELEM_INT32
    shift: int = 0
    contrib_type: int = qz.ELEM_INT32
    # Retransmission timeout: starts at timeout_s, then follows the measured round trips (which
    # include waiting for the slowest worker) but never below min_timeout_s; as in the ring.
    timeout_s: float = 0.05
    min_timeout_s: float = 0.05
    max_timeout_s: float = 2.0
    max_retries: int = 100
    first_epoch: int = 1
    strict_overflow: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.n_workers:
            raise ValueError(f"rank {self.rank} not in 0..{self.n_workers - 1}")
        if not 1 <= self.slot_count <= AGG.field("slot").max_value + 1:
            raise ValueError(f"slot_count {self.slot_count} out of range")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        qz.q_limit(self.n_workers, contrib_type=self.contrib_type, result_type=self.result_type, shift=self.shift)


class IncWorker:
    """allreduce(tensor) -> summed tensor, through the switches of one job."""

    def __init__(self, job: IncJob, transport: Transport, prefix: bytes, agree: Agreement | None = None) -> None:
        if job.n_workers > 1 and agree is None:
            raise ValueError("with more than one worker an agreement (barrier + max) is needed: pass agree=")
        self.job = job
        self.transport = transport
        self.prefix = prefix
        self.agree = agree
        self.calls = 0
        self.last_stats: AllreduceStats | None = None
        self.last_plan: qz.FixedPoint | None = None
        self._decoder = ResultDecoder()
        self.rto = RtoEstimator(job.timeout_s, min_s=min(job.min_timeout_s, job.timeout_s),
                                max_s=max(job.max_timeout_s, job.timeout_s))

    @property
    def epoch(self) -> int:
        """Epoch of the next all-reduce: advances by one per call (mod 256), the same on every worker."""
        return (self.job.first_epoch + self.calls) % 256

    def allreduce(self, tensor: np.ndarray) -> np.ndarray:
        job = self.job
        x = np.asarray(tensor, dtype=np.float32)
        local = qz.max_abs(x)  # refuses NaN/inf before anything is sent
        tag = f"inc-{job.job_id}-{self.calls}"
        global_max = self.agree(tag, local, x.size) if self.agree else local
        fp = qz.plan(global_max, job.n_workers, contrib_type=job.contrib_type, result_type=job.result_type, shift=job.shift)
        self.last_plan = fp
        flat = x.ravel()
        n_chunks = max(1, -(-flat.size // AGG.num_lanes))
        padded = np.zeros(n_chunks * AGG.num_lanes, dtype=np.float32)
        padded[: flat.size] = flat
        lanes = fp.quantize(padded).reshape(n_chunks, AGG.num_lanes)
        epoch = self.epoch
        self.calls += 1
        frames = ContributionFrames(
            self.prefix, lanes, job_id=job.job_id, rank=job.rank, epoch=epoch,
            exponent=fp.exponent, elem_type=job.contrib_type, slot_count=job.slot_count,
        )
        sums, stats = self._stream(frames, epoch, fp, flat.size)
        self.last_stats = stats
        result = qz.dequantize(sums, fp.exponent, job.shift).ravel()[: flat.size]
        return result.astype(np.float32).reshape(x.shape)

    def _stream(self, frames: ContributionFrames, epoch: int, fp: qz.FixedPoint, elements: int) -> tuple[np.ndarray, AllreduceStats]:
        job, send, recv = self.job, self.transport.send, self.transport.recv
        n_chunks, window = len(frames), job.slot_count
        header = self._decoder.header
        sums = np.zeros((n_chunks, AGG.num_lanes), dtype=np.int64)
        outstanding = np.full(window, -1, dtype=np.int64)  # chunk in flight per slot
        sends = np.zeros(n_chunks, dtype=np.int64)
        first_sent = np.zeros(n_chunks, dtype=np.float64)
        deadlines: list[tuple[float, int, int]] = []  # heap of (deadline, chunk, send number)
        sent = retrans = received = duplicates = overflows = sent_bytes = 0
        done = 0
        start = time.perf_counter()
        rto = self.rto

        def transmit(chunk: int) -> None:
            nonlocal sent, retrans, sent_bytes
            now = time.perf_counter()
            if sends[chunk]:
                send(frames.retransmission(chunk))
                retrans += 1
            else:
                send(frames.frame(chunk))
                first_sent[chunk] = now
            sends[chunk] += 1
            sent += 1
            sent_bytes += frames.frame_len
            heapq.heappush(deadlines, (now + rto.timeout(int(sends[chunk])), chunk, int(sends[chunk])))

        for chunk in range(min(window, n_chunks)):
            outstanding[chunk] = chunk
            transmit(chunk)

        while done < n_chunks:
            now = time.perf_counter()
            while deadlines:
                due, chunk, nth = deadlines[0]
                slot = chunk % window
                if outstanding[slot] != chunk or sends[chunk] != nth:
                    heapq.heappop(deadlines)  # answered, or sent again since
                    continue
                if due > now:
                    break
                heapq.heappop(deadlines)
                if sends[chunk] > job.max_retries:
                    raise AllreduceTimeoutError(
                        f"job {job.job_id} rank {job.rank}: no result for slot {slot} offset "
                        f"{chunk * AGG.num_lanes} after {job.max_retries} retransmissions "
                        f"(epoch {epoch}); is the job installed and are all {job.n_workers} workers running?"
                    )
                LOG.debug("timeout: resend chunk %d on slot %d", chunk, slot)
                rto.expired(now)
                transmit(chunk)
            wait = deadlines[0][0] - time.perf_counter() if deadlines else rto.rto
            payload = recv(max(wait, 0.0))
            if payload is None:
                continue
            received += 1
            try:
                h = header(payload)
            except ValueError:
                duplicates += 1
                continue
            slot = h["slot"]
            if (h["op"] != OP_RESULT or h["job_id"] != job.job_id or h["epoch"] != epoch or slot >= window):
                duplicates += 1
                continue
            chunk = int(outstanding[slot])
            if chunk < 0 or h["offset"] != chunk * AGG.num_lanes or h["shadow"] != (chunk // window) % 2:
                duplicates += 1
                continue
            try:
                lanes = self._decoder.lanes(payload, h["elem_type"])
            except ValueError:
                duplicates += 1
                continue
            if h["shift"] != job.shift or h["elem_type"] != job.result_type:
                raise JobMismatchError(
                    f"job {job.job_id}: a result has elem_type {h['elem_type']} shift {h['shift']}, the worker "
                    f"was configured with {job.result_type} / {job.shift}: pass the result type and shift the "
                    "controller installed (set_job)"
                )
            if h["flags"] & FLAG_OVERFLOW:
                overflows += 1
            sums[chunk] = lanes
            done += 1
            if sends[chunk] == 1:  # Karn: only unambiguous round trips
                rto.sample(time.perf_counter() - first_sent[chunk])
            nxt = chunk + window
            if nxt < n_chunks:
                outstanding[slot] = nxt
                transmit(nxt)
            else:
                outstanding[slot] = -1
        latency = time.perf_counter() - start
        stats = AllreduceStats(
            method="inc", elements=elements, latency_s=latency, packets_sent=sent,
            retransmissions=retrans, packets_received=received, duplicates=duplicates,
            bytes_sent=sent_bytes, overflows=overflows,
        )
        if overflows:
            msg = f"{overflows} result(s) flagged overflow (exponent {fp.exponent}, shift {job.shift})"
            if job.strict_overflow:
                raise AggregationOverflowError(msg)
            LOG.warning(msg)
        return sums, stats
