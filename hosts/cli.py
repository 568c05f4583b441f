"""`python -m hosts agent|inc|ring|coordinator ...`: run host code inside a namespace or Mininet host.

`agent` is what the experiment runner starts on every host: a long-lived
process that runs whichever method the runner asks for, step by step (see
hosts.agent). `inc` and `ring` run one method for a few iterations and exit:
each worker prints one JSON line (with --json) describing its all-reduces and
how far its sums are from the float64 numpy sum of every worker's input (the
inputs are deterministic and differ per iteration, see hosts.workload), and
reports the same object to the coordinator if one is given.  The coordinator
subcommand is the runner's side: it holds the barriers, collects the reports
and checks them.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from typing import Any, TypedDict

from hosts.coordination import CoordinatorClient
from hosts.sizes import SizeError, elements_of, parse_elements
from wireformat import fixedpoint as fxp
from wireformat.fixedpoint import LANE_TYPES

LOG = logging.getLogger("hosts")


def _unit_size(text: str) -> int:
    """--size as every p4ina command reads it (hosts.sizes): float32 elements from a size with its unit."""
    try:
        return elements_of(text)
    except SizeError as ex:
        raise argparse.ArgumentTypeError(str(ex)) from ex


def _bare_elements(text: str) -> int:
    try:
        return parse_elements(text)
    except SizeError as ex:
        raise argparse.ArgumentTypeError(str(ex)) from ex


def _check(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What the command line alone shows to be wrong, refused before a socket is opened (exit 2)."""
    if args.workers < 1:
        ap.error(f"--workers {args.workers}: a job has at least one worker")
    if getattr(args, "standby", False):
        if args.rank < args.workers:
            ap.error(f"--rank {args.rank} --standby: a standby agent's rank follows the workers' ({args.workers} up)")
    elif not 0 <= args.rank < args.workers:
        ap.error(f"--rank {args.rank}: ranks of {args.workers} workers are 0..{args.workers - 1}")
    if args.cmd != "agent" and args.workers > 1 and not args.coord:
        ap.error(f"--coord is required with {args.workers} workers (the workers must agree and start together)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--workers", type=int, required=True, help="number of workers in the job")
    p.add_argument("--coord", help="coordinator address, unix:/path or tcp:127.0.0.1:PORT (needed for > 1 worker)")
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--size",
        type=_unit_size,
        default=4096,
        help="the tensor's size with its unit, bytes or float32 elements: 64KiB, 16Ki-elem (default 4Ki-elem)",
    )
    size.add_argument(
        "--elements", dest="size", type=_bare_elements, help="the size as a bare float32 count: 4096, 16K"
    )
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument("--input", default="normal", help="input kind (hosts.workload.KINDS)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="initial retransmission timeout, seconds (then adapted to measured round trips)",
    )
    p.add_argument("--min-timeout", type=float, default=None, help="floor of the adapted timeout, seconds")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("-v", "--verbose", action="store_true")


def build_parser(prog: str = "p4ina host") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    agent = sub.add_parser("agent", help="long-lived agent that runs the runner's steps")
    agent.add_argument("--rank", type=int, required=True)
    agent.add_argument("--workers", type=int, required=True)
    agent.add_argument("--coord", required=True, help="coordinator address, unix:/path or tcp:127.0.0.1:PORT")
    agent.add_argument("--iface", help="the host's interface towards its switch (in-network methods)")
    agent.add_argument("--peers", help="comma-separated IPv4 addresses of ranks 0..n-1 (host methods)")
    agent.add_argument("--groups", help="comma-separated group (edge switch) per rank: rings keep groups together")
    agent.add_argument(
        "--standby",
        action="store_true",
        help="a hot spare (rank >= --workers): idle until the runner seats it in a dead rank's place",
    )
    agent.add_argument("-v", "--verbose", action="store_true")
    inc = sub.add_parser("inc", help="in-network all-reduce worker")
    _common(inc)
    inc.add_argument("--iface", required=True, help="the host's interface towards its switch")
    inc.add_argument("--job-id", type=int, required=True)
    inc.add_argument("--slot-count", type=int, required=True, help="slots of the job (the window)")
    inc.add_argument("--up-lanes", choices=LANE_TYPES, help="lane type this worker sends (default int32)")
    inc.add_argument("--down-lanes", choices=LANE_TYPES, help="lane type of the results (default int32)")
    # the old names, for one release (inc_lanes warns)
    inc.add_argument("--contrib-type", choices=LANE_TYPES, help=argparse.SUPPRESS)
    inc.add_argument("--result-type", choices=LANE_TYPES, help=argparse.SUPPRESS)
    inc.add_argument("--shift", type=int, default=0, help="the job's data-plane right shift")
    inc.add_argument("--first-epoch", type=int, default=1)
    inc.add_argument("--max-retries", type=int, default=100)
    inc.add_argument(
        "--recv-mode",
        choices=("packet", "udp"),
        default="packet",
        help="take results from AF_PACKET (default; independent of the host's IP stack) or a UDP socket",
    )
    ring = sub.add_parser("ring", help="ring all-reduce baseline over UDP")
    _common(ring)
    ring.add_argument("--peers", required=True, help="comma-separated IPv4 addresses of ranks 0..n-1")
    ring.add_argument("--port", type=int, default=16712)
    ring.add_argument("--groups", help="comma-separated group (edge switch) per rank: ring keeps groups together")
    ring.add_argument("--window", type=int, default=128)
    ring.add_argument("--wire", choices=("float32", "bfloat16"), default="float32")
    coord = sub.add_parser("coordinator", help="barriers + result collection for one job (the runner's side)")
    coord.add_argument("--listen", required=True, help="unix:/path or tcp:127.0.0.1:PORT")
    coord.add_argument("--workers", type=int, required=True)
    coord.add_argument("--wait", type=float, default=600.0, help="seconds to wait for all reports")
    coord.add_argument("--json", action="store_true")
    coord.add_argument("-v", "--verbose", action="store_true")
    for verb in (agent, inc, ring, coord):
        verb.set_defaults(parser=verb)  # a refusal after parsing is the verb's own, named as typed
    return ap


