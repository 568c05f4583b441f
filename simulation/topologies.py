"""Fabric builders: the controller's topologies, 3-tier and rail-optimised fat-trees, Dragonfly+.

A topology is data: the controller's model (`fat_tree(k)`, `leaf_spine`, a
topology JSON) is transcribed as it is, so the simulator routes and plans on
the same switches and ports the emulation runs; the cluster-scale builders
produce the same kind of Fabric, sized to the number of GPUs asked for.

Spec strings (`--topology`), one spelling per builder:
  fat-tree:K | leaf-spine:LxSxH | PATH.json     the controller's model (one GPU per host), as the emulation has it
  clos[:radix=64,tiers=3,oversub=1]             folded Clos (a fat-tree) of radix-R switches, sized to the GPU count
  rail[:radix=64,tiers=3,oversub=1]             the same, rail-optimised: GPU i of every server on rail leaf i
  dragonfly+[:radix=64]                         Dragonfly+: groups of leaf-spine, spines joined by global links
  rail-only[:radix=64]                          rail-only (Wang et al. 2023): one network per rail, no spine
                                                joining them; traffic between rails crosses NVLink
The scale Clos was spelled `fattree` (one hyphen away from the controller's `fat-tree:K`, a different
builder); `fattree` and the other old aliases still work, with a deprecation line (`canonical_spec`).
"""

from __future__ import annotations

import ipaddress
import math
import struct
import warnings
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from controller import names as N
from controller.addressing import ip_to_int
from controller.fattree import fat_tree
from controller.leafspine import leaf_spine
from controller.routing import all_route_entries
from controller.topology import Topology, TopologyError
from simulation.fabric import (
    ClosRouter,
    DragonflyPlusRouter,
    Fabric,
    FabricBuilder,
    FabricError,
    Router,
    UnroutableError,
    clos_router,
)
from simulation.params import Preset

CONTROLLER_KINDS = ("fat-tree", "leaf-spine")
SCALE_KINDS = {
    "clos": "fat-tree (folded Clos)",
    "rail": "rail-optimised fat-tree",
    "dragonfly+": "Dragonfly+",
    "rail-only": "rail-only (no spine joining the rails)",
}
DEPRECATED = {  # old spellings of the scale builders: still read, with a deprecation line (canonical_spec)
    "fattree": "clos",
    "fat-tree3": "clos",
    "dfplus": "dragonfly+",
    "dragonflyplus": "dragonfly+",
    "rail-fattree": "rail",
}
SCALE_KEYS = {
    "clos": {"radix", "tiers", "oversub"},
    "rail": {"radix", "tiers", "oversub"},
    "dragonfly+": {"radix"},
    "rail-only": {"radix"},
}


def _lat(preset: Preset, into_switch: bool) -> float:
    return preset.cable_latency + (preset.switch_latency if into_switch else 0.0)


def _add_nvlink(b: FabricBuilder, preset: Preset, server: list[int]) -> None:
    if preset.gpus_per_server <= 1:
        return
    nvs: dict[int, int] = {}
    for g, s in enumerate(server):
        if s not in nvs:
            nvs[s] = b.nvswitch(s)
        b.cable(g, nvs[s], preset.nvlink_bw, preset.nvlink_latency, preset.nvlink_latency)


def _topo_rank(server: list[int], local: list[int]) -> np.ndarray:
    """Position of each GPU when ranks are ordered by (server, GPU in server): NCCL-like topology order."""
    order = np.lexsort((np.asarray(local), np.asarray(server)))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank


# -- the controller's model ----------------------------------------------------------------------------
UDP = 17
FIVE_TUPLE = struct.Struct("!IIBHH")  # the P4 program's ECMP hash input: src, dst, protocol, L4 ports


