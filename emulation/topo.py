"""The controller's topology model as a Mininet Topo: same names, same port numbers, host addresses from the model.

Thin on purpose: everything that reasons about the network (routing, the
planner) reads `controller.topology.Topology`; this module only transcribes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from controller.topology import Topology
from emulation.mininet_compat import Topo

HOST_PREFIX_LEN = 8  # every host address is in 10.0.0.0/8; the switches route, the hosts just send on-link


class ModelTopo(Topo):
    """Topo(model, switch_cls, switch_opts, iface): one Mininet node per switch and host of the model.

    iface(switch, device_id, port) names a switch's root-side interface (Mininet's default <node>-eth<port>
    could collide with another run's or another program's). Links are plain veths: the network shapes them
    itself (emulation.shaping), since Mininet's TCLink gives HTB a burst worth 120 ms at 1 Mbit/s.
    """

    def build(
        self,
        model: Topology,
        switch_cls: type,
        switch_opts: dict[str, Any],  # type: ignore[override]
        iface: Callable[[str, int, int], str],
    ) -> None:
        for sw in model.switches:
            self.addSwitch(sw.name, cls=switch_cls, device_id=sw.device_id, **switch_opts)
        for h in model.hosts:
            self.addHost(h.name, ip=f"{h.ip}/{HOST_PREFIX_LEN}", mac=h.mac)
        # Host first: its interface (<host>-eth0) is made inside its namespace, the switch end in the root one.
        for h in model.hosts:
            dev = model.switch(h.switch).device_id
            self.addLink(h.name, h.switch, port1=0, port2=h.port, intfName2=iface(h.switch, dev, h.port))
        for ln in model.links:
            a, b = model.switch(ln.a), model.switch(ln.b)
            self.addLink(
                ln.a,
                ln.b,
                port1=ln.a_port,
                port2=ln.b_port,
                intfName1=iface(a.name, a.device_id, ln.a_port),
                intfName2=iface(b.name, b.device_id, ln.b_port),
            )