def _summary(method: str, args: argparse.Namespace, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One worker's report: per iteration figures, and the worst accuracy over its iterations."""
    lat = [r["latency_s"] for r in runs]
    worst = max(runs, key=lambda r: r["max_error_ratio"]) if runs else {}
    return {
        "method": method,
        "rank": args.rank,
        "workers": args.workers,
        "elements": args.size,
        "iterations": len(runs),
        "latency_s": lat,
        "latency_median_s": statistics.median(lat) if lat else None,
        "packets_sent": sum(r["packets_sent"] for r in runs),
        "retransmissions": sum(r["retransmissions"] for r in runs),
        "duplicates": sum(r["duplicates"] for r in runs),
        "bytes_sent": sum(r["bytes_sent"] for r in runs),
        "goodput_bps_median": statistics.median(r["goodput_bps"] for r in runs) if runs else None,
        "digest": " ".join(r["digest"] for r in runs),  # equal on every worker iff every iteration's sums are
        "max_error_ratio": worst.get("max_error_ratio"),
        "max_abs_error": worst.get("max_abs_error"),
        "rel_l2_error": max((r["rel_l2_error"] for r in runs), default=None),
        "runs": runs,
    }


class Timeouts(TypedDict, total=False):
    """The timers given on the command line (the others: the worker's defaults)."""

    timeout_s: float
    min_timeout_s: float


def _timeouts(args: argparse.Namespace) -> Timeouts:
    out: Timeouts = {}
    if args.timeout:
        out["timeout_s"] = args.timeout
    if args.min_timeout:
        out["min_timeout_s"] = args.min_timeout
    return out


def _group(args: argparse.Namespace) -> CoordinatorClient | None:
    if args.coord:
        return CoordinatorClient(args.coord, args.rank, args.workers)
    if args.workers > 1:
        raise SystemExit("--coord is required with more than one worker (the workers must agree and start together)")
    return None


def inc_lanes(args: argparse.Namespace) -> tuple[str, str]:
    """(up, down) lanes of `inc`; the old --contrib-type / --result-type still work, with a warning."""
    up, down = args.up_lanes, args.down_lanes
    for old, new, value in (
        ("--contrib-type", "--up-lanes", args.contrib_type),
        ("--result-type", "--down-lanes", args.result_type),
    ):
        if value is not None:
            LOG.warning("%s is deprecated: use %s", old, new)
    return up or args.contrib_type or "int32", down or args.result_type or "int32"


def run_inc(args: argparse.Namespace) -> dict[str, Any]:
    from hosts import workload
    from hosts.coordination import result_digest
    from hosts.inc_worker import IncJob, IncWorker
    from hosts.transport import RawSocketTransport, interface_endpoint

    up, down = inc_lanes(args)
    group = _group(args)
    me = interface_endpoint(args.iface)
    job = IncJob(
        job_id=args.job_id,
        rank=args.rank,
        n_workers=args.workers,
        slot_count=args.slot_count,
        up_lanes=fxp.lane_type(up),
        down_lanes=fxp.lane_type(down),
        shift=args.shift,
        first_epoch=args.first_epoch,
        max_retries=args.max_retries,
        **_timeouts(args),
    )
    runs: list[dict[str, Any]] = []
    try:
        with RawSocketTransport(args.iface, me.ip, recv_mode=args.recv_mode) as transport:
            worker = IncWorker(job, transport, me)
            for i in range(args.iterations):
                x = workload.make_input(args.input, args.size, args.rank, args.seed, i)
                if group:
                    group.barrier(f"inc-{args.job_id}-{i}")
                result = worker.allreduce(x)
                assert worker.last_stats is not None and worker.last_plan is not None
                reference, _ = workload.reference_sum(args.input, args.size, args.workers, args.seed, i)
                run = worker.last_stats.to_dict()
                run.update(
                    workload.accuracy(result, reference, workload.inc_bound(reference, worker.last_plan)).to_dict()
                )
                run["digest"] = result_digest(result)
                runs.append(run)
    except Exception as ex:
        _fail_report(group, args, ex)
        raise
    report = _summary("inc", args, runs)
    report.update(job_id=args.job_id, up_lanes=up, down_lanes=down, shift=args.shift)
    if group:
        group.report(report)
        group.close()
    return report


def run_ring(args: argparse.Namespace) -> dict[str, Any]:
    from hosts import workload
    from hosts.coordination import result_digest
    from hosts.ring import RingAllreduce, RingConfig, topology_order

    peers = tuple((ip.strip(), args.port) for ip in args.peers.split(","))
    if len(peers) != args.workers:
        raise SystemExit(f"--peers lists {len(peers)} addresses for --workers {args.workers}")
    order = topology_order(args.groups.split(",")) if args.groups else None
    cfg = RingConfig(rank=args.rank, peers=peers, order=order, window=args.window, wire=args.wire, **_timeouts(args))
    group = _group(args)
    ring = RingAllreduce(cfg, group)
    runs: list[dict[str, Any]] = []
    try:
        for i in range(args.iterations):
            x = workload.make_input(args.input, args.size, args.rank, args.seed, i)
            result = ring.allreduce(x)
            assert ring.last_stats is not None
            reference, magnitude = workload.reference_sum(args.input, args.size, args.workers, args.seed, i)
            run = ring.last_stats.to_dict()
            run.update(
                workload.accuracy(result, reference, workload.ring_bound(magnitude, args.workers, args.wire)).to_dict()
            )
            run["digest"] = result_digest(result)
            runs.append(run)
        ring.barrier("ring-done")  # nobody leaves while a neighbour may still need an acknowledgement
    except Exception as ex:
        _fail_report(group, args, ex)
        raise
    finally:
        ring.close()
    report = _summary("ring", args, runs)
    report.update(order=list(cfg.ring), wire=args.wire)
    if group:
        group.report(report)
        group.close()
    return report


def run_agent(args: argparse.Namespace) -> dict[str, Any]:
    from hosts.agent import Agent, AgentConfig

    peers = tuple(ip.strip() for ip in args.peers.split(",")) if args.peers else ()
    groups = tuple(args.groups.split(",")) if args.groups else None
    cfg = AgentConfig(
        rank=args.rank, workers=args.workers, coord=args.coord, iface=args.iface, peers=peers, groups=groups
    )
    client = CoordinatorClient(args.coord, args.rank, args.workers)
    agent = Agent(cfg, client)
    try:
        agent.watch_notices()
        steps = agent.serve()
    finally:
        agent.close()
        client.close()
    return {"agent": args.rank, "steps": steps}


def run_coordinator(args: argparse.Namespace) -> dict[str, Any]:
    from hosts.coordination import CoordinatorServer, check_reports

    with CoordinatorServer(args.listen, args.workers) as server:
        LOG.info("coordinator for %d workers on %s", args.workers, server.address)
        reports = server.wait_reports(args.wait)
    outcome = check_reports([reports[r] for r in sorted(reports)], args.workers)
    return {"ok": outcome.ok, "problems": list(outcome.problems), "reports": [reports[r] for r in sorted(reports)]}


def _fail_report(group: Any, args: argparse.Namespace, ex: Exception) -> None:
    """Tell the coordinator this worker failed, so the runner does not wait for it."""
    if group is None:
        return
    try:
        group.report({"method": args.cmd, "rank": args.rank, "error": f"{type(ex).__name__}: {ex}"})
    except Exception:  # the coordinator may be what failed
        LOG.debug("could not report the failure to the coordinator", exc_info=True)


def main(argv: list[str] | None = None, prog: str = "p4ina host") -> int:
    args = build_parser(prog).parse_args(argv)
    if args.cmd != "coordinator":
        _check(args.parser, args)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.cmd == "coordinator":
        out = run_coordinator(args)
        print(json.dumps(out) if args.json else json.dumps(out, indent=2))
        return 0 if out["ok"] else 1
    try:
        report = {"inc": run_inc, "ring": run_ring, "agent": run_agent}[args.cmd](args)
    # whatever stopped the worker is its report (and exit status 1): the runner reads it, not a traceback
    except Exception as ex:  # noqa: BLE001
        LOG.error("%s worker rank %d failed: %s", args.cmd, args.rank, ex)
        if getattr(args, "json", False):
            print(json.dumps({"method": args.cmd, "rank": args.rank, "error": f"{type(ex).__name__}: {ex}"}))
        return 1
    if args.cmd == "agent" or args.json:  # the agent parser has no --json: it always prints its report
        print(json.dumps(report))
    else:
        lat = ", ".join(f"{t * 1e3:.2f}" for t in report["latency_s"])
        print(
            f"{args.cmd} rank {args.rank}: latency ms [{lat}], sent {report['packets_sent']} packets "
            f"({report['retransmissions']} retransmitted), max error {report['max_abs_error']:.3g} "
            f"(ratio to bound {report['max_error_ratio']:.3g}), digest {report['digest']}"
        )
    return 0