class ControllerRouter(Router):
    """The emulation's own forwarding on a controller topology: the routes and ECMP groups the controller
    installs (controller.routing.all_route_entries), a member picked as the P4 program does it, crc32 of
    (source IP, destination IP, protocol, UDP source and destination port) modulo the group's size.

    `salt` is the flow's UDP port (a host method's socket uses the same port at both ends, so it is both
    ports of the 5-tuple).  With failed links or switches it hands over to the structural router
    (the controller has no failover), which routes around them.
    """

    def __init__(self, fabric: Fabric, topo: Topology, fallback: Router) -> None:
        self.fabric, self.topo, self.fallback = fabric, topo, fallback
        ids = {s.name: fabric.node(s.name) for s in topo.switches}
        hosts = {h.name: i for i, h in enumerate(topo.hosts)}
        self.ip = [ip_to_int(h.ip) for h in topo.hosts]
        self.first = [ids[h.switch] for h in topo.hosts]
        self.port_to: dict[int, dict[int, int]] = {}
        for s in topo.switches:
            self.port_to[ids[s.name]] = {
                nb.port: (hosts[nb.peer] if nb.is_host else ids[nb.peer]) for nb in topo.neighbors(s.name)
            }
        self.tables: dict[int, tuple[list[tuple[int, int, dict[str, int], str]], dict[tuple[int, int], int]]] = {}
        for name, entries in all_route_entries(topo).items():
            lpm: list[tuple[int, int, dict[str, int], str]] = []
            members: dict[tuple[int, int], int] = {}
            for e in entries:
                if e.table == N.T_IPV4_LPM:
                    key = dict(e.match)[N.K_DST_ADDR]
                    lpm.append((int(key.value), int(key.prefix_len), dict(e.params), e.action))  # type: ignore[union-attr]
                elif e.table == N.T_ECMP_MEMBERS:
                    m = dict(e.match)
                    members[(int(m[N.K_GROUP]), int(m[N.K_INDEX]))] = int(dict(e.params)["port"])
            lpm.sort(key=lambda t: -t[1])  # longest prefix first
            self.tables[ids[name]] = (lpm, members)
        self._cache: dict[tuple[int, int, int], list[int]] = {}

    def for_fabric(self, fabric: Fabric) -> Router:
        return ControllerRouter(fabric, self.topo, self.fallback.for_fabric(fabric))

    def _egress(self, switch: int, dst_ip: int, flow: int) -> int:
        lpm, members = self.tables[switch]
        for value, length, params, action in lpm:
            if length == 0 or (dst_ip >> (32 - length)) == (value >> (32 - length)):
                if action == N.A_FORWARD:
                    return params["port"]
                return members[(params["group"], flow % params["size"])]
        raise UnroutableError(f"{self.fabric.name_of(switch)} has no route to {ipaddress.IPv4Address(dst_ip)}")

    def path(self, src: int, dst: int, salt: int) -> list[int]:
        if self.fabric.has_failures:
            return self.fallback.path(src, dst, salt)
        key = (src, dst, salt)
        got = self._cache.get(key)
        if got is None:
            flow = zlib.crc32(FIVE_TUPLE.pack(self.ip[src], self.ip[dst], UDP, salt & 0xFFFF, salt & 0xFFFF))
            x, got = self.first[src], [src]
            while x != dst:
                got.append(x)
                if len(got) > len(self.tables) + 2:
                    raise UnroutableError(f"a routing loop from GPU {src} to GPU {dst}")
                x = self.port_to[x][self._egress(x, self.ip[dst], flow)]
            got.append(dst)
            self._cache[key] = got
        return list(got)


def from_controller(topo: Topology, preset: Preset) -> Fabric:
    """The controller's topology as a fabric: hosts are the GPUs (one per host), same switch names."""
    if preset.gpus_per_server != 1:
        raise FabricError(
            f"{topo.kind} from the controller has one endpoint per host; preset {preset.name!r} has "
            f"{preset.gpus_per_server} GPUs per server (use the clos/rail/dragonfly+ builders)"
        )
    b = FabricBuilder(len(topo.hosts))
    ids = {s.name: b.switch(s.tier, s.name) for s in topo.switches}
    for i, h in enumerate(topo.hosts):
        b.cable(i, ids[h.switch], preset.nic_bw, _lat(preset, True), _lat(preset, False))
    for ln in topo.links:
        b.cable(ids[ln.a], ids[ln.b], preset.fabric_bw, _lat(preset, True), _lat(preset, True))
    n = len(topo.hosts)
    fabric = b.build(
        f"{topo.kind}:{_params_text(topo.params)}",
        topo.kind,
        dict(topo.params),
        list(range(n)),
        [0] * n,
        gpu_names=[h.name for h in topo.hosts],
    )
    fabric.router = clos_router(fabric, preset.routing)
    if preset.routing == "ecmp":  # the emulation's forwarding, hash for hash
        fabric.router = ControllerRouter(fabric, topo, fabric.router)
    fabric.controller_topology = topo  # type: ignore[attr-defined]  # the planner plans on it
    return fabric


