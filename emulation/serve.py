"""`p4ina serve`: start the emulated network and keep it up for the `p4ina` CLI.

The experiment runner drives the controller from Python; this is the same
network for someone who wants to drive it by hand. It writes the topology
with every switch's gRPC address and waits (Ctrl-C or SIGTERM ends it, with
the usual guaranteed teardown). Nothing is installed: the printed `p4ina`
commands push the program, the routes and a job. Needs root.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from controller.topology import TopologyError
from controller.topospec import load_topology
from emulation.network import NetworkConfig, running
from emulation.nodes import BACKENDS, backend_missing, default_backend
from emulation.shaping import LinkShape, LinkShapeError

LOG = logging.getLogger("emulation.serve")


def main(argv: list[str] | None = None, prog: str = "p4ina serve") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", default="fat-tree:4", help="fat-tree:K, leaf-spine:LxSxH or a topology JSON")
    ap.add_argument("--switch", choices=BACKENDS, default=None, help="switch back end (default: embedded)")
    ap.add_argument("--bw", type=float, default=0.0, help="link rate in Mbit/s (0: unshaped)")
    ap.add_argument(
        "--topology-out",
        type=Path,
        default=Path("state/topology.json"),
        help="where to write the topology with gRPC addresses (default state/topology.json)",
    )
    ap.add_argument("--run-dir", type=Path, default=Path("state/serve"), help="switch logs")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )

    # every input is checked before anything is made or started: one line, exit status 2
    backend = args.switch or default_backend()
    try:
        model = load_topology(args.topology)
        shape = LinkShape(bw_mbps=args.bw or None)
        why = backend_missing(backend)
    except (TopologyError, LinkShapeError) as ex:
        why = str(ex)
    if why is None and os.geteuid() != 0:
        why = "needs root (Mininet): run it with sudo or as root"
    if why:
        print(f"{prog}: error: {why}", file=sys.stderr)
        return 2

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    args.run_dir.mkdir(parents=True, exist_ok=True)
    config = NetworkConfig(run_dir=args.run_dir, backend=backend, shape=shape)
    with running(model, config) as net:
        args.topology_out.parent.mkdir(parents=True, exist_ok=True)
        net.topology.save(args.topology_out)
        hosts = ",".join(h.name for h in net.topology.hosts[:4])
        print(
            f"network up: {len(net.topology.switches)} switches ({config.backend}), {len(net.topology.hosts)} hosts; "
            f"topology with gRPC addresses in {args.topology_out}\n"
            f"  p4ina pipeline push --topology {args.topology_out}\n"
            f"  p4ina routes install\n"
            f"  p4ina job install --job 7 --hosts {hosts} --lanes int8\n"
            f"  p4ina job show --job 7; p4ina counters --job 7; p4ina verify\n"
            f"Ctrl-C stops the network.",
            flush=True,
        )
        stop.wait()
    print("network stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
