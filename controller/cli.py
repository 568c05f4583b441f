"""p4ina: plan, install, observe and remove in-network aggregation jobs over P4Runtime.

A state file (default ./state/p4ina-state.json) records the topology, the routes
and the installed jobs, so later invocations know what is there; `verify` reads
the switches back and compares.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from controller import names as N
from controller import routing
from controller.api import DEFAULT_BMV2_JSON, DEFAULT_P4INFO, Controller
from controller.client import SwitchError
from controller.draw import draw_job, draw_topology
from controller.fabric import FabricError
from controller.installer import InstallError
from controller.p4info import P4InfoError
from controller.planner import DEFAULT_SLOTS, PlanError
from controller.service import DemotedError, Service, ServiceReport
from controller.standby import DEFAULT_BOUND_S, Standby, TakeoverError
from controller.state import CURRENT, DEFAULT_STATE, STATE_NAME, State, StateError, default_state, locked
from controller.topology import Topology, TopologyError, host_names
from controller.topospec import load_topology
from wireformat.fixedpoint import LANE_TYPES

LOG = logging.getLogger("p4ina")


# The P4Runtime election ids: p4ina's controller is 1; the shell takes p4runtime-shell's own default (1,0), i.e.
# 2^64, so a shell opened beside a running controller is primary for its own session. Defaults per command: a
# default set on one subparser would change the shared option's default for every command (argparse parents
# share their actions).
CONTROLLER_ELECTION_ID = 1
SHELL_ELECTION_ID = 1 << 64


class UsageError(Exception):
    """The command line asks for what cannot be (no topology, no such switch, a state of another fabric): one
    line and exit status 2, as argparse's own refusals."""


class NetworkDownError(Exception):
    """The served network the state names is gone: exit status 1, at once, rather than a wait per switch."""


class ShellEnvironmentError(Exception):
    """p4runtime-shell's own environment is not there (`make setup` makes it): exit status 1, as for a missing
    tool rather than a bad command line."""


NO_TOPOLOGY = "no topology: pass --topology PATH|fat-tree:K|leaf-spine:LxSxH (later runs remember it in the state file)"


def _topology_spec(args: argparse.Namespace, state: State) -> str:
    spec = args.topology or state.topology
    if not spec:
        raise UsageError(NO_TOPOLOGY)
    if args.topology and Path(args.topology).exists():
        spec = str(Path(args.topology).resolve())
    return spec


def _served_network(args: argparse.Namespace, state: State) -> None:
    """A served network that is gone is named at once (a switch verb would wait --timeout for each switch), and
    what its switches held is forgotten; the verbs that only read the state go on after a note."""
    if state.served is None or state.served.alive:
        return
    if state.served.stopped is None:  # killed: serve could not say so itself
        state.network_gone(datetime.now().isoformat(timespec="seconds"), killed=True)
    assert state.served is not None
    if args.fn not in OFFLINE:
        raise NetworkDownError(state.served.down())
    print(f"{_prog(args)}: note: {state.served.down()}", file=sys.stderr)


def _controller(args: argparse.Namespace, state: State, election_id: int) -> Controller:
    """The controller of a command (or of `serve`) on the locked state: the network it serves, its topology
    checked against the state's, then a Controller (a context manager) with that election id."""
    _served_network(args, state)
    spec = _topology_spec(args, state)
    topo = load_topology(spec)
    _check_state_fits(topo, state, args.state)
    state.topology = spec
    return Controller(
        topo,
        p4info=args.p4info,
        device_config=args.bmv2_json,
        state=state,
        election_id=election_id,
        timeout=args.timeout,
    )


