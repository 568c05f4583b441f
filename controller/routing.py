"""IPv4 forwarding for every host on every switch: shortest paths, ECMP over equal next hops.

Routes are compressed per switch: a /16 or /24 that covers only hosts with the
same next hops on that switch becomes one entry (in a fat-tree: a pod's /16 on
the cores, an edge's /24 elsewhere), so a k=8 fabric needs about a tenth of
the per-host entries.  Hosts not in the topology but inside such a prefix are
forwarded towards that prefix's edge switch, which drops them (no route).

ECMP de-correlation: every switch computes the same hash (crc32 of the
5-tuple) and picks member `hash mod size`.  With 2 uplinks at the edge and 2
at the aggregation layer, `hash mod 2` is the same at both, so a flow's
aggregation-layer choice is tied to its edge choice and only half the cores
carry traffic (hash polarisation).  So a switch at tier t lists each next hop
`stride(t)` times in a row (stride = product of the ECMP widths of the tiers
below): its choice is `(hash // stride) mod width`, independent of the choices
below it.
"""

from __future__ import annotations

import ipaddress
import logging
from collections import deque
from dataclasses import dataclass

from controller import names as N
from controller.addressing import ip_to_int, mac_to_int
from controller.entities import Lpm, TableEntry
from controller.topology import Topology

LOG = logging.getLogger(__name__)

PREFIX_LENGTHS = (16, 24)  # tried in this order before falling back to /32


@dataclass(frozen=True)
class Route:
    prefix: str  # "10.1.0.0/16"
    ports: tuple[int, ...]  # one port: forward; several: ECMP over them


def switch_distances(topo: Topology) -> dict[str, dict[str, int]]:
    """Hop counts between all switch pairs (BFS from each switch)."""
    out: dict[str, dict[str, int]] = {}
    for s in topo.switches:
        dist = {s.name: 0}
        todo = deque([s.name])
        while todo:
            cur = todo.popleft()
            for nb in topo.switch_neighbors(cur):
                if nb.peer not in dist:
                    dist[nb.peer] = dist[cur] + 1
                    todo.append(nb.peer)
        out[s.name] = dist
    return out


def next_hops(topo: Topology, dist: dict[str, dict[str, int]]) -> dict[str, dict[str, tuple[int, ...]]]:
    """switch -> host -> the ports on shortest paths to that host (empty if unreachable)."""
    out: dict[str, dict[str, tuple[int, ...]]] = {}
    for s in topo.switches:
        per_host: dict[str, tuple[int, ...]] = {}
        nbs = topo.switch_neighbors(s.name)
        for h in topo.hosts:
            if h.switch == s.name:
                per_host[h.name] = (h.port,)
                continue
            d = dist[s.name].get(h.switch)
            if d is None:
                per_host[h.name] = ()
                continue
            per_host[h.name] = tuple(sorted(nb.port for nb in nbs if dist[nb.peer].get(h.switch) == d - 1))
        out[s.name] = per_host
    return out


def routes(topo: Topology) -> dict[str, list[Route]]:
    """Compressed routes of every switch."""
    hops = next_hops(topo, switch_distances(topo))
    by_net: dict[int, dict[str, list[str]]] = {plen: {} for plen in PREFIX_LENGTHS}
    for h in topo.hosts:
        for plen in PREFIX_LENGTHS:
            net = str(ipaddress.IPv4Network(f"{h.ip}/{plen}", strict=False))
            by_net[plen].setdefault(net, []).append(h.name)
    out: dict[str, list[Route]] = {}
    for s in topo.switches:
        mine = hops[s.name]
        table: list[Route] = []
        done: set[str] = set()
        for h in topo.hosts:
            if h.name in done:
                continue
            if not mine[h.name]:
                LOG.warning("switch %s has no path to host %s", s.name, h.name)
                done.add(h.name)
                continue
            for plen in PREFIX_LENGTHS:
                net = str(ipaddress.IPv4Network(f"{h.ip}/{plen}", strict=False))
                members = by_net[plen][net]
                if len({mine[m] for m in members}) == 1:
                    table.append(Route(net, mine[h.name]))
                    done.update(members)
                    break
            else:
                table.append(Route(f"{h.ip}/32", mine[h.name]))
                done.add(h.name)
        out[s.name] = table
    return out


