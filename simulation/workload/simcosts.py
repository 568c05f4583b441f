"""CollectiveCosts on the simulator: the system layer's methods over SimGrid, for every group of a dimension at once.

One cluster (fabric) is built and one job placed on it (contiguous or scattered servers); rank r of the layout
is the job's r-th GPU.  A dimension's groups become the jobs of one `simulation.model.Evaluation` on that
fabric, so all data-parallel groups reduce at the same time and share the links they share; SimGrid rates
their flows once, and every size is then composed from those rates (model.Evaluation.times).  A pipeline's
point-to-point sends are one flow set (every stage boundary at once).

NCCL's methods (`nccl-ring`, `nccl-tree`, `nccl`; simulation/nccl.py) are closed forms of the group's servers and
GPUs a server: their all-reduce, reduce-scatter and all-gather are NCCL's own for that shape, on as many of
the server's NICs as the group has GPUs there (a tree has no
reduce-scatter or all-gather in NCCL, so `nccl-tree` runs them as NCCL's ring, as NCCL_ALGO=Tree falls back).
They reduce in the framework's dtype: fp32 by default, bf16 with the `-bf16` suffix (`nccl-bf16`: a TP group's
activations), as `ring-1nic` and `ring-1nic-bf16` differ.  An all-gather moves bytes whatever the method.

The other methods have only an all-reduce in the simulator; their reduce-scatter and all-gather are derived
from it (the same network solve, so the fabric and the placement count): a ring all-reduce is a reduce-scatter
then an all-gather of the same steps, so each is half the ring's time; in-network, each is the all-reduce's time
scaled by nccl.inc_collective's ratio for the same shape (a flat tree sends every byte up for a reduce-scatter
and gets every byte down for an all-gather, so the busier direction is the all-reduce's: ratio 1; hier-inc's
NVLink stage runs once instead of twice); an in-network all-gather multicasts at the lanes' full width (int32:
parameters cannot be narrowed).

All-to-all (the expert-parallel groups): the simulator's `a2a-direct` and `a2a-hier` (simulation/alltoall.py), one
`Evaluation` of the groups at once like the other dimensions, the slowest group's time.  Only the first
EP_GROUPS_SOLVED groups are built (a2a-direct is n(n-1) flows a group: 1,536 groups of 64 are 6.2M flows at
98,304 GPUs).  Why that is sound where it is used: ranks are placed in order, so under contiguous placement the
first 64 groups of 64 are the first 4,096 GPUs, one pod of a radix-128 fat-tree or rail-optimised fat-tree and
one Dragonfly+ group, and an expert group's 8 servers sit inside it: no all-to-all flow leaves its pod, pods
share no link, and every pod holds the same arrangement (the others are translates).  Under scattered placement
the groups are not alike and do share upper-tier links: the solved groups then see only each other's
contention, so the time is a lower bound (docs/workload.md says which rows are).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace

import numpy as np

from simulation import nccl, topologies
from simulation.engine import Engine, FlowSet
from simulation.fabric import Fabric
from simulation.methods import A2A_METHODS, INC_METHODS, METHODS, NCCL_METHODS, canonical_method, groups_of
from simulation.model import Evaluation, Scenario
from simulation.params import Preset
from simulation.placement import Job, place
from simulation.trees import TreeError
from simulation.workload.costs import CollectiveError, GroupShape

LOG = logging.getLogger(__name__)

# bytes on the wire per element, by method (what an all-gather of given bytes asks of the method)
WIRE_BYTES = {"ring-1nic": 4, "ring-addr": 4, "ring-1nic-bf16": 2, "hier": 4, "hier-rail": 4, "tree-1nic": 4, "rd": 4}
WIRE_BYTES |= {"inc-int32": 4, "inc-int16": 2, "inc-int8": 1, "hier-inc": 4}
BF16 = "-bf16"  # an NCCL method reducing bf16 elements (TP activations); without it fp32 (gradients)
WIRE_BYTES |= {m: 4 for m in NCCL_METHODS} | {m + BF16: 2 for m in NCCL_METHODS}
RING_FAMILY = ("ring-1nic", "ring-addr", "ring-1nic-bf16", "hier", "hier-rail", "rd")
P2P_SALT = 7  # the flow hash's salt for pipeline sends (any fixed value: one ECMP choice per flow)
EP_GROUPS_SOLVED = 64  # expert-parallel groups built and solved (module doc)
INC_LANES = {"inc-int32": "int32", "inc-int16": "int16", "inc-int8": "int8", "hier-inc": "int32"}


def workload_method(method: str) -> tuple[str, str | None]:
    """A workload method in its one spelling, and the deprecation line for an old one (the simulator's rule:
    ring -> ring-1nic, ring-bf16 -> ring-1nic-bf16, tree -> tree-1nic)."""
    return canonical_method(method)


def nccl_base(method: str) -> str | None:
    """The NCCL method behind `method` (nccl-bf16 -> nccl), or None when it is not one of NCCL's."""
    base = method.removesuffix(BF16)
    return base if base in NCCL_METHODS else None