def _check_state_fits(topo: Topology, state: State, path: Path) -> None:
    """Refuse a state whose jobs name switches or hosts this topology lacks (a state of another fabric)."""
    for plan in state.plans():
        missing = [sp.switch for sp in plan.switches if sp.switch not in {s.name for s in topo.switches}]
        missing += [h for h in plan.spec.hosts if not topo.has_host(h)]
        if missing:
            raise UsageError(
                f"state file {path} has job {plan.job_id} on {', '.join(missing[:5])}, which this {topo.kind} "
                "topology lacks; use --state for another fabric"
            )


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=1, sort_keys=False) if args.json else text)


# -- commands -------------------------------------------------------------------------
def cmd_topo_show(args: argparse.Namespace, ctl: Controller) -> int:
    _emit(args, ctl.topo.to_dict(), draw_topology(ctl.topo))
    return 0


def cmd_pipeline_push(args: argparse.Namespace, ctl: Controller) -> int:
    t0 = time.perf_counter()
    res = ctl.push_pipeline(force=args.force)
    took = time.perf_counter() - t0
    pushed = sorted(n for n, r in res.items() if r == "pushed")
    _emit(
        args,
        {"switches": res, "seconds": took},
        f"pipeline pushed to {len(pushed)} switch(es), unchanged on {len(res) - len(pushed)} ({took:.2f} s)",
    )
    return 0


def cmd_routes_install(args: argparse.Namespace, ctl: Controller) -> int:
    t0 = time.perf_counter()
    res = ctl.install_routes()
    took = time.perf_counter() - t0
    ins, mod, dele = (sum(getattr(r, f) for r in res.values()) for f in ("inserted", "modified", "deleted"))
    data = {"switches": {n: vars(r) for n, r in res.items()}, "seconds": took}
    _emit(args, data, f"routes on {len(res)} switches: {ins} inserted, {mod} modified, {dele} deleted ({took:.2f} s)")
    return 0


def cmd_routes_show(args: argparse.Namespace, ctl: Controller) -> int:
    """The routes `routes install` put on every switch, from the state (the topology without the switches and
    links the state lists as failed): each prefix with its port(s) and the neighbour(s) behind them."""
    state = ctl.state
    if not state.routes:
        _emit(args, {"installed": False, "switches": {}}, "no routes installed (`p4ina routes install` installs them)")
        return 0
    topo = ctl.topo.without(state.failed, state.failed_links) if state.failed or state.failed_links else ctl.topo
    table = routing.routes(topo)
    data: dict[str, Any] = {
        "installed": True,
        "failed": sorted(state.failed),
        "failed_links": [list(pair) for pair in sorted(state.failed_links)],
        "switches": {},
    }
    lines = [
        f"routes on {len(table)} switches (shortest paths; several ports: ECMP)"
        + (f", around failed {', '.join(sorted(state.failed))}" if state.failed else "")
        + (
            f", around links down {', '.join('-'.join(p) for p in sorted(state.failed_links))}"
            if state.failed_links
            else ""
        )
    ]
    width = max((len(r.prefix) for rs in table.values() for r in rs), default=0)
    for sw in topo.switches:
        peer = {nb.port: nb.peer for nb in topo.neighbors(sw.name)}
        data["switches"][sw.name] = [
            {"prefix": r.prefix, "ports": list(r.ports), "via": [peer.get(p, "?") for p in r.ports]}
            for r in table[sw.name]
        ]
        lines.append(f"{sw.name} ({sw.role}, dev {sw.device_id})")
        for r in table[sw.name]:
            lines.append(
                f"  {r.prefix:<{width}}  port{'s' if len(r.ports) > 1 else ''} {','.join(map(str, r.ports))} "
                f"({', '.join(peer.get(p, '?') for p in r.ports)})" + ("  ECMP" if len(r.ports) > 1 else "")
            )
    _emit(args, data, "\n".join(lines))
    return 0