def ecmp_strides(topo: Topology, table: dict[str, list[Route]]) -> dict[int, int]:
    """tier -> how many times each next hop is repeated in that tier's ECMP groups."""
    width: dict[int, int] = {}
    for s in topo.switches:
        for r in table[s.name]:
            if len(r.ports) > 1:
                width[s.tier] = max(width.get(s.tier, 1), len(r.ports))
    strides, acc = {}, 1
    for tier in range(topo.max_tier + 1):
        strides[tier] = acc
        acc *= width.get(tier, 1)
    return strides


def route_entries(topo: Topology, switch: str, table: list[Route] | None = None, stride: int = 1) -> list[TableEntry]:
    """ipv4_lpm, ecmp_members and host_port entries of one switch."""
    if table is None:
        everything = routes(topo)
        table = everything[switch]
        stride = ecmp_strides(topo, everything)[topo.switch(switch).tier]
    entries: list[TableEntry] = []
    groups: dict[tuple[int, ...], int] = {}
    for r in table:
        net = ipaddress.IPv4Network(r.prefix)
        match = {N.K_DST_ADDR: Lpm(int(net.network_address), net.prefixlen)}
        if len(r.ports) == 1:
            entries.append(TableEntry.make(N.T_IPV4_LPM, match, N.A_FORWARD, {"port": r.ports[0]}))
            continue
        if r.ports not in groups:
            gid = groups[r.ports] = len(groups) + 1
            for i in range(len(r.ports) * stride):
                port = r.ports[(i // stride) % len(r.ports)]
                entries.append(
                    TableEntry.make(N.T_ECMP_MEMBERS, {N.K_GROUP: gid, N.K_INDEX: i}, N.A_FORWARD, {"port": port})
                )
        entries.append(
            TableEntry.make(N.T_IPV4_LPM, match, N.A_ECMP, {"group": groups[r.ports], "size": len(r.ports) * stride})
        )
    for h in topo.hosts_of(switch):
        entries.append(
            TableEntry.make(
                N.T_HOST_PORT,
                {N.K_EGRESS_PORT: h.port},
                N.A_SET_HOST,
                {"mac": mac_to_int(h.mac), "ip": ip_to_int(h.ip)},
            )
        )
    return entries


def all_route_entries(topo: Topology) -> dict[str, list[TableEntry]]:
    table = routes(topo)
    strides = ecmp_strides(topo, table)
    return {s.name: route_entries(topo, s.name, table[s.name], strides[s.tier]) for s in topo.switches}


def lookup(entries: list[TableEntry], ip: str, flow_hash: int = 0) -> int | None:
    """The egress port a switch with these entries picks for `ip` (a model of the P4 tables, for tests)."""
    addr = ip_to_int(ip)
    best: TableEntry | None = None
    best_len = -1
    for e in entries:
        if e.table != N.T_IPV4_LPM:
            continue
        lpm = dict(e.match)[N.K_DST_ADDR]
        assert isinstance(lpm, Lpm)
        if lpm.prefix_len > best_len and (addr >> (32 - lpm.prefix_len)) == (lpm.value >> (32 - lpm.prefix_len)):
            best, best_len = e, lpm.prefix_len
    if best is None:
        return None
    params = dict(best.params)
    if best.action == N.A_FORWARD:
        return params["port"]
    index = flow_hash % params["size"]
    for e in entries:
        if e.table == N.T_ECMP_MEMBERS and dict(e.match) == {N.K_GROUP: params["group"], N.K_INDEX: index}:
            return dict(e.params)["port"]
    return None
