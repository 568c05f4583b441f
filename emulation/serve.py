"""`p4ina serve`: start an emulated network and keep it up for the `p4ina` verbs.

The experiment runner drives the controller from Python; this is the same network for someone who wants
to drive it by hand. Each topology has its own folder, state/<topology>/ (e.g. state/leaf-spine-2x1x2/):
the topology with every switch's gRPC address (topology.json), the controller's state (p4ina-state.json,
started afresh: the new switches hold nothing), serve's record of the network (serve.json: its hosts'
processes and interfaces, which `p4ina allreduce` uses) and the switch logs (run/). state/current points
at the folder, so the verbs find this network without --topology or --state. Ctrl-C or SIGTERM ends it,
with the usual guaranteed teardown; the state then says the network stopped and holds no jobs, and the
verbs say so at once. Nothing is installed: the printed `p4ina` commands push the program, the routes and
a job. Needs root.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
from datetime import datetime
from pathlib import Path

from controller.state import CURRENT, STATE_NAME, STATE_ROOT, Served, State, StateError, locked, process_start
from controller.topology import TopologyError
from controller.topospec import load_topology
from emulation.network import EmulatedNetwork, NetworkConfig, running
from emulation.nodes import BACKENDS, backend_missing, default_backend
from emulation.served import SERVE_RECORD, Process, ServedHost, ServeRecord
from emulation.shaping import LinkShape, LinkShapeError

LOG = logging.getLogger("emulation.serve")


def topology_name(spec: str) -> str:
    """The folder name of a topology: leaf-spine:2x1x2 -> leaf-spine-2x1x2, /x/my.json -> my."""
    kind, sep, arg = spec.partition(":")
    name = f"{kind}-{arg}" if sep and kind in ("fat-tree", "leaf-spine") else Path(spec).stem
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "topology"
    return f"{name}-topology" if name == CURRENT.name else name


def _point_current(folder: Path) -> bool:
    """state/current -> folder, when folder is one of state/'s own (True); replaced atomically."""
    if folder.resolve().parent != STATE_ROOT.resolve():
        return False
    tmp = STATE_ROOT / f".current-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    os.symlink(folder.name, tmp)
    try:
        os.replace(tmp, CURRENT)
    except OSError as ex:  # e.g. a real folder named current
        tmp.unlink(missing_ok=True)
        LOG.warning("cannot point %s at %s (%s): pass --state to the verbs", CURRENT, folder, ex)
        return False
    return True


def _record(net: EmulatedNetwork, args: argparse.Namespace, topo_out: Path, state: Path, me: Process) -> ServeRecord:
    from emulation import cleanup

    hosts = {}
    for h in net.topology.hosts:
        pid = net.host(h.name).pid
        hosts[h.name] = ServedHost(h.name, Process(pid, cleanup.start_time(pid) or 0), net.host_iface(h.name))
    return ServeRecord(
        topology=args.topology,
        topology_file=str(topo_out.resolve()),
        state=str(state.resolve()),
        backend=net.config.backend,
        bw_mbps=net.config.shape.bw_mbps,
        tag=net.tag,
        runner=me,
        since=datetime.now().isoformat(timespec="seconds"),
        hosts=hosts,
        switches={n: Process(pid, cleanup.start_time(pid) or 0) for n, pid in net.switch_pids().items()},
        link_ports=net.link_ports(),
    )


def main(argv: list[str] | None = None, prog: str = "p4ina serve") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", default="fat-tree:4", help="fat-tree:K, leaf-spine:LxSxH or a topology JSON")
    ap.add_argument("--switch", choices=BACKENDS, default=None, help="switch back end (default: embedded)")
    ap.add_argument("--bw", type=float, default=0.0, help="link rate in Mbit/s (0: unshaped)")
    ap.add_argument(
        "--dir",
        type=Path,
        default=None,
        help=f"the network's folder (default {STATE_ROOT}/<topology>, e.g. {STATE_ROOT}/leaf-spine-2x1x2; "
        f"{CURRENT} points at it when it is in {STATE_ROOT}/)",
    )
    ap.add_argument(
        "--topology-out",
        type=Path,
        default=None,
        help="where to write the topology with gRPC addresses (DIR/topology.json)",
    )
    ap.add_argument("--run-dir", type=Path, default=None, help="switch logs (default DIR/run)")
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
    folder: Path = args.dir or STATE_ROOT / topology_name(args.topology)
    state_path = folder / STATE_NAME
    topo_out: Path = args.topology_out or folder / "topology.json"
    run_dir: Path = args.run_dir or folder / "run"
    try:
        old = State.load(state_path)
    except StateError:
        old = None  # this folder's state is serve's to rewrite
    if old is not None and old.served is not None and old.served.alive:
        print(
            f"{prog}: error: {old.served.topology} is already served from {folder} by pid {old.served.pid} "
            f"(since {old.served.since}): stop it (Ctrl-C in its terminal), or pass --dir for another copy",
            file=sys.stderr,
        )
        return 1

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    run_dir.mkdir(parents=True, exist_ok=True)
    config = NetworkConfig(run_dir=run_dir, backend=backend, shape=shape)
    me = Process(os.getpid(), process_start(os.getpid()) or 0)
    with running(model, config) as net:
        topo_out.parent.mkdir(parents=True, exist_ok=True)
        net.topology.save(topo_out)
        record = _record(net, args, topo_out, state_path, me)
        record.save(folder / SERVE_RECORD)
        served = Served(me.pid, me.start, args.topology, record.since, str((folder / SERVE_RECORD).resolve()))
        try:
            with locked(state_path) as state:
                state.serve_anew(str(topo_out.resolve()), served)
            default = _point_current(folder)
            st = "" if default else f" --state {state_path}"
            hosts = ",".join(h.name for h in net.topology.hosts[:4])
            print(
                f"network up: {len(net.topology.switches)} switches ({config.backend}), {len(net.topology.hosts)} "
                f"hosts; topology, state and logs in {folder}/"
                + (f" (the verbs' default: {CURRENT} points there)" if default else "")
                + f"\n  p4ina topo show{st}\n"
                f"  p4ina pipeline push{st}\n"
                f"  p4ina routes install{st}\n"
                f"  p4ina job install --job 7 --hosts {hosts} --lanes int8{st}\n"
                f"  p4ina allreduce --job 7{st}      # an all-reduce through it, one agent per host\n"
                f"  p4ina counters --job 7{st}; p4ina verify{st}\n"
                f"Ctrl-C stops the network.",
                flush=True,
            )
            stop.wait()
        finally:  # the state says the network is gone before its switches are
            with locked(state_path) as state:
                if state.served is not None and (state.served.pid, state.served.start) == (me.pid, me.start):
                    state.network_gone(datetime.now().isoformat(timespec="seconds"))
            (folder / SERVE_RECORD).unlink(missing_ok=True)
    print("network stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
