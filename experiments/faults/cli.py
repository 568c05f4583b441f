"""`p4ina faults` (make emulate-faults): what a fabric does to an all-reduce, and that every sum stays exact.

A switch killed mid all-reduce, a link taken down, an edge switch lost, random loss, duplication and
reordering on every link, four jobs at once on shared switches, and register bit flips; every sum
is checked. Writes a results folder with the summary and a timeline plot. Needs root.
"""

from __future__ import annotations

import argparse
import json
import sys

from experiments.cli import (
    SIZES_HELP,
    CommandError,
    add_fabric_options,
    backend_of,
    check_fabric,
    needs_root,
    parse_size,
    run_errors,
    setup_logging,
    tear_down_on_sigterm,
    topology_of,
)
from experiments.faults.run import HOST_POLICIES, FaultsConfig, FaultsError
from experiments.results import human_size

PROG = "p4ina faults"
D = FaultsConfig()


def _rates(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) / 100 for x in text.split(",") if x.strip())
    except ValueError as ex:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of percentages") from ex


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fabric_options(ap, bw_default=D.bw_mbps, bw_help=f"link bandwidth in Mbit/s (default {D.bw_mbps:g})")
    ap.add_argument("--hosts", type=int, default=D.hosts, help=f"hosts in the job (default {D.hosts})")
    ap.add_argument(
        "--size",
        default=None,
        help=f"the all-reduce's size, {SIZES_HELP} (default {human_size(D.size)}-elem)",
    )
    ap.add_argument("--slots", type=int, default=D.slots, help=f"aggregation slots of the job (default {D.slots})")
    ap.add_argument("--reps", type=int, default=D.reps, help=f"all-reduces per loss rate and phase (default {D.reps})")
    ap.add_argument(
        "--loss-rates",
        type=_rates,
        default=D.loss_rates,
        help="loss rates to sweep, percent (default " + ",".join(f"{r * 100:g}" for r in D.loss_rates) + ")",
    )
    ap.add_argument(
        "--failure-runs",
        type=int,
        default=D.failure_runs,
        help=f"switch crashes, link failures, gray switches and gray links each, placed early, middle and late in turn "
        f"(default {D.failure_runs})",
    )
    ap.add_argument(
        "--no-signals",
        action="store_true",
        help="no failure monitor: failures are found by the workers' failure timeout only (the detector off)",
    )
    ap.add_argument(
        "--no-gray",
        action="store_true",
        help="no gray failures (a switch dropping every frame it receives, one direction of a link dropping all)",
    )
    ap.add_argument(
        "--no-gray-detection",
        action="store_true",
        help="do not read the tree's slot registers at a stall: gray failures go unlocalised (the detector off)",
    )
    ap.add_argument(
        "--controller-runs",
        type=int,
        default=D.controller_runs,
        help="controller crashes: a primary controller process killed, the standby taking over, then a switch "
        f"failure it handles (default {D.controller_runs}; 0: none)",
    )
    ap.add_argument(
        "--host-policy",
        type=_policies,
        default=D.host_policies,
        help="a host's agent killed mid all-reduce, then the job goes on by each of these: shrink (the survivors' "
        "sum), spare (a standby host takes the rank: the hosts after --hosts, or where the fabric has none, the "
        "job's last --host-runs hosts stand by for these phases); comma-separated, or none (the default; make "
        "emulate-faults asks for both)",
    )
    ap.add_argument(
        "--host-runs",
        type=int,
        default=D.host_runs,
        help=f"host crashes per policy, placed early, middle and late in turn (default {D.host_runs})",
    )
    ap.add_argument(
        "--victim", default=D.victim, help=f"root, aggregation or a switch name to kill (default {D.victim})"
    )
    ap.add_argument(
        "--flips",
        type=int,
        default=D.sdc_flips,
        help=f"register bit flips to land in live rounds (default {D.sdc_flips})",
    )
    ap.add_argument(
        "--dup",
        type=float,
        default=D.dup_rate * 100,
        help=f"percent of packets duplicated per link end (default {D.dup_rate * 100:g})",
    )
    ap.add_argument(
        "--reorder",
        type=float,
        default=D.reorder_rate * 100,
        help=f"percent of packets held back behind later ones per link end (default {D.reorder_rate * 100:g})",
    )
    return ap


def _policies(text: str) -> tuple[str, ...]:
    names = tuple(p for p in text.split(",") if p and p != "none")
    bad = [p for p in names if p not in HOST_POLICIES]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown host policy {', '.join(bad)}; choose from {', '.join(HOST_POLICIES)}"
        )
    return names


def config_from_args(args: argparse.Namespace) -> FaultsConfig:
    return FaultsConfig(
        topology=topology_of(args),
        hosts=args.hosts,
        size=D.size if args.size is None else parse_size(args.size),
        slots=args.slots,
        bw_mbps=args.bw,
        loss_rates=args.loss_rates,
        reps=args.reps,
        victim=args.victim,
        failure_runs=args.failure_runs,
        signals=not args.no_signals,
        gray_failure=not args.no_gray,
        gray_detection=not args.no_gray_detection,
        controller_runs=args.controller_runs,
        host_policies=args.host_policy,
        host_runs=args.host_runs,
        sdc_flips=args.flips,
        dup_rate=args.dup / 100,
        reorder_rate=args.reorder / 100,
        backend=backend_of(args),
        results_root=args.out,
        seed=args.seed,
    )


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    setup_logging(args.verbose)
    try:
        cfg = config_from_args(args)
        model = check_fabric(args, cfg.topology, (cfg.hosts,))
        if cfg.victim not in ("root", "aggregation") and cfg.victim not in {s.name for s in model.switches}:
            raise CommandError(
                f"--victim {cfg.victim}: not a switch of {cfg.topology}; want root, aggregation or a switch name "
                f"({', '.join(s.name for s in model.switches[:6])}, ...)"
            )
    except (FaultsError, ValueError, CommandError) as ex:
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 2
    if needs_root(prog):
        return 2
    tear_down_on_sigterm()

    from experiments.faults.report import table
    from experiments.faults.run import run_faults

    print(
        f"{prog}: {cfg.topology}, {cfg.hosts} hosts, {human_size(cfg.size)} elements (float32), "
        f"{cfg.bw_mbps:g} Mbit/s, "
        f"loss {list(cfg.loss_rates)}, kill the {cfg.victim}",
        file=sys.stderr,
    )
    try:
        result = run_faults(cfg)
    except KeyboardInterrupt:
        print("interrupted: the network was torn down", file=sys.stderr)
        return 130
    except (*run_errors(), FaultsError) as ex:
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 1
    print(json.dumps(result.summary, indent=1, default=str) if args.json else table(result.summary))
    print(f"\nresults: {result.out_dir}", file=sys.stderr)
    return 0 if result.summary.get("ok") else 1
