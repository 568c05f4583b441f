"""A PyTorch DDP communication hook that all-reduces every gradient bucket through a p4ina worker.

    import torchddp
    ddp = DistributedDataParallel(model)                       # Gloo process group, as usual
    torchddp.register(ddp, torchddp.HookState(worker, "inc-int8", rank, world_size))

DDP hands the hook each bucket of gradients as it fills (``dist.GradBucket``: one flat tensor of the bucket's
dtype, float32, bfloat16 or float16) and waits on the future it returns for the bucket's average. The hook
widens the bucket to float32 (the type every p4ina method takes), all-reduces it with the rank's worker (an
in-network job's IncWorker, or the host ring, hier or tree: hosts.agent builds either), divides by the world
size in float32 and writes the result back into the bucket in its own dtype. Every method returns the same
bits on every rank (hosts.collective's contract), so the replicas' parameters stay bit-identical.

Buckets come in any size and count: DDP's first step uses buckets in parameter order, later ones the order
gradients became ready, and unused parameters leave zeros; the workers take any length, and the in-network
worker numbers its calls, which every rank makes in the same bucket order (DDP reduces buckets in order).

What cannot be served is refused by ``register`` with one line naming the fix, before the first step: a
parameter dtype outside the three above, a worker that is not the named method's (lanes, wire, size, rank),
a world size that is not the worker's, error feedback on a float32 method (it has no residual to carry).

Error feedback (1-bit SGD, Seide et al. 2014; PowerSGD, Vogels et al. 2019): with narrow lanes each rank's
contribution is rounded (int8 lanes keep 3-4 significant bits at 8 ranks); the rank keeps what rounding took
off, per parameter, and adds it to its next gradient, so no part of a gradient is lost for good, only
delayed. The residual is the rank's own rounding: its float32 input minus the value its lanes carried at the
block exponent the job agreed (inc), or minus its bfloat16 rounding (ring-bf16). The root switch's rounding
of the narrowed sum is common to every rank and is not carried.

No ``from __future__ import annotations`` here: DDP reads the hook's return annotation at registration, and a
string there fails its check.
"""

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from hosts import clock
from hosts import quantization as qz
from hosts.bf16 import round_bf16
from hosts.methods import METHODS, Method, UnknownMethodError

LOG = logging.getLogger(__name__)

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
BROKEN_SCALE = 2.0**-7  # the broken hook's wrong scale (a fixed-point exponent 7 off), as hosts.training's control
FAULTS = ("scale", "offset", "keep-local")


class HookError(ValueError):
    """A hook that cannot serve this model or group; raised at registration, never mid-training."""


def narrow(m: Method) -> bool:
    """Methods that round each contribution below float32: int16/int8 lanes, a bfloat16 wire."""
    return (m.in_network and m.lanes != "int32") or m.wire == "bfloat16"


@dataclass
class CallRecord:
    """One bucket's all-reduce on this rank: where the time went and what it sent."""

    elements: int
    dtype: str
    t_start: float  # hosts.clock: the hook was called
    t_done: float  # the averaged bucket is written back
    bytes_sent: int = 0
    retransmissions: int = 0

    @property
    def seconds(self) -> float:
        return self.t_done - self.t_start


