"""One rank of data-parallel training with PyTorch DDP: `python -m torchddp rank --plan PLAN --rank R`.

The process runs in its host (a Mininet host's namespace, or any machine): it joins a Gloo process group over
the host's interface (DDP's own broadcasts at construction go there), connects to the runner's coordinator,
and trains the plan's runs one after the other, each a stock DDP loop with a fresh model:

    ddp = DistributedDataParallel(model, bucket_cap_mb=...)
    torchddp.register(ddp, HookState(worker, method, rank, world))   # not for "gloo": PyTorch's own all-reduce
    for step: loss(ddp(x), y).backward(); opt.step()

The method "gloo" is the exact reference: PyTorch's own float32 all-reduce hook (allreduce_hook) through the
Gloo group, timed like the p4ina hook. Every step starts at a barrier of the coordinator (its release is the
step's start on hosts.clock, shared by every process) and records the step's loss, the time the hook spent in
its all-reduces, what the worker sent, and a digest of the parameters after the update (the runner compares
them across ranks). Rank 0 evaluates the model at the run's evaluation steps, after its step is over (off the
step's clock). Each run's rows are appended to the plan's out folder as one JSON line per rank and run.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from hosts import clock
from hosts.agent import Agent, AgentConfig
from hosts.coordination import CoordinatorClient
from hosts.methods import METHODS, method
from hosts.tickets import JobTicket, RingSettings
from torchddp import models
from torchddp.hook import GlooTimer, HookError, HookState, gloo_hook, params_digest, register

LOG = logging.getLogger(__name__)

T = TypeVar("T")
GLOO = "gloo"  # the exact reference: PyTorch's float32 all-reduce through the Gloo group
CHECKER = 0  # the rank that evaluates
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class PlanError(ValueError):
    """A plan the rank cannot run; the message names the field."""


@dataclass(frozen=True)
class RunSpec:
    """One training run: a model trained with one method from one seed."""

    run: str  # unique in the plan
    model: models.ModelConfig
    method: str  # GLOO or a hosts.methods name
    seed: int = 0
    steps: int = 100
    eval_every: int = 10
    error_feedback: bool = False
    fault: str | None = None  # torchddp.hook.FAULTS: the broken hook (a control)
    fault_rank: int = 0
    bucket_cap_mb: float = 25.0  # DDP's bucket size (its first bucket is capped at 1 MB by DDP itself)
    dtype: str = "float32"  # the model's parameters, so DDP's buckets: float32, bfloat16 or float16
    loss_pct: float = 0.0  # random loss on every link during the run (the runner sets it)

    def __post_init__(self) -> None:
        if self.method != GLOO and self.method not in METHODS:
            raise PlanError(f"run {self.run}: unknown method {self.method!r}; choose from {GLOO}, {', '.join(METHODS)}")
        if self.dtype not in DTYPES:
            raise PlanError(f"run {self.run}: dtype {self.dtype!r}; choose from {', '.join(DTYPES)}")
        if self.steps < 1 or self.eval_every < 1 or self.bucket_cap_mb <= 0:
            raise PlanError(f"run {self.run}: steps, eval_every and bucket_cap_mb must be positive")

    def eval_steps(self) -> list[int]:
        return sorted({0, self.steps, *range(self.eval_every, self.steps + 1, self.eval_every)})

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["model"] = asdict(self.model)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise PlanError(f"run spec: unknown field(s) {', '.join(unknown)}")
        return cls(**{**d, "model": models.ModelConfig(**d["model"])})


@dataclass(frozen=True)
class Plan:
    """What every rank of one group runs: the group, the runs, the jobs of the in-network methods."""

    workers: int
    coord: str  # the runner's coordinator (hosts.coordination address)
    master: str  # "ip:port" of rank 0: Gloo's rendezvous
    out: str  # folder for the ranks' rows
    peers: tuple[str, ...] = ()  # every rank's IPv4 address (host methods)
    groups: tuple[str, ...] | None = None  # edge switch of every rank (hier, ring order)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # method -> JobTicket.to_dict()
    ring: dict[str, Any] = field(default_factory=dict)  # RingSettings.to_dict()
    runs: tuple[RunSpec, ...] = ()

    def __post_init__(self) -> None:
        names = [r.run for r in self.runs]
        if len(set(names)) != len(names):
            raise PlanError("run names repeat in the plan")
        for r in self.runs:
            r.model.shard(self.workers)
            if METHODS.get(r.method) is not None and METHODS[r.method].in_network and r.method not in self.jobs:
                raise PlanError(f"run {r.run}: {r.method} needs its job's ticket in the plan's jobs")
        if self.peers and len(self.peers) != self.workers:
            raise PlanError(f"{len(self.peers)} peers for {self.workers} workers")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["runs"] = [r.to_dict() for r in self.runs]
        d["peers"], d["groups"] = list(self.peers), list(self.groups) if self.groups else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        return cls(
            workers=int(d["workers"]),
            coord=str(d["coord"]),
            master=str(d["master"]),
            out=str(d["out"]),
            peers=tuple(d.get("peers") or ()),
            groups=tuple(d["groups"]) if d.get("groups") else None,
            jobs=dict(d.get("jobs") or {}),
            ring=dict(d.get("ring") or {}),
            runs=tuple(RunSpec.from_dict(r) for r in d.get("runs", [])),
        )

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: Path) -> Plan:
        return cls.from_dict(json.loads(path.read_text()))


def rows_path(out: str | Path, rank: int) -> Path:
    return Path(out) / f"rank{rank}.jsonl"


class Rank:
    """One rank's process: coordinator, process group, workers (kept across runs)."""

    def __init__(self, plan: Plan, rank: int, iface: str | None) -> None:
        self.plan, self.rank, self.iface = plan, rank, iface
        self.client = CoordinatorClient(plan.coord, rank, plan.workers, timeout_s=900)
        self.agent = Agent(
            AgentConfig(rank, plan.workers, plan.coord, iface=iface, peers=plan.peers, groups=plan.groups),
            self.client,
        )
        self._serving: Any = None  # the current run's host worker: answered while this rank waits

    def barrier(self, tag: str) -> float:
        """Meet every rank; returns the release instant (hosts.clock)."""
        fn: Callable[[], tuple[list[Any], float]] = lambda: self.client.timed_exchange(tag, None)  # noqa: E731
        if self._serving is not None and hasattr(self._serving, "service_while"):
            return self._serving.service_while(fn)[1]
        return fn()[1]

    def worker(self, spec: RunSpec) -> Any:
        m = method(spec.method)
        job = JobTicket.from_dict(self.plan.jobs[m.name], where=f"the plan's {m.name} job") if m.in_network else None
        return self.agent.worker(m, job, RingSettings.from_dict(self.plan.ring) if self.plan.ring else None)

    def run(self, index: int, spec: RunSpec) -> dict[str, Any]:
        n, rank = self.plan.workers, self.rank
        dtype = DTYPES[spec.dtype]
        model = models.build(spec.model, spec.seed).to(dtype)
        ddp = DistributedDataParallel(model, bucket_cap_mb=spec.bucket_cap_mb)
        state: HookState | GlooTimer
        if spec.method == GLOO:
            state = GlooTimer(ddp.process_group)
            ddp.register_comm_hook(state, gloo_hook)
            self._serving = None
        else:
            worker = self.worker(spec)
            state = HookState(
                worker, spec.method, rank, n, spec.error_feedback, fault=spec.fault, fault_rank=spec.fault_rank
            )
            register(ddp, state)
            self._serving = None if METHODS[spec.method].in_network else worker
        opt, schedule = models.optimizer(spec.model, ddp)
        eval_at = set(spec.eval_steps())
        records: list[dict[str, Any]] = []
        evals: list[dict[str, Any]] = []
        if rank == CHECKER and 0 in eval_at:
            evals.append({"step": 0, **models.evaluate(spec.model, model)})
        self.barrier(f"run-{index}-start")  # the runner sets the run's link loss here, reads the counters
        if hasattr(state, "worker") and hasattr(state.worker, "realign"):
            # every rank at the same barrier, every call finished: the in-network worker forgets the exponents
            # it would guess from (the previous run's), so that a run's bits do not depend on the runs before it
            state.worker.realign()
        for step in range(1, spec.steps + 1):
            released = self.barrier(f"run-{index}-{step}")
            x, y = models.batch(spec.model, spec.seed, step, rank, n)
            x = x.to(dtype) if x.is_floating_point() else x
            out = ddp(x)
            loss = models.loss_fn(spec.model, out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            schedule()
            t_end = clock.now()
            calls = state.take_calls()
            right, total = models.correct(out.detach(), y)
            records.append(
                {
                    "step": step,
                    "t_release": released,
                    "t_end": t_end,
                    "allreduce_s": sum(c.seconds for c in calls),
                    "buckets": len(calls),
                    "elements": sum(c.elements for c in calls),
                    "bytes_sent": sum(c.bytes_sent for c in calls),
                    "retransmissions": sum(c.retransmissions for c in calls),
                    "loss": float(loss.detach()),
                    "correct": right,
                    "total": total,
                    "digest": params_digest(model),
                }
            )
            if rank == CHECKER and step in eval_at:
                evals.append({"step": step, **models.evaluate(spec.model, model)})
        self.barrier(f"run-{index}-end")  # the runner reads the counters again
        self._serving = None
        row = {"run": spec.run, "index": index, "rank": rank, "records": records, "evals": evals}
        with rows_path(self.plan.out, rank).open("a") as f:
            f.write(json.dumps(row) + "\n")
        return row

    def close(self) -> None:
        self.agent.close()
        self.client.close()


def main_rank(plan_path: Path, rank: int, iface: str | None, threads: int = 1) -> int:
    """Run every run of the plan as rank `rank`; 0 when all finished (errors go to the coordinator and the log)."""
    plan = Plan.load(plan_path)
    torch.set_num_threads(threads)  # one process per host on a few shared cores
    if iface:
        os.environ["GLOO_SOCKET_IFNAME"] = iface  # Gloo's traffic on the host's link into the fabric
    r = Rank(plan, rank, iface)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://{plan.master}", rank=rank, world_size=plan.workers)
        try:
            # Gloo connects its pairs on first use: once here, so that no run's first step pays for it
            dist.all_reduce(torch.zeros(1))
            for i, spec in enumerate(plan.runs):
                LOG.info("run %s (%d/%d)", spec.run, i + 1, len(plan.runs))
                r.run(i, spec)
            r.client.report({"rank": rank, "ok": True})
        finally:
            dist.destroy_process_group()
    except (HookError, PlanError) as ex:
        LOG.error("%s", ex)
        r.client.report({"rank": rank, "error": f"{type(ex).__name__}: {ex}"})
        return 2
    except Exception as ex:
        LOG.exception("rank %d failed", rank)
        try:
            r.client.report({"rank": rank, "error": f"{type(ex).__name__}: {ex}"})
        except Exception:  # the coordinator may be gone; the log has the error
            LOG.debug("could not report the error", exc_info=True)
        return 1
    finally:
        r.close()
    return 0