def job_lanes(args: argparse.Namespace) -> tuple[str, str]:
    """(up, down) lanes of `job install`: --lanes both ways, --up-lanes / --down-lanes for one direction.

    The flags of the old vocabulary still work for one release, with a warning: --quantize (the result lanes,
    "none" for int32) and --contrib (the lanes hosts send)."""
    down = args.down_lanes or args.lanes
    up = args.up_lanes
    if args.quantize is not None:
        LOG.warning("--quantize is deprecated: use --lanes (both ways) or --down-lanes (int32 for 'none')")
        down = down or ("int32" if args.quantize == "none" else args.quantize)
    if args.contrib is not None:
        LOG.warning("--contrib is deprecated: use --up-lanes")
        up = up or args.contrib
    down = down or "int32"
    return up or args.lanes or down, down


def cmd_job_install(args: argparse.Namespace, ctl: Controller) -> int:
    hosts = host_names(ctl.topo, args.hosts)
    up, down = job_lanes(args)
    t0 = time.perf_counter()
    plan = ctl.install_job(args.job, hosts, down, up_lanes=up, shift=args.shift, slots=args.slots)
    took = time.perf_counter() - t0
    _emit(args, {**plan.to_dict(), "seconds": took}, draw_job(plan) + f"\ninstalled in {took:.2f} s")
    return 0


def cmd_job_remove(args: argparse.Namespace, ctl: Controller) -> int:
    plan = ctl.remove_job(args.job)
    _emit(
        args,
        {"removed": plan.job_id, "switches": [sp.switch for sp in plan.switches]},
        f"job {plan.job_id} removed from {len(plan.switches)} switches",
    )
    return 0


def cmd_job_list(args: argparse.Namespace, ctl: Controller) -> int:
    rows: list[dict[str, Any]] = [  # the --json rows
        {
            "job_id": p.job_id,
            "hosts": list(p.spec.hosts),
            "root": p.root,
            "switches": len(p.switches),
            "up_lanes": p.spec.up_lanes,
            "down_lanes": p.spec.down_lanes,
            "shift": p.spec.shift,
            "slots": p.spec.slots,
        }
        for p in ctl.jobs()
    ]
    lines = [f"{'job':>5}  {'hosts':>5}  {'root':<6} {'switches':>8}  {'up':<5} {'down':<5} {'shift':>5} {'slots':>5}"]
    lines += [
        f"{r['job_id']:>5}  {len(r['hosts']):>5}  {r['root']:<6} {r['switches']:>8}  "
        f"{r['up_lanes']:<5} {r['down_lanes']:<5} {r['shift']:>5} {r['slots']:>5}"
        for r in rows
    ]
    _emit(args, rows, "\n".join(lines) if rows else "no jobs installed")
    return 0


def cmd_job_show(args: argparse.Namespace, ctl: Controller) -> int:
    plan = ctl.job(args.job)
    _emit(args, plan.to_dict(), draw_job(plan))
    return 0


def cmd_counters(args: argparse.Namespace, ctl: Controller) -> int:
    job_ids = [args.job] if args.job is not None else [p.job_id for p in ctl.jobs()]
    data: dict[str, Any] = {"jobs": {}}
    lines = []
    names = list(N.JOB_COUNTERS)
    for jid in job_ids:
        per = ctl.counters(jid)
        data["jobs"][str(jid)] = {sw: sc.to_dict() for sw, sc in per.items()}
        lines.append(f"job {jid}")
        lines.append(f"  {'switch':<6} {'idx':>3} " + " ".join(f"{n:>15}" for n in names) + "  drops")
        for sw, sc in per.items():
            drops = ", ".join(f"{k}={v}" for k, v in sc.drops.items() if v) or "-"
            lines.append(
                f"  {sw:<6} {sc.job_index:>3} " + " ".join(f"{sc.packets.get(n, 0):>15}" for n in names) + f"  {drops}"
            )
    if args.job is None:
        per = ctl.unattributed_drops()
        data["no_job_drops"] = {sw: sc.drops for sw, sc in per.items()}
        nz = {sw: {k: v for k, v in sc.drops.items() if v} for sw, sc in per.items()}
        nz = {sw: d for sw, d in nz.items() if d}
        lines.append(
            "drops of no job: "
            + ("; ".join(f"{sw} " + ", ".join(f"{k}={v}" for k, v in d.items()) for sw, d in nz.items()) or "none")
        )
    _emit(args, data, "\n".join(lines))
    return 0