@dataclass
class HookState:
    """What the hook needs on one rank: the worker, the method it runs, the group's shape, the options.

    worker: an IncWorker (in-network methods) or a HostCollective (ring, ring-bf16, hier, tree) of this rank,
    e.g. hosts.agent.Agent.worker(method, job). fault (tests and the experiment's control only): "scale"
    returns the average times BROKEN_SCALE on every rank; "offset" returns it one element off (a lane offset
    off by one: each gradient lands on its neighbour's parameter); "keep-local" makes rank `fault_rank` all-reduce as
    usual but keep its own gradient (its bucket's result dropped).
    """

    worker: Any
    method: str
    rank: int
    world_size: int
    error_feedback: bool = False
    fault: str | None = None
    fault_rank: int = 0
    calls: list[CallRecord] = field(default_factory=list)
    residuals: dict[int, np.ndarray] = field(default_factory=dict)  # error feedback, per parameter (its id)

    def __post_init__(self) -> None:
        try:
            self.spec = METHODS[self.method]
        except KeyError:
            raise HookError(
                f"unknown method {self.method!r}: choose from {', '.join(METHODS)}"
            ) from UnknownMethodError(self.method)
        if not 0 <= self.rank < self.world_size:
            raise HookError(f"rank {self.rank} is not in 0..{self.world_size - 1}")
        if self.error_feedback and not narrow(self.spec):
            raise HookError(
                f"error feedback carries rounding residuals, and {self.method} rounds nothing below float32: "
                "drop error_feedback, or choose inc-int16, inc-int8 or ring-bf16"
            )
        if self.fault is not None and self.fault not in FAULTS:
            raise HookError(f"unknown fault {self.fault!r}: choose from {', '.join(FAULTS)}")
        self._check_worker()

    def _check_worker(self) -> None:
        m, w = self.spec, self.worker
        if m.in_network:
            job = getattr(w, "job", None)
            if job is None or not hasattr(w, "last_plan"):
                raise HookError(f"{m.name} runs through the switches: pass the job's IncWorker (Agent.worker)")
            if (job.up_lanes, job.down_lanes) != (m.lanes, m.lanes):
                raise HookError(
                    f"{m.name} needs {m.lanes} lanes both ways; the worker's job has {job.up_lanes} up and "
                    f"{job.down_lanes} down: install the job with --lanes {m.lanes}"
                )
            size, rank = job.n_workers, job.rank
        else:
            cfg = getattr(w, "cfg", None)
            if cfg is None or getattr(w, "method", None) != m.name:
                raise HookError(f"{m.name} is a host method: pass its worker (Agent.worker), got {type(w).__name__}")
            size, rank = cfg.size, cfg.rank
        if (size, rank) != (self.world_size, self.rank):
            raise HookError(
                f"the worker is rank {rank} of {size}, the process group rank {self.rank} of {self.world_size}: "
                "start one worker per rank of this group"
            )

    # -- one bucket ---------------------------------------------------------------------------------
    def reduce(self, flat: torch.Tensor, params: Sequence[tuple[int, int]] | None = None) -> torch.Tensor:
        """The average over every rank of this rank's flat gradient tensor, in its dtype (a new tensor).

        params: (key, numel) of the parameters the tensor holds, in order (DDP's bucket layout); error
        feedback keeps its residuals per key, so a bucket that DDP rebuilt after the first step still finds
        its parameters' residuals. None: the whole tensor is one key (its length)."""
        t_start = clock.now()
        if flat.dtype not in SUPPORTED_DTYPES:
            raise HookError(f"a bucket of {flat.dtype}: the hook takes {', '.join(map(str, SUPPORTED_DTYPES))}")
        local = flat.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy().ravel()
        x = local.copy()
        layout = list(params) if params is not None else [(-x.size, x.size)]
        if sum(n for _k, n in layout) != x.size:
            layout = [(-x.size, x.size)]  # not the layout we know: one residual for the whole bucket
        if self.error_feedback:
            x += self._residual(layout)
        summed = self._allreduce(x)
        if self.error_feedback:
            self._keep_residual(layout, x - self._carried(x))
        if self.fault == "keep-local" and self.rank == self.fault_rank:
            summed = local * np.float32(self.world_size)
        avg = np.divide(summed, np.float32(self.world_size), dtype=np.float32)
        if self.fault == "scale":
            avg *= np.float32(BROKEN_SCALE)
        elif self.fault == "offset":
            avg = np.roll(avg, 1)
        out = torch.from_numpy(avg.reshape(flat.shape)).to(dtype=flat.dtype, device=flat.device)
        stats = getattr(self.worker, "last_stats", None)
        self.calls.append(
            CallRecord(
                elements=int(x.size),
                dtype=str(flat.dtype).removeprefix("torch."),
                t_start=t_start,
                t_done=clock.now(),
                bytes_sent=int(getattr(stats, "bytes_sent", 0)),
                retransmissions=int(getattr(stats, "retransmissions", 0)),
            )
        )
        return out

    def _allreduce(self, x: np.ndarray) -> np.ndarray:
        w = self.worker
        if self.spec.in_network:
            return np.asarray(w.allreduce(x), dtype=np.float32)
        # host methods number their calls: every rank makes the same calls, so the next number is the same
        return np.asarray(w.allreduce(x, call=w.last_call + 1), dtype=np.float32)

    def _carried(self, x: np.ndarray) -> np.ndarray:
        """What this rank's contribution x was on the wire, as float32: its lanes at the agreed exponents (inc),
        or its bfloat16 rounding (ring-bf16)."""
        if self.spec.in_network:
            plan = self.worker.last_plan
            lanes = qz.quantize(x, plan.exponent, plan.up_elem)
            return qz.dequantize(lanes, plan.exponent, 0, plan.up_elem).astype(np.float32)
        return round_bf16(x)

    def _residual(self, layout: list[tuple[int, int]]) -> np.ndarray:
        return np.concatenate(
            [self.residuals.get(key, np.zeros(n, dtype=np.float32)) for key, n in layout] or [np.zeros(0, np.float32)]
        )

    def _keep_residual(self, layout: list[tuple[int, int]], residual: np.ndarray) -> None:
        at = 0
        for key, n in layout:
            self.residuals[key] = residual[at : at + n].copy()
            at += n

    # -- per training step ----------------------------------------------------------------------------
    def take_calls(self) -> list[CallRecord]:
        """The calls since the last take (a training loop takes them once per step)."""
        out, self.calls = self.calls, []
        return out


