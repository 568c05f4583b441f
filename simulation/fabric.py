"""A network fabric as data: endpoints (GPUs), switches, directed links, and how a flow is routed.

The simulator's network model, kept free of SimGrid so that routing, trees and
placement are testable on their own.  Nodes are integers: the GPUs first
(0..n_gpus-1, each with its own NIC), then the switches, then one NVSwitch per
server that has several GPUs.  Every cable is two directed links (full duplex),
each with a bandwidth and a latency; a link's latency includes the traversal
of the switch it enters, so a path's latency is the sum over its links.

Routers turn (source GPU, destination GPU, flow hash) into a node path:
- `ClosRouter` for folded Clos fabrics (fat-trees, leaf-spine, rail-optimised):
  up until a switch covers the destination (each switch covers a contiguous
  range of GPU numbers), then the unique way down; the up-link is chosen by
  destination (D-mod-k, InfiniBand's ftree routing) or by a hash of the flow
  (ECMP, as p4ina's controller does);
- `DragonflyPlusRouter`: minimal routing leaf - spine - global link - spine - leaf;
- `GraphRouter`: shortest paths with hashed ties, for any other topology.
All of them avoid failed links and switches (`Fabric.fail`).
"""

from __future__ import annotations

import bisect
import logging
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

LOG = logging.getLogger(__name__)

GPU_TIER = -1
NVSWITCH_TIER = -2


class FabricError(ValueError):
    """A fabric that cannot be built or a request it cannot serve; the message says which."""


class UnroutableError(FabricError):
    """No path between two endpoints (after failures)."""


def flow_hash(src: int, dst: int, salt: int = 0) -> int:
    """A cheap deterministic 32-bit hash of a flow (stands in for the switches' ECMP hash)."""
    x = (src * 0x9E3779B1 + dst * 0x85EBCA77 + salt * 0xC2B2AE3D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x2C1B3C6D) & 0xFFFFFFFF
    x ^= x >> 12
    return x


@dataclass
class FabricBuilder:
    """Collects nodes and links; `build` freezes them into a Fabric."""

    n_gpus: int
    tiers: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    _edges: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    _nvswitch: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.n_gpus < 1:
            raise FabricError(f"a fabric needs at least one GPU, got {self.n_gpus}")
        self.tiers = [GPU_TIER] * self.n_gpus
        self.names = []  # GPU names are generated ("g<i>") unless set_gpu_names is called

    def switch(self, tier: int, name: str) -> int:
        self.tiers.append(tier)
        self.names.append(name)
        return len(self.tiers) - 1

    def nvswitch(self, server: int) -> int:
        """The NVSwitch of a server: its GPUs reach each other through it, not through the NICs."""
        node = self.switch(NVSWITCH_TIER, f"s{server}.nvs")
        self._nvswitch[server] = node
        return node

    def cable(self, a: int, b: int, bw: float, latency_a_to_b: float, latency_b_to_a: float) -> None:
        """A full-duplex cable: two directed links; parallel cables between the same nodes add their bandwidth."""
        if a == b:
            raise FabricError(f"cable from node {a} to itself")
        for key, lat in (((a, b), latency_a_to_b), ((b, a), latency_b_to_a)):
            if key in self._edges:
                self._edges[key][0] += bw
            else:
                self._edges[key] = [bw, lat]

    def build(
        self,
        name: str,
        kind: str,
        params: dict[str, Any],
        server: Sequence[int],
        local: Sequence[int],
        topo_rank: Sequence[int] | None = None,
        gpu_names: Sequence[str] | None = None,
    ) -> Fabric:
        keys = np.array(list(self._edges.keys()), dtype=np.int64).reshape(-1, 2)
        vals = np.array(list(self._edges.values()), dtype=np.float64).reshape(-1, 2)
        return Fabric(
            name=name,
            kind=kind,
            params=dict(params),
            n_gpus=self.n_gpus,
            tiers=np.array(self.tiers, dtype=np.int8),
            switch_names=list(self.names),
            link_src=keys[:, 0].copy(),
            link_dst=keys[:, 1].copy(),
            link_bw=vals[:, 0].copy(),
            link_lat=vals[:, 1].copy(),
            server=np.asarray(server, dtype=np.int64),
            local=np.asarray(local, dtype=np.int64),
            topo_rank=None if topo_rank is None else np.asarray(topo_rank, dtype=np.int64),
            gpu_names=None if gpu_names is None else list(gpu_names),
            nvswitch=dict(self._nvswitch),
        )