def cmd_verify(args: argparse.Namespace, ctl: Controller) -> int:
    if args.repair:
        res = ctl.repair()
        changed = {n: r for n, r in res.items() if r.inserted or r.modified or r.deleted}
        _emit(
            args,
            {"repaired": {n: vars(r) for n, r in res.items()}},
            "repaired: "
            + (
                ", ".join(f"{n} (+{r.inserted} ~{r.modified} -{r.deleted})" for n, r in changed.items())
                or "nothing to do"
            ),
        )
        return 0
    drift = ctl.verify()
    dirty = {n: d for n, d in drift.items() if not d.clean}
    data = {"clean": not dirty, "switches": {n: vars(d) for n, d in dirty.items()}}
    if not dirty:
        routes = "installed" if ctl.state.routes else "not installed"
        text = f"all {len(drift)} switches match the state ({len(ctl.jobs())} job(s), routes {routes})"
    else:
        text = "\n".join(
            f"{n}: "
            + "; ".join(
                f"{what} {len(items)}: {', '.join(items[:3])}{' ...' if len(items) > 3 else ''}"
                for what, items in vars(d).items()
                if items
            )
            for n, d in dirty.items()
        )
        text += "\n(`p4ina verify --repair` makes the switches match the state)"
    _emit(args, data, text)
    return 1 if dirty else 0


def cmd_reconcile(args: argparse.Namespace, ctl: Controller) -> int:
    rec = ctl.reconcile(fix=args.fix)
    lines = [f"jobs of the state on their switches: {', '.join(map(str, rec.ok)) or 'none'}"]
    for job, sws in rec.drifted.items():
        lines.append(f"job {job} drifted on {', '.join(sws)}")
    for job, sws in rec.unknown.items():
        lines.append(f"job {job} is on {', '.join(sws)} but not in the state")
    if rec.no_pipeline:
        lines.append(f"no pipeline (restarted?): {', '.join(rec.no_pipeline)}")
    for sw, (before, after) in rec.tokens.items():
        lines.append(f"{sw}: install count {before} -> {after} (tokens read back from the switch)")
    if rec.repaired:
        changed = {n: r for n, r in rec.repaired.items() if r.inserted or r.modified or r.deleted}
        lines.append(
            "repaired: "
            + (
                ", ".join(f"{n} (+{r.inserted} ~{r.modified} -{r.deleted})" for n, r in changed.items())
                or "nothing to do"
            )
        )
    elif not rec.clean:
        lines.append("(`p4ina reconcile --fix` or `p4ina verify --repair` makes the switches match the state)")
    _emit(args, rec.to_dict(), "\n".join(lines))
    return 0 if rec.clean or args.fix else 1


# -- p4ina controller serve | standby: a controller process that keeps its sessions --------------------------
def _stop_event() -> threading.Event:
    """Set by SIGTERM or SIGINT: a controller process stops cleanly (report written, sessions closed)."""
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda _sig, _frame: stop.set())
    return stop


@contextlib.contextmanager
def _reporting(args: argparse.Namespace, report: ServiceReport) -> Iterator[None]:
    """A controller process that fails says so in its report too (status "failed", the error), for whoever polls
    it; the error then goes on to main()'s one line and exit status."""
    try:
        yield
    except (TakeoverError, DemotedError, StateError, FabricError, SwitchError, InstallError, PlanError) as ex:
        report.status, report.error = "failed", str(ex)
        report.save(args.report)
        raise


def _finish(args: argparse.Namespace, report: ServiceReport, text: str) -> None:
    report.save(args.report)
    _emit(args, report.to_dict(), text)


