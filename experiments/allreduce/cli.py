"""`p4ina emulate` (make emulate): how much faster is an all-reduce when the switches aggregate?

Starts a Mininet fat-tree of P4 switches (the embedded switch unless BMv2 is asked for), installs
routes and aggregation jobs with the controller, and for each host count and size runs the
in-network all-reduce with int32, int16 and int8 lanes and the host baselines (a float32 ring, a
bfloat16 ring), in a shuffled order per repetition, timed the same way. Prints a table with the
speed-ups, what bounded each point (the wire, the chain of hops, or the CPUs) and whether each sum
met its accuracy target, and writes a results folder (raw.csv, summary.json, plots). Needs root.
"""

from __future__ import annotations

import argparse
import json
import sys

from emulation.shaping import LinkShape, LinkShapeError
from experiments.cli import (
    CommandError,
    Progress,
    add_fabric_options,
    add_size_options,
    backend_of,
    check_fabric,
    int_list,
    method_list,
    needs_root,
    run_errors,
    setup_logging,
    sizes_of,
    tear_down_on_sigterm,
    topology_of,
)
from experiments.config import DEFAULT_BW_MBPS, DEFAULT_REPS, PRESETS, ConfigError, ExperimentConfig, Sample
from experiments.results import human_size
from hosts.methods import METHODS
from hosts.sizes import SizeError

PROG = "p4ina emulate"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fabric_options(
        ap,
        bw_default=None,
        bw_help=f"link bandwidth in Mbit/s (default: the preset's, {DEFAULT_BW_MBPS:g} for bandwidth; "
        "0 = unshaped, then the switches' CPU is the limit)",
    )
    ap.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="bandwidth",
        help="the sweep's defaults: "
        + "; ".join(
            f"{k}: {v.doc} (hosts {','.join(map(str, v.host_counts))}, "
            f"sizes {','.join(human_size(s) for s in v.sizes)} elements, {v.bw_mbps:g} Mbit/s, "
            f"delay {v.delay_ms:g} ms)"
            for k, v in sorted(PRESETS.items())
        )
        + "; options given here override it",
    )
    ap.add_argument(
        "--hosts", type=int_list, default=None, help="host counts to sweep, comma-separated (default: the preset's)"
    )
    add_size_options(ap, "default: the preset's")
    ap.add_argument(
        "--methods", type=method_list, default=None, help=f"any of {','.join(METHODS)} (default: the preset's)"
    )
    ap.add_argument(
        "--reps", type=int, default=DEFAULT_REPS, help=f"measured repetitions per point (default {DEFAULT_REPS})"
    )
    ap.add_argument("--warmup", type=int, default=1, help="warm-up all-reduces before them, not counted (default 1)")
    ap.add_argument(
        "--delay",
        type=float,
        default=None,
        help="one-way delay per link, ms (netem where the kernel has it, else the embedded switch's delay stage)",
    )
    ap.add_argument("--loss", type=float, default=0.0, help="packet loss per link and direction, percent")
    ap.add_argument("--slots", type=int, default=128, help="in-network window: aggregation slots per job (default 128)")
    ap.add_argument("--input", default="normal", help="worker input kind (hosts.workload.KINDS)")
    ap.add_argument("--name", default="", help="extra label for the results folder (default: the preset's name)")
    return ap


def config_from_args(args: argparse.Namespace) -> ExperimentConfig:
    preset = PRESETS[args.preset]
    bw = preset.bw_mbps if args.bw is None else args.bw
    delay = preset.delay_ms if args.delay is None else args.delay
    shape = LinkShape(bw_mbps=bw or None, delay_ms=delay or None, loss_pct=args.loss or None)
    name = args.name or ("" if preset is PRESETS["bandwidth"] else args.preset)
    return ExperimentConfig(
        topology=topology_of(args),
        host_counts=args.hosts or preset.host_counts,
        sizes=sizes_of(args) or preset.sizes,
        methods=args.methods or preset.methods,
        reps=args.reps,
        warmup=args.warmup,
        backend=backend_of(args),
        shape=shape,
        slots=args.slots,
        input_kind=args.input,
        seed=args.seed,
        results_root=args.out,
        name=name,
    )


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    setup_logging(args.verbose)
    try:
        config = config_from_args(args)
        check_fabric(args, config.topology, config.host_counts)
    except (ConfigError, LinkShapeError, CommandError, SizeError) as ex:
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 2
    if needs_root(prog):
        return 2
    tear_down_on_sigterm()

    from experiments.allreduce import report
    from experiments.allreduce.run import run_experiment

    total = len(config.host_counts) * len(config.sizes) * len(config.methods) * config.iterations
    bar = Progress(total, not args.no_progress and not args.json)

    def progress(what: str, s: Sample | None) -> None:
        if s is None:
            bar.describe(what)
        else:
            bar.advance(what, 1, "last: " + ("FAILED" if s.error else f"{s.latency_s * 1e3:.1f} ms"))

    print(
        f"{prog}: {config.topology} on the {config.backend} switch, hosts {list(config.host_counts)}, "
        f"sizes {', '.join(human_size(s) for s in config.sizes)} elements (float32), "
        f"{config.reps} reps + {config.warmup} warm-up, "
        f"links {config.shape.bw_mbps or 'unshaped'} Mbit/s",
        file=sys.stderr,
    )
    try:
        result = run_experiment(config, progress=progress)
    except KeyboardInterrupt:
        bar.close()
        print(
            "interrupted: the network was torn down; partial results (if any) are in the results folder",
            file=sys.stderr,
        )
        return 130
    except run_errors() as ex:
        bar.close()
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 1
    bar.close()
    summary = report.summary_of(result)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(report.table(summary))
        print(
            f"\nresults: {result.out_dir}  ({result.duration_s:.0f} s, of which {result.startup_s or 0:.0f} s start-up)"
        )
    return 0 if summary["ok"] else 1