class Fabric:
    """Nodes, directed links and a router; `fail()` returns a copy with links or switches down."""

    def __init__(
        self,
        *,
        name: str,
        kind: str,
        params: dict[str, Any],
        n_gpus: int,
        tiers: np.ndarray,
        switch_names: list[str],
        link_src: np.ndarray,
        link_dst: np.ndarray,
        link_bw: np.ndarray,
        link_lat: np.ndarray,
        server: np.ndarray,
        local: np.ndarray,
        topo_rank: np.ndarray | None,
        gpu_names: list[str] | None,
        nvswitch: dict[int, int] | None = None,
    ) -> None:
        self.name, self.kind, self.params = name, kind, params
        self.n_gpus = n_gpus
        self.tiers = tiers
        self.n_nodes = len(tiers)
        self.switch_names = switch_names
        self.link_src, self.link_dst, self.link_bw, self.link_lat = link_src, link_dst, link_bw, link_lat
        self.server, self.local = server, local
        if len(server) != n_gpus or len(local) != n_gpus:
            raise FabricError("server and local index are needed for every GPU")
        order = np.arange(n_gpus) if topo_rank is None else topo_rank
        self.topo_rank = order  # position of each GPU in topology order (NCCL-like rank reordering)
        self.gpu_names = gpu_names
        self.failed_links: frozenset[int] = frozenset()
        self.failed_nodes: frozenset[int] = frozenset()
        self._lid: dict[int, int] = {
            int(s) * self.n_nodes + int(d): i for i, (s, d) in enumerate(zip(link_src.tolist(), link_dst.tolist()))
        }
        self._nbrs: list[list[int]] | None = None
        self._by_name: dict[str, int] | None = None
        self.router: Router = NullRouter()
        # NVSwitch of each server (-1 when the server has one GPU or no NVLink)
        self.n_servers = int(server.max()) + 1 if n_gpus else 0
        self.nvswitch = np.full(self.n_servers, -1, dtype=np.int64)
        for srv, node in (nvswitch or {}).items():
            self.nvswitch[srv] = node
        self.attach = np.full(n_gpus, -1, dtype=np.int64)  # the switch each GPU's NIC plugs into
        for s, d in zip(link_src.tolist(), link_dst.tolist()):
            if s < n_gpus and tiers[d] >= 0:
                if self.attach[s] != -1:
                    raise FabricError(f"GPU {s} has NICs on two switches; model a second NIC as a second GPU")
                self.attach[s] = d
        if (self.attach < 0).any():
            raise FabricError(f"GPU {int(np.argmin(self.attach))} is not attached to any switch")

    # -- names --------------------------------------------------------------------------------------
    def name_of(self, node: int) -> str:
        if node < self.n_gpus:
            return self.gpu_names[node] if self.gpu_names else f"g{node}"
        return self.switch_names[node - self.n_gpus]

    def node(self, name: str) -> int:
        if self._by_name is None:
            m = {n: self.n_gpus + i for i, n in enumerate(self.switch_names)}
            if self.gpu_names:
                m.update({n: i for i, n in enumerate(self.gpu_names)})
            self._by_name = m
        if name in self._by_name:
            return self._by_name[name]
        if not self.gpu_names and name.startswith("g") and name[1:].isdigit() and int(name[1:]) < self.n_gpus:
            return int(name[1:])
        raise FabricError(f"{self.name} has no node named {name!r}")

    # -- links ---------------------------------------------------------------------------------------
    def link(self, a: int, b: int) -> int:
        try:
            return self._lid[a * self.n_nodes + b]
        except KeyError:
            raise FabricError(f"no link {self.name_of(a)} -> {self.name_of(b)} in {self.name}") from None

    def has_link(self, a: int, b: int) -> bool:
        return a * self.n_nodes + b in self._lid

    def link_ok(self, a: int, b: int) -> bool:
        lid = self._lid.get(a * self.n_nodes + b)
        return (
            lid is not None
            and lid not in self.failed_links
            and b not in self.failed_nodes
            and a not in self.failed_nodes
        )

    def links_of(self, path: Sequence[int]) -> list[int]:
        lid, n = self._lid, self.n_nodes
        return [lid[a * n + b] for a, b in zip(path, path[1:])]

    def neighbors(self, node: int) -> list[int]:
        if self._nbrs is None:
            nb: list[list[int]] = [[] for _ in range(self.n_nodes)]
            for s, d in zip(self.link_src.tolist(), self.link_dst.tolist()):
                nb[s].append(d)
            self._nbrs = nb
        return self._nbrs[node]

    @property
    def has_failures(self) -> bool:
        return bool(self.failed_links or self.failed_nodes)

    # -- routing -------------------------------------------------------------------------------------
    def path(self, src: int, dst: int, salt: int = 0) -> list[int]:
        """Node path of a flow from GPU src to GPU dst."""
        if src == dst:
            return [src]
        s_srv, d_srv = self.server[src], self.server[dst]
        if s_srv == d_srv:
            nvs = int(self.nvswitch[s_srv])
            if nvs >= 0:
                return [src, nvs, dst]
        return self.router.path(src, dst, salt)

    def fail(self, links: Iterable[tuple[int, int]] = (), nodes: Iterable[int] = ()) -> Fabric:
        """A copy of this fabric with cables (both directions) or switches down; routing avoids them."""
        dead = set(self.failed_links)
        for a, b in links:
            dead.add(self.link(a, b))
            dead.add(self.link(b, a))
        down = set(self.failed_nodes) | set(nodes)
        bad = [n for n in down if n < self.n_gpus]
        if bad:
            raise FabricError(f"cannot fail GPU {bad[0]}: failures are for switches and cables")
        copy = object.__new__(Fabric)
        copy.__dict__.update(self.__dict__)
        copy.failed_links, copy.failed_nodes = frozenset(dead), frozenset(down)
        copy.router = self.router.for_fabric(copy)
        return copy

    def describe(self) -> dict[str, Any]:
        tiers = {int(t): int((self.tiers == t).sum()) for t in np.unique(self.tiers) if t >= 0}
        return {
            "name": self.name,
            "kind": self.kind,
            "params": self.params,
            "gpus": self.n_gpus,
            "servers": self.n_servers,
            "switches_per_tier": tiers,
            "links": int(len(self.link_src)),
            "failed_links": len(self.failed_links) // 2,
            "failed_switches": len(self.failed_nodes),
        }