def p4ina_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's communication hook: the bucket's average over every rank through the p4ina worker (synchronous:
    the returned future is complete)."""
    buffer = bucket.buffer()
    params = [(id(p), p.numel()) for p in bucket.parameters()]
    buffer.copy_(state.reduce(buffer, params))
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(buffer)
    return fut


class GlooTimer:
    """The exact reference's state: PyTorch's own allreduce_hook (divide by the world size, then Gloo's float32
    sum), waited for in the hook so that its time is measured as the p4ina hook's is."""

    def __init__(self, group: dist.ProcessGroup) -> None:
        self.group = group
        self.calls: list[CallRecord] = []

    def take_calls(self) -> list[CallRecord]:
        out, self.calls = self.calls, []
        return out


def gloo_hook(state: GlooTimer, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """PyTorch's float32 all-reduce of the bucket through the DDP model's process group, timed (the reference)."""
    t0 = clock.now()
    result = default_hooks.allreduce_hook(state.group, bucket).wait()
    buffer = bucket.buffer()
    state.calls.append(CallRecord(int(buffer.numel()), str(buffer.dtype).removeprefix("torch."), t0, clock.now()))
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(result)
    return fut


def check_model(ddp: DistributedDataParallel, state: HookState) -> None:
    """Everything register() refuses, without registering (HookError names the problem and the fix)."""
    if not isinstance(ddp, DistributedDataParallel):
        raise HookError(f"register takes a DistributedDataParallel model, got {type(ddp).__name__}")
    if not dist.is_initialized():
        raise HookError("no process group: call torch.distributed.init_process_group('gloo', ...) first")
    group = ddp.process_group
    size, rank = dist.get_world_size(group), dist.get_rank(group)
    if (size, rank) != (state.world_size, state.rank):
        raise HookError(
            f"the process group is rank {rank} of {size}, the hook's state rank {state.rank} of {state.world_size}"
        )
    for name, p in ddp.module.named_parameters():
        if p.requires_grad and p.dtype not in SUPPORTED_DTYPES:
            raise HookError(
                f"parameter {name} is {p.dtype}: the hook all-reduces float32, bfloat16 or float16 "
                f"(convert the model, e.g. model.float())"
            )


def register(ddp: DistributedDataParallel, state: HookState) -> None:
    """Check that the hook can serve every bucket of this model and group (HookError if not), then register it."""
    check_model(ddp, state)
    ddp.register_comm_hook(state, p4ina_hook)
    LOG.info(
        "p4ina hook registered: %s, rank %d of %d%s",
        state.method,
        state.rank,
        state.world_size,
        ", error feedback" if state.error_feedback else "",
    )


def params_digest(model: torch.nn.Module) -> str:
    """A fingerprint of the exact parameter bits: equal digests, equal parameters."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]
