"""CollectiveCosts on the simulator: the system layer's methods over SimGrid, for every group of a dimension at once.

One cluster (fabric) is built and one job placed on it (contiguous or scattered servers); rank r of the layout
is the job's r-th GPU.  A dimension's groups become the jobs of one `simulation.model.Evaluation` on that
fabric, so all data-parallel groups reduce at the same time and share the links they share; SimGrid rates
their flows once, and every size is then composed from those rates (model.Evaluation.times).  A pipeline's
point-to-point sends are one flow set (every stage boundary at once).

What the simulator does not have yet is stated where it is used:
- reduce-scatter and all-gather: derived from the all-reduce of the same network solve.  A ring all-reduce
  is a reduce-scatter then an all-gather of the same steps, so each is half the ring's time (NCCL has only
  ring reduce-scatter/all-gather, so `tree` falls back to the ring); an in-network reduce-scatter sends every
  byte up the tree as the all-reduce does (only the way down shrinks), so it takes the all-reduce's time; an
  in-network all-gather multicasts the bytes down at the lanes' full width (int32: parameters cannot be
  narrowed), the inc-int32 all-reduce's time for those bytes.  (PLACEHOLDER until the NCCL model's
  reduce-scatter/all-gather are merged.)
- all-to-all: costs.placeholder_alltoall, a bandwidth bound (PLACEHOLDER until the all-to-all model is merged).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np

from simulation import topologies
from simulation.engine import Engine, FlowSet
from simulation.fabric import Fabric
from simulation.methods import INC_METHODS, METHODS
from simulation.model import Evaluation, Scenario
from simulation.params import Preset
from simulation.placement import Job, place
from simulation.workload.costs import CollectiveError, GroupShape, placeholder_alltoall

LOG = logging.getLogger(__name__)

# bytes on the wire per element, by method (what an all-gather of given bytes asks of the method)
WIRE_BYTES = {"ring": 4, "ring-addr": 4, "ring-bf16": 2, "hier": 4, "hier-rail": 4, "tree": 4, "rd": 4}
WIRE_BYTES |= {"inc-int32": 4, "inc-int16": 2, "inc-int8": 1, "hier-inc": 4}
RING_FAMILY = ("ring", "ring-addr", "ring-bf16", "hier", "hier-rail", "rd")
P2P_SALT = 7  # the flow hash's salt for pipeline sends (any fixed value: one ECMP choice per flow)


@dataclass
class _Dim:
    shape: GroupShape
    ev: Evaluation | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    rate: float = math.inf  # p2p: the slowest flow's rate
    latency: float = 0.0  # p2p: the longest path's latency


class SimCollectives:
    """The simulator's methods as CollectiveCosts, on one cluster and placement."""

    def __init__(
        self,
        topology: str,
        preset: Preset,
        gpus: int,
        placement: str = "contiguous",
        seed: int = 0,
        engine: Engine | None = None,
        cluster_gpus: int | None = None,
    ) -> None:
        self.preset = preset
        self.topology = topology
        self.placement = placement
        self.engine = engine or Engine()
        self.fabric: Fabric = topologies.build(topology, preset, cluster_gpus or gpus)
        self.rank_gpu = place(self.fabric, [gpus], placement, seed)[0].gpus
        self.dims: dict[str, _Dim] = {}
        self._cache: dict[tuple[str, str, float], float] = {}

    def _shape(self, groups: list[tuple[int, ...]]) -> GroupShape:
        first = [self.rank_gpu[r] for r in groups[0]]
        servers = np.bincount(self.fabric.server[first])
        return GroupShape(len(first), int(servers.max()), len(groups))

    def prepare(self, dim: str, groups: list[tuple[int, ...]], methods: tuple[str, ...]) -> None:
        shape = self._shape(groups)
        d = _Dim(shape)
        self.dims[dim] = d
        if shape.size < 2:
            return
        if dim == "ep":  # the all-to-all placeholder needs only the shape
            return
        if dim == "pp":
            pairs = [(self.rank_gpu[g[i]], self.rank_gpu[g[i + 1]]) for g in groups for i in range(len(g) - 1)]
            paths = [self.fabric.links_of(self.fabric.path(a, b, P2P_SALT)) for a, b in pairs]
            fs = FlowSet("pp", paths, np.full(len(paths), np.inf))
            self.engine.solve(self.fabric, [fs])
            assert fs.rates is not None
            d.rate = float(fs.rates.min())
            lat = self.fabric.link_lat
            d.latency = max(float(lat[p].sum()) for p in paths)
            return
        # a group inside one server never shares its NVLink with another group: one stands for all
        if shape.per_server == shape.size:
            groups = groups[:1]
        sim_methods = tuple(m for m in dict.fromkeys(methods) if m != "adaptive")
        if shape.per_server == 1 and "hier-inc" in sim_methods:  # one GPU a server: no NVLink stage to add
            sim_methods = tuple(m for m in sim_methods if m != "hier-inc")
            d.skipped["hier-inc"] = "one GPU a server in these groups: hier-inc is inc-int32 without an NVLink stage"
        bad = [m for m in sim_methods if m not in METHODS]
        if bad:
            raise CollectiveError(f"unknown collective method(s) {', '.join(bad)}: choose from {', '.join(METHODS)}")
        scenario = Scenario(
            topology=self.topology,
            gpus=len(groups[0]),
            preset=self.preset.name,
            methods=sim_methods,
            sizes=(4,),
            label=f"workload-{dim}",
        )
        jobs = [Job(i, tuple(self.rank_gpu[r] for r in g)) for i, g in enumerate(groups)]
        ev = Evaluation(scenario, self.preset, self.engine, fabric=self.fabric, jobs=jobs)
        ev.build()
        ev.solve()
        d.ev = ev
        d.skipped.update(ev.skipped)

    def _dim(self, dim: str) -> _Dim:
        if dim not in self.dims:
            raise CollectiveError(f"dimension {dim!r} was not prepared (prepare it with its groups first)")
        return self.dims[dim]

    def methods(self, dim: str) -> tuple[str, ...]:
        """The methods a prepared dimension can use (those that did not apply are left out)."""
        d = self._dim(dim)
        if d.ev is None:
            return ()
        return tuple(dict.fromkeys(p.method for p in d.ev.plans))

    def skipped(self, dim: str) -> dict[str, str]:
        return dict(self._dim(dim).skipped)

    def allreduce(self, method: str, elements: float, dim: str) -> float:
        d = self._dim(dim)
        if d.shape.size < 2 or elements <= 0:
            return 0.0
        if method == "adaptive":  # the fastest of the methods evaluated for this size (an offload tuner)
            return min(self.allreduce(m, elements, dim) for m in self.methods(dim) if m != "ring-addr")
        key = (dim, method, float(elements))
        if key not in self._cache:
            if d.ev is None:
                raise CollectiveError(f"{dim}: no all-reduce was prepared")
            if method in d.skipped:
                raise CollectiveError(f"{method} does not apply to the {dim} groups: {d.skipped[method]}")
            plans = [p for p in d.ev.plans if p.method == method]
            if not plans:
                raise CollectiveError(f"{dim}: method {method!r} was not prepared")
            size = max(4, int(round(elements * 4)))  # the simulator's sizes are bytes of float32 per GPU
            self._cache[key] = max(d.ev.times(p, size) for p in plans)
        return self._cache[key]

    def reduce_scatter(self, method: str, elements: float, dim: str) -> float:
        """PLACEHOLDER (module doc): half a ring all-reduce; an in-network all-reduce's time; tree -> ring."""
        if method in INC_METHODS:
            return self.allreduce(method, elements, dim)
        if method == "tree":
            method = "ring"
        if method == "adaptive":
            return min(self.reduce_scatter(m, elements, dim) for m in self.methods(dim) if m != "ring-addr")
        return self.allreduce(method, elements, dim) / 2

    def all_gather(self, method: str, nbytes: float, dim: str) -> float:
        """PLACEHOLDER (module doc): half a ring all-reduce of the same wire bytes; in-network: int32 multicast."""
        if method in INC_METHODS:
            return self.allreduce("inc-int32", nbytes / 4, dim)
        if method == "tree":
            method = "ring"
        if method == "adaptive":
            return min(self.all_gather(m, nbytes, dim) for m in self.methods(dim) if m != "ring-addr")
        if method not in WIRE_BYTES:
            raise CollectiveError(f"all-gather method {method!r}: choose from {', '.join(WIRE_BYTES)}")
        return self.allreduce(method, nbytes / WIRE_BYTES[method], dim) / 2

    def alltoall(self, method: str, nbytes: float, dim: str) -> float:
        """PLACEHOLDER (costs.placeholder_alltoall): a bandwidth bound, no fabric contention."""
        d = self._dim(dim)
        p = self.preset
        hops = 6 * (p.switch_latency + p.cable_latency)  # up and down three tiers
        return placeholder_alltoall(
            method,
            nbytes,
            d.shape,
            p.nic_bw,
            p.nvlink_bw or p.nic_bw,
            p.step_overhead + hops,
            p.nvlink_step_overhead + p.nvlink_latency,
        )

    def p2p(self, nbytes: float, dim: str = "pp") -> float:
        d = self._dim(dim)
        if d.shape.size < 2 or nbytes <= 0:
            return 0.0
        return self.preset.step_overhead + d.latency + nbytes / d.rate
