"""The topology model: switches, hosts and links with stable port numbers.

Everything that needs to know the network (routing, the planner, the emulation
that builds it) reads this one model, so port numbers agree by construction.
Tiers: 0 = edge/leaf (hosts attach here), 1 = aggregation/spine, 2 = core.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from controller.names import MAX_PORT

LOG = logging.getLogger(__name__)

FORMAT_VERSION = 1


class TopologyError(ValueError):
    """The topology is inconsistent or cannot be loaded."""


@dataclass(frozen=True)
class Switch:
    name: str
    tier: int  # 0 edge/leaf, 1 aggregation/spine, 2 core
    role: str  # "edge", "aggregation", "core", "leaf", "spine"
    device_id: int
    pod: int | None = None
    grpc_addr: str | None = None  # "127.0.0.1:50001", written by the emulation runner


@dataclass(frozen=True)
class Host:
    name: str
    ip: str
    mac: str
    switch: str
    port: int  # the switch port the host is attached to


def link_key(a: str, b: str) -> tuple[str, str]:
    """One name for a switch-to-switch link, whichever end is given first."""
    return (a, b) if a <= b else (b, a)


@dataclass(frozen=True)
class Link:
    """A switch-to-switch link; `a` is the lower tier end."""

    a: str
    a_port: int
    b: str
    b_port: int


@dataclass(frozen=True)
class Neighbor:
    port: int
    peer: str
    peer_port: int
    is_host: bool


@dataclass(frozen=True)
class Topology:
    kind: str
    params: Mapping[str, Any]
    switches: tuple[Switch, ...]
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    _sw: dict[str, Switch] = field(init=False, repr=False, compare=False)
    _host: dict[str, Host] = field(init=False, repr=False, compare=False)
    _adj: dict[str, dict[int, Neighbor]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        sw: dict[str, Switch] = {}
        ids: dict[int, str] = {}
        for s in self.switches:
            if s.name in sw:
                raise TopologyError(f"duplicate switch name {s.name!r}")
            if s.device_id in ids:
                raise TopologyError(f"switches {ids[s.device_id]!r} and {s.name!r} share device id {s.device_id}")
            sw[s.name] = s
            ids[s.device_id] = s.name
        hosts: dict[str, Host] = {}
        adj: dict[str, dict[int, Neighbor]] = {name: {} for name in sw}

        def attach(switch: str, port: int, nb: Neighbor, what: str) -> None:
            if switch not in sw:
                raise TopologyError(f"{what}: unknown switch {switch!r}")
            if not 1 <= port <= MAX_PORT:
                raise TopologyError(f"{what}: port {port} of {switch!r} outside 1..{MAX_PORT}")
            if port in adj[switch]:
                raise TopologyError(f"{what}: port {port} of {switch!r} is already used by {adj[switch][port].peer!r}")
            adj[switch][port] = nb

        seen_ip: dict[str, str] = {}
        seen_mac: dict[str, str] = {}
        for h in self.hosts:
            if h.name in hosts or h.name in sw:
                raise TopologyError(f"duplicate node name {h.name!r}")
            for value, seen, what in ((h.ip, seen_ip, "IP"), (h.mac.lower(), seen_mac, "MAC")):
                if value in seen:
                    raise TopologyError(f"hosts {seen[value]!r} and {h.name!r} share {what} {value}")
                seen[value] = h.name
            hosts[h.name] = h
            attach(h.switch, h.port, Neighbor(h.port, h.name, 0, True), f"host {h.name}")
        for ln in self.links:
            what = f"link {ln.a}:{ln.a_port}-{ln.b}:{ln.b_port}"
            attach(ln.a, ln.a_port, Neighbor(ln.a_port, ln.b, ln.b_port, False), what)
            attach(ln.b, ln.b_port, Neighbor(ln.b_port, ln.a, ln.a_port, False), what)
        object.__setattr__(self, "_sw", sw)
        object.__setattr__(self, "_host", hosts)
        object.__setattr__(self, "_adj", adj)

    # -- lookups -------------------------------------------------------------------
    def switch(self, name: str) -> Switch:
        try:
            return self._sw[name]
        except KeyError:
            raise TopologyError(f"no switch named {name!r} in this {self.kind} topology") from None

    def host(self, name: str) -> Host:
        try:
            return self._host[name]
        except KeyError:
            raise TopologyError(f"no host named {name!r} in this {self.kind} topology") from None

    def has_host(self, name: str) -> bool:
        return name in self._host

    def neighbors(self, switch: str) -> list[Neighbor]:
        """The switch's used ports, in port order."""
        self.switch(switch)
        return [self._adj[switch][p] for p in sorted(self._adj[switch])]

    def switch_neighbors(self, switch: str) -> list[Neighbor]:
        return [n for n in self.neighbors(switch) if not n.is_host]

    def hosts_of(self, switch: str) -> list[Host]:
        return [self._host[n.peer] for n in self.neighbors(switch) if n.is_host]

    def num_ports(self, switch: str) -> int:
        """Highest port number in use (BMv2 ports are 1..num_ports; port 0 unused)."""
        return max(self._adj[switch], default=0)

    def by_tier(self, tier: int) -> list[Switch]:
        return [s for s in self.switches if s.tier == tier]

    @property
    def max_tier(self) -> int:
        return max((s.tier for s in self.switches), default=0)

    def with_grpc(self, addresses: Mapping[str, str]) -> Topology:
        """A copy with the P4Runtime addresses of (some) switches set."""
        unknown = set(addresses) - set(self._sw)
        if unknown:
            raise TopologyError(f"grpc addresses for unknown switches {sorted(unknown)}")
        switches = tuple(replace(s, grpc_addr=addresses.get(s.name, s.grpc_addr)) for s in self.switches)
        return Topology(self.kind, dict(self.params), switches, self.hosts, self.links)

    def without(self, switches: Iterable[str], links: Iterable[tuple[str, str]] = ()) -> Topology:
        """The fabric that is left when `switches` fail: without them, their links and the hosts they carried;
        and without the switch-to-switch `links` that are down (pairs of switch names, either order)."""
        gone = set(switches)
        for name in gone:
            self.switch(name)
        down = {frozenset(pair) for pair in links}
        known = {frozenset((ln.a, ln.b)) for ln in self.links}
        unknown = sorted("-".join(sorted(pair)) for pair in down - known)
        if unknown:
            raise TopologyError(f"no switch-to-switch link {', '.join(unknown)} in this topology")
        return Topology(
            self.kind,
            dict(self.params),
            tuple(s for s in self.switches if s.name not in gone),
            tuple(h for h in self.hosts if h.switch not in gone),
            tuple(
                ln for ln in self.links if ln.a not in gone and ln.b not in gone and frozenset((ln.a, ln.b)) not in down
            ),
        )

    # -- serialization --------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "kind": self.kind,
            "params": dict(self.params),
            "switches": [_drop_none(vars(s)) for s in self.switches],
            "hosts": [vars(h) for h in self.hosts],
            "links": [vars(ln) for ln in self.links],
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "topology") -> Topology:
        """The topology a JSON document describes (docs/topology.md), checked completely first: a document the
        format does not allow is refused with one line naming `source`, the field and the fix."""
        from controller import toposchema  # it names this module's TopologyError

        toposchema.check(data, source)
        return cls(
            kind=str(data.get("kind", "custom")),
            params=dict(data.get("params", {})),
            switches=tuple(Switch(**s) for s in data["switches"]),
            hosts=tuple(Host(**h) for h in data.get("hosts", [])),
            links=tuple(Link(**ln) for ln in data.get("links", [])),
        )

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> Topology:
        """A topology JSON file, read and checked completely (controller.toposchema) before anything is built."""
        from controller import toposchema

        return cls.from_dict(toposchema.read(Path(path)), str(path))


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def host_names(topo: Topology, spec: str | Iterable[str]) -> tuple[str, ...]:
    """Expand a host list: 'h1,h2', 'h1-h8' ranges and 'all'; order kept, duplicates refused."""
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else [s.strip() for s in spec]
    out: list[str] = []
    order = [h.name for h in topo.hosts]
    for item in filter(None, items):
        if item == "all":
            out.extend(order)
        elif "-" in item and not topo.has_host(item):
            lo, _, hi = item.partition("-")
            try:
                i, j = order.index(lo), order.index(hi)
            except ValueError:
                raise TopologyError(f"host range {item!r}: unknown host {lo if lo not in order else hi!r}") from None
            if j < i:
                raise TopologyError(f"host range {item!r} runs backwards")
            out.extend(order[i : j + 1])
        else:
            out.append(item)
    dups = sorted({h for h in out if out.count(h) > 1})
    if dups:
        raise TopologyError(f"hosts listed twice: {', '.join(dups)}")
    return tuple(out)
