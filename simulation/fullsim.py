"""The check on the phase model: the same algorithm simulated message by message, one SimGrid actor per rank.

Where it is affordable (a few hundred ranks: SimGrid's Python actors are
threads, about 8k messages a second here), every rank (and, for in-network
aggregation, every switch of the tree) is an actor that sends each step's or
each packet's message when the algorithm says so, and SimGrid moves the
messages over the same links, on the same routes, with the same latencies as
the phase model.  No composition formula is involved: the all-reduce ends
when the last rank has its result.  `compare` runs both and returns the two
times.  A per-message software overhead (the preset's step overhead) is a
latency in front of each sender, as the phase model treats it.

Run as `python -m simulation.fullsim IN.json OUT.json` (one SimGrid engine per process).
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from simulation.engine import EngineError, _raise_stack, simgrid_available
from simulation.methods import LANES, canonical, double_binary_tree
from simulation.model import Evaluation, Scenario
from simulation.params import IncFrames, Preset, agg_elements

LOG = logging.getLogger(__name__)


class _Platform:
    """Collects the links and routes a full simulation needs, in compact numbering."""

    def __init__(self, ev: Evaluation, alpha: float) -> None:
        self.ev, self.alpha = ev, alpha
        self.links: dict[int, int] = {}
        self.routes: dict[tuple[int, int], list[int]] = {}
        self.hosts: set[int] = set()

    def route(self, a: int, b: int, adjacent: bool = False) -> None:
        if (a, b) in self.routes:
            return
        f = self.ev.fabric
        path = f.links_of([a, b] if adjacent else f.path(a, b))
        self.routes[(a, b)] = [self.links.setdefault(lid, len(self.links)) for lid in path]
        self.hosts.update((a, b))

    def spec(self, algo: dict[str, Any]) -> dict[str, Any]:
        f = self.ev.fabric
        ids = sorted(self.links, key=self.links.__getitem__)
        return {
            "links": [[float(f.link_bw[i]), float(f.link_lat[i])] for i in ids],
            "hosts": sorted(self.hosts),
            "routes": [[a, b, r] for (a, b), r in self.routes.items()],
            "alpha": self.alpha,
            "algo": algo,
        }


def build_spec(ev: Evaluation, method: str, size: int) -> dict[str, Any]:
    """The full-simulation input for `method` on the evaluation's first job, `size` bytes per GPU."""
    p: Preset = ev.preset
    job = ev.jobs[0]
    topo = job.topology_order(ev.fabric)
    n = len(topo)
    if method == "ring-1nic":
        plat = _Platform(ev, p.step_overhead)
        for i in range(n):
            plat.route(topo[i], topo[(i + 1) % n])
        seg = size / n
        if p.pipeline_chunk < seg:
            raise ValueError("the full ring simulation moves whole segments: give the preset pipeline_chunk >= S/N")
        return plat.spec({"name": "ring", "order": topo, "steps": 2 * (n - 1), "bytes": p.wire_bytes(seg)})
    if method == "tree-1nic":
        plat = _Platform(ev, p.step_overhead)
        t1, t2 = double_binary_tree(n)
        for t in (t1, t2):
            for a, b in enumerate(t):
                if b >= 0:
                    plat.route(topo[a], topo[b])
                    plat.route(topo[b], topo[a])
        half = size / 2
        chunk = min(float(p.pipeline_chunk), half)
        chunks = math.ceil(half / chunk)
        return plat.spec(
            {"name": "tree", "ranks": topo, "trees": [t1, t2], "chunks": chunks, "bytes": p.wire_bytes(chunk)}
        )
    if method.startswith("inc-"):
        tree = next(t for t in ev.trees["inc"] if t.job == job.index)
        plat = _Platform(ev, p.step_overhead)
        for c, par in tree.parent.items():
            plat.route(c, par, adjacent=True)
            plat.route(par, c, adjacent=True)
        packets = math.ceil(size / 4 / agg_elements())
        frames = IncFrames.of(LANES[method], len(tree.gpus), tree.balanced)
        spec = plat.spec(
            {
                "name": "inc",
                "root": tree.root,
                "parent": [[c, q] for c, q in tree.parent.items()],
                "gpus": list(tree.gpus),
                "packets": packets,
                "up": frames.host_up,
                "up_switch": frames.switch_up,
                "down": frames.down,
                "exponent": frames.exponent,
                "exp_rounds": p.exponent_slots(packets, tree.window, frames.lanes),
                "window": tree.window,
            }
        )
        # a switch adds its aggregation latency to every packet it sends on (up from an inner switch, down from any)
        spec["extra_latency"] = {str(sw): p.switch_agg_latency for sw in tree.children}
        return spec
    raise ValueError(f"no full simulation for {method!r} (have ring, tree, inc-*)")


