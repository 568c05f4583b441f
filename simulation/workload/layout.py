"""A parallelism layout: how one training step of a model is spread over GPUs, and which ranks talk.

Ranks are numbered as Megatron-LM numbers them (its default order tp-cp-ep-dp-pp, context parallelism
absent here): tensor parallelism fastest, then data parallelism, pipeline stages slowest, so a TP group
is consecutive ranks (one server when TP = 8) and a stage is a block of TP x DP ranks.  Expert parallelism
splits the data-parallel ranks of a stage into groups of EP consecutive ones; the ranks holding the same
experts (every EP-th data-parallel rank) reduce the experts' gradients among themselves (expert data
parallelism).  A layout's groups are rank tuples; the system layer maps ranks to GPUs through the placement.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, fields
from typing import Any

from simulation.methods import canonical_method
from simulation.workload.models import ModelSpec

LOG = logging.getLogger(__name__)

SCHEDULES = ("1f1b", "interleaved", "gpipe")
SHARDING = ("ddp", "zero1", "zero2", "fsdp")
RECOMPUTE = ("none", "selective", "full")
DIMS = ("tp", "dp", "edp", "ep", "pp")


class LayoutError(ValueError):
    """A layout that cannot run its model or its GPU count; the message names the field and the fix."""


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1  # expert parallelism, within the data-parallel ranks of a stage
    schedule: str = "1f1b"  # pipeline schedule: 1f1b (PipeDream-Flush), interleaved (Megatron, vpp chunks), gpipe
    vpp: int = 1  # model chunks a stage holds (virtual stages) with the interleaved schedule
    microbatch: int = 1  # sequences per microbatch
    global_batch: int = 0  # sequences per step (0: one microbatch per data-parallel rank)
    seq_len: int = 0  # tokens per sequence (0: the model's)
    sharding: str = (
        "ddp"  # ddp: all-reduce grads; zero1/zero2: reduce-scatter grads, all-gather params; fsdp: per layer
    )
    recompute: str = "none"  # activation recomputation: none, selective (attention core), full (every layer's forward)
    sequence_parallel: bool = True  # TP's activations sharded between its all-gathers and reduce-scatters
    # the strongest baseline a user runs is NCCL: its tuner for the fp32 gradients and the parameters' all-gather,
    # and for TP's bf16 activations on NVLink (`-bf16`: bf16 elements); any simulation method otherwise
    dp_method: str = "nccl"  # the all-reduce (or reduce-scatter) method of the gradients
    ag_method: str = "nccl"  # the all-gather of bf16 parameters (zero1/2, fsdp)
    tp_method: str = "nccl-bf16"  # the TP all-reduces of bf16 activations (NVLink inside a server)
    a2a_method: str = "a2a-direct"  # the MoE dispatch/combine all-to-all
    dp_overlap: bool = True  # DDP/FSDP: buckets all-reduced while the backward pass goes on
    bucket_bytes: int = 25 << 20  # DDP's bucket_cap_mb default (25 MiB), in bytes of the reduced tensor
    param_gather_overlap: bool = True  # zero1/2: the parameters' all-gather overlaps the next step's first forward
    tp_overlap: float = 0.0  # share of the TP all-reduces hidden behind compute (0: Megatron-LM default, none)
    a2a_overlap: float = 0.0  # share of the MoE all-to-all hidden behind compute (0: on the critical path)
    pp_fewer_layers: int = 0  # layers fewer on the first and on the last stage (Llama 3: 1, for the embedding/head)

    def __post_init__(self) -> None:
        for f in ("dp_method", "ag_method", "tp_method"):  # old names read as the simulator reads them
            new, deprecated = canonical_method(getattr(self, f))
            if deprecated:
                LOG.warning("layout %s: %s", f, deprecated)
                object.__setattr__(self, f, new)
        for f in ("tp", "pp", "dp", "ep", "vpp", "microbatch"):
            if getattr(self, f) < 1:
                raise LayoutError(f"layout: {f}={getattr(self, f)} must be >= 1")
        if self.schedule not in SCHEDULES:
            raise LayoutError(f"layout: schedule={self.schedule!r}: choose from {', '.join(SCHEDULES)}")
        if self.schedule != "interleaved" and self.vpp != 1:
            raise LayoutError(f"layout: vpp={self.vpp} needs schedule=interleaved")
        if self.sharding not in SHARDING:
            raise LayoutError(f"layout: sharding={self.sharding!r}: choose from {', '.join(SHARDING)}")
        if self.recompute not in RECOMPUTE:
            raise LayoutError(f"layout: recompute={self.recompute!r}: choose from {', '.join(RECOMPUTE)}")
        if self.dp % self.ep:
            raise LayoutError(f"layout: ep={self.ep} must divide dp={self.dp} (experts split the data-parallel ranks)")
        if self.global_batch and self.global_batch % (self.dp * self.microbatch):
            raise LayoutError(
                f"layout: global_batch={self.global_batch} is not a whole number of microbatches of "
                f"{self.microbatch} on each of dp={self.dp} ranks"
            )
        for f in ("tp_overlap", "a2a_overlap"):
            if not 0 <= getattr(self, f) <= 1:
                raise LayoutError(f"layout: {f}={getattr(self, f)} must be in [0, 1]")
        if self.bucket_bytes < 4:
            raise LayoutError("layout: bucket_bytes must be >= 4")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def microbatches(self) -> int:
        """Microbatches each data-parallel rank runs per step."""
        return max(1, self.global_batch // (self.dp * self.microbatch)) if self.global_batch else 1

    def check(self, model: ModelSpec) -> None:
        """Refuse a layout its model cannot run, naming the field."""
        if self.ep > 1 and not model.moe:
            raise LayoutError(f"layout: ep={self.ep} but {model.name} is dense (no experts to spread)")
        if model.moe and model.experts % self.ep:
            raise LayoutError(f"layout: ep={self.ep} must divide {model.name}'s {model.experts} experts")
        chunks = self.pp * self.vpp
        if model.layers + 2 * self.pp_fewer_layers < chunks:
            raise LayoutError(f"layout: {model.name}'s {model.layers} layers cannot fill pp x vpp = {chunks} chunks")
        if model.heads % self.tp:
            raise LayoutError(f"layout: tp={self.tp} must divide {model.name}'s {model.heads} attention heads")

    def groups(self, dim: str) -> list[tuple[int, ...]]:
        """Every group of `dim` (tp, dp, edp, ep, pp) as rank tuples in rank order."""
        t, d, p, e = self.tp, self.dp, self.pp, self.ep

        def rank(ti: int, di: int, pi: int) -> int:
            return ti + t * (di + d * pi)

        if dim == "tp":
            return [tuple(rank(i, di, pi) for i in range(t)) for pi in range(p) for di in range(d)]
        if dim == "dp":
            return [tuple(rank(ti, i, pi) for i in range(d)) for pi in range(p) for ti in range(t)]
        if dim == "ep":
            return [
                tuple(rank(ti, g * e + i, pi) for i in range(e))
                for pi in range(p)
                for ti in range(t)
                for g in range(d // e)
            ]
        if dim == "edp":
            return [
                tuple(rank(ti, g * e + k, pi) for g in range(d // e))
                for pi in range(p)
                for ti in range(t)
                for k in range(e)
            ]
        if dim == "pp":
            return [tuple(rank(ti, di, i) for i in range(p)) for ti in range(t) for di in range(d)]
        raise LayoutError(f"unknown parallel dimension {dim!r}: choose from {', '.join(DIMS)}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Layout:
        known = {f.name for f in fields(cls)}
        bad = sorted(set(d) - known)
        if bad:
            raise LayoutError(f"layout: unknown field(s) {', '.join(bad)}: choose from {', '.join(sorted(known))}")
        return cls(**d)


ALIASES = {"mb": "microbatch", "gbs": "global_batch", "seq": "seq_len", "zero": "sharding", "a2a": "a2a_method"}


def parse_layout(spec: str) -> Layout:
    """'tp=8,pp=16,dp=128,schedule=interleaved,vpp=4,gbs=2048' -> Layout; every value checked, unknown keys refused."""
    out: dict[str, Any] = {}
    types = {f.name: f.type for f in fields(Layout)}
    for item in filter(None, (x.strip() for x in spec.split(","))):
        key, eq, value = item.partition("=")
        key = ALIASES.get(key.strip().replace("-", "_"), key.strip().replace("-", "_"))
        if not eq:
            raise LayoutError(f"layout {spec!r}: want KEY=VALUE, not {item!r}")
        if key not in types:
            raise LayoutError(f"layout {spec!r}: unknown key {key!r}: choose from {', '.join(sorted(types))}")
        kind = str(types[key])
        try:
            if kind == "int":
                out[key] = int(value)
            elif kind == "float":
                out[key] = float(value)
            elif kind == "bool":
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                out[key] = value.lower() in ("true", "1", "yes")
            else:
                out[key] = value.strip()
        except ValueError:
            raise LayoutError(f"layout {spec!r}: {key}={value!r} is not a {kind}") from None
    return Layout(**out)
