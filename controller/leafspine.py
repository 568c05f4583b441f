"""Two-tier leaf-spine builder.

Ports: leaf l: 1..hosts_per_leaf hosts, hosts_per_leaf+1+s -> spine s; spine s: l+1 -> leaf l.
Hosts h1.. in (leaf, n) order with IP 10.0.l.(n+2). Device ids: leaves, then spines.
"""

from __future__ import annotations

from controller.addressing import host_ip, mac_for_ip
from controller.topology import Host, Link, Switch, Topology, TopologyError


def leaf_spine(leaves: int, spines: int, hosts_per_leaf: int) -> Topology:
    if not 1 <= leaves <= 255:
        raise TopologyError(f"leaf-spine: leaves must be 1..255, got {leaves}")
    if not 1 <= spines <= 64:
        raise TopologyError(f"leaf-spine: spines must be 1..64, got {spines}")
    if not 1 <= hosts_per_leaf <= 64:
        raise TopologyError(f"leaf-spine: hosts per leaf must be 1..64, got {hosts_per_leaf}")
    leaf = [f"l{i + 1}" for i in range(leaves)]
    spine = [f"s{i + 1}" for i in range(spines)]
    switches = [Switch(n, 0, "leaf", i + 1, pod=i) for i, n in enumerate(leaf)]
    switches += [Switch(n, 1, "spine", leaves + i + 1) for i, n in enumerate(spine)]
    hosts: list[Host] = []
    links: list[Link] = []
    for li, lname in enumerate(leaf):
        for n in range(hosts_per_leaf):
            ip = host_ip(0, li, n)
            hosts.append(Host(f"h{len(hosts) + 1}", ip, mac_for_ip(ip), lname, n + 1))
        for si, sname in enumerate(spine):
            links.append(Link(lname, hosts_per_leaf + 1 + si, sname, li + 1))
    params = {"leaves": leaves, "spines": spines, "hosts_per_leaf": hosts_per_leaf}
    return Topology("leaf-spine", params, tuple(switches), tuple(hosts), tuple(links))