def _params_text(params: Mapping[str, Any]) -> str:
    if set(params) == {"k"}:
        return str(params["k"])
    if set(params) == {"leaves", "spines", "hosts_per_leaf"}:
        return f"{params['leaves']}x{params['spines']}x{params['hosts_per_leaf']}"
    return ",".join(f"{k}={v}" for k, v in params.items())


# -- folded Clos (fat-tree), optionally rail-optimised ----------------------------------------------------
def _clos_shape(n_gpus: int, g: int, radix: int, tiers: int, oversub: float, rail: bool) -> tuple[int, int, int]:
    """(GPU ports per leaf, leaves, pods) of fat_tree3's fabric, or the FabricError that says why it cannot be;
    cheap, so that a command line is checked before anything runs."""
    if radix < 4 or radix % 2:
        raise FabricError(f"fat-tree radix must be an even number >= 4, got {radix}")
    if tiers not in (2, 3):
        raise FabricError(f"fat-tree tiers must be 2 or 3, got {tiers}")
    if not oversub >= 1.0:
        raise FabricError(f"oversubscription must be >= 1 (1 = non-blocking), got {oversub}")
    if n_gpus < 1:
        raise FabricError(f"a fabric needs at least one GPU, not {n_gpus}")
    d = radix // 2  # GPUs per leaf
    if n_gpus % g:
        raise FabricError(f"{n_gpus} GPUs is not a whole number of {g}-GPU servers")
    if rail and g == 1:
        raise FabricError("a rail-optimised fat-tree needs servers with several GPUs (preset gpus_per_server > 1)")
    if not rail and d % g:
        raise FabricError(f"a leaf has {d} GPU ports, not a whole number of {g}-GPU servers")
    n_leaves = math.ceil(n_gpus // g / d) * g if rail else math.ceil(n_gpus / d)
    if rail and d % g:
        raise FabricError(f"radix {radix}: a pod's {d} leaves are not whole scalable units of {g} rails")
    pods = math.ceil(n_leaves / d) if tiers == 3 else 1
    if tiers == 2 and n_leaves > radix:
        raise FabricError(f"a 2-tier fat-tree of radix {radix} holds {radix * d} GPUs, not {n_gpus}")
    if pods > radix:
        raise FabricError(f"a 3-tier fat-tree of radix {radix} holds {radix * d * d} GPUs (radix^3/4), not {n_gpus}")
    return d, n_leaves, pods


def fat_tree3(
    n_gpus: int, preset: Preset, radix: int = 64, tiers: int = 3, oversub: float = 1.0, rail: bool = False
) -> Fabric:
    """A folded Clos of radix-`radix` switches with room for `n_gpus` GPUs, partially populated like a cluster.

    Leaves have radix/2 GPU ports and radix/2 up-links (one to every spine of their pod), so with `oversub`=1
    the fabric is non-blocking; `oversub`=o keeps radix/(2o) of the up-links (o:1 at the leaves, every link
    at full rate, fewer spines).  A pod is radix/2 leaves and its spines; spine j of every pod connects to
    the radix/2 cores of group j, and a core has one port per pod: at most radix pods, radix^3/4 GPUs
    (65,536 at radix 64).  A job of one
    pod gets no core tier (its traffic would never use it).  `rail`: servers of `gpus_per_server` GPUs whose
    GPU i sits on rail leaf i of the server's scalable unit (that many leaves), as in NVIDIA's rail-optimised
    clusters; otherwise a server's GPUs share one leaf.
    """
    g = preset.gpus_per_server
    d, n_leaves, pods = _clos_shape(n_gpus, g, radix, tiers, oversub, rail)
    leaves_per_pod = d
    # GPUs in leaf order: (leaf, position); server and GPU-in-server of each
    server: list[int] = []
    local: list[int] = []
    leaf_of: list[int] = []
    if rail:
        servers = n_gpus // g
        for su in range(math.ceil(servers / d)):
            m = min(d, servers - su * d)
            for r in range(g):
                for p in range(m):
                    leaf_of.append(su * g + r)
                    server.append(su * d + p)
                    local.append(r)
    else:
        for i in range(n_gpus):
            leaf_of.append(i // d)
            server.append(i // g)
            local.append(i % g)
    assert leaf_of[-1] + 1 == n_leaves
    # o:1 at the leaves: radix/2 GPU ports and radix/(2o) full-rate up-links (the other ports stay dark)
    uplinks = max(1, round(d / oversub))
    spines_per_pod = uplinks
    b = FabricBuilder(n_gpus)
    leaf = [b.switch(0, f"l{i}") for i in range(n_leaves)]
    for gi, li in enumerate(leaf_of):
        b.cable(gi, leaf[li], preset.nic_bw, _lat(preset, True), _lat(preset, False))
    up_bw = preset.fabric_bw
    if tiers == 2 or pods == 1:
        spine = [b.switch(1, f"s{j}") for j in range(spines_per_pod)]
        for li in range(n_leaves):
            for s in spine:
                b.cable(leaf[li], s, up_bw, _lat(preset, True), _lat(preset, True))
    else:
        cores_per_group = radix - leaves_per_pod
        spine_ids = [[b.switch(1, f"p{p}.s{j}") for j in range(spines_per_pod)] for p in range(pods)]
        core = [b.switch(2, f"c{c}") for c in range(spines_per_pod * cores_per_group)]
        for li in range(n_leaves):
            for s in spine_ids[li // leaves_per_pod]:
                b.cable(leaf[li], s, up_bw, _lat(preset, True), _lat(preset, True))
        for p in range(pods):
            for j, s in enumerate(spine_ids[p]):
                for m in range(cores_per_group):
                    b.cable(s, core[j * cores_per_group + m], preset.fabric_bw, _lat(preset, True), _lat(preset, True))
    _add_nvlink(b, preset, server)
    kind = "rail" if rail else "clos"
    params = {"radix": radix, "tiers": tiers if pods > 1 else 2, "oversub": oversub, "gpus_per_server": g}
    fabric = b.build(
        f"{kind}:radix={radix},gpus={n_gpus}",
        kind,
        params,
        server,
        local,
        topo_rank=_topo_rank(server, local) if rail else None,
    )
    router = clos_router(fabric, preset.routing)
    if not isinstance(router, ClosRouter):
        raise FabricError(f"{fabric.name}: internal error, the Clos numbering is not contiguous")
    fabric.router = router
    return fabric


def _dragonfly_groups(n_gpus: int, g: int, radix: int) -> int:
    """The groups of dragonfly_plus's fabric, or the FabricError that says why it cannot be (cheap)."""
    if radix < 4 or radix % 2:
        raise FabricError(f"Dragonfly+ radix must be an even number >= 4, got {radix}")
    if n_gpus < 1:
        raise FabricError(f"a fabric needs at least one GPU, not {n_gpus}")
    h = radix // 2
    if n_gpus % g or h % g:
        raise FabricError(f"{n_gpus} GPUs in {g}-GPU servers do not fill {h}-port leaves evenly")
    group_size = h * h
    groups = math.ceil(n_gpus / group_size)
    ports = (radix - h) * (radix - h)
    if groups - 1 > ports:
        raise FabricError(
            f"Dragonfly+ of radix {radix} joins at most {ports + 1} groups ({(ports + 1) * group_size} GPUs), "
            f"not {groups}"
        )
    return groups


# -- Dragonfly+ ------------------------------------------------------------------------------------------------
def dragonfly_plus(n_gpus: int, preset: Preset, radix: int = 64) -> Fabric:
    """Dragonfly+ (Shpiner et al.): groups of radix/2 leaves and radix/2 spines (complete bipartite), spines
    joined across groups by global links, as many groups as the GPUs need.

    A leaf has radix/2 GPU ports; a spine radix/2 leaf ports and radix/2 global ports.  Every pair of groups
    gets the same number of parallel global links (the group's global ports divided evenly), spread over the
    spines, so a group has as much global bandwidth as its GPUs have NIC bandwidth.
    """
    g = preset.gpus_per_server
    h = radix // 2
    groups = _dragonfly_groups(n_gpus, g, radix)
    spines_per_group = radix - h
    leaves_per_group = h
    global_ports = radix - leaves_per_group
    ports = spines_per_group * global_ports
    n_leaves = math.ceil(n_gpus / h)
    b = FabricBuilder(n_gpus)
    leaf = [b.switch(0, f"g{i // leaves_per_group}.l{i % leaves_per_group}") for i in range(n_leaves)]
    spine = [[b.switch(1, f"g{k}.s{j}") for j in range(spines_per_group)] for k in range(groups)]
    server = [i // g for i in range(n_gpus)]
    local = [i % g for i in range(n_gpus)]
    for i in range(n_gpus):
        b.cable(i, leaf[i // h], preset.nic_bw, _lat(preset, True), _lat(preset, False))
    group: dict[int, int] = {}
    for li, node in enumerate(leaf):
        k = li // leaves_per_group
        group[node] = k
        for s in spine[k]:
            b.cable(node, s, preset.fabric_bw, _lat(preset, True), _lat(preset, True))
    gates: dict[tuple[int, int], list[tuple[int, int]]] = {}
    if groups > 1:
        per_pair = ports // (groups - 1)
        for a in range(groups):
            for c in range(a + 1, groups):
                pairs = []
                for r in range(per_pair):
                    sa = spine[a][(((c - a - 1) % groups) * per_pair + r) % spines_per_group]
                    sc = spine[c][(((a - c - 1) % groups) * per_pair + r) % spines_per_group]
                    b.cable(sa, sc, preset.fabric_bw, _lat(preset, True), _lat(preset, True))
                    pairs.append((sa, sc))
                uniq = sorted(set(pairs))
                gates[(a, c)] = uniq
                gates[(c, a)] = [(y, x) for x, y in uniq]
    for k in range(groups):
        for s in spine[k]:
            group[s] = k
    _add_nvlink(b, preset, server)
    fabric = b.build(
        f"dragonfly+:radix={radix},gpus={n_gpus}",
        "dragonfly+",
        {"radix": radix, "groups": groups, "gpus_per_server": g},
        server,
        local,
    )
    fabric.router = DragonflyPlusRouter(fabric, group, spine, gates, preset.routing)
    return fabric


# -- rail-only -------------------------------------------------------------------------------------------------
def _rail_only_shape(n_gpus: int, g: int, radix: int) -> tuple[int, int, int]:
    """(servers, servers a leaf, leaves a rail) of a rail-only network, or the FabricError naming what does not fit."""
    if radix < 4 or radix % 2:
        raise FabricError(f"rail-only radix must be an even number >= 4, got {radix}")
    if g == 1:
        raise FabricError("a rail-only network needs servers with several GPUs (preset gpus_per_server > 1)")
    if n_gpus % g:
        raise FabricError(f"{n_gpus} GPUs is not a whole number of {g}-GPU servers")
    servers = n_gpus // g
    d = radix // 2
    leaves = 1 if servers <= radix else math.ceil(servers / d)
    if leaves > radix:
        raise FabricError(
            f"a rail-only network of radix {radix} holds {radix * d * g} GPUs (radix^2/2 servers a rail), not {n_gpus}"
        )
    return servers, d, leaves


class RailOnlyRouter(Router):
    """Within a rail, the rail's own network (a ClosRouter over it); between rails, NVLink to the source server's
    GPU on the destination's rail, then that rail's network (Wang et al. 2023 forward through NVLink: no switch
    joins two rails)."""

    def __init__(self, fabric: Fabric, clos: ClosRouter, gpu_at: np.ndarray) -> None:
        self.fabric, self.clos, self.gpu_at = fabric, clos, gpu_at  # gpu_at[server, local]

    def for_fabric(self, fabric: Fabric) -> Router:
        return RailOnlyRouter(fabric, self.clos.for_fabric(fabric), self.gpu_at)

    def path(self, src: int, dst: int, salt: int) -> list[int]:
        f = self.fabric
        if f.local[src] == f.local[dst]:
            return self.clos.path(src, dst, salt)
        srv = int(f.server[src])
        mid = int(self.gpu_at[srv, int(f.local[dst])])
        return [src, int(f.nvswitch[srv])] + self.clos.path(mid, dst, salt)


def rail_only(n_gpus: int, preset: Preset, radix: int = 64) -> Fabric:
    """Rail-only (Wang et al. 2023, "How to build low-cost networks for large language models"): GPU i of every
    server on rail i's network and nothing joining the rails. A rail of up to `radix` servers is one switch;
    a larger one a non-blocking two-tier Clos of radix-`radix` switches (radix/2 servers a leaf, radix/2 spines
    each joined to every leaf of the rail: up to radix^2/2 servers). Traffic between rails crosses NVLink in
    the source server (RailOnlyRouter). GPUs are numbered rail by rail, so each rail's switches cover a
    contiguous range; ranks are ordered server by server, as on the rail-optimised fat-tree."""
    g = preset.gpus_per_server
    servers, d, leaves = _rail_only_shape(n_gpus, g, radix)
    server = [i % servers for i in range(n_gpus)]
    local = [i // servers for i in range(n_gpus)]
    b = FabricBuilder(n_gpus)
    for r in range(g):
        leaf = [b.switch(0, f"r{r}.l{i}") for i in range(leaves)]
        for s in range(servers):
            b.cable(
                r * servers + s,
                leaf[0 if leaves == 1 else s // d],
                preset.nic_bw,
                _lat(preset, True),
                _lat(preset, False),
            )
        if leaves > 1:
            for j in range(d):
                spine = b.switch(1, f"r{r}.s{j}")
                for node in leaf:
                    b.cable(node, spine, preset.fabric_bw, _lat(preset, True), _lat(preset, True))
    _add_nvlink(b, preset, server)
    fabric = b.build(
        f"rail-only:radix={radix},gpus={n_gpus}",
        "rail-only",
        {"radix": radix, "tiers": 2 if leaves > 1 else 1, "gpus_per_server": g},
        server,
        local,
        topo_rank=_topo_rank(server, local),
    )
    clos = clos_router(fabric, preset.routing)
    if not isinstance(clos, ClosRouter):
        raise FabricError(f"{fabric.name}: internal error, a rail's numbering is not contiguous")
    gpu_at = np.empty((servers, g), dtype=np.int64)
    gpu_at[np.asarray(server), np.asarray(local)] = np.arange(n_gpus)
    fabric.router = RailOnlyRouter(fabric, clos, gpu_at)
    return fabric


# -- spec strings --------------------------------------------------------------------------------------------------
def controller_topology(spec: str) -> Topology | None:
    """The controller's model for 'fat-tree:K', 'leaf-spine:LxSxH' or a JSON path; None for the scale builders."""
    kind, sep, arg = spec.partition(":")
    try:
        if sep and kind == "fat-tree":
            return fat_tree(int(arg))
        if sep and kind == "leaf-spine":
            leaves, spines, hosts = (int(x) for x in arg.split("x"))
            return leaf_spine(leaves, spines, hosts)
    except ValueError as ex:
        raise FabricError(f"topology {spec!r}: {ex}") from ex
    if spec.endswith(".json"):
        try:
            return Topology.load(Path(spec))
        except TopologyError as ex:
            raise FabricError(str(ex)) from ex
    return None


def canonical_spec(spec: str) -> tuple[str, str | None]:
    """A spec in its one spelling, and the deprecation line for an old one (None when it was already canonical):
    'fattree:radix=16' -> ('clos:radix=16', "'fattree' is deprecated ..."). A controller topology with a scale
    builder's options ('fat-tree:radix=64') is refused, naming both builders."""
    kind, sep, rest = spec.partition(":")
    if kind in CONTROLLER_KINDS and "=" in rest:
        raise FabricError(
            f"topology {spec!r}: {kind}:{'K' if kind == 'fat-tree' else 'LxSxH'} is the controller's topology "
            f"(the emulation's); for a fat-tree sized to the GPUs write clos:{rest}"
        )
    if kind not in DEPRECATED:
        return spec, None
    new = DEPRECATED[kind] + sep + rest
    same = {"clos": "the folded-Clos fat-tree sized to the GPUs", "rail": "the rail-optimised fat-tree"}
    return new, (
        f"topology {spec!r}: {kind!r} is deprecated, write {new!r} "
        f"({same.get(DEPRECATED[kind], DEPRECATED[kind])}; fat-tree:K is the controller's k-ary fat-tree)"
    )


def parse_scale_spec(spec: str) -> tuple[str, dict[str, float]]:
    """'rail:radix=128,oversub=2' -> ('rail', {'radix': 128, 'oversub': 2.0}); unknown kinds and keys refused
    (a deprecated spelling is read as its canonical one, with a DeprecationWarning)."""
    canon, deprecated = canonical_spec(spec)
    if deprecated:
        warnings.warn(deprecated, DeprecationWarning, stacklevel=2)
    kind, _, rest = canon.partition(":")
    if kind not in SCALE_KINDS:
        raise FabricError(
            f"unknown topology {spec!r}: use fat-tree:K, leaf-spine:LxSxH, a topology JSON, "
            f"or one of {', '.join(SCALE_KINDS)} (with key=value options)"
        )
    opts: dict[str, float] = {}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key not in SCALE_KEYS[kind]:
            raise FabricError(
                f"topology {spec!r}: {kind} takes {', '.join(sorted(SCALE_KEYS[kind]))}=VALUE, not {item!r}"
            )
        try:
            opts[key] = float(value)
        except ValueError:
            raise FabricError(f"topology {spec!r}: {key}={value!r} is not a number") from None
    return kind, opts


def build(spec: str, preset: Preset, n_gpus: int | None = None) -> Fabric:
    """The fabric a spec names: the controller's model as it is, a scale builder sized to `n_gpus`."""
    canonical_spec(spec)  # refuses a controller topology with a scale builder's options, naming both
    topo = controller_topology(spec)
    if topo is not None:
        fabric = from_controller(topo, preset)
        if n_gpus is not None and n_gpus > fabric.n_gpus:
            raise FabricError(f"{spec} has {fabric.n_gpus} hosts, {n_gpus} asked for")
        return fabric
    kind, opts = parse_scale_spec(spec)
    if n_gpus is None:
        raise FabricError(f"{spec}: the scale builders need a GPU count")
    radix = int(opts.get("radix", 64))
    if kind == "dragonfly+":
        return dragonfly_plus(n_gpus, preset, radix=radix)
    if kind == "rail-only":
        return rail_only(n_gpus, preset, radix=radix)
    return fat_tree3(n_gpus, preset, radix=radix, **_clos_options(kind, opts))


def _clos_options(kind: str, opts: Mapping[str, float]) -> dict[str, Any]:
    return {"tiers": int(opts.get("tiers", 3)), "oversub": float(opts.get("oversub", 1.0)), "rail": kind == "rail"}


def check(spec: str, preset: Preset, n_gpus: int) -> None:
    """Raise the FabricError that build(spec, preset, n_gpus) would, without building the fabric: a command line
    that asks a builder for GPUs it cannot hold is refused before anything runs."""
    topo = controller_topology(spec)
    if topo is not None:
        if n_gpus > len(topo.hosts):
            raise FabricError(f"{spec} has {len(topo.hosts)} hosts, {n_gpus} asked for")
        return
    kind, opts = parse_scale_spec(spec)
    radix = int(opts.get("radix", 64))
    if kind == "dragonfly+":
        _dragonfly_groups(n_gpus, preset.gpus_per_server, radix)
    elif kind == "rail-only":
        _rail_only_shape(n_gpus, preset.gpus_per_server, radix)
    else:
        o = _clos_options(kind, opts)
        _clos_shape(n_gpus, preset.gpus_per_server, radix, o["tiers"], o["oversub"], o["rail"])