def run_spec(spec: dict[str, Any], timeout: float = 900.0) -> float:
    """Run one full simulation in its own process; the all-reduce's simulated time in seconds."""
    missing = simgrid_available()
    if missing:
        raise EngineError(missing)
    with tempfile.TemporaryDirectory(prefix="p4ina-full-") as tmp:
        src, dst = Path(tmp) / "in.json", Path(tmp) / "out.json"
        src.write_text(json.dumps(spec))
        proc = subprocess.run(
            [sys.executable, "-m", "simulation.fullsim", str(src), str(dst)],
            capture_output=True,
            text=True,
            preexec_fn=_raise_stack,
            timeout=timeout,
        )
        if proc.returncode or not dst.exists():
            tail = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if "->" not in ln][-6:]
            raise EngineError(f"full simulation failed (exit {proc.returncode}): " + " | ".join(tail))
        return float(json.loads(dst.read_text())["time"])


def compare(scenario: Scenario, method: str, size: int, preset: Preset | None = None) -> tuple[float, float]:
    """(phase-model time, full-simulation time) of `method` for the scenario's first job."""
    method = canonical(method)
    ev = Evaluation(scenario.__class__(**{**scenario.to_dict(), "methods": (method,), "sizes": (size,)}), preset)
    ev.build()
    ev.solve()
    model = next(r.time_s for r in ev.rows() if r.method == method and r.job == 0)
    return model, run_spec(build_spec(ev, method, size))