def _serve(args: argparse.Namespace, ctl: Controller, report: ServiceReport, stop: threading.Event) -> int:
    """The failure handling of a primary, until stopped (controller.service)."""
    service = Service(ctl, report, args.report)
    service.start()
    for name, at in (report.takeover.lost if report.takeover is not None else {}).items():
        service.dead_before(name, at)
    LOG.warning("controller (election id %d) serving %d job(s)", report.election_id, len(ctl.state.jobs))
    service.run(stop)
    report.status = "stopped"
    moved = sum(f.moved for f in report.failovers)
    _finish(args, report, f"stopped: {moved} job move(s), {len(report.failovers) - moved} job(s) dropped")
    return 0


def cmd_controller_serve(args: argparse.Namespace) -> int:
    """The primary as a process: primary on every switch, reconciled with its state (repaired with --repair; an
    optional job installed), then moving jobs off failed switches until SIGTERM. It holds the state file's lock
    while it lives (the kernel releases it when the process dies: a standby then takes it)."""
    if (args.job is None) != (args.hosts is None):
        raise UsageError("--job and --hosts go together (the job to install and its member hosts)")
    eid = CONTROLLER_ELECTION_ID if args.election_id is None else args.election_id
    report = ServiceReport("primary", eid, os.getpid())
    stop = _stop_event()
    # a lock held longer than --timeout is another controller's (a standby that took over holds it for its life)
    with _reporting(args, report), locked(args.state, timeout=args.timeout) as state:
        with _controller(args, state, eid) as ctl:
            topo = ctl.topo
            ctl.fabric.connect()  # primary on every switch now, or ArbitrationError naming the switch
            rec = ctl.reconcile(fix=args.repair)
            if not rec.clean:
                LOG.warning("the switches differed from the state: %s", rec.to_dict())
            if args.job is not None and args.job not in state.jobs:
                ctl.install_job(args.job, host_names(topo, args.hosts))
            return _serve(args, ctl, report, stop)


def cmd_controller_standby(args: argparse.Namespace) -> int:
    """A standby: backup on every switch (an election id below the primary's) until the switches promote it, then
    it adopts the primary's state file, reconciles it with the switches and serves as the primary did."""
    if args.election_id is None:
        raise UsageError("a standby needs --election-id, below the primary's (arbitration makes the highest primary)")
    report = ServiceReport("standby", args.election_id, os.getpid())
    stop = _stop_event()
    on_disk = State.load(args.state)  # unlocked, for its topology only: the primary holds the lock
    spec = _topology_spec(args, on_disk)
    topo = load_topology(spec)
    # no state until the takeover: nothing is saved to the primary's file before this controller owns it
    with (
        _reporting(args, report),
        Controller(
            topo,
            p4info=args.p4info,
            device_config=args.bmv2_json,
            election_id=args.election_id,
            timeout=args.timeout,
            backup_ok=True,
        ) as ctl,
    ):
        standby = Standby(ctl, bound_s=args.bound, repair=args.repair, skip=on_disk.failed)
        standby.open()
        report.status = "backup"
        report.save(args.report)
        if not standby.wait_primary(args.wait, stop):
            report.status = "stopped"
            _finish(args, report, "stopped while backup")
            return 0
        with locked(args.state, timeout=args.bound) as state:
            _check_state_fits(topo, state, args.state)
            state.topology = spec
            report.takeover = standby.take_over(state)
            return _serve(args, ctl, report, stop)


SERVICES = {cmd_controller_serve, cmd_controller_standby}


# -- parser ---------------------------------------------------------------------------
# -- p4ina shell: p4runtime-shell on one switch ------------------------------------------------
# p4runtime-shell pins protobuf < 3.21: it lives in its own environment, beside p4ina's (`make setup` makes it,
# named after p4ina's own with "-shell"), and runs from there as a child process (controller/shell_runner.py)
SHELL_PYTHON_ENV = "P4INA_SHELL_PYTHON"
SHELL_RUNNER = Path(__file__).with_name("shell_runner.py")


