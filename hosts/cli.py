"""`python -m hosts inc|ring|coordinator ...`: run a worker inside a namespace or Mininet host.

Each worker prints one JSON line (with --json) describing its all-reduces and
how far its sum is from the float64 numpy sum of every worker's input (the
inputs are deterministic, see hosts.workload), and reports the same object to
the coordinator if one is given.  The coordinator subcommand is the runner's
side: it holds the barriers, collects the reports and checks them.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from typing import Any

from hosts.coordination import CoordinatorClient
from wireformat import AGG

LOG = logging.getLogger("hosts")

ELEM_BY_NAME = {name.removeprefix("ELEM_").lower(): code for name, code in AGG.elem_types.items()}


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--workers", type=int, required=True, help="number of workers in the job")
    p.add_argument("--coord", help="coordinator address, unix:/path or tcp:127.0.0.1:PORT (needed for > 1 worker)")
    p.add_argument("--size", type=int, default=4096, help="tensor elements (float32)")
    p.add_argument("--iterations", type=int, default=1)
    p.add_argument("--input", default="normal", help="input kind (hosts.workload.KINDS)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=None,
                   help="initial retransmission timeout, seconds (then adapted to measured round trips)")
    p.add_argument("--min-timeout", type=float, default=None, help="floor of the adapted timeout, seconds")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("-v", "--verbose", action="store_true")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m hosts", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    inc = sub.add_parser("inc", help="in-network all-reduce worker")
    _common(inc)
    inc.add_argument("--iface", required=True, help="the host's interface towards its switch")
    inc.add_argument("--job-id", type=int, required=True)
    inc.add_argument("--slot-count", type=int, required=True, help="slots of the job (the window)")
    inc.add_argument("--result-type", choices=sorted(ELEM_BY_NAME), default="int32")
    inc.add_argument("--contrib-type", choices=sorted(ELEM_BY_NAME), default="int32")
    inc.add_argument("--shift", type=int, default=0, help="the job's data-plane right shift")
    inc.add_argument("--first-epoch", type=int, default=1)
    inc.add_argument("--max-retries", type=int, default=100)
    inc.add_argument("--recv-mode", choices=("packet", "udp"), default="packet",
                     help="take results from AF_PACKET (default; independent of the host's IP stack) or a UDP socket")
    ring = sub.add_parser("ring", help="ring all-reduce baseline over UDP")
    _common(ring)
    ring.add_argument("--peers", required=True, help="comma-separated IPv4 addresses of ranks 0..n-1")
    ring.add_argument("--port", type=int, default=16712)
    ring.add_argument("--groups", help="comma-separated group (edge switch) per rank: ring keeps groups together")
    ring.add_argument("--window", type=int, default=128)
    coord = sub.add_parser("coordinator", help="barriers + result collection for one job (the runner's side)")
    coord.add_argument("--listen", required=True, help="unix:/path or tcp:127.0.0.1:PORT")
    coord.add_argument("--workers", type=int, required=True)
    coord.add_argument("--wait", type=float, default=600.0, help="seconds to wait for all reports")
    coord.add_argument("--json", action="store_true")
    coord.add_argument("-v", "--verbose", action="store_true")
    return ap


def _summary(method: str, args: argparse.Namespace, runs: list[dict[str, Any]]) -> dict[str, Any]:
    lat = [r["latency_s"] for r in runs]
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
        "runs": runs,
    }


def _timeouts(args: argparse.Namespace) -> dict[str, float]:
    out = {}
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


def run_inc(args: argparse.Namespace) -> dict[str, Any]:
    from hosts import workload
    from hosts.coordination import agree_max, result_digest
    from hosts.inc_worker import IncJob, IncWorker
    from hosts.packets import frame_prefix
    from hosts.transport import RawSocketTransport, interface_endpoint

    group = _group(args)
    me = interface_endpoint(args.iface)
    job = IncJob(
        job_id=args.job_id, rank=args.rank, n_workers=args.workers, slot_count=args.slot_count,
        result_type=ELEM_BY_NAME[args.result_type], contrib_type=ELEM_BY_NAME[args.contrib_type],
        shift=args.shift, first_epoch=args.first_epoch, max_retries=args.max_retries,
        **_timeouts(args),
    )
    x = workload.make_input(args.input, args.size, args.rank, args.seed)
    reference, _ = workload.reference_sum(args.input, args.size, args.workers, args.seed)
    runs: list[dict[str, Any]] = []
    report: dict[str, Any]
    try:
        with RawSocketTransport(args.iface, me.ip, recv_mode=args.recv_mode) as transport:
            worker = IncWorker(job, transport, frame_prefix(me, job.contrib_type), agree_max(group) if group else None)
            for _ in range(args.iterations):
                result = worker.allreduce(x)
                assert worker.last_stats is not None and worker.last_plan is not None
                runs.append(worker.last_stats.to_dict())
    except Exception as ex:
        _fail_report(group, args, ex)
        raise
    report = _summary("inc", args, runs)
    report.update(digest=result_digest(result), exponent=worker.last_plan.exponent, job_id=args.job_id,
                  result_type=args.result_type, shift=args.shift)
    report.update(workload.inc_accuracy(result, reference, worker.last_plan).to_dict())
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
    cfg = RingConfig(rank=args.rank, peers=peers, order=order, window=args.window, **_timeouts(args))
    group = _group(args)
    x = workload.make_input(args.input, args.size, args.rank, args.seed)
    reference, magnitude = workload.reference_sum(args.input, args.size, args.workers, args.seed)
    ring = RingAllreduce(cfg, group)
    runs: list[dict[str, Any]] = []
    try:
        for _ in range(args.iterations):
            result = ring.allreduce(x)
            assert ring.last_stats is not None
            runs.append(ring.last_stats.to_dict())
        ring.barrier("ring-done")  # nobody leaves while a neighbour may still need an acknowledgement
    except Exception as ex:
        _fail_report(group, args, ex)
        raise
    finally:
        ring.close()
    report = _summary("ring", args, runs)
    report.update(digest=result_digest(result), order=list(cfg.ring))
    report.update(workload.ring_accuracy(result, reference, magnitude, args.workers).to_dict())
    if group:
        group.report(report)
        group.close()
    return report


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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.cmd == "coordinator":
        out = run_coordinator(args)
        print(json.dumps(out) if args.json else json.dumps(out, indent=2))
        return 0 if out["ok"] else 1
    try:
        report = run_inc(args) if args.cmd == "inc" else run_ring(args)
    except Exception as ex:
        LOG.error("%s worker rank %d failed: %s", args.cmd, args.rank, ex)
        if args.json:
            print(json.dumps({"method": args.cmd, "rank": args.rank, "error": f"{type(ex).__name__}: {ex}"}))
        return 1
    if args.json:
        print(json.dumps(report))
    else:
        lat = ", ".join(f"{t * 1e3:.2f}" for t in report["latency_s"])
        print(f"{args.cmd} rank {args.rank}: latency ms [{lat}], sent {report['packets_sent']} packets "
              f"({report['retransmissions']} retransmitted), max error {report['max_abs_error']:.3g} "
              f"(ratio to bound {report['max_error_ratio']:.3g}), digest {report['digest']}")
    return 0
