"""Aggregation trees for the in-network methods: the controller's planner where it applies, its rule elsewhere.

On the controller's own topologies (fat_tree(k), leaf_spine, a topology
JSON) the trees are exactly what `controller.planner.plan_job` installs on
the emulated switches, jobs planned one after the other so that later jobs
avoid loaded switches; a failed link or switch is removed from the model and
the planner re-plans around it.  The cluster-scale fabrics are beyond the
P4 program's limits (fan-in 32, 15 jobs a switch, 9-bit ports), so there the
same rule is applied structurally: each member leaf aggregates its GPUs, the
root is a least-loaded switch of the lowest tier that reaches every member
leaf by down links (on Dragonfly+, where no switch does, a spine of the
group holding most members, with a shortest-path tree to the others).

Slot memory: a switch's `switch_slots` are shared by the trees that use it,
so a job's window (outstanding packets) is the smaller of what it asks for
and its share on its most crowded switch.
"""

from __future__ import annotations

import logging
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from controller.planner import JobPlan, JobSpec, PlanError, plan_job
from controller.topology import Link as CLink
from controller.topology import Topology
from simulation.fabric import ClosRouter, Fabric, FabricError
from simulation.placement import Job
from wireformat.fixedpoint import LANE_TYPES

LOG = logging.getLogger(__name__)


class TreeError(FabricError):
    """No aggregation tree for a job (the planner's refusal, or failures that cut members off)."""


