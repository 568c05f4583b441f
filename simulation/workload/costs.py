"""The system layer's one interface to the workload: what a collective of a parallel dimension costs.

The workload (simulation.workload.step) asks only this: how long does one collective of `dim` take, by
`method`, for this much data per GPU, with every group of that dimension doing the same at the same time
(all data-parallel groups reduce their buckets together, every pipeline boundary sends at once).  Groups are
registered first (`prepare`), so an implementation can solve the network once per dimension and then answer
for any size.  `simulation.workload.simcosts.SimCollectives` implements it on the simulator's methods and
SimGrid; an NCCL-faithful or all-to-all model is another implementation of the same five calls.

Units: a reduction is given in elements (the method decides what goes on the wire: `ring` float32,
`ring-bf16` bfloat16, `inc-int8` int8 lanes); a move (all-gather, all-to-all, point-to-point) in bytes per
GPU as the framework sends them.  Times are seconds: the slowest group's, since a step waits for all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# the all-to-alls' names (hosts/alltoall.py; simulation.methods.A2A_METHODS, a test keeps them equal)
A2A_METHODS = ("a2a-direct", "a2a-hier")


class CollectiveError(ValueError):
    """A method the implementation does not have, or a dimension that was not prepared."""


@dataclass(frozen=True)
class GroupShape:
    """What a bandwidth bound needs to know of a dimension's groups (the first group's, all are alike)."""

    size: int  # ranks in a group
    per_server: int  # of them on one server (over NVLink)
    instances: int  # groups of this dimension communicating at once


class CollectiveCosts(Protocol):
    """Seconds for one collective of a prepared parallel dimension (every group of it at once)."""

    def prepare(self, dim: str, groups: list[tuple[int, ...]], methods: tuple[str, ...]) -> None: ...

    def allreduce(self, method: str, elements: float, dim: str) -> float: ...

    def reduce_scatter(self, method: str, elements: float, dim: str) -> float: ...

    def all_gather(self, method: str, nbytes: float, dim: str) -> float: ...

    def alltoall(self, method: str, nbytes: float, dim: str) -> float: ...

    def p2p(self, nbytes: float, dim: str) -> float: ...
