"""Jobs on a cluster (the workload layer): which GPUs each job gets, and in which rank order.

A scheduler hands out whole servers.  `contiguous` packs each job into
consecutive servers in topology order (a job fills leaves and pods one after
the other, as the emulation's first-N-hosts does); `scattered` hands out
servers in a random order, as a fragmented cluster does.  A job's GPU list is
its address order (the order it was given its servers, GPUs in server order);
`topology_order` sorts it as NCCL's rank reordering would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulation.fabric import Fabric

POLICIES = ("contiguous", "scattered")


class PlacementError(ValueError):
    """Jobs that do not fit the cluster or a policy that does not exist."""


@dataclass(frozen=True)
class Job:
    index: int
    gpus: tuple[int, ...]  # address order

    @property
    def size(self) -> int:
        return len(self.gpus)

    def topology_order(self, fabric: Fabric) -> list[int]:
        return sorted(self.gpus, key=lambda g: int(fabric.topo_rank[g]))


def server_order(fabric: Fabric) -> list[int]:
    """Servers in topology order (by their first GPU's topology rank)."""
    first = np.full(fabric.n_servers, np.iinfo(np.int64).max)
    np.minimum.at(first, fabric.server, fabric.topo_rank)
    return np.argsort(first, kind="stable").tolist()


def place(fabric: Fabric, sizes: Sequence[int], policy: str = "contiguous", seed: int = 0) -> list[Job]:
    """One Job per size, in whole servers, by `policy`."""
    if policy not in POLICIES:
        raise PlacementError(f"placement {policy!r}: choose from {', '.join(POLICIES)}")
    per = np.bincount(fabric.server, minlength=fabric.n_servers)
    g = int(per.max())
    for s in sizes:
        if s < 2:
            raise PlacementError(f"a job of {s} GPU(s) has nothing to all-reduce with (need >= 2)")
        if s % g:
            raise PlacementError(f"a job of {s} GPUs is not a whole number of {g}-GPU servers")
    if sum(sizes) > fabric.n_gpus:
        raise PlacementError(f"jobs of {sum(sizes)} GPUs do not fit {fabric.name} ({fabric.n_gpus} GPUs)")
    servers = server_order(fabric)
    if policy == "scattered":
        servers = np.random.default_rng(seed).permutation(servers).tolist()
    members: list[list[int]] = [[] for _ in range(fabric.n_servers)]
    for gpu in sorted(range(fabric.n_gpus), key=lambda x: int(fabric.topo_rank[x])):
        members[int(fabric.server[gpu])].append(gpu)
    jobs, pos = [], 0
    for i, s in enumerate(sizes):
        take = servers[pos : pos + s // g]
        pos += s // g
        jobs.append(Job(i, tuple(x for srv in take for x in members[srv])))
    return jobs
