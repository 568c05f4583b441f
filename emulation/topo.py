"""The controller's topology model as a Mininet Topo: same names, same port numbers, host addresses from the model.

Thin on purpose: everything that reasons about the network (routing, the
planner) reads `controller.topology.Topology`; this module only transcribes it.
"""

from __future__ import annotations

import logging

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mininet.topo import Topo

# mininet.log makes MininetLogger (with its own console handler) the class of every logger created after it.
logging.setLoggerClass(logging.Logger)

from controller.topology import Topology

HOST_PREFIX_LEN = 8  # every host address is in 10.0.0.0/8; the switches route, the hosts just send on-link


class LinkShapeError(ValueError):
    """A bandwidth, delay or loss that tc cannot apply."""


@dataclass(frozen=True)
class LinkShape:
    """tc settings applied to both ends of every link (TCLink): None leaves the link unshaped."""

    bw_mbps: float | None = None
    delay_ms: float | None = None
    loss_pct: float | None = None
    max_queue: int | None = None

    def __post_init__(self) -> None:
        if self.bw_mbps is not None and not 0 < self.bw_mbps <= 1000:
            raise LinkShapeError(f"link bandwidth {self.bw_mbps} Mbit/s outside (0, 1000] (tc's HTB in Mininet)")
        if self.delay_ms is not None and not 0 <= self.delay_ms <= 10_000:
            raise LinkShapeError(f"link delay {self.delay_ms} ms outside 0..10000")
        if self.loss_pct is not None and not 0 <= self.loss_pct < 100:
            raise LinkShapeError(f"link loss {self.loss_pct}% outside [0, 100)")
        if self.max_queue is not None and self.max_queue < 1:
            raise LinkShapeError(f"max queue {self.max_queue} packets must be >= 1")

    @property
    def shaped(self) -> bool:
        return any(v for v in (self.bw_mbps, self.delay_ms, self.loss_pct))

    def link_params(self) -> dict[str, Any]:
        """Keyword arguments for Mininet's TCLink (only the ones set)."""
        out: dict[str, Any] = {}
        if self.bw_mbps:
            out["bw"] = self.bw_mbps
        if self.delay_ms:
            out["delay"] = f"{self.delay_ms}ms"
        if self.loss_pct:
            out["loss"] = self.loss_pct
        if self.max_queue:
            out["max_queue_size"] = self.max_queue
        return out


class ModelTopo(Topo):
    """Topo(model, shape, switch_cls, switch_opts, iface): one Mininet node per switch and host of the model.

    iface(switch, device_id, port) names a switch's root-side interface (Mininet's default <node>-eth<port>
    could collide with another run's or another program's).
    """

    def build(self, model: Topology, shape: LinkShape, switch_cls: type, switch_opts: dict[str, Any],  # type: ignore[override]
              iface: Callable[[str, int, int], str]) -> None:
        for sw in model.switches:
            self.addSwitch(sw.name, cls=switch_cls, device_id=sw.device_id, **switch_opts)
        for h in model.hosts:
            self.addHost(h.name, ip=f"{h.ip}/{HOST_PREFIX_LEN}", mac=h.mac)
        params = shape.link_params()
        # Host first: its interface (<host>-eth0) is made inside its namespace, the switch end in the root one.
        for h in model.hosts:
            dev = model.switch(h.switch).device_id
            self.addLink(h.name, h.switch, port1=0, port2=h.port, intfName2=iface(h.switch, dev, h.port), **params)
        for ln in model.links:
            a, b = model.switch(ln.a), model.switch(ln.b)
            self.addLink(ln.a, ln.b, port1=ln.a_port, port2=ln.b_port, intfName1=iface(a.name, a.device_id, ln.a_port),
                         intfName2=iface(b.name, b.device_id, ln.b_port), **params)