# -- the SimGrid side -------------------------------------------------------------------------------------------
def _main(src: str, dst: str) -> int:
    """Build the platform, start the algorithm's actors, write the time the last rank finished.

    Every directed edge a->b of the algorithm gets a sender actor on a (messages leave in order, one at a
    time, at whatever rate the shared links give: a NIC queue, not a processor-sharing fluid) and a
    forwarder on a virtual host w: the message is serialised over the real links a->w (no latency there),
    then w passes it on to b over a private link that has the path's latency (plus the per-message
    software overhead) and no bandwidth limit, so later messages' transfers overlap earlier ones' latency.
    """
    spec = json.loads(Path(src).read_text())
    import simgrid as sg

    engine = sg.Engine(
        [
            "p4ina-full",
            "--cfg=network/model:CM02",
            "--cfg=network/crosstraffic:0",
            "--cfg=network/TCP-gamma:0",
            "--log=root.thres:critical",
            "--log=xbt_cfg.thres:critical",
        ]
    )
    zone = sg.NetZone.create_full_zone("fabric")
    links = [
        sg.LinkInRoute(zone.create_link(f"l{i}", bw).set_latency(0.0).seal())
        for i, (bw, _lat) in enumerate(spec["links"])
    ]
    lat = [link_lat for _bw, link_lat in spec["links"]]
    hosts = {n: zone.create_host(f"n{n}", 1.0).seal() for n in spec["hosts"]}
    algo = spec["algo"]
    per_message = spec["alpha"] if algo["name"] != "inc" else 0.0  # in-network: one start-up per collective
    wires = {}
    for a, b, route in spec["routes"]:
        w = zone.create_host(f"w{a}-{b}", 1.0).seal()
        extra = spec.get("extra_latency", {}).get(str(a), 0.0)
        delay = zone.create_link(f"d{a}-{b}", 1e18).set_latency(per_message + extra + sum(lat[i] for i in route)).seal()
        zone.add_route(hosts[a].netpoint, w.netpoint, None, None, [links[i] for i in route], False)
        zone.add_route(w.netpoint, hosts[b].netpoint, None, None, [sg.LinkInRoute(delay)], False)
        wires[(a, b)] = w
    zone.seal()
    mbox = sg.Mailbox.by_name
    done: list[float] = []
    expected = [0]

    def finished() -> None:
        done.append(sg.Engine.clock)
        if len(done) == expected[0]:
            Path(dst).write_text(json.dumps({"time": max(done)}))
            sys.stdout.flush()
            os._exit(0)

    class Edge:
        """a -> b: push(payload, size, mailbox at b) queues a message; it arrives after transfer + latency."""

        def __init__(self, a: int, b: int) -> None:
            self.queue: list[tuple[Any, int, str]] = []
            self.ready = sg.Semaphore(0)
            self.name = f"x{a}-{b}"
            snd = sg.Actor.create(f"snd{a}-{b}", hosts[a], self.send)
            fwd = sg.Actor.create(f"fwd{a}-{b}", wires[(a, b)], self.forward)
            snd.daemonize()
            fwd.daemonize()
            mbox(self.name).set_receiver(fwd)

        def push(self, payload: Any, size: int, to: str) -> None:
            self.queue.append((payload, size, to))
            self.ready.release()

        def send(self) -> None:
            while True:
                self.ready.acquire()
                payload, size, to = self.queue.pop(0)
                mbox(self.name).put((payload, to), max(size, 1))

        def forward(self) -> None:
            while True:
                payload, to = mbox(self.name).get()
                mbox(to).put_init(payload, 1).detach()  # 1 byte: SimGrid 3.32 delivers 0-byte eager comms early

    edges: dict[tuple[int, int], Edge] = {}

    def edge(a: int, b: int) -> Edge:
        if (a, b) not in edges:
            edges[(a, b)] = Edge(a, b)
        return edges[(a, b)]

    if algo["name"] == "ring":
        order, steps, size = algo["order"], algo["steps"], int(algo["bytes"])
        n = len(order)
        expected[0] = n

        def rank(i: int) -> None:
            me, right = order[i], order[(i + 1) % n]
            out = edge(me, right)
            for step in range(steps):
                out.push(step, size, f"r{right}")
                mbox(f"r{me}").get()
            finished()

        for i in range(n):
            edge(order[i], order[(i + 1) % n])
            actor = sg.Actor.create(f"rank{i}", hosts[order[i]], rank, i)
            mbox(f"r{order[i]}").set_receiver(actor)

    elif algo["name"] == "tree":
        ranks, chunks, size = algo["ranks"], algo["chunks"], int(algo["bytes"])
        expected[0] = 2 * len(ranks)
        for t, parent in enumerate(algo["trees"]):
            kids: dict[int, list[int]] = {}
            for a, b in enumerate(parent):
                if b >= 0:
                    kids.setdefault(b, []).append(a)
                    edge(ranks[a], ranks[b])
                    edge(ranks[b], ranks[a])

            def up(t: int, a: int, parent: list[int], kids: dict[int, list[int]]) -> None:
                me = ranks[a]
                for c in range(chunks):
                    for k in kids.get(a, []):  # chunk c from every child, each on its own mailbox
                        mbox(f"u{t}.{me}.{ranks[k]}").get()
                    if parent[a] >= 0:
                        edge(me, ranks[parent[a]]).push(c, size, f"u{t}.{ranks[parent[a]]}.{me}")
                    else:
                        mbox(f"d{t}.{me}").put_init(c, 1).detach()  # the root turns the chunk around

            def down(t: int, a: int, kids: dict[int, list[int]]) -> None:
                me = ranks[a]
                for c in range(chunks):
                    mbox(f"d{t}.{me}").get()
                    for k in kids.get(a, []):
                        edge(me, ranks[k]).push(c, size, f"d{t}.{ranks[k]}")
                finished()

            for a in range(len(ranks)):
                act_u = sg.Actor.create(f"up{t}.{a}", hosts[ranks[a]], up, t, a, parent, kids)
                act_d = sg.Actor.create(f"down{t}.{a}", hosts[ranks[a]], down, t, a, kids)
                for k in kids.get(a, []):
                    mbox(f"u{t}.{ranks[a]}.{ranks[k]}").set_receiver(act_u)
                mbox(f"d{t}.{ranks[a]}").set_receiver(act_d)

    elif algo["name"] == "inc":
        parent = {c: q for c, q in algo["parent"]}
        kids: dict[int, list[int]] = {}
        for c, q in parent.items():
            kids.setdefault(q, []).append(c)
            edge(c, q)
            edge(q, c)
        packets, up_b, dn_b, window, root = (
            algo["packets"],
            int(algo["up"]),
            int(algo["down"]),
            algo["window"],
            algo["root"],
        )
        up_s, exp_b, n_exp = (
            int(algo.get("up_switch", up_b)),
            int(algo.get("exponent", 0)),
            int(algo.get("exp_rounds", 0)),
        )
        total = packets + n_exp  # packet k < n_exp: slot k's exponent round; then the data packets
        expected[0] = len(algo["gpus"])

        def size(k: int, data: int) -> int:
            return exp_b if k < n_exp else data

        def switch_up(sw: int) -> None:
            count: dict[int, int] = {}
            need = len(kids[sw])
            for _ in range(total * need):
                k = mbox(f"u{sw}").get()
                count[k] = count.get(k, 0) + 1
                if count[k] == need:
                    if sw == root:
                        for c in kids[sw]:
                            edge(sw, c).push(k, size(k, dn_b), f"d{c}")
                    else:
                        edge(sw, parent[sw]).push(k, size(k, up_s), f"u{parent[sw]}")

        def switch_down(sw: int) -> None:
            for _ in range(total):
                k = mbox(f"d{sw}").get()
                for c in kids[sw]:
                    edge(sw, c).push(k, size(k, dn_b), f"d{c}")

        # packet j may leave once its slot's previous round is back: packet j - lag (the exponent rounds fill
        # the slots first, so lag = their number; without them, the window)
        lag = n_exp if n_exp else window

        def gpu_send(g: int, back: list[Any]) -> None:
            sg.this_actor.sleep_for(spec["alpha"])  # the collective's software start-up, once
            for k in range(total):
                if k >= lag:
                    back[k - lag].acquire()
                edge(g, parent[g]).push(k, size(k, up_b), f"u{parent[g]}")

        def gpu_recv(g: int, back: list[Any]) -> None:
            for _ in range(total):
                k = mbox(f"d{g}").get()
                back[k].release()
            finished()

        for sw in kids:
            a = sg.Actor.create(f"up{sw}", hosts[sw], switch_up, sw)
            mbox(f"u{sw}").set_receiver(a)
            if sw != root:
                b = sg.Actor.create(f"down{sw}", hosts[sw], switch_down, sw)
                mbox(f"d{sw}").set_receiver(b)
        for g in algo["gpus"]:
            back = [sg.Semaphore(0) for _ in range(total)]
            sg.Actor.create(f"send{g}", hosts[g], gpu_send, g, back)
            r = sg.Actor.create(f"recv{g}", hosts[g], gpu_recv, g, back)
            mbox(f"d{g}").set_receiver(r)
    else:
        raise SystemExit(f"unknown algorithm {algo['name']!r}")

    engine.run()
    Path(dst).write_text(json.dumps({"time": max(done) if done else 0.0, "incomplete": len(done) != expected[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(_main(*sys.argv[1:]))
