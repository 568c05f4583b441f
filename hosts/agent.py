"""A host's long-lived agent: runs whatever all-reduce the runner asks for, step by step, and reports it.

One agent per host keeps its sockets (the in-network worker's AF_PACKET
transport, one UDP socket per host method) across steps, so the runner can
interleave methods in any order without starting processes in between. A step:

1. the command arrives (a hosts.tickets.StepCommand: method, size, iteration, the job's ticket);
2. the agent builds its input for that iteration (hosts.workload: every
   iteration all-reduces different tensors, so a stale result cannot pass);
3. it meets the other agents at the step's barrier; the release instant, on
   the clock every process shares (hosts.clock), is the all-reduce's start;
4. it all-reduces; the end is when its float32 result is complete;
5. it checks the result (every rank sends a digest; the checker rank also
   compares with numpy's float64 sum of every input) and reports. An
   all-to-all (hosts.alltoall) has a result of its own on every rank: each
   rank checks every block it received against the block its source sent.

While it waits for a command or a barrier it keeps answering its host
methods' sockets (a neighbour may still need an acknowledgement).

A "train" command (op "train") runs a segment of data-parallel training steps
instead (hosts.training): the agent keeps the run's model replica between
segments and all-reduces each step's gradient with the same worker a
measurement step of that method would use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import select
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from hosts import alltoall, clock, workload
from hosts.coordination import CoordinatorClient, result_digest, same_size
from hosts.methods import Method, method
from hosts.packets import Endpoint
from hosts.tickets import FailureNotice, JobTicket, RingSettings, StepCommand

LOG = logging.getLogger(__name__)

T = TypeVar("T")
RING_BASE_PORT = 16712  # one UDP port per host method, from here up
# port offset of each host method (family, wire): ring-bf16 and ring keep the ports they always had
HOST_METHOD_PORTS = {
    ("ring", "bfloat16"): 0,
    ("ring", "float32"): 1,
    ("hier", "float32"): 2,
    ("tree", "float32"): 3,
    ("hier", "bfloat16"): 4,
    ("tree", "bfloat16"): 5,
    ("a2a-direct", "float32"): 6,
    ("a2a-hier", "float32"): 7,
}


class StepError(RuntimeError):
    """A command the agent cannot carry out; reported to the runner as the step's error."""


class SwitchFailureError(StepError):
    """The job's switches failed and the runner could not give it a way on (the reason names switch and hosts)."""


def pack_mask(mask: np.ndarray) -> str:
    return np.packbits(np.asarray(mask, dtype=bool)).tobytes().hex()


def unpack_mask(text: str, n: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(bytes.fromhex(text), dtype=np.uint8), count=n).astype(bool)


@dataclass(frozen=True)
class AgentConfig:
    rank: int
    workers: int
    coord: str
    iface: str | None = None  # the in-network worker's interface (None: no in-network methods)
    peers: tuple[str, ...] = ()  # every rank's IPv4 address, or "ip:port" (host methods use port, port + 1, ...)
    groups: tuple[str, ...] | None = (
        None  # edge switch of every rank: rings and trees keep groups together, hier's groups
    )


