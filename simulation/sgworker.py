"""The SimGrid side of the phase model: one process, one platform, the max-min rates of concurrent flows.

Run by simulation.engine as `python -m simulation.sgworker IN.npz OUT.npz`, never imported by the rest of
the package: SimGrid allows one engine per process, its actors are threads, and its maestro recurses deeply
on large flow sets (the parent raises this process's stack limit).

The platform is a star zone with one host per flow whose route is the flow's own list of (contended)
links, and one sink with an empty route: so every flow follows exactly the path the fabric's router chose,
however the fabric looks, and the zone costs memory only in proportion to the flows.  The driver actor
starts every flow of a problem at once with a payload that cannot finish, lets the network model run for a
while and reads how far each flow got: the rate SimGrid's max-min sharing (CM02 model, no TCP window bound,
no cross-traffic) gives it while all of them are active, which is the steady state of a pipelined phase.
"""

from __future__ import annotations

import os
import sys

import numpy as np

SIZE = float(1 << 49)  # payload that no flow finishes: ~5.6e14 bytes, exactly representable


def main(argv: list[str]) -> int:
    src, dst = argv
    data = np.load(src)
    import simgrid as sg

    engine = sg.Engine(
        [
            "p4ina-simulate",
            "--cfg=network/model:CM02",
            "--cfg=network/crosstraffic:0",
            "--cfg=network/TCP-gamma:0",
            "--log=root.thres:critical",
            "--log=xbt_cfg.thres:critical",
        ]
    )
    zone = sg.NetZone.create_star_zone("fabric")
    link_bw = data["link_bw"]
    links = [
        sg.LinkInRoute(zone.create_link(f"l{i}", float(bw)).set_latency(0.0).seal()) for i, bw in enumerate(link_bw)
    ]
    sink = zone.create_host("sink", 1.0).seal()
    problems = int(data["problems"])
    hosts: list[list[object]] = []
    caps: list[np.ndarray] = []
    for k in range(problems):
        off, flat, cap = data[f"off{k}"], data[f"links{k}"].tolist(), data[f"cap{k}"]
        hs = []
        for i, c in enumerate(cap.tolist()):
            h = zone.create_host(f"p{k}f{i}", 1.0).seal()
            route = [links[j] for j in flat[off[i] : off[i + 1]]]
            if c != float(
                "inf"
            ):  # Comm.set_rate is refused on comms made by sendto_init (3.32): a private link caps the flow
                route.append(sg.LinkInRoute(zone.create_link(f"p{k}c{i}", c).set_latency(0.0).seal()))
            zone.add_route(h.netpoint, None, None, None, route, False)
            hs.append(h)
        hosts.append(hs)
        caps.append(cap)
    zone.add_route(None, sink.netpoint, None, None, [], False)
    zone.seal()
    out: dict[str, np.ndarray] = {}
    peak = max(
        [float(link_bw.max()) if len(link_bw) else 1.0]
        + [float(c[np.isfinite(c)].max()) for c in caps if np.isfinite(c).any()]
    )
    dt = SIZE / (16.0 * peak)  # the fastest flow moves 1/16 of its payload: no flow can finish

    def driver() -> None:
        for k in range(problems):
            comms = []
            for h in hosts[k]:
                comms.append(sg.Comm.sendto_async(h, sink, int(SIZE)))
            sg.this_actor.sleep_for(dt)
            out[f"rate{k}"] = (SIZE - np.array([c.remaining for c in comms])) / dt
            if k == problems - 1:
                np.savez(dst, **out)
                sys.stdout.flush()
                os._exit(0)  # cancelling 10^5 comms costs more than the whole solve; nothing else is left to do
            for c in comms:
                c.cancel()

    sg.Actor.create("driver", sink, driver)
    engine.run()
    np.savez(dst, **out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