class Router:
    """path(src GPU, dst GPU, salt) -> node list; for_fabric(f) rebinds to a copy (e.g. with failures)."""

    fabric: Fabric

    def path(self, src: int, dst: int, salt: int) -> list[int]:
        raise NotImplementedError

    def for_fabric(self, fabric: Fabric) -> Router:
        raise NotImplementedError


class NullRouter(Router):
    def path(self, src: int, dst: int, salt: int) -> list[int]:
        raise FabricError("this fabric has no router")

    def for_fabric(self, fabric: Fabric) -> Router:
        return self


class ClosRouter(Router):
    """Up to the lowest switch that covers the destination, then down (folded Clos, up*/down* routing).

    `lo[x], hi[x]`: the GPU numbers switch x reaches by down links only (contiguous in a Clos numbering).
    `div[t]`: product of the up-degrees below tier t, for destination-based up-link choice (D-mod-k).
    """

    def __init__(
        self,
        fabric: Fabric,
        lo: Sequence[int],
        hi: Sequence[int],
        ups: list[list[int]],
        downs: list[list[int]],
        mode: str,
    ) -> None:
        self.fabric, self.lo, self.hi, self.ups, self.downs, self.mode = fabric, list(lo), list(hi), ups, downs, mode
        self.down_lo = [[self.lo[c] for c in ch] for ch in downs]
        tiers = fabric.tiers
        degree: dict[int, int] = {}
        for x in range(fabric.n_gpus, fabric.n_nodes):
            if tiers[x] >= 0 and ups[x]:
                degree[int(tiers[x])] = max(degree.get(int(tiers[x]), 0), len(ups[x]))
        div, acc = {}, 1
        for t in sorted(degree):
            div[t] = acc
            acc *= degree[t]
        self.div = div
        self._reach: dict[tuple[int, int], bool] = {}

    def for_fabric(self, fabric: Fabric) -> ClosRouter:
        r = object.__new__(ClosRouter)
        r.__dict__.update(self.__dict__)
        r.fabric, r._reach = fabric, {}
        return r

    def covers(self, x: int, d: int) -> bool:
        return self.lo[x] <= d < self.hi[x]

    def child(self, x: int, d: int) -> int:
        """The child of switch x whose range holds GPU d (UnroutableError if none)."""
        i = bisect.bisect_right(self.down_lo[x], d) - 1
        if i < 0:
            raise UnroutableError(f"{self.fabric.name_of(x)} has no way down to GPU {d}")
        return self.downs[x][i]

    def down_path(self, x: int, d: int) -> list[int]:
        out = []
        while x != d:
            x = self.child(x, d)
            out.append(x)
        return out

    def down_ok(self, x: int, d: int) -> bool:
        """Whether every link of the way down from x to GPU d is up."""
        f = self.fabric
        while x != d:
            c = self.child(x, d)
            if not f.link_ok(x, c):
                return False
            x = c
        return True

    def reaches(self, x: int, d: int) -> bool:
        """Whether a packet at x can still get to GPU d going up then down, around the failures."""
        f = self.fabric
        if not f.has_failures:
            return True
        key = (x, int(f.attach[d]))
        got = self._reach.get(key)
        if got is None:
            if self.covers(x, d) and self.down_ok(x, d):
                got = True
            else:
                got = any(f.link_ok(x, u) and self.reaches(u, d) for u in self.ups[x])
            self._reach[key] = got
        return got

    def path(self, src: int, dst: int, salt: int) -> list[int]:
        f = self.fabric
        x = int(f.attach[src])
        out = [src, x]
        failures = f.has_failures
        if failures and not f.link_ok(src, x):
            raise UnroutableError(f"GPU {src}'s link is down")
        while not self.covers(x, dst) or (failures and not self.down_ok(x, dst)):
            ups = self.ups[x]
            if not ups:
                raise UnroutableError(f"no way from GPU {src} to GPU {dst} in {f.name}")
            if self.mode == "dmodk":
                i = (dst // self.div.get(int(f.tiers[x]), 1)) % len(ups)
            else:
                i = flow_hash(src, dst, salt + len(out)) % len(ups)
            u = ups[i]
            if failures and not (f.link_ok(x, u) and self.reaches(u, dst)):
                alive = [v for v in ups if f.link_ok(x, v) and self.reaches(v, dst)]
                if not alive:
                    raise UnroutableError(f"no way from GPU {src} to GPU {dst} around the failures in {f.name}")
                u = alive[i % len(alive)]
            x = u
            out.append(x)
        out.extend(self.down_path(x, dst))
        return out


class DragonflyPlusRouter(Router):
    """Dragonfly+ minimal routing: leaf, a spine of the source group, one global link, a spine, the leaf.

    `group[leaf or spine]`, `spines[group]`, `gates[(ga, gb)]` = [(spine in ga, spine in gb), ...] global links.
    """

    def __init__(
        self,
        fabric: Fabric,
        group: dict[int, int],
        spines: list[list[int]],
        gates: dict[tuple[int, int], list[tuple[int, int]]],
        mode: str,
    ) -> None:
        self.fabric, self.group, self.spines, self.gates, self.mode = fabric, group, spines, gates, mode

    def for_fabric(self, fabric: Fabric) -> DragonflyPlusRouter:
        return DragonflyPlusRouter(fabric, self.group, self.spines, self.gates, self.mode)

    def _pick(self, options: list[Any], src: int, dst: int, salt: int, ok: Any) -> Any:
        i = dst if self.mode == "dmodk" else flow_hash(src, dst, salt)
        choice = options[i % len(options)]
        if self.fabric.has_failures and not ok(choice):
            alive = [o for o in options if ok(o)]
            if not alive:
                raise UnroutableError(f"no way from GPU {src} to GPU {dst} around the failures in {self.fabric.name}")
            choice = alive[i % len(alive)]
        return choice

    def path(self, src: int, dst: int, salt: int) -> list[int]:
        f = self.fabric
        ls, ld = int(f.attach[src]), int(f.attach[dst])
        if ls == ld:
            return [src, ls, dst]
        gs, gd = self.group[ls], self.group[ld]
        if gs == gd:
            sp = self._pick(self.spines[gs], src, dst, salt, lambda s: f.link_ok(ls, s) and f.link_ok(s, ld))
            return [src, ls, sp, ld, dst]
        a, b = self._pick(
            self.gates[(gs, gd)],
            src,
            dst,
            salt,
            lambda g: f.link_ok(ls, g[0]) and f.link_ok(g[0], g[1]) and f.link_ok(g[1], ld),
        )
        return [src, ls, a, b, ld, dst]


class GraphRouter(Router):
    """Shortest paths between switches (BFS per destination switch, cached), ties broken by the flow hash."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self._dist: dict[int, dict[int, int]] = {}

    def for_fabric(self, fabric: Fabric) -> GraphRouter:
        return GraphRouter(fabric)

    def _distances(self, target: int) -> dict[int, int]:
        got = self._dist.get(target)
        if got is None:
            f = self.fabric
            got = {target: 0}
            todo = deque([target])
            while todo:
                x = todo.popleft()
                for y in f.neighbors(x):
                    if y >= f.n_gpus and y not in got and f.tiers[y] >= 0 and f.link_ok(y, x):
                        got[y] = got[x] + 1
                        todo.append(y)
            self._dist[target] = got
        return got

    def path(self, src: int, dst: int, salt: int) -> list[int]:
        f = self.fabric
        x, target = int(f.attach[src]), int(f.attach[dst])
        dist = self._distances(target)
        if x not in dist or (f.has_failures and not (f.link_ok(src, x) and f.link_ok(target, dst))):
            raise UnroutableError(f"no way from GPU {src} to GPU {dst} in {f.name}")
        out = [src, x]
        while x != target:
            nxt = sorted(y for y in f.neighbors(x) if dist.get(y, -1) == dist[x] - 1 and f.link_ok(x, y))
            x = nxt[flow_hash(src, dst, salt + len(out)) % len(nxt)]
            out.append(x)
        out.append(dst)
        return out


def clos_router(fabric: Fabric, mode: str) -> Router:
    """A ClosRouter when every switch's down-reach is a contiguous range of GPU numbers, else a GraphRouter."""
    tiers = fabric.tiers
    n = fabric.n_nodes
    ups: list[list[int]] = [[] for _ in range(n)]
    downs: list[list[int]] = [[] for _ in range(n)]
    for s, d in zip(fabric.link_src.tolist(), fabric.link_dst.tolist()):
        ts, td = int(tiers[s]), int(tiers[d])
        if ts == NVSWITCH_TIER or td == NVSWITCH_TIER:
            continue
        if td > ts:
            ups[s].append(d)
        elif td < ts:
            downs[s].append(d)
    lo = [0] * n
    hi = [0] * n
    ok = True
    for g in range(fabric.n_gpus):
        lo[g], hi[g] = g, g + 1
    for x in sorted(range(fabric.n_gpus, n), key=lambda v: tiers[v]):
        if tiers[x] < 0 or not downs[x]:
            continue
        spans = sorted((lo[c], hi[c]) for c in downs[x])
        end = spans[0][1]
        for a, b in spans[1:]:  # the union of the children's ranges must be one interval
            if a > end:
                ok = False
            end = max(end, b)
        lo[x], hi[x] = spans[0][0], end
    if not ok:
        LOG.debug("%s: switch reach is not contiguous, using shortest-path routing", fabric.name)
        return GraphRouter(fabric)
    for x in range(n):
        ups[x].sort()
        downs[x].sort(key=lambda c: lo[c])
    return ClosRouter(fabric, lo, hi, ups, downs, mode)