@dataclass
class _Dim:
    shape: GroupShape
    ev: Evaluation | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    rate: float = math.inf  # p2p: the slowest flow's rate
    latency: float = 0.0  # p2p: the longest path's latency
    nccl_shapes: tuple[tuple[int, int], ...] = ()  # (servers, GPUs a server) of the groups: NCCL's closed forms


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
        self._nccl_server: nccl.Server | None = None

    def _server(self) -> nccl.Server:
        if self._nccl_server is None:
            try:
                self._nccl_server = nccl.Server.of_preset(self.preset)
            except nccl.NcclError as ex:
                raise CollectiveError(f"NCCL's methods on preset {self.preset.name}: {ex}") from ex
        return self._nccl_server

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
        if dim == "ep":  # the all-to-alls, on a few groups (module doc)
            groups = groups[:EP_GROUPS_SOLVED]
            methods = tuple(m for m in A2A_METHODS if m in methods) or A2A_METHODS
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
        methods = tuple(workload_method(m)[0] for m in methods)
        if any(nccl_base(m) for m in methods):
            shapes = set()
            for g in groups:
                per = groups_of(self.fabric, [self.rank_gpu[r] for r in g])
                shapes.add((len(per), max(len(x) for x in per)))
            d.nccl_shapes = tuple(sorted(shapes))
        sim_methods = tuple(dict.fromkeys(nccl_base(m) or m for m in methods if m != "adaptive"))
        if dim != "ep" and any(m in A2A_METHODS for m in sim_methods):
            raise CollectiveError(f"{dim}: the all-to-alls ({', '.join(A2A_METHODS)}) are not reductions")
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
        try:
            ev.build()
        except TreeError as ex:  # e.g. rail-only: no switch joins the rails, so no aggregation tree spans them
            inc = [m for m in sim_methods if m in INC_METHODS]
            for m in inc:
                d.skipped[m] = f"no aggregation tree for these groups on {self.fabric.name}: {ex}"
            scenario = replace(scenario, methods=tuple(m for m in sim_methods if m not in inc))
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
        closed = [m for m in d.ev.scenario.methods if m in NCCL_METHODS and m not in d.skipped]
        return tuple(dict.fromkeys([p.method for p in d.ev.plans] + closed))

    def skipped(self, dim: str) -> dict[str, str]:
        return dict(self._dim(dim).skipped)

    def _nccl(self, coll: str, method: str, nbytes: float, dim: str) -> float:
        """NCCL's time for `coll` of `nbytes` (the whole buffer) in every group of `dim`: the slowest shape's."""
        d = self._dim(dim)
        base = nccl_base(method)
        assert base is not None
        if not d.nccl_shapes or d.ev is None or base not in d.ev.scenario.methods:
            raise CollectiveError(f"{dim}: method {method!r} was not prepared")
        if base in d.skipped:
            raise CollectiveError(f"{base} does not apply to the {dim} groups: {d.skipped[base]}")
        if coll != "all-reduce" and base == "nccl-tree":  # NCCL has no tree reduce-scatter/all-gather: its ring
            base = "nccl-ring"
        size = max(1, int(round(nbytes)))
        server = self._server()
        per_server = self.preset.gpus_per_server
        try:
            # a group with g of a server's GPUs gets g of its NICs: the server's other GPUs are in the dimension's
            # other groups, reducing at the same time through theirs (one GPU a server: one NIC, not eight)
            return max(
                nccl.nccl_collective(
                    coll, replace(server, nics=max(1, server.nics * g // per_server)), n, size, base, g
                ).time_s
                for n, g in d.nccl_shapes
            )
        except nccl.NcclError as ex:
            raise CollectiveError(f"{dim}: {method}: {ex}") from ex

    def allreduce(self, method: str, elements: float, dim: str) -> float:
        d = self._dim(dim)
        if d.shape.size < 2 or elements <= 0:
            return 0.0
        method = workload_method(method)[0]
        if nccl_base(method):
            return self._nccl("all-reduce", method, elements * WIRE_BYTES[method], dim)
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

    def _inc_ratio(self, coll: str, method: str, dim: str) -> float:
        """nccl.inc_collective's `coll` over its all-reduce for this dimension's shape (module doc)."""
        d = self._dim(dim)
        g = d.shape.per_server if method == "hier-inc" else 1
        nodes = max(1, d.shape.size // g)
        lanes, big = INC_LANES[method], 1 << 26
        t = nccl.inc_collective(coll, self.preset, nodes, big, lanes, g).time_s
        return t / nccl.inc_collective("all-reduce", self.preset, nodes, big, lanes, g).time_s

    def reduce_scatter(self, method: str, elements: float, dim: str) -> float:
        """NCCL's reduce-scatter for its methods; the others derived from their all-reduce (module doc)."""
        d = self._dim(dim)
        if d.shape.size < 2 or elements <= 0:
            return 0.0
        method = workload_method(method)[0]
        if nccl_base(method):
            return self._nccl("reduce-scatter", method, elements * WIRE_BYTES[method], dim)
        if method in INC_METHODS:
            return self.allreduce(method, elements, dim) * self._inc_ratio("reduce-scatter", method, dim)
        if method == "tree-1nic":  # NCCL has only ring reduce-scatter: a tree's is the ring's
            method = "ring-1nic"
        if method == "adaptive":
            return min(self.reduce_scatter(m, elements, dim) for m in self.methods(dim) if m != "ring-addr")
        return self.allreduce(method, elements, dim) / 2

    def all_gather(self, method: str, nbytes: float, dim: str) -> float:
        """NCCL's all-gather of the bytes for its methods; the others derived from their all-reduce (module doc)."""
        d = self._dim(dim)
        if d.shape.size < 2 or nbytes <= 0:
            return 0.0
        method = workload_method(method)[0]
        if nccl_base(method):
            return self._nccl("all-gather", method, nbytes, dim)
        if method in INC_METHODS:
            lanes = "hier-inc" if method == "hier-inc" else "inc-int32"  # parameters are not narrowed
            return self.allreduce(lanes, nbytes / 4, dim) * self._inc_ratio("all-gather", lanes, dim)
        if method == "tree-1nic":
            method = "ring-1nic"
        if method == "adaptive":
            return min(self.all_gather(m, nbytes, dim) for m in self.methods(dim) if m != "ring-addr")
        if method not in WIRE_BYTES:
            raise CollectiveError(f"all-gather method {method!r}: choose from {', '.join(WIRE_BYTES)}")
        return self.allreduce(method, nbytes / WIRE_BYTES[method], dim) / 2

    def alltoall(self, method: str, nbytes: float, dim: str) -> float:
        """The simulator's all-to-all, `nbytes` sent by each rank in all: the slowest solved group's time."""
        d = self._dim(dim)
        if d.shape.size < 2 or nbytes <= 0:
            return 0.0
        if method not in A2A_METHODS:
            raise CollectiveError(f"unknown all-to-all method {method!r}: choose from {', '.join(A2A_METHODS)}")
        key = (dim, method, float(nbytes))
        if key not in self._cache:
            if d.ev is None:
                raise CollectiveError(f"{dim}: no all-to-all was prepared")
            if method in d.skipped:
                raise CollectiveError(f"{method} does not apply to the {dim} groups: {d.skipped[method]}")
            plans = [p for p in d.ev.plans if p.method == method]
            if not plans:
                raise CollectiveError(f"{dim}: method {method!r} was not prepared")
            self._cache[key] = max(d.ev.times(p, max(1, int(round(nbytes)))) for p in plans)
        return self._cache[key]

    def p2p(self, nbytes: float, dim: str = "pp") -> float:
        d = self._dim(dim)
        if d.shape.size < 2 or nbytes <= 0:
            return 0.0
        return self.preset.step_overhead + d.latency + nbytes / d.rate