class Agent:
    """transport/endpoint: the in-network worker's, if not the interface's own (tests pass a model switch's)."""

    def __init__(
        self, cfg: AgentConfig, client: CoordinatorClient, transport: Any = None, endpoint: Endpoint | None = None
    ) -> None:
        self.cfg = cfg
        self.client = client
        self._workers: dict[tuple[Any, ...], Any] = {}
        self._transport: Any = transport
        self._endpoint = endpoint
        self._replicas: dict[str, Any] = {}  # training run -> hosts.training.Replica, kept between segments
        # The last in-network step this agent finished (its command, worker and report): a failure that the
        # other ranks detect after it finished calls it back to redo their missing chunks (rejoin)
        self._finished: dict[str, Any] | None = None
        self.notices: list[FailureNotice] = []  # every failure notice this agent's watcher took
        # job id -> the next epoch of the last worker of that job this agent dropped (a redo after a host died
        # goes on from there: hosts.agent.Agent.run_step)
        self._last_epoch: dict[int, int] = {}
        self._watcher: threading.Thread | None = None
        self._watch_client: CoordinatorClient | None = None
        self._stop = threading.Event()

    # -- failure notices -------------------------------------------------------------------------
    def watch_notices(self) -> None:
        """Take the runner's failure notices on a connection of their own, in a thread: a notice for the install
        an in-network worker of this agent runs stops that worker's wait at once (IncWorker.interrupt)."""
        client = CoordinatorClient(self.cfg.coord, self.cfg.rank, self.cfg.workers)
        self._watch_client = client

        def run() -> None:
            seen = 0
            while not self._stop.is_set():
                try:
                    batch = client.watch(seen, wait_s=5.0)
                except Exception:  # the coordinator is gone (the run ended): nothing more to hear
                    if not self._stop.is_set():
                        LOG.debug("failure notices: the coordinator connection ended", exc_info=True)
                    return
                for d in batch:
                    seen = max(seen, int(d.get("seq", seen)))
                    try:
                        self.take_notice(FailureNotice.from_dict(d, where="a failure notice"))
                    except Exception:
                        LOG.exception("a failure notice could not be taken")

        self._watcher = threading.Thread(target=run, name="notices", daemon=True)
        self._watcher.start()

    def take_notice(self, notice: FailureNotice) -> None:
        """Interrupt the in-network worker of the notice's job and install (none running it: nothing to do)."""
        self.notices.append(notice)
        for key, worker in list(self._workers.items()):
            if key[0] == "inc" and key[1] == notice.job_id and key[2] == notice.install:
                LOG.warning("failure notice: %s %s failed; job %d stops waiting", notice.kind, notice.what, key[1])
                worker.interrupt(f"{notice.kind} {notice.what} failed")

    # -- waiting without going deaf --------------------------------------------------------------
    def _serviced(self, fn: Callable[[], T]) -> T:
        """Run fn (a blocking call to the coordinator) while answering the host methods' sockets."""
        rings = [w for w in self._workers.values() if hasattr(w, "service")]
        if not rings:
            return fn()
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = fn()
            # anything fn raised (a KeyboardInterrupt too) is raised again in the caller's thread below
            except BaseException as ex:  # noqa: BLE001
                box["error"] = ex

        t = threading.Thread(target=run, name="agent-wait", daemon=True)
        t.start()
        fds = [r.fileno() for r in rings]
        while t.is_alive():
            ready, _, _ = select.select(fds, [], [], 0.005)
            for ring in rings:
                if ring.fileno() in ready:
                    ring.service()
            t.join(0)
        if "error" in box:
            raise box["error"]
        return box["value"]

    # -- workers ---------------------------------------------------------------------------------
    def worker(self, m: Method, job: JobTicket | None, ring: RingSettings | None = None) -> Any:
        """The worker this agent runs method m with (kept across calls): an IncWorker for the job's in-network
        method, a ring, hier or tree on its own UDP port. What a training loop outside the agent's steps all-reduces
        through (torchddp's communication hook)."""
        return self._worker(m, job, ring if ring is not None else RingSettings())

    def _worker(self, m: Method, job: JobTicket | None, ring: RingSettings) -> Any:
        if m.in_network:
            if job is None:
                raise StepError(f"{m.name} runs through the switches: the command carries no job ticket")
            return self._inc_worker(job)
        return self._host_method(m, ring)

    def _inc_worker(self, job: JobTicket, rank: int | None = None, workers: int | None = None) -> Any:
        """The worker of this install, as job rank `rank` of `workers` (None: the agent's own rank and count)."""
        from hosts.inc_worker import IncJob, IncWorker
        from hosts.transport import RawSocketTransport, interface_endpoint

        rank = self.cfg.rank if rank is None else rank
        workers = self.cfg.workers if workers is None else workers
        key = ("inc", job.job_id, job.install)
        old_worker = self._workers.get(key)
        if old_worker is not None and (old_worker.job.rank, old_worker.job.n_workers) != (rank, workers):
            self._workers.pop(key).close()  # same install, other seat: never reuse its epochs or rank
        if key not in self._workers:
            if self._transport is None:
                if not self.cfg.iface:
                    raise StepError("an in-network method needs --iface")
                self._endpoint = interface_endpoint(self.cfg.iface)
                self._transport = RawSocketTransport(self.cfg.iface, self._endpoint.ip)
            # a reinstalled job (new token) starts its epochs afresh; the old worker is dropped
            for old in [k for k in self._workers if k[0] == "inc" and k[1] == job.job_id]:
                dropped = self._workers.pop(old)
                self._last_epoch[job.job_id] = dropped.epoch
                dropped.close()
            assert self._endpoint is not None
            self._workers[key] = IncWorker(
                IncJob(
                    job_id=job.job_id,
                    rank=rank,
                    n_workers=workers,
                    slot_count=job.slots,
                    up_lanes=job.up_lanes,
                    down_lanes=job.down_lanes,
                    shift=job.shift,
                    timeout_s=job.timeout_s,
                    min_timeout_s=job.min_timeout_s,
                    failure_timeout_s=job.failure_timeout_s,
                    error_lsb=job.error_lsb,
                    max_lane=job.q_limit,
                    first_epoch=IncJob.first_epoch if job.first_epoch is None else job.first_epoch,
                ),
                self._transport,
                self._endpoint,
            )
        worker = self._workers[key]
        # early retransmission may change between steps of one install (the faults experiment's bit-flip phase
        # turns it off so that a lost frame holds its round open for the flipper)
        if job.early_window is not None and job.early_window != worker.job.early_window:
            worker.job = dataclasses.replace(worker.job, early_window=job.early_window)
        return worker

    def _host_method(self, m: Method, settings: RingSettings) -> Any:
        """The ring, hier, tree or all-to-all worker of this method, on its own UDP port (base port + the method's
        offset). An all-to-all rank sends to many peers at once: the runner's window (a ring rank's, to its one
        neighbour) is what it keeps in flight in all, shared among them (hosts.alltoall.split_window)."""
        from hosts.alltoall import AllToAllConfig, AllToAllDirect, AllToAllHier
        from hosts.hier import HierAllreduce, HierConfig
        from hosts.ring import RingAllreduce, RingConfig, topology_order
        from hosts.tree import TreeAllreduce, TreeConfig

        if len(self.cfg.peers) != self.cfg.workers:
            raise StepError(f"a host method needs the {self.cfg.workers} peers' addresses (--peers)")
        if (m.family, m.wire) not in HOST_METHOD_PORTS:
            raise StepError(f"{m.name}: no host method of family {m.family!r} with {m.wire} on the wire")
        # the runner's transport settings, the same for every host method
        key = (m.family, m.wire, settings.window, settings.timeout_s)
        if key not in self._workers:
            offset = HOST_METHOD_PORTS[(m.family, m.wire)]
            peers = []
            for peer in self.cfg.peers:
                ip, _, port = peer.partition(":")
                peers.append((ip, (int(port) if port else RING_BASE_PORT) + offset))
            groups = self.cfg.groups
            order = topology_order(list(groups)) if groups else None
            extra: dict[str, Any] = {}
            if settings.window is not None:
                extra["window"] = settings.window
            if settings.timeout_s is not None:
                extra.update(timeout_s=settings.timeout_s, min_timeout_s=settings.timeout_s)
            common: dict[str, Any] = dict(rank=self.cfg.rank, peers=tuple(peers), wire=m.wire, **extra)
            if m.alltoall:
                if m.family == "a2a-hier" and not groups:
                    raise StepError(f"{m.name} needs every rank's group, its edge switch (--groups)")
                cls = AllToAllDirect if m.family == "a2a-direct" else AllToAllHier
                try:
                    worker: Any = cls(AllToAllConfig(groups=tuple(groups or ()), **common))
                except ValueError as ex:
                    raise StepError(f"{m.name}: {ex}") from ex
            elif m.family == "ring":
                worker = RingAllreduce(RingConfig(order=order, **common))
            elif m.family == "tree":
                worker = TreeAllreduce(TreeConfig(order=order, **common))
            else:
                if not groups:
                    raise StepError(f"{m.name} needs every rank's group, its edge switch (--groups)")
                worker = HierAllreduce(HierConfig(groups=groups, **common))
            self._workers[key] = worker
        return self._workers[key]

    # -- one step --------------------------------------------------------------------------------
    def run_step(self, cmd: StepCommand) -> dict[str, Any] | None:
        """The step's report; None if this agent takes no part in it (a standby not called, a rank left out)."""
        step, m = cmd.step, method(cmd.method)
        size, iteration, kind, seed = cmd.size, cmd.iteration, cmd.input, cmd.seed
        seat = cmd.seat(self.cfg.rank, self.cfg.workers)
        if seat is None:
            return None
        job_rank, job_workers, input_rank = seat
        if m.in_network:
            assert cmd.job is not None
            worker = self._inc_worker(cmd.job, job_rank, job_workers)
        else:
            worker = self._worker(m, cmd.job, cmd.ring)
        if m.alltoall:  # its own input: blocks that say where they come from and go (hosts.alltoall.block)
            x = alltoall.send_buffer(self.cfg.rank, self.cfg.workers, size, seed, iteration)
        else:
            # a spare rebuilds the dead rank's input from the step's seed and iteration (hosts.workload)
            x = workload.make_input(kind, size, input_rank, seed, iteration)
        if cmd.members is None:
            _, released = self._serviced(lambda: self.client.timed_exchange(f"step-{step}", [size]))
        else:
            # A step redone after a host died runs on a new install. Frames of the interrupted one may still be in
            # flight; started afresh from epoch 1 one could open a cell under an epoch the redo is yet to use and
            # hold it. So the members agree to go on from the furthest epoch any of them reached (a spare has
            # none), as a fail-over does; a ticket's own first_epoch wins.
            mine = self._last_epoch.get(cmd.job.job_id, -1) if cmd.job is not None else -1
            values, released = self._serviced(lambda: self.client.timed_exchange(f"step-{step}", [mine, size]))
            same_size(values, f"step-{step}")
            furthest = max(int(v[0]) for v in values)
            if m.in_network and cmd.job is not None and cmd.job.first_epoch is None and furthest >= 0:
                if worker.calls == 0:
                    worker.job = dataclasses.replace(worker.job, first_epoch=furthest)
        failovers: list[dict[str, Any]] = []
        if m.alltoall:
            result = worker.alltoall(x, call=step)
        elif m.in_network:
            result, worker = self._inc_allreduce(worker, x, cmd, step, failovers)
        else:
            result = worker.allreduce(x, call=step)
        stats = worker.last_stats
        report: dict[str, Any] = {
            "step": step,
            "method": m.name,
            "rank": self.cfg.rank,
            "size": size,
            "iteration": iteration,
            "t_release": released,
            **stats.to_dict(),
            "digest": result_digest(result),
            # whose inputs the result sums: every rank's, or the survivors' after a host died (never implied)
            "sum_over": self._sum_over(cmd),
            "input_rank": input_rank,
        }
        report["latency_s"] = stats.t_done - released  # from the common start, on the shared clock
        if failovers:
            report["failovers"] = failovers
            report["fallback"] = failovers[-1].get("fallback")
        rto = getattr(worker, "rto", None)
        if rto is not None:
            report["srtt_s"], report["rto_s"] = rto.srtt, rto.rto
        if hasattr(worker, "false_alarms"):
            worker.on_stall = None
            report["false_alarms"] = worker.false_alarms
        if m.alltoall:  # every rank checks every block it received (no rank holds the others' results)
            report.update(self._check_blocks(m, result, size, seed, iteration))
        elif cmd.checker == self.cfg.rank:
            used = method("ring") if report.get("fallback") == "ring" else m
            report.update(self._check(used, result, kind, size, seed, iteration, worker, report["sum_over"]))
        kept = m.in_network and report.get("fallback") is None and getattr(worker, "last_partial", None) is not None
        self._finished = {"step": step, "cmd": cmd, "worker": worker, "report": report} if kept else None
        return report

    def _sum_over(self, cmd: StepCommand) -> list[int]:
        """The input ranks the step's result sums: every rank's, or those of its members (a survivors' sum)."""
        if cmd.members is None:
            return list(range(self.cfg.workers))
        return list(cmd.inputs if cmd.inputs is not None else cmd.members)

    def rejoin(self, call: dict[str, Any]) -> dict[str, Any]:
        """Called back to a switch-failure barrier of a step this agent finished: the others lack chunks whose
        results reached it before the switch died. It reports nothing missing and, on the verdict, redoes
        their chunks with them (a sum needs every contribution), then checks that the redone chunks equal the
        result it already returned; the step's report goes again, with the fail-over and that check."""
        step, attempt = int(call["step"]), int(call["attempt"])
        done = self._finished
        try:
            if done is None or done["step"] != step:
                raise StepError(
                    f"called back to step {step}, but the last in-network step this agent finished "
                    f"was {done['step'] if done else 'none'}"
                )
            cmd, worker, report = done["cmd"], done["worker"], dict(done["report"])
            x = workload.make_input(cmd.input, cmd.size, int(report["input_rank"]), cmd.seed, cmd.iteration)
        except Exception as ex:  # the others wait at the barrier for this rank: tell them, then report
            with contextlib.suppress(Exception):
                self.client.decided_exchange(
                    str(call["tag"]), {"rank": self.cfg.rank, "rejoined": True, "error": f"{type(ex).__name__}: {ex}"}
                )
            raise
        failovers: list[dict[str, Any]] = []
        result, worker = self._inc_allreduce(worker, x, cmd, step, failovers, rejoin=(worker.last_partial, attempt))
        report["failovers"] = list(report.get("failovers", [])) + failovers
        report["rejoined"] = report.get("rejoined", 0) + 1
        # what it sent and received includes the redo (its result, and the time it held it, are the first call's)
        counts = worker.last_stats.to_dict() if getattr(worker, "last_partial", None) is not None else {}
        for key in (
            "packets_sent",
            "retransmissions",
            "fast_retransmissions",
            "packets_received",
            "duplicates",
            "bytes_sent",
            "corrupt",
        ):
            if key in counts:
                report[key] = counts[key]
        fallback = failovers[-1].get("fallback")  # the kept report had none: only in-network steps are kept
        if fallback == "ring":  # the others' sum is the ring's now: the ranks' reports differ
            report["fallback"] = fallback
            report["rejoin_note"] = "the others fell back to the host ring; this rank keeps the in-network sum"
        elif result_digest(result) != report["digest"]:
            report["error"] = (
                f"step {step}: the chunks redone after rejoining differ from the result this rank "
                f"returned before the failure (digest {result_digest(result)} != {report['digest']})"
            )
        self._finished = (
            {**done, "worker": worker, "report": report} if getattr(worker, "last_partial", None) is not None else None
        )
        return report

    def _inc_allreduce(
        self,
        worker: Any,
        x: np.ndarray,
        cmd: StepCommand,
        step: int,
        failovers: list[dict[str, Any]],
        rejoin: tuple[Any, int] | None = None,
    ) -> tuple[np.ndarray, Any]:
        """The in-network all-reduce, surviving switch failures: on SwitchFailureSuspected every rank reports
        which chunks it lacks at a barrier the runner answers (hosts.coordination's decide hook) with the job
        re-planned around the failed switch (then the chunks someone lacks are redone on it), the host ring
        (no tree left), or an error naming what is cut off. The barrier calls back ranks that had finished.

        rejoin (partial holding every chunk, attempt): such a call-back; go to that attempt's barrier first."""
        from hosts.inc_worker import SwitchFailureSuspected

        partial, redo = None, None
        first = 0 if rejoin is None else rejoin[1]
        # what goes to the barrier without streaming first: a finished rank called back (nothing missing)
        pending: Any = (
            None
            if rejoin is None
            else SwitchFailureSuspected(
                f"step {step}: called back after finishing it (others lack chunks)", rejoin[0], 0.0, clock.now()
            )
        )

        assert cmd.job is not None  # an in-network step (StepCommand refuses one without its ticket)
        job_id = cmd.job.job_id

        def alive(stalled_s: float, missing: int, chunks: int) -> bool:
            answer = self.client.ask(
                "stall", {"job_id": job_id, "stalled_s": stalled_s, "missing": missing, "chunks": chunks}
            )
            return isinstance(answer, dict) and answer.get("alive") is True

        while True:
            ex, pending = pending, None
            if ex is None:
                worker.on_stall = alive
                try:
                    if partial is None:
                        return worker.allreduce(x), worker
                    return worker.resume(x, partial, redo), worker
                except SwitchFailureSuspected as raised:
                    ex = raised
            # report at the fail-over barrier, take the verdict
            partial = ex.partial
            n = len(partial.done)
            called = rejoin is not None and not failovers
            mine = {
                "rank": self.cfg.rank,
                "job_id": job_id,
                "missing": pack_mask(partial.missing),
                "chunks": n,
                "detected_at": None if called else ex.detected_at,
                "stalled_s": ex.stalled_s,
                "why": str(ex),
                "rejoined": called,
            }
            LOG.warning("step %d: %s; reporting to the coordinator", step, ex)
            attempt = first + len(failovers)
            # bound now: the call runs in another thread (Agent._serviced) while this loop's names move on
            exchange = functools.partial(
                self.client.decided_exchange,
                f"failover-{step}-{attempt}",
                mine,
                call_in={"step": step, "attempt": attempt},
            )
            values, released, decision = self._serviced(exchange)
            refused = [v for v in values if isinstance(v, dict) and "error" in v]
            if refused:
                raise SwitchFailureError(
                    f"{ex}; rank {refused[0].get('rank')} could not rejoin the fail-over: {refused[0]['error']}"
                ) from ex
            redo = np.logical_or.reduce([unpack_mask(v["missing"], n) for v in values])
            event: dict[str, Any] = {
                # what ended the wait: the controller's notice ("notice"), the failure timeout, or a call-back
                "trigger": "rejoin" if called else ("notice" if ex.notice is not None else "timeout"),
                "detected_at": mine["detected_at"],
                "stalled_s": ex.stalled_s,
                "decided_at": released,
                "missing": int(partial.missing.sum()),
                "redo": int(redo.sum()),
                "chunks": n,
                "rejoined": called,
            }
            failovers.append(event)
            if not isinstance(decision, dict) or "error" in decision:
                why = decision.get("error") if isinstance(decision, dict) else "nobody answered the failure report"
                raise SwitchFailureError(f"{ex}; the job could not be moved: {why}") from ex
            event.update({k: decision[k] for k in ("failed", "root", "fallback") if k in decision})
            if decision.get("fallback") == "ring":
                worker.realign()  # the in-network worker, if it is used again, starts level with the others
                ring = self._host_method(method("ring"), cmd.ring)
                return ring.allreduce(x, call=step), ring
            job = JobTicket.from_dict(decision["job"], where="the fail-over's job")
            if cmd.job is not None and job.install != cmd.job.install and job.first_epoch is None:
                # The new install's epochs go on from the interrupted one's (every rank made the same calls, so
                # they agree). Frames of the old install still in flight when the switches that are in both trees
                # are rewritten carry older epochs, which the switches drop as stale; started afresh from 1, a
                # late one could open a cell of the new install under an epoch the redo is yet to use, and hold it.
                job = dataclasses.replace(job, first_epoch=worker.epoch)
            cmd = dataclasses.replace(cmd, job=job)
            worker.on_stall = None
            worker.clear_notice()  # answered: a notice does not end the redo's wait (a later one will)
            # the same worker on a false alarm (same install), else a new one; in the same seat of the job
            worker = self._inc_worker(job, worker.job.rank, worker.job.n_workers)
            worker.realign()  # every rank from the same shadow copies (a rejoined one had advanced its own)

    def _check_blocks(self, m: Method, result: np.ndarray, size: int, seed: int, iteration: int) -> dict[str, Any]:
        """Every block against the one its source sent (not timed); a wrong one fails the step, naming it."""
        t0 = clock.now()
        got = alltoall.check(result, self.cfg.rank, self.cfg.workers, size, seed, iteration)
        if not got.ok:
            raise StepError(
                f"{m.name}: rank {self.cfg.rank} received wrong blocks from ranks {list(got.wrong)} "
                f"(of {got.blocks}; largest difference {got.max_abs_error:.3g})"
            )
        return {
            "max_abs_error": 0.0,
            "rel_l2_error": 0.0,
            "snr_db": float("inf"),
            "max_error_ratio": 0.0,
            "error_bound": 0.0,
            "rel_l2_target": m.rel_l2_target,
            "blocks_checked": got.blocks,
            "check_s": clock.now() - t0,
        }

    def _check(
        self,
        m: Method,
        result: np.ndarray,
        kind: str,
        size: int,
        seed: int,
        iteration: int,
        worker: Any,
        sum_over: list[int],
    ) -> dict[str, Any]:
        """Against numpy's float64 sum of the inputs of `sum_over` for this iteration (not timed)."""
        t0 = clock.now()
        reference, magnitude = workload.reference_sum(kind, size, len(sum_over), seed, iteration, ranks=sum_over)
        if m.in_network:
            bound = workload.inc_bound(reference, worker.last_plan)
        else:
            bound = workload.ring_bound(magnitude, len(sum_over), m.wire)
        acc = workload.accuracy(result, reference, bound).to_dict()
        acc["rel_l2_target"] = m.rel_l2_target
        acc["check_s"] = clock.now() - t0
        return acc

    # -- training ----------------------------------------------------------------------------------
    def run_train(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """One segment of a training run: `count` steps of hosts.training.run_segment over this method's worker."""
        from hosts.training import Replica, TrainConfig, run_segment

        m, run, count = method(cmd["method"]), str(cmd["run"]), int(cmd["count"])
        job = JobTicket.from_dict(cmd["job"], where="the training job") if cmd.get("job") is not None else None
        worker = self._worker(m, job, RingSettings.from_dict(cmd["ring"]) if "ring" in cmd else RingSettings())
        replica = self._replicas.get(run)
        at = replica.step if replica is not None else 0
        if int(cmd.get("first", at + 1)) != at + 1:
            raise StepError(f"run {run}: segment starts at step {cmd['first']}, this replica is at {at}")
        if replica is None:
            replica = self._replicas[run] = Replica(
                TrainConfig.from_dict(cmd["train"]), self.cfg.rank, self.cfg.workers
            )

        def allreduce(grad: np.ndarray) -> tuple[np.ndarray, Any]:
            # host methods number their calls; the agent's measurement steps pass the runner's step, training
            # goes on from the worker's own last call (the same on every rank: they all made the same calls)
            result = worker.allreduce(grad) if m.in_network else worker.allreduce(grad, call=worker.last_call + 1)
            return result, worker.last_stats

        def barrier(tag: str, size: int) -> float:
            values, released = self._serviced(lambda: self.client.timed_exchange(tag, [size]))
            same_size(values, tag)
            return released

        last = bool(cmd.get("last"))
        try:
            records, snaps, end = run_segment(
                replica,
                count,
                allreduce,
                barrier,
                f"train-{run}",
                snapshots=cmd.get("checker") == self.cfg.rank,
                end_barrier=last,
            )
        finally:
            if last:
                self._replicas.pop(run, None)
        return {
            "step": int(cmd["step"]),
            "op": "train",
            "method": m.name,
            "rank": self.cfg.rank,
            "run": run,
            "records": records,
            "snapshots": snaps,
            "t_end_release": end,
        }

    def serve(self) -> int:
        """Take steps until the runner says stop; returns the number of steps run."""
        last, done = -1, 0
        while True:
            cmd = self._serviced(functools.partial(self.client.next_command, last, wait_s=60.0))
            if cmd is None:
                continue
            if cmd.get("op") == "rejoin":  # a step it finished, called back (not a new step: `last` stays)
                try:
                    report = self.rejoin(cmd)
                except Exception as ex:
                    LOG.exception("rejoining step %s failed", cmd.get("step"))
                    report = {"step": cmd.get("step"), "rank": self.cfg.rank, "error": f"{type(ex).__name__}: {ex}"}
                self.client.step_report(int(cmd["step"]), report)
                continue
            last = int(cmd["step"])
            if cmd.get("op") == "quit":
                return done
            try:
                if cmd.get("op") == "train":
                    report = self.run_train(cmd)
                else:
                    step_report = self.run_step(StepCommand.from_dict(cmd))
                    if step_report is None:  # not this agent's step (a standby, a rank left out)
                        continue
                    report = step_report
            except Exception as ex:  # the step failed here; the runner decides what happens next
                LOG.exception("step %d (%s) failed", last, cmd.get("method"))
                report = {
                    "step": last,
                    "rank": self.cfg.rank,
                    "method": cmd.get("method"),
                    "error": f"{type(ex).__name__}: {ex}",
                }
            self.client.step_report(last, report)
            done += 1

    def close(self) -> None:
        self._stop.set()
        if self._watch_client is not None:
            self._watch_client.close()
        for w in self._workers.values():
            if hasattr(w, "close"):
                w.close()
        if self._transport is not None:
            self._transport.close()