@dataclass
class AggTree:
    """A job's aggregation tree: every child -> parent edge; the root's up edges do not exist."""

    job: int
    root: int
    parent: dict[int, int]  # node (GPU or switch) -> parent switch
    gpus: tuple[int, ...]
    planner: str  # "controller" or "structural"
    window: int = 0  # outstanding packets (slots), set by assign_windows
    children: dict[int, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ch: dict[int, list[int]] = {}
        for c, p in self.parent.items():
            ch.setdefault(p, []).append(c)
        self.children = {k: sorted(v) for k, v in ch.items()}

    @property
    def switches(self) -> list[int]:
        return sorted(self.children)

    def depth_of(self, gpu: int) -> int:
        d, x = 0, gpu
        while x != self.root:
            x = self.parent[x]
            d += 1
        return d

    @property
    def depth(self) -> int:
        """Links from the root down to the deepest GPU."""
        memo: dict[int, int] = {self.root: 0}

        def up(x: int) -> int:
            path = []
            while x not in memo:
                path.append(x)
                x = self.parent[x]
            d = memo[x]
            for y in reversed(path):
                d += 1
                memo[y] = d
            return memo[path[0]] if path else d

        return max(up(g) for g in self.gpus)

    @cached_property
    def balanced(self) -> bool:
        """Every member GPU at the same depth: the planner's per-level shifts keep narrow partial sums narrow."""
        return len({self.depth_of(g) for g in self.gpus}) == 1

    def edges(self) -> list[tuple[int, int]]:
        return sorted(self.parent.items())

    @property
    def max_fan_in(self) -> int:
        return max(len(v) for v in self.children.values())


# -- the controller's planner -----------------------------------------------------------------------------
def _without_failures(topo: Topology, fabric: Fabric) -> Topology:
    dead_nodes = {fabric.name_of(n) for n in fabric.failed_nodes}
    dead_links = set()
    for lid in fabric.failed_links:
        a, b = fabric.name_of(int(fabric.link_src[lid])), fabric.name_of(int(fabric.link_dst[lid]))
        dead_links.add(frozenset((a, b)))
    links = tuple(
        ln
        for ln in topo.links
        if frozenset((ln.a, ln.b)) not in dead_links and ln.a not in dead_nodes and ln.b not in dead_nodes
    )
    cut = [h.name for h in topo.hosts if h.switch in dead_nodes or frozenset((h.name, h.switch)) in dead_links]
    if cut:
        raise TreeError(f"hosts {', '.join(cut[:4])} lost their only link: no tree can include them")
    switches = tuple(s for s in topo.switches if s.name not in dead_nodes)
    return Topology(
        topo.kind,
        dict(topo.params),
        switches,
        topo.hosts,
        tuple(CLink(ln.a, ln.a_port, ln.b, ln.b_port) for ln in links),
    )


def _controller_trees(fabric: Fabric, topo: Topology, jobs: Sequence[Job], lanes: str, slots: int) -> list[AggTree]:
    if fabric.has_failures:
        topo = _without_failures(topo, fabric)
    plans: list[JobPlan] = []
    out = []
    for job in jobs:
        hosts = [fabric.name_of(g) for g in job.gpus]
        try:
            plan = plan_job(topo, JobSpec.make(job.index + 1, hosts, lanes, slots=slots), plans)
        except PlanError as ex:
            raise TreeError(f"controller planner: {ex}") from ex
        plans.append(plan)
        parent = {}
        for sp in plan.switches:
            for c in sp.children:
                parent[fabric.node(c.node)] = fabric.node(sp.switch)
        out.append(AggTree(job.index, fabric.node(plan.root), parent, job.gpus, "controller"))
    return out


# -- the same rule on cluster-scale fabrics -----------------------------------------------------------------
def _clos_tree(fabric: Fabric, router: ClosRouter, job: Job, load: dict[int, int]) -> AggTree:
    gpus = sorted(job.gpus)
    lo, hi = gpus[0], gpus[-1] + 1
    leaves = sorted(set(fabric.attach[np.asarray(gpus)].tolist()))
    lo_of, hi_of, tiers = _ranges(router, fabric)
    for t in tiers:
        covers = (fabric.tiers == t) & (lo_of <= lo) & (hi <= hi_of)
        covers[: fabric.n_gpus] = False
        cands = [x for x in np.flatnonzero(covers).tolist() if x not in fabric.failed_nodes]
        if not cands:
            continue
        # one member per child range (the same ranges under every candidate)
        probes = _one_per_child(router, cands[0], gpus)

        # sorted() calls it within this iteration, so late binding is harmless; the defaults make the binding explicit
        def score(i: int, cands: list[int] = cands, probes: list[int] = probes) -> tuple[int, int, int]:
            """The controller planner's key: the load of the tree's upper switches (root and the switches
            right below it that cover members: for a fat-tree core, one spine per member pod), then rotation."""
            root = cands[i]
            kids = {router.child(root, g) for g in probes}
            upper = [load.get(root, 0)] + [load.get(k, 0) for k in kids if fabric.tiers[k] > 0]
            return (max(upper), sum(upper), (i - job.index) % len(cands))

        order = sorted(range(len(cands)), key=score)
        for i in order:
            root = cands[i]
            if fabric.has_failures and not all(router.down_ok(root, g) for g in gpus):
                continue
            parent: dict[int, int] = {}
            for g in gpus:
                x = root
                for y in router.down_path(root, g):
                    if y in parent:
                        x = y
                        continue
                    parent[y] = x
                    x = y
            LOG.debug("job %d: root %s over %d leaves", job.index, fabric.name_of(root), len(leaves))
            return AggTree(job.index, root, parent, job.gpus, "structural")
        if fabric.has_failures:
            continue
    raise TreeError(f"job {job.index}: no switch reaches all {len(leaves)} member leaves around the failures")


_RANGES: weakref.WeakKeyDictionary[ClosRouter, tuple[np.ndarray, np.ndarray, list[int]]] = weakref.WeakKeyDictionary()


def _ranges(router: ClosRouter, fabric: Fabric) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The GPU range every node covers, as arrays, and the switch tiers bottom up (kept on the router: many
    jobs plan on one fabric)."""
    cached = _RANGES.get(router)
    if cached is None:
        tiers = sorted(int(t) for t in np.unique(fabric.tiers) if t >= 0)
        cached = (np.asarray(router.lo), np.asarray(router.hi), tiers)
        _RANGES[router] = cached
    return cached


def _one_per_child(router: ClosRouter, root: int, gpus: Sequence[int]) -> list[int]:
    """One member GPU under each child of `root` that has members (children cover contiguous ranges)."""
    out, last = [], -1
    for g in gpus:  # sorted
        c = router.child(root, g)
        if c != last:
            out.append(g)
            last = c
    return out


def _graph_tree(fabric: Fabric, job: Job, load: dict[int, int]) -> AggTree:
    leaves = {int(fabric.attach[g]) for g in job.gpus}
    tops = sorted({int(fabric.tiers[x]) for x in range(fabric.n_gpus, fabric.n_nodes) if fabric.tiers[x] >= 0})
    top = tops[-1]
    # the group (component under one top-tier neighbourhood) holding most member leaves: its top switches
    votes: dict[int, int] = {}
    for leaf in leaves:
        for y in fabric.neighbors(leaf):
            if fabric.tiers[y] == top and y not in fabric.failed_nodes and fabric.link_ok(leaf, y):
                votes[y] = votes.get(y, 0) + 1
    if not votes:
        raise TreeError(f"job {job.index}: member leaves reach no switch above them")
    best = max(votes.values())
    cands = sorted(y for y, v in votes.items() if v == best)
    root = min(cands, key=lambda y: (load.get(y, 0), (cands.index(y) - job.index) % len(cands)))
    parent_sw: dict[int, int] = {root: -1}
    todo = deque([root])
    while todo:
        x = todo.popleft()
        for y in sorted(fabric.neighbors(x), key=lambda v: (load.get(v, 0), v)):
            if y >= fabric.n_gpus and fabric.tiers[y] >= 0 and y not in parent_sw and fabric.link_ok(y, x):
                parent_sw[y] = x
                todo.append(y)
    parent: dict[int, int] = {}
    for g in job.gpus:
        leaf = int(fabric.attach[g])
        if leaf not in parent_sw or not fabric.link_ok(g, leaf):
            raise TreeError(f"job {job.index}: GPU {g} is cut off from the root {fabric.name_of(root)}")
        parent[g] = leaf
        x = leaf
        while x != root and x not in parent:
            parent[x] = parent_sw[x]
            x = parent_sw[x]
    return AggTree(job.index, root, parent, job.gpus, "structural")


def plan_trees(
    fabric: Fabric, jobs: Sequence[Job], lanes: str = "int32", slots: int = 128, use_controller: bool = True
) -> list[AggTree]:
    """One tree per job, planned in job order (later jobs see the load of earlier ones); lanes both ways."""
    if lanes not in LANE_TYPES:
        raise TreeError(f"lanes must be one of {', '.join(LANE_TYPES)}, got {lanes!r}")
    topo = getattr(fabric, "controller_topology", None)
    if topo is not None and use_controller:
        return _controller_trees(fabric, topo, jobs, lanes, slots)
    load: dict[int, int] = {}
    out = []
    for job in jobs:
        router = getattr(fabric.router, "fallback", fabric.router)  # the structure behind the controller's routes
        if isinstance(router, ClosRouter):
            tree = _clos_tree(fabric, router, job, load)
        else:
            tree = _graph_tree(fabric, job, load)
        for sw in tree.switches:
            if fabric.tiers[sw] > 0 or sw == tree.root:
                load[sw] = load.get(sw, 0) + 1
        out.append(tree)
    return out


def assign_windows(trees: Sequence[AggTree], asked: int, switch_slots: int) -> None:
    """Each tree's window: what it asks for, or its share of the slots of its most crowded switch."""
    users: dict[int, int] = {}
    for t in trees:
        for sw in t.switches:
            users[sw] = users.get(sw, 0) + 1
    for t in trees:
        crowd = max(users[sw] for sw in t.switches)
        t.window = max(1, min(asked, switch_slots // crowd))
