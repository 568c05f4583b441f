"""The in-network all-reduce worker (SwitchML-style, against the p4ina switch).

A tensor is cut into chunks of NUM_LANES elements (the last padded with zeros)
and streamed through the job's slot_count slots: chunk k uses slot k %
slot_count. Every slot opens with an exponent round (an ELEM_NONE packet
carrying only this worker's proposal for the slot's first chunk); each result
carries the minimum proposal over all workers, the agreed exponent of the slot's
next chunk, which the worker then quantizes and sends, proposing in turn the
exponent of the chunk after it (SwitchML's in-band agreement: no message outside
the data plane, one exponent per block). A slot carries its next round only
once the previous round's result arrived; each round alternates the slot's
shadow copy. A round whose result does not come within the timeout is sent
again with FLAG_RETRANSMIT; the switch either adds it (the first copy was lost)
or, if its bit is already set, answers with the stored result, so lost
contributions and lost results are both recovered without double counting.
Results that do not match the outstanding round of their slot (duplicates, a
late copy from an earlier round or all-reduce) are counted and ignored.

Speculative exponents (the "delayed scaling" of FP8 training, here for the
fixed-point scale): a training job all-reduces the same tensor every step, and a
block's exponent rarely changes much from one step to the next. Where the
exponent round would double the latency (every slot carries a single chunk), and
the previous all-reduce had as many chunks, the worker skips the exponent rounds:
chunk k is quantized with a guess, the exponent agreed for chunk k last time less
SPEC_GUARD steps (room to grow), and proposes its own; the result carries the
agreed one, the largest every worker could have used. The guess is kept when it
is at most SPEC_WINDOW steps below the agreed exponent (a scale that much
coarser than the best: at most two bits for int32, 1.5 for int16 (int8 does not guess);
the error bound is computed with the exponent used). Otherwise the speculation
missed: every worker sees it in the same result and sends the chunk again, in
the slot's next round, at the agreed exponent. A value too large for the guessed
scale is clipped to the lane limit first, so no sum can overflow, and such a
sum is never kept (the agreed exponent is then below the guess). What
speculation changes is the time: one round trip less when it holds, one more
for each missed chunk. Every worker of a job makes the same choice, as they
share the history (the same calls, the same agreed exponents); a failure (and
resume) starts afresh.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import heapq
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from hosts import clock, native_stream
from hosts import quantization as qz
from hosts.packets import (
    ELEM_NONE,
    FLAG_OVERFLOW,
    FLAG_RETRANSMIT,
    HEADER_LEN,
    LAYOUT,
    OP_RESULT,
    ContributionFrames,
    Endpoint,
    ResultDecoder,
    checks_out,
)
from hosts.rto import RtoEstimator
from hosts.stats import AllreduceStats
from wireformat import AGG
from wireformat.fixedpoint import LaneType

LOG = logging.getLogger(__name__)

# Speculation's margins in exponent steps, by the lanes hosts send (quantization.EXPONENT_STEPS per octave).
# int32 and int16 have precision to spare (their errors sit orders of magnitude under their targets): a guess
# up to two bits (int32) or 1.5 bits (int16) coarse is kept, and a guard step lets a block grow. int8 has none
# (its error is near its target): a guess could be a quarter bit coarse at most, and one that tight misses
# often enough that the redone chunks cost more than the round saved, so int8 contributions do not guess
# (SPEC_WINDOW None; the runs behind this: docs/results-history.md, Guessed exponents).
SPEC_GUARD: dict[str, int] = {"int32": 1, "int16": 1}  # by up lanes
SPEC_WINDOW: dict[str, int | None] = {"int32": 2, "int16": 3, "int8": None}


# Speculation saves one round trip and costs a frame per missed chunk: a gain where round trips set the time
# (small tensors), a loss where the links do (a miss rate of 1 in 5 on int8 is 20% more bytes). Like NCCL's choice
# of algorithm, the line is drawn by size: up to 16 chunks (4096 elements).
SPEC_MAX_CHUNKS = 16

# Where the transport has no file descriptor to poll beside the wake fd (the in-memory model switch), the
# Python loop looks at the notice at least this often.
NOTICE_POLL_S = 0.02


def speculates(chunks: int, slot_count: int, up_lanes: str = "int32") -> bool:
    """Whether an all-reduce of `chunks` chunks guesses its exponents (when it has a previous one of that size):
    only a small one, where every slot carries one chunk, so that the exponent round would be half of the time,
    and only with lanes that have precision to spare for a guess (not int8)."""
    return SPEC_WINDOW[up_lanes] is not None and chunks <= min(slot_count, SPEC_MAX_CHUNKS)


class Transport(Protocol):
    def send(self, frame: bytes | memoryview) -> None: ...

    def recv(self, timeout: float) -> bytes | None: ...

    def close(self) -> None: ...


class AllreduceTimeoutError(TimeoutError):
    """A chunk got no result after the configured number of retransmissions."""


@dataclass(frozen=True)
class Partial:
    """What an interrupted all-reduce already holds: per chunk, whether its result arrived, its sum and exponent."""

    done: np.ndarray  # bool per chunk
    sums: np.ndarray  # int64 (n_chunks, NUM_LANES); rows of chunks not done are meaningless
    exps: np.ndarray  # int64 per chunk
    stats: AllreduceStats  # what the interrupted attempt cost
    # the exponents the all-reduce guessed (hosts that speculated), or None: a redo guesses the same, so a chunk
    # comes out as it would have (and as it did on a worker that got it before the failure)
    guess: np.ndarray | None = None

    @property
    def missing(self) -> np.ndarray:
        return ~self.done


class SwitchFailureSuspected(AllreduceTimeoutError):
    """No result of any outstanding chunk for `failure_timeout_s`: a switch of the tree is presumably dead.

    Raised instead of waiting out max_retries, with what the worker already holds (`partial`), so the
    caller can have the job re-planned and finish only the missing chunks (IncWorker.resume).
    """

    def __init__(
        self, message: str, partial: Partial, stalled_s: float, detected_at: float, notice: str | None = None
    ) -> None:
        super().__init__(message)
        self.partial = partial
        self.stalled_s = stalled_s
        self.detected_at = detected_at
        self.notice = notice  # the controller's failure notice that ended the wait (None: the failure timeout did)


class AggregationOverflowError(ArithmeticError):
    """The switch flagged a saturated sum although the exponent was chosen not to overflow."""


class JobMismatchError(ValueError):
    """Results carry another result type or shift than the worker was configured with."""


class ProtocolError(ValueError):
    """A result that no correct switch sends (e.g. an agreed exponent above this worker's own proposal)."""


@dataclass(frozen=True)
class IncJob:
    """A worker's job configuration (as installed by the controller)."""

    job_id: int
    rank: int
    n_workers: int
    slot_count: int
    down_lanes: LaneType = "int32"  # what the switches send back (narrowed by the root's shift)
    shift: int = 0
    up_lanes: LaneType = "int32"  # what this worker sends
    # Retransmission timeout: starts at timeout_s, then follows the measured round trips (which
    # include waiting for the slowest worker) but never below min_timeout_s; as in the ring.
    timeout_s: float = 0.05
    min_timeout_s: float = 0.05
    max_timeout_s: float = 2.0
    max_retries: int = 100
    # Failure detection: no result for any outstanding chunk for this long, after at least
    # failure_timeouts consecutive retransmission timeouts, raises SwitchFailureSuspected (None: only
    # max_retries ends the wait). The bound a caller states: detected within failure_timeout_s of the
    # last result that arrived (so within failure_timeout_s plus one round trip of the failure); the
    # timer's backoff is capped at failure_timeout_s / failure_timeouts so that the timeouts do happen.
    failure_timeout_s: float | None = None
    failure_timeouts: int = 2
    # A stall that the tree's liveness explains away (on_stall: every switch answers) this many times in a row,
    # with no result in between, is a lost round, not a loss burst: a cell that can no longer complete (a
    # stored result whose check failed restarts its round, but the workers that got the result have moved
    # on). SwitchFailureSuspected then goes to the caller too, whose fail-over redoes the missing chunks
    # under the next epoch with every worker (hosts.agent; the verdict is "false alarm: same tree").
    lost_round_alarms: int = 2
    # Early retransmission (RACK, RFC 8985, for rounds): a round whose result is missing while a round sent after
    # it has been answered is sent again once it is a round trip plus early_window x srtt old, without waiting
    # for the timeout (every worker sends in the order the results came, so results return in send order; a
    # later one answered first means a lost frame). 0 turns it off: only the timeout resends.
    early_window: float = 0.25
    first_epoch: int = 1
    strict_overflow: bool = True
    # Skip the exponent rounds when the previous all-reduce had as many chunks (its agreed exponents are the
    # guess; a miss costs that chunk one more round). Every worker of a job must use the same setting.
    speculate: bool = True
    # The controller's bound on the sum's rounding error, in units of 2^-exponent (JobPlan.error_lsb); None: one
    # root switch does all the shifting (the model switch, a single-switch job).
    error_lsb: float | None = None
    # The controller's limit on |lane| for this tree (JobPlan.q_limit: a unit or two below the formula where
    # the switches' rounding could push a sum over); None: the formula's.
    max_lane: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.n_workers:
            raise ValueError(f"rank {self.rank} not in 0..{self.n_workers - 1}")
        if not 1 <= self.slot_count <= AGG.field("slot").max_value + 1:
            raise ValueError(f"slot_count {self.slot_count} out of range")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.failure_timeout_s is not None and self.failure_timeout_s <= 0:
            raise ValueError(f"failure_timeout_s must be > 0 (or None), got {self.failure_timeout_s}")
        if self.lost_round_alarms < 1:
            raise ValueError(f"lost_round_alarms must be >= 1, got {self.lost_round_alarms}")
        if not self.early_window >= 0:
            raise ValueError(f"early_window must be >= 0 (0: off), got {self.early_window}")
        # The same check as `p4ina job install`: refuse what cannot represent the sum, naming the numbers.
        qz.check_job(self.n_workers, up_lanes=self.up_lanes, down_lanes=self.down_lanes, shift=self.shift)
        formula = qz.q_limit(self.n_workers, up_lanes=self.up_lanes, down_lanes=self.down_lanes, shift=self.shift)
        if self.max_lane is not None and not 1 <= self.max_lane <= formula:
            raise qz.QuantizationError(
                f"max_lane {self.max_lane} outside 1..{formula}, the most {self.n_workers} "
                "workers may contribute without overflowing"
            )

    @property
    def q_limit(self) -> int:
        if self.max_lane is not None:
            return self.max_lane
        return qz.q_limit(self.n_workers, up_lanes=self.up_lanes, down_lanes=self.down_lanes, shift=self.shift)

    @functools.cached_property  # read per frame: looked up once
    def up_elem(self) -> int:
        """The header's elem_type code of this worker's contributions."""
        return qz.lane_elem(self.up_lanes)

    @functools.cached_property
    def down_elem(self) -> int:
        """The header's elem_type code of the results (a result of another code is a JobMismatchError)."""
        return qz.lane_elem(self.down_lanes)


class IncWorker:
    """allreduce(tensor) -> summed tensor, through the switches of one job."""

    def __init__(self, job: IncJob, transport: Transport, endpoint: Endpoint) -> None:
        self.job = job
        self.transport = transport
        self.endpoint = endpoint
        self.calls = 0
        self.last_stats: AllreduceStats | None = None
        self.last_plan: qz.FixedPoint | None = None
        # What the last completed all-reduce holds (every chunk done): a rank called back to a fail-over of a
        # step it finished redoes the others' chunks from it (hosts.agent's rejoin)
        self.last_partial: Partial | None = None
        self._decoder = ResultDecoder()
        # Asked before SwitchFailureSuspected is raised: (stalled_s, missing chunks, chunks) -> True if the tree is
        # known to be alive (a long loss burst, not a failure): then the worker keeps waiting on the same rounds.
        self.on_stall: Callable[[float, int, int], bool] | None = None
        self.false_alarms = 0
        # A failure notice (the controller heard a switch of this install's tree die, or a link of it go down):
        # the stream stops waiting at once and raises SwitchFailureSuspected. Set from another thread
        # (interrupt()), kept until the fail-over's verdict clears it (clear_notice()).
        self.notice: str | None = None
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)  # what the C loop polls beside its socket
        max_s = max(job.max_timeout_s, job.timeout_s)
        if job.failure_timeout_s is not None:  # backed-off timers must still expire failure_timeouts times in time
            max_s = max(min(max_s, job.failure_timeout_s / job.failure_timeouts), job.timeout_s, job.min_timeout_s)
        # 2^(e/steps) of every exponent the header can carry, looked up per round (qz.scale's own values)
        exponents = np.arange(qz.EXPONENT_MIN, qz.EXPONENT_MAX + 1)
        self._scale_table = np.ascontiguousarray(
            qz.scale(exponents, job.up_elem), dtype=np.float64
        )  # also the C loop's table
        self._scales: dict[int, float] = dict(zip(exponents.tolist(), self._scale_table.tolist()))
        self.rto = RtoEstimator(job.timeout_s, min_s=min(job.min_timeout_s, job.timeout_s), max_s=max_s)
        # The agreed exponents of the last all-reduce that completed normally (None: none, or a failure since):
        # the agreed ones, not the ones used, which a kept guess makes coarser (the next guess would drift).
        self._last_exps: np.ndarray | None = None
        self._agreed: np.ndarray | None = None  # the last stream's agreed exponent per chunk
        # Per slot, the round its next round is (its shadow copy: the parity). It carries on across all-reduces:
        # a slot's first round of a call must use the other copy than its last round of the call before, which
        # keeps that result for a worker that has not got it yet (without a barrier between calls, the others
        # may start the next call while it still asks). Every worker of a job counts alike.
        self._next_round = np.zeros(job.slot_count, dtype=np.int64)

    def realign(self) -> None:
        """Start every slot's rounds from the first shadow copy again, with no exponent history: after a
        fail-over barrier, where a worker that had finished the step (rejoined) is a round ahead of the ones
        that had not, and holds a history they lost. Safe because the redo runs under the next epoch, in which
        every cell starts afresh (and guesses from the interrupted call's Partial); every worker of the job
        calls it there."""
        self._next_round[:] = 0
        self._last_exps = None

    def interrupt(self, notice: str) -> None:
        """A failure of this install's tree was announced: the stream in progress (or the next) stops waiting."""
        self.notice = notice
        os.eventfd_write(self._wake, 1)

    def clear_notice(self) -> None:
        """The fail-over answered the notice (the same tree goes on: a false alarm); stream normally again."""
        self.notice = None
        try:
            os.eventfd_read(self._wake)
        except BlockingIOError:
            pass

    def close(self) -> None:
        """Release the wake fd (the transport is the caller's)."""
        if self._wake >= 0:
            os.close(self._wake)
            self._wake = -1

    @property
    def epoch(self) -> int:
        """Epoch of the next all-reduce: advances by one per call (mod 256), the same on every worker."""
        return (self.job.first_epoch + self.calls) % 256

    def allreduce(self, tensor: np.ndarray) -> np.ndarray:
        """The sum over all workers, as float32; every cost of the method (proposals, agreement,
        quantization, framing, dequantization) is inside, and timed in last_stats.

        Raises SwitchFailureSuspected (with what already arrived) when the job's switches stop answering."""
        t_start = clock.now()
        self.false_alarms = 0
        x = np.asarray(tensor, dtype=np.float32)
        blocks = self._blocks(x)
        n = len(blocks)
        guess = None
        if (
            self.job.speculate
            and self._last_exps is not None
            and len(self._last_exps) == n
            and speculates(n, self.job.slot_count, self.job.up_lanes)
        ):
            guess = np.maximum(self._last_exps - SPEC_GUARD[self.job.up_lanes], qz.EXPONENT_MIN)
        self._last_exps = None  # set again only if this call completes
        sums, exps, stats = self._run(
            blocks,
            t_start,
            np.ones(n, dtype=bool),
            np.zeros((n, AGG.num_lanes), np.int64),
            np.zeros(n, np.int64),
            guess,
        )
        out = self._finish(x, sums, exps, stats, t_start, guess)
        self._last_exps = self._agreed
        return out

    def resume(self, tensor: np.ndarray, partial: Partial, redo: np.ndarray) -> np.ndarray:
        """Finish an all-reduce interrupted by a switch failure on this (re-installed) job: the chunks in `redo`
        (every chunk some worker lacks, the same set on every worker) are all-reduced again under this worker's
        epoch; the others keep the sums that arrived before. Under a new install token the switches start those
        cells afresh, so no contribution is counted twice."""
        t_start = clock.now()
        x = np.asarray(tensor, dtype=np.float32)
        blocks = self._blocks(x)
        self._last_exps = None
        redo = np.asarray(redo, dtype=bool)
        if redo.shape != partial.done.shape or redo.shape[0] != len(blocks):
            raise ValueError(f"redo mask of {redo.shape} for {len(blocks)} chunks")
        if np.any(~redo & ~partial.done):
            raise ValueError("a chunk neither done nor to be redone: the redo set must cover every missing chunk")
        sums, exps = partial.sums.copy(), partial.exps.copy()
        sums, exps, stats = self._run(blocks, t_start, redo, sums, exps, partial.guess)
        before = partial.stats
        merged = dataclasses.replace(
            stats,
            packets_sent=stats.packets_sent + before.packets_sent,
            retransmissions=stats.retransmissions + before.retransmissions,
            fast_retransmissions=stats.fast_retransmissions + before.fast_retransmissions,
            packets_received=stats.packets_received + before.packets_received,
            duplicates=stats.duplicates + before.duplicates,
            bytes_sent=stats.bytes_sent + before.bytes_sent,
            corrupt=stats.corrupt + before.corrupt,
        )
        return self._finish(x, sums, exps, merged, before.t_start or t_start, partial.guess)

    @staticmethod
    def _blocks(x: np.ndarray) -> np.ndarray:
        flat = x.ravel()
        n_chunks = max(1, -(-flat.size // AGG.num_lanes))
        padded = np.zeros(n_chunks * AGG.num_lanes, dtype=np.float32)
        padded[: flat.size] = flat
        return padded.reshape(n_chunks, AGG.num_lanes)

    def _run(
        self,
        blocks: np.ndarray,
        t_start: float,
        todo: np.ndarray,
        sums: np.ndarray,
        exps: np.ndarray,
        guess: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, AllreduceStats]:
        """Stream the chunks in `todo` (one epoch) and put their sums and exponents into sums/exps.

        guess: speculated exponents of every chunk (those in `todo` are used), or None for exponent rounds."""
        job = self.job
        sub = blocks[todo]
        if not len(sub):  # every chunk arrived everywhere before the failure: nothing to stream
            return (
                sums,
                exps,
                AllreduceStats(
                    method="inc",
                    elements=0,
                    latency_s=0.0,
                    packets_sent=0,
                    retransmissions=0,
                    packets_received=0,
                    duplicates=0,
                    bytes_sent=0,
                    t_start=t_start,
                ),
            )
        proposals = qz.block_exponents(qz.block_max_abs(sub.ravel()), job.q_limit, job.up_elem)  # NaN/inf first
        epoch = self.epoch
        self.calls += 1
        frames = ContributionFrames(
            self.endpoint,
            proposals,
            job_id=job.job_id,
            rank=job.rank,
            epoch=epoch,
            elem_type=job.up_elem,
            slot_count=job.slot_count,
            speculative=guess is not None,
        )
        index = np.flatnonzero(todo)
        t_framed = clock.now()
        try:
            sub_sums, sub_exps, stats = self._stream(
                frames, sub, proposals, epoch, t_start, None if guess is None else guess[todo]
            )
        except SwitchFailureSuspected as ex:
            done = ~todo.copy()
            done[index] = ex.partial.done
            sums[index[ex.partial.done]] = ex.partial.sums[ex.partial.done]
            exps[index[ex.partial.done]] = ex.partial.exps[ex.partial.done]
            ex.partial = Partial(done, sums, exps, dataclasses.replace(ex.partial.stats, t_start=t_start), guess)
            raise
        sums[index], exps[index] = sub_sums, sub_exps
        parts = dict(stats.parts)
        parts["quantize"] = parts.get("quantize", 0.0) + (t_framed - t_start)
        return sums, exps, dataclasses.replace(stats, parts=parts)

    def _finish(
        self,
        x: np.ndarray,
        sums: np.ndarray,
        exps: np.ndarray,
        stats: AllreduceStats,
        t_start: float,
        guess: np.ndarray | None = None,
    ) -> np.ndarray:
        job = self.job
        size = x.size
        t0 = clock.now()
        result = (
            qz.dequantize(sums, exps[:, None], job.shift, job.up_elem)
            .ravel()[:size]
            .astype(np.float32)
            .reshape(x.shape)
        )
        t_done = clock.now()
        parts = dict(stats.parts)
        parts["dequantize"] = t_done - t0
        self.last_stats = dataclasses.replace(
            stats, elements=int(size), latency_s=t_done - t_start, t_start=t_start, t_done=t_done, parts=parts
        )
        self.last_plan = qz.FixedPoint(
            np.repeat(exps, AGG.num_lanes)[:size].reshape(x.shape),
            job.n_workers,
            job.up_lanes,
            job.down_lanes,
            job.shift,
            job.error_lsb,
        )
        self.last_partial = Partial(np.ones(len(exps), dtype=bool), sums, exps, self.last_stats, guess)
        return result

    def _stream(
        self,
        frames: ContributionFrames,
        blocks: np.ndarray,
        proposals: np.ndarray,
        epoch: int,
        t_start: float,
        guess: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, AllreduceStats]:
        """Run every slot's rounds to the end; (int64 sums per chunk, exponent per chunk, stats).

        guess: the speculated exponent of each chunk (no exponent rounds), or None.

        Where the transport has sockets (native_fds) and the C loop builds, the same rounds run in C
        (_stream_native); this loop is the reference, and the path of transports without descriptors."""
        fds_of = getattr(self.transport, "native_fds", None)
        fds = fds_of() if fds_of is not None else None
        lib = native_stream.library() if fds is not None else None
        if lib is not None and fds is not None:
            return self._stream_native(lib, fds, frames, blocks, proposals, epoch, t_start, guess)
        job, send, recv = self.job, self.transport.send, self.transport.recv
        n_chunks, window = len(frames), job.slot_count
        n_slots = frames.n_slots
        header = self._decoder.header
        lane_dtype = qz.ELEM_DTYPE[job.up_elem]
        lane_info = np.iinfo(lane_dtype)
        q_max = job.q_limit
        scales = self._scales
        blocks64 = blocks.astype(np.float64)  # once, not per round (the quantization's products are float64)
        maxabs = np.abs(blocks64).max(axis=1)
        window_steps = SPEC_WINDOW[job.up_lanes] or 0
        sums = np.zeros((n_chunks, AGG.num_lanes), dtype=np.int64)
        exps = np.zeros(n_chunks, dtype=np.int64)
        agreed_exps = exps if guess is None else np.zeros(n_chunks, dtype=np.int64)  # the same without a guess
        self._agreed = agreed_exps
        got = np.zeros(n_chunks, dtype=bool)
        failure_s = job.failure_timeout_s
        last_progress = clock.now()  # the last result (of any round) that arrived
        expired_since = 0  # retransmission timeouts since then
        # A round is a packet id: chunk k is k, the exponent round of slot s is n_chunks + s.
        n_ids = n_chunks + n_slots
        # Per-round bookkeeping in lists, not arrays: the loop reads and writes them one element at a time, which
        # costs a numpy array several times what it costs a list (the agents' CPU is what bounds the emulation).
        outstanding = [-1] * window  # round in flight per slot
        rounds = self._next_round[:window].tolist()  # the round each slot is in (shadow copy = round % 2)
        sends = [0] * n_ids
        round_from = [0] * n_ids  # sends[rid] when its current round began
        first_sent = [0.0] * n_ids
        expiries = [0] * n_ids  # timeouts of the round in flight (its backoff)
        deadlines: list[tuple[float, int, int, bool]] = []  # heap of (deadline, round, send number, early)
        # early retransmission: every send in time order (time, round, send number), and the latest send time
        # answered (unambiguously) with its round trip; sends before it still unanswered are presumed lost
        in_order: collections.deque[tuple[float, int, int]] = collections.deque()
        early = job.early_window > 0
        sent = retrans = fast = received = duplicates = overflows = sent_bytes = corrupt = missed = 0
        done = 0
        quantize_s = 0.0
        agreed_at: float | None = None
        rto = self.rto

        def transmit(rid: int) -> None:
            nonlocal sent, retrans, sent_bytes
            now = clock.now()
            is_exp = rid >= n_chunks
            if sends[rid] > round_from[rid]:
                send(frames.exponent_retransmission(rid - n_chunks) if is_exp else frames.retransmission(rid))
                retrans += 1
            else:
                send(frames.exponent_frame(rid - n_chunks) if is_exp else frames.frame(rid))
                first_sent[rid] = now
                expiries[rid] = 0
            sends[rid] += 1
            sent += 1
            sent_bytes += frames.exp_frame_len if is_exp else frames.frame_len
            heapq.heappush(deadlines, (now + rto.timeout(1 + expiries[rid]), rid, sends[rid], False))
            if early:
                in_order.append((now, rid, sends[rid]))

        def answered(rid: int, now: float) -> None:
            """rid's round came back, sent once: sends before it that are still unanswered get an early deadline."""
            rtt = now - first_sent[rid]
            rto.sample(rtt)
            if not early:
                return
            due_after = rtt + job.early_window * (rto.srtt or rtt)
            while in_order and in_order[0][0] < first_sent[rid]:
                t, r, nth = in_order.popleft()
                if sends[r] == nth and outstanding[r - n_chunks if r >= n_chunks else r % window] == r:
                    heapq.heappush(deadlines, (t + due_after, r, nth, True))

        def start_chunk(chunk: int, exponent: int, speculated: bool = False) -> None:
            """Quantize and send a chunk's next round: at an agreed exponent, or a speculated one (clipped)."""
            nonlocal quantize_s
            if exponent > proposals[chunk] and not speculated:
                raise ProtocolError(
                    f"job {job.job_id} rank {job.rank}: chunk {chunk} agreed exponent {exponent} is above this "
                    f"worker's proposal {int(proposals[chunk])}: the switches must return the minimum"
                )
            t0 = clock.now()
            s = scales.get(exponent)
            if s is None:  # outside the header's range (no switch sends one): computed, and refused below
                s = float(qz.scale(exponent, job.up_elem))
            q = blocks64[chunk] * s
            np.rint(q, out=q)
            # the block's largest |q| without scanning it: rint and a positive scale keep the order of |x|
            top = float(np.rint(maxabs[chunk] * s))
            if speculated and exponent > proposals[chunk]:
                np.clip(q, -q_max, q_max, out=q)  # too fine a scale for this block: the round will be sent again
                top = min(top, q_max)
            if top > lane_info.max:
                raise ProtocolError(f"chunk {chunk}: exponent {exponent} overflows {lane_dtype}")
            slot = chunk % window
            frames.fill(chunk, exponent, q)
            frames.set_shadow(chunk, rounds[slot] % 2)
            exps[chunk] = exponent
            quantize_s += clock.now() - t0
            outstanding[slot] = chunk
            round_from[chunk] = sends[chunk]
            transmit(chunk)

        if guess is None:
            for slot in range(n_slots):
                frames.set_exponent_shadow(slot, rounds[slot] % 2)
                outstanding[slot] = n_chunks + slot
                transmit(n_chunks + slot)
        else:
            for slot in range(n_slots):
                start_chunk(slot, int(guess[slot]), speculated=True)

        alarms = 0  # stalls explained away by a live tree since the last result

        def stalled(now: float, alive: bool = False, notice: str | None = None) -> SwitchFailureSuspected:
            stats = AllreduceStats(
                method="inc",
                elements=int(blocks.size),
                latency_s=now - t_start,
                packets_sent=sent,
                retransmissions=retrans,
                fast_retransmissions=fast,
                packets_received=received,
                duplicates=duplicates,
                bytes_sent=sent_bytes,
                overflows=overflows,
                corrupt=corrupt,
                t_start=t_start,
            )
            why = (
                f"the controller says: {notice}"
                if notice is not None
                else f"the tree answers, yet {alarms} stalls in a row: a round's cell is presumably lost"
                if alive
                else "a switch of the job's tree is presumably down"
            )
            return SwitchFailureSuspected(
                f"job {job.job_id} rank {job.rank}: no result for {now - last_progress:.2f} s ({expired_since} "
                f"retransmission timeouts, {n_chunks - done} of {n_chunks} chunks missing, epoch {epoch}): {why}",
                Partial(got.copy(), sums, exps, stats),
                now - last_progress,
                now,
                notice,
            )

        while done < n_chunks:
            now = clock.now()
            if self.notice is not None:
                raise stalled(now, notice=self.notice)
            if failure_s is not None and now - last_progress >= failure_s and expired_since >= job.failure_timeouts:
                if self.on_stall is None or not self.on_stall(now - last_progress, n_chunks - done, n_chunks):
                    raise stalled(now)
                self.false_alarms += 1
                alarms += 1
                if alarms >= job.lost_round_alarms:
                    raise stalled(now, alive=True)
                LOG.info(
                    "job %d rank %d: no result for %.2f s but the tree is alive; waiting on",
                    job.job_id,
                    job.rank,
                    now - last_progress,
                )
                last_progress, expired_since = clock.now(), 0
            while deadlines:
                due, rid, nth, is_early = deadlines[0]
                slot = rid - n_chunks if rid >= n_chunks else rid % window
                if outstanding[slot] != rid or sends[rid] != nth:
                    heapq.heappop(deadlines)  # answered, or sent again since
                    continue
                if due > now:
                    break
                heapq.heappop(deadlines)
                if is_early:  # a later round was answered first: this one's frame (or its result) was lost
                    LOG.debug("early: resend round %d on slot %d", rid, slot)
                    fast += 1
                    transmit(rid)
                    continue
                if expiries[rid] >= job.max_retries:
                    what = "exponent round" if rid >= n_chunks else f"offset {rid * AGG.num_lanes}"
                    raise AllreduceTimeoutError(
                        f"job {job.job_id} rank {job.rank}: no result for slot {slot} ({what}) after "
                        f"{job.max_retries} retransmissions (epoch {epoch}); is the job installed and are all "
                        f"{job.n_workers} workers running?"
                    )
                LOG.debug("timeout: resend round %d on slot %d", rid, slot)
                rto.expired(now)
                expired_since += 1
                expiries[rid] += 1
                transmit(rid)
            wait = deadlines[0][0] - clock.now() if deadlines else rto.rto
            if failure_s is not None:
                wait = min(wait, last_progress + failure_s - clock.now())
            wait = min(wait, NOTICE_POLL_S)  # a transport without file descriptors cannot poll the wake fd
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
            if h["op"] != OP_RESULT or h["job_id"] != job.job_id or h["epoch"] != epoch or slot >= window:
                duplicates += 1
                continue
            rid = outstanding[slot]
            if rid < 0:
                duplicates += 1
                continue
            if rid >= n_chunks:  # the slot's exponent round
                if (
                    h["elem_type"] != ELEM_NONE
                    or h["shadow"] != rounds[slot] % 2
                    or h["offset"] != slot * AGG.num_lanes
                ):
                    duplicates += 1
                    continue
                if h["checksum"] != frames.salts[slot]:
                    corrupt += 1  # dropped: the timeout asks for it again
                    continue
                if agreed_at is None:
                    agreed_at = clock.now()
            else:
                if (
                    h["elem_type"] == ELEM_NONE
                    or h["offset"] != rid * AGG.num_lanes
                    or h["shadow"] != rounds[slot] % 2
                    or h["exponent"] != exps[rid]
                ):
                    duplicates += 1
                    continue
                try:
                    lanes = self._decoder.lanes(payload, h["elem_type"], widen=False)  # copied into sums below
                except ValueError:
                    duplicates += 1
                    continue
                if not checks_out(lanes, h["checksum"], h["offset"], job.job_id, epoch):
                    corrupt += 1  # a flipped bit on the way down: dropped, the timeout fetches the stored result
                    continue
                if h["shift"] != job.shift or h["elem_type"] != job.down_elem:
                    raise JobMismatchError(
                        f"job {job.job_id}: a result has elem_type {h['elem_type']} shift {h['shift']}, the worker "
                        f"was configured with {job.down_lanes} (elem_type {job.down_elem}) / shift {job.shift}: pass "
                        "the lanes down and the shift the controller installed (set_job)"
                    )
                agreed = int(h["next_exponent"])
                if guess is not None and agreed > proposals[rid]:
                    corrupt += 1  # no switch returns more than the minimum: a damaged header; fetched again
                    continue
                if guess is not None and not 0 <= agreed - exps[rid] <= window_steps:  # missed: again, agreed scale
                    last_progress, expired_since, alarms = clock.now(), 0, 0
                    if sends[rid] - round_from[rid] == 1:
                        answered(rid, clock.now())
                    missed += 1
                    rounds[slot] += 1
                    start_chunk(rid, agreed)
                    continue
                if h["flags"] & FLAG_OVERFLOW:
                    overflows += 1
                if guess is not None:
                    agreed_exps[rid] = agreed
                sums[rid] = lanes
                got[rid] = True
                done += 1
            last_progress, expired_since, alarms = clock.now(), 0, 0
            if sends[rid] - round_from[rid] == 1:  # Karn: only unambiguous round trips
                answered(rid, clock.now())
            nxt = rid + window if rid < n_chunks else slot
            if nxt < n_chunks:
                rounds[slot] += 1
                if guess is not None:
                    start_chunk(nxt, int(guess[nxt]), speculated=True)
                else:
                    start_chunk(nxt, int(h["next_exponent"]))
            else:
                outstanding[slot] = -1
        t_end = clock.now()
        self._next_round[:n_slots] = np.asarray(rounds[:n_slots], dtype=np.int64) + 1
        parts = {"quantize": quantize_s, "agree": ((agreed_at or t_end) - t_start) if guess is None else 0.0}
        stats = AllreduceStats(
            method="inc",
            elements=int(blocks.size),
            latency_s=t_end - t_start,
            packets_sent=sent,
            retransmissions=retrans,
            fast_retransmissions=fast,
            packets_received=received,
            duplicates=duplicates,
            bytes_sent=sent_bytes,
            overflows=overflows,
            corrupt=corrupt,
            parts=parts,
            exponent_rounds=0 if guess is not None else n_slots,
            missed_exponents=missed,
        )
        if overflows:
            msg = f"{overflows} result(s) flagged overflow (shift {job.shift})"
            if job.strict_overflow:
                raise AggregationOverflowError(msg)
            LOG.warning(msg)
        return sums, exps, stats

    def _stream_native(
        self,
        lib: Any,
        fds: native_stream.Fds,
        frames: ContributionFrames,
        blocks: np.ndarray,
        proposals: np.ndarray,
        epoch: int,
        t_start: float,
        guess: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray, AllreduceStats]:
        """_stream's rounds in C (hosts/c/inc_stream.c): the same results, counters and errors."""
        job = self.job
        n_chunks, window, n_slots = len(frames), job.slot_count, frames.n_slots
        blocks64 = np.ascontiguousarray(blocks, dtype=np.float64)
        maxabs = np.ascontiguousarray(np.abs(blocks64).max(axis=1))
        sums = np.zeros((n_chunks, AGG.num_lanes), dtype=np.int64)
        exps = np.zeros(n_chunks, dtype=np.int64)
        agreed_exps = exps if guess is None else np.zeros(n_chunks, dtype=np.int64)
        self._agreed = agreed_exps
        got = np.zeros(n_chunks, dtype=np.uint8)
        rounds = np.ascontiguousarray(self._next_round[:window], dtype=np.int64).copy()
        lay = frames.layout()
        rto = self.rto
        codes = set(AGG.elem_types.values())  # a code the wire format lacks has no lanes: its results are refused
        widths = [AGG.lane_bytes(c) if c in codes else 0 for c in range(native_stream.N_WIDTHS)]
        ints = dict(
            tx_fd=fds.tx,
            rx_fd=fds.rx,
            packet_mode=int(fds.packet_mode),
            payload_at=fds.payload_at,
            chunks=n_chunks,
            window=window,
            slots=n_slots,
            lanes=AGG.num_lanes,
            width=frames.width,
            frame_len=frames.frame_len,
            exp_frame_len=frames.exp_frame_len,
            header_len=HEADER_LEN,
            flag_retransmit=FLAG_RETRANSMIT,
            flag_overflow=FLAG_OVERFLOW,
            op_result=OP_RESULT,
            elem_none=ELEM_NONE,
            job=job.job_id,
            epoch=epoch,
            result_type=job.down_elem,
            shift=job.shift,
            q_max=job.q_limit,
            lane_max=int(np.iinfo(qz.ELEM_DTYPE[job.up_elem]).max),
            exp_min=qz.EXPONENT_MIN,
            exp_max=qz.EXPONENT_MAX,
            speculate=int(guess is not None),
            window_steps=SPEC_WINDOW[job.up_lanes] or 0,
            max_retries=job.max_retries,
            failure=int(job.failure_timeout_s is not None),
            failure_timeouts=job.failure_timeouts,
            early=int(job.early_window > 0),
            exp_sign=1 << (AGG.field("exponent").bits - 1),
            has_srtt=int(rto.srtt is not None),
            wake_fd=self._wake,
            **lay,
        )
        floats = dict(
            failure_s=job.failure_timeout_s or 0.0,
            early_window=job.early_window,
            rto=rto.rto,
            srtt=rto.srtt or 0.0,
            rttvar=rto.rttvar,
            calm_until=rto.calm_until,
            rto_min=rto.min_s,
            rto_max=rto.max_s,
        )
        arrays = dict(
            frames=frames.frames,
            exp_frames=frames.exp_frames,
            blocks=blocks64,
            maxabs=maxabs,
            proposals=np.ascontiguousarray(proposals, dtype=np.int64),
            guess=None if guess is None else np.ascontiguousarray(guess, dtype=np.int64),
            scales=self._scale_table,
            salts=np.ascontiguousarray(frames.salts, dtype=np.int64),
            sums=sums,
            exps=exps,
            agreed=agreed_exps,
            got=got,
            rounds=rounds,
        )
        layout = {name: LAYOUT[name] for name in native_stream.FIELDS}

        with native_stream.NativeStream(lib, ints, widths, layout, floats, arrays) as ns:

            def stats_now(t_end: float, final: bool) -> AllreduceStats:
                c, t = ns.stats()
                rto.restore(t["rto"], t["rttvar"], t["calm_until"], t["srtt"] if c["has_srtt"] else None)
                parts = (
                    {
                        "quantize": t["quantize_s"],
                        "agree": ((t["agreed_at"] if t["agreed_at"] >= 0 else t_end) - t_start)
                        if guess is None
                        else 0.0,
                    }
                    if final
                    else {}
                )
                return AllreduceStats(
                    method="inc",
                    elements=int(blocks.size),
                    latency_s=t_end - t_start,
                    packets_sent=c["sent"],
                    retransmissions=c["retrans"],
                    fast_retransmissions=c["fast"],
                    packets_received=c["received"],
                    duplicates=c["duplicates"],
                    bytes_sent=c["bytes"],
                    overflows=c["overflows"],
                    corrupt=c["corrupt"],
                    parts=parts,
                    t_start=t_start,
                    **(
                        dict(exponent_rounds=0 if guess is not None else n_slots, missed_exponents=c["missed"])
                        if final
                        else {}
                    ),
                )

            def stalled(
                now: float, alarms: int, alive: bool = False, notice: str | None = None
            ) -> SwitchFailureSuspected:
                stats = stats_now(now, final=False)
                c, t = ns.stats()
                why = (
                    f"the controller says: {notice}"
                    if notice is not None
                    else f"the tree answers, yet {alarms} stalls in a row: a round's cell is presumably lost"
                    if alive
                    else "a switch of the job's tree is presumably down"
                )
                return SwitchFailureSuspected(
                    f"job {job.job_id} rank {job.rank}: no result for {now - t['last_progress']:.2f} s "
                    f"({c['expired_since']} retransmission timeouts, {n_chunks - c['done']} of {n_chunks} chunks "
                    f"missing, epoch {epoch}): {why}",
                    Partial(got.astype(bool), sums, exps, stats),
                    now - t["last_progress"],
                    now,
                    notice,
                )

            while True:
                code, info = ns.run()
                if code == native_stream.DONE:
                    break
                if code == native_stream.NOTICE:
                    now = clock.now()
                    raise stalled(now, ns.stats()[0]["alarms"], notice=self.notice or "a failure was announced")
                if code == native_stream.STALL:
                    now = clock.now()
                    c, t = ns.stats()
                    stalled_s = now - t["last_progress"]
                    if self.on_stall is None or not self.on_stall(stalled_s, n_chunks - c["done"], n_chunks):
                        raise stalled(now, c["alarms"])
                    self.false_alarms += 1
                    alarms = ns.false_alarm()
                    if alarms >= job.lost_round_alarms:
                        raise stalled(now, alarms, alive=True)
                    LOG.info(
                        "job %d rank %d: no result for %.2f s but the tree is alive; waiting on",
                        job.job_id,
                        job.rank,
                        stalled_s,
                    )
                    ns.false_alarm(restart=True)
                    continue
                if code == native_stream.RETRIES:
                    slot, rid = info[0], info[1]
                    what = "exponent round" if rid >= n_chunks else f"offset {rid * AGG.num_lanes}"
                    raise AllreduceTimeoutError(
                        f"job {job.job_id} rank {job.rank}: no result for slot {slot} ({what}) after "
                        f"{job.max_retries} retransmissions (epoch {epoch}); is the job installed and are all "
                        f"{job.n_workers} workers running?"
                    )
                if code == native_stream.ABOVE_PROPOSAL:
                    raise ProtocolError(
                        f"job {job.job_id} rank {job.rank}: chunk {info[0]} agreed exponent {info[1]} is above this "
                        f"worker's proposal {info[2]}: the switches must return the minimum"
                    )
                if code == native_stream.LANE_OVERFLOW:
                    raise ProtocolError(
                        f"chunk {info[0]}: exponent {info[1]} overflows {np.dtype(qz.ELEM_DTYPE[job.up_elem])}"
                    )
                if code == native_stream.MISMATCH:
                    raise JobMismatchError(
                        f"job {job.job_id}: a result has elem_type {info[0]} shift {info[1]}, the worker "
                        f"was configured with {job.down_lanes} (elem_type {job.down_elem}) / shift {job.shift}: pass "
                        "the lanes down and the shift the controller installed (set_job)"
                    )
                raise OSError(
                    -code, f"job {job.job_id} rank {job.rank}: the stream's socket call failed: {os.strerror(-code)}"
                )
            t_end = clock.now()
            stats = stats_now(t_end, final=True)
        self._next_round[:n_slots] = rounds[:n_slots] + 1
        if stats.overflows:
            msg = f"{stats.overflows} result(s) flagged overflow (shift {job.shift})"
            if job.strict_overflow:
                raise AggregationOverflowError(msg)
            LOG.warning(msg)
        return sums, exps, stats