def shell_python() -> Path:
    """The Python of p4runtime-shell's environment: $P4INA_SHELL_PYTHON, else the venv beside p4ina's own."""
    given = os.environ.get(SHELL_PYTHON_ENV)
    python = Path(given) if given else Path(sys.prefix + "-shell") / "bin" / "python"
    if not python.is_file():
        raise ShellEnvironmentError(
            f"p4runtime-shell's environment is missing (no {python}): `make setup` makes it, or set "
            f"{SHELL_PYTHON_ENV} to a Python that has p4runtime-shell 0.0.6"
        )
    return python


def cmd_shell(args: argparse.Namespace) -> int:
    """p4runtime-shell on one switch of a running emulation, with the P4Info the switch runs.

    Runs p4runtime-shell in its own environment, as a child process that takes the terminal, outside the state
    file's lock, so other p4ina commands keep working; with a script, runs it in the shell's names and exits
    with the script's status.
    """
    state = State.load(args.state) if args.state.exists() else None
    if state is not None and state.served is not None and not state.served.alive:
        raise NetworkDownError(state.served.down())
    spec = args.topology or (state.topology if state else None)
    if not spec:
        raise UsageError("no topology: pass --topology (the JSON `p4ina serve` writes) or run a p4ina command first")
    topo = load_topology(spec)
    try:
        sw = topo.switch(args.switch)
    except (KeyError, TopologyError) as ex:
        raise UsageError(
            f"no switch {args.switch!r} in the topology (has {', '.join(s.name for s in topo.switches)})"
        ) from ex
    if not sw.grpc_addr:
        raise UsageError(
            f"switch {sw.name!r} has no gRPC address: use the topology JSON of a running emulation (p4ina serve)"
        )
    if args.script is not None and not args.script.is_file():
        raise UsageError(f"no script {args.script}: give the path of a Python file to run in the shell")
    eid = SHELL_ELECTION_ID if args.election_id is None else args.election_id
    cmd = [str(shell_python()), "-I", str(SHELL_RUNNER), "--grpc-addr", sw.grpc_addr]
    cmd += ["--device-id", str(sw.device_id), "--election-id", str(eid)]
    if args.script is not None:
        cmd += ["--script", str(args.script.resolve())]
    # the child owns the terminal: Ctrl-C is the IPython shell's to handle, not a reason for p4ina to leave it.
    # A handler, not SIG_IGN: an ignored signal would stay ignored in the child across exec.
    previous = signal.signal(signal.SIGINT, lambda _sig, _frame: None)
    try:
        return subprocess.run(cmd, check=False).returncode
    finally:
        signal.signal(signal.SIGINT, previous)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--topology",
        "-t",
        help="topology JSON (with grpc_addr per switch, from the emulation runner), fat-tree:K or "
        "leaf-spine:LxSxH; remembered in the state",
    )
    common.add_argument(
        "--state",
        type=Path,
        default=None,
        help=f"state file (default: the served network's, {CURRENT / STATE_NAME}, which `p4ina serve` points at "
        f"state/<topology>/; else {DEFAULT_STATE})",
    )
    common.add_argument(
        "--p4info",
        type=Path,
        default=DEFAULT_P4INFO,
        help=f"P4Info text file (default: the compiled one, {DEFAULT_P4INFO}; else read from the switch)",
    )
    common.add_argument(
        "--bmv2-json",
        type=Path,
        default=DEFAULT_BMV2_JSON,
        help=f"BMv2 JSON pushed as the device config (default {DEFAULT_BMV2_JSON})",
    )
    common.add_argument(
        "--election-id",
        type=int,
        default=None,
        help=f"P4Runtime election id (default {CONTROLLER_ELECTION_ID}; for `shell` 2^64, p4runtime-shell's own "
        "(1,0)); a higher one wins primary",
    )
    common.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a switch")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("-v", "--verbose", action="store_true", help="debug logging")

    ap = argparse.ArgumentParser(
        prog="p4ina", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="group", required=True)

    def leaf(
        parent: argparse._SubParsersAction, name: str, fn: Callable[..., int], help_: str
    ) -> argparse.ArgumentParser:
        p = parent.add_parser(name, parents=[common], help=help_, description=help_)
        p.set_defaults(fn=fn, parser=p)
        return p

    topo = sub.add_parser("topo", help="the topology").add_subparsers(dest="cmd", required=True)
    leaf(topo, "show", cmd_topo_show, "draw the topology (or print its JSON with --json)")
    pipe = sub.add_parser("pipeline", help="the P4 program on the switches").add_subparsers(dest="cmd", required=True)
    p = leaf(pipe, "push", cmd_pipeline_push, "push P4Info + BMv2 JSON to every switch whose pipeline differs")
    p.add_argument("--force", action="store_true", help="push even where the switch already runs this pipeline")
    routes = sub.add_parser("routes", help="IPv4 forwarding").add_subparsers(dest="cmd", required=True)
    leaf(
        routes, "install", cmd_routes_install, "install shortest-path IPv4 routes (ECMP) and host ports on every switch"
    )
    leaf(routes, "show", cmd_routes_show, "the installed routes of every switch, from the state (no switch is asked)")
    job = sub.add_parser("job", help="aggregation jobs").add_subparsers(dest="cmd", required=True)
    p = leaf(job, "install", cmd_job_install, "plan a job's aggregation tree and install it (all or nothing)")
    p.add_argument("--job", type=int, required=True, help="job id (1..65535), carried in every packet")
    p.add_argument("--hosts", required=True, help="member hosts: h1,h2,... ranges h1-h8, or all")
    p.add_argument("--lanes", choices=LANE_TYPES, help="lane type both ways (default int32)")
    p.add_argument("--up-lanes", choices=LANE_TYPES, help="lane type hosts send (default: --lanes)")
    p.add_argument("--down-lanes", choices=LANE_TYPES, help="lane type of the results (default: --lanes)")
    # the old vocabulary, for one release (job_lanes warns)
    p.add_argument("--quantize", choices=("none", "int16", "int8"), help=argparse.SUPPRESS)
    p.add_argument("--contrib", choices=LANE_TYPES, help=argparse.SUPPRESS)
    p.add_argument(
        "--shift",
        type=int,
        help="right shift before narrowing (default: the headroom the job's sum needs, "
        "e.g. 4 for int8 lanes both ways of 16 hosts, 24 for int32 up and int8 down)",
    )
    p.add_argument(
        "--slots",
        type=int,
        default=DEFAULT_SLOTS,
        help=f"aggregation slots of the job on each switch (default {DEFAULT_SLOTS})",
    )
    p = leaf(job, "remove", cmd_job_remove, "delete a job's entries and multicast groups")
    p.add_argument("--job", type=int, required=True)
    leaf(job, "list", cmd_job_list, "installed jobs")
    p = leaf(job, "show", cmd_job_show, "draw a job's tree")
    p.add_argument("--job", type=int, required=True)
    p = leaf(sub, "counters", cmd_counters, "per-job counters from every switch of the job's tree")
    p.add_argument("--job", type=int, help="one job (default: all jobs, plus drops of no job)")
    p = leaf(sub, "verify", cmd_verify, "read the switches back and compare with the state (exit 1 on drift)")
    p.add_argument("--repair", action="store_true", help="make the switches match the state instead")
    p = leaf(
        sub,
        "reconcile",
        cmd_reconcile,
        "after a controller restart: compare what the switches hold with the "
        "state, move install counts past the tokens they hold (exit 1 on differences)",
    )
    p.add_argument("--fix", action="store_true", help="then make the switches match the state")
    ctl_group = sub.add_parser("controller", help="a controller process that keeps its sessions").add_subparsers(
        dest="cmd", required=True
    )
    p = leaf(
        ctl_group,
        "serve",
        cmd_controller_serve,
        "be the primary: reconcile with the state, then move jobs off failed switches until SIGTERM",
    )
    p.add_argument("--job", type=int, help="install this job first, unless the state has it")
    p.add_argument("--hosts", help="the job's member hosts (as for `job install`)")
    p = leaf(
        ctl_group,
        "standby",
        cmd_controller_standby,
        "be the backup (--election-id below the primary's); when the switches promote it, reconcile with the "
        "primary's state and serve as it did",
    )
    p.add_argument(
        "--wait",
        type=float,
        help="give up when not promoted within this many seconds (default: wait as long as it takes)",
    )
    p.add_argument(
        "--bound",
        type=float,
        default=DEFAULT_BOUND_S,
        help=f"seconds from the first switch's promotion to the last's, and for the state file's lock (default "
        f"{DEFAULT_BOUND_S:.0f})",
    )
    for p in ctl_group.choices.values():
        p.add_argument("--report", type=Path, help="JSON report, rewritten after each event (status, takeover, moves)")
        p.add_argument(
            "--repair",
            action="store_true",
            help="after the reconcile, make the switches hold what the state says: delete jobs it does not know "
            "(another controller's too), restore drifted ones (default: report them, change nothing)",
        )
    p = leaf(sub, "shell", cmd_shell, "open p4runtime-shell on one switch (P4Info read from the switch)")
    p.add_argument("switch", help="switch name, e.g. e1 (fat-tree edge) or l1 (leaf-spine leaf)")
    p.add_argument("script", nargs="?", type=Path, help="run this Python script in the shell's namespace instead")
    return ap


