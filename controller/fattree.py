"""k-ary fat-tree builder (Al-Fares et al.): k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 cores.

Ports (1-based; BMv2 port 0 is unused):
  edge e of pod p:        1..k/2 hosts, k/2+1+j -> aggregation j of pod p
  aggregation j of pod p: 1+e -> edge e of pod p, k/2+1+m -> core j*k/2+m
  core c:                 p+1 -> pod p (its aggregation switch c // (k/2))
Hosts: h1.. in (pod, edge, n) order with IP 10.p.e.(n+2).
Device ids: edges, then aggregation, then cores, from 1.
"""

from __future__ import annotations

from controller.addressing import host_ip, mac_for_ip
from controller.topology import Host, Link, Switch, Topology, TopologyError

SUPPORTED_K = (2, 4, 6, 8, 10, 12, 14, 16)


def fat_tree(k: int) -> Topology:
    if k not in SUPPORTED_K:
        raise TopologyError(f"fat-tree k must be an even number in {SUPPORTED_K[0]}..{SUPPORTED_K[-1]}, got {k}")
    half = k // 2
    edge = [[f"e{p * half + i + 1}" for i in range(half)] for p in range(k)]
    agg = [[f"a{p * half + j + 1}" for j in range(half)] for p in range(k)]
    core = [f"c{c + 1}" for c in range(half * half)]
    switches: list[Switch] = []
    for p in range(k):
        switches += [Switch(edge[p][i], 0, "edge", 0, pod=p) for i in range(half)]
    for p in range(k):
        switches += [Switch(agg[p][j], 1, "aggregation", 0, pod=p) for j in range(half)]
    switches += [Switch(name, 2, "core", 0) for name in core]
    switches = [Switch(s.name, s.tier, s.role, n + 1, s.pod) for n, s in enumerate(switches)]

    hosts: list[Host] = []
    links: list[Link] = []
    for p in range(k):
        for i in range(half):
            for n in range(half):
                ip = host_ip(p, i, n)
                hosts.append(Host(f"h{len(hosts) + 1}", ip, mac_for_ip(ip), edge[p][i], n + 1))
            for j in range(half):
                links.append(Link(edge[p][i], half + 1 + j, agg[p][j], 1 + i))
        for j in range(half):
            for m in range(half):
                links.append(Link(agg[p][j], half + 1 + m, core[j * half + m], p + 1))
    return Topology("fat-tree", {"k": k}, tuple(switches), tuple(hosts), tuple(links))