OFFLINE = {cmd_topo_show, cmd_routes_show, cmd_job_list, cmd_job_show}


def _prog(args: argparse.Namespace) -> str:
    """The command as typed ('p4ina job install'), which starts every line it prints on stderr."""
    return " ".join(["p4ina", args.group, *([args.cmd] if getattr(args, "cmd", None) else [])])


def main(argv: list[str] | None = None) -> int:
    args, extra = build_parser().parse_known_args(argv)
    if extra:  # named by the verb's own parser, whose --help lists the options
        args.parser.error(f"unrecognized arguments: {' '.join(extra)}")
    prog = _prog(args)
    if args.state is None:
        args.state = default_state()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if args.fn is cmd_shell:
        try:
            return cmd_shell(args)
        except (TopologyError, UsageError) as ex:  # bad input: the exit status of argparse's refusals
            print(f"{prog}: error: {ex}", file=sys.stderr)
            return 2
        except (NetworkDownError, ShellEnvironmentError, StateError) as ex:
            print(f"{prog}: error: {ex}", file=sys.stderr)
            return 1
    try:
        if args.topology:
            load_topology(args.topology)  # a bad topology is refused before the state file is made or locked
        elif not args.state.exists():
            raise UsageError(NO_TOPOLOGY)  # nor is a state file made for a command that cannot run
        if args.fn in SERVICES:  # they take the state's lock themselves (a standby: only once it is primary)
            return int(args.fn(args))
        with locked(args.state) as state:
            eid = CONTROLLER_ELECTION_ID if args.election_id is None else args.election_id
            with _controller(args, state, eid) as ctl:
                return args.fn(args, ctl)
    except (TopologyError, UsageError) as ex:  # bad input: the exit status of argparse's refusals
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 2
    except (
        NetworkDownError,
        PlanError,
        InstallError,
        FabricError,
        SwitchError,
        P4InfoError,
        StateError,
        TakeoverError,
        DemotedError,
    ) as ex:
        print(f"{prog}: error: {ex}", file=sys.stderr)
        LOG.debug("details", exc_info=True)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
