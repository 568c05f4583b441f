"""`p4ina ddp`: real PyTorch models trained with DDP through the fabric, every method against an exact run.

A stock DDP loop per host (one PyTorch process in each emulated host) all-reduces its gradient buckets through
torchddp's communication hook, once per method: a CNN on scikit-learn's digits and a small transformer
language model on Python's own sources (no download). Compared with PyTorch's own float32 all-reduce through
Gloo (same seeds and data order) and with the spread of a few seeds of it; with and without random loss on
every link. Writes a results folder with the curves. Needs root.
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
    backend_of,
    check_fabric,
    int_list,
    method_list,
    needs_root,
    run_errors,
    setup_logging,
    tear_down_on_sigterm,
    words,
)
from experiments.config import ConfigError, ExperimentConfig

PROG = "p4ina ddp"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    from experiments.ddp.results import ALL, DEFAULT_BW_MBPS, DEFAULT_HOSTS, DEFAULT_STEPS, SEEDS

    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fabric_options(
        ap, bw_default=DEFAULT_BW_MBPS, bw_help=f"link bandwidth in Mbit/s (default {DEFAULT_BW_MBPS:g}; 0 = unshaped)"
    )
    ap.add_argument("--hosts", type=int_list, default=DEFAULT_HOSTS, help="host counts, comma-separated (default 4,8)")
    ap.add_argument("--methods", type=method_list, default=ALL, help=f"any of {','.join(ALL)} (default all)")
    ap.add_argument("--models", type=words, default=("cnn", "lm"), help="cnn, lm or both (default cnn,lm)")
    ap.add_argument("--steps", type=int, default=None, help=f"training steps of every model (default {DEFAULT_STEPS})")
    ap.add_argument("--seeds", type=int, default=SEEDS, help=f"extra exact runs for the seed spread (default {SEEDS})")
    ap.add_argument(
        "--ef",
        type=method_list,
        default=None,
        help="methods run again with error feedback (default inc-int8, if among --methods)",
    )
    ap.add_argument("--loss", type=float, default=1.0, help="random loss per link of the lossy runs, percent (0: none)")
    ap.add_argument("--loss-steps", type=int, default=15, help="steps of each lossy run (default 15)")
    ap.add_argument("--eval-every", type=int, default=10, help="evaluate every this many steps (default 10)")
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb (default 25, DDP's own)")
    ap.add_argument("--no-controls", action="store_true", help="skip the broken-hook controls")
    ap.add_argument("--slots", type=int, default=128, help="in-network window: aggregation slots per job")
    ap.add_argument("--name", default="ddp", help="label for the results folder (default ddp)")
    return ap


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    setup_logging(args.verbose)
    from experiments.ddp import results as R

    try:
        fabric = ExperimentConfig(
            topology=args.topology or (f"fat-tree:{args.k}" if args.k else R.DEFAULT_TOPOLOGY),
            host_counts=args.hosts,
            methods=args.methods,
            sizes=(1,),
            reps=1,
            warmup=0,
            backend=backend_of(args),
            shape=LinkShape(bw_mbps=args.bw or None),
            slots=args.slots,
            seed=args.seed,
            results_root=args.out,
            name=args.name,
        )
        steps = dict(R.DEFAULT_STEPS) if args.steps is None else {m: args.steps for m in R.DEFAULT_STEPS}
        config = R.DdpConfig(
            fabric=fabric,
            models=args.models,
            steps=steps,
            eval_every=args.eval_every,
            seeds=args.seeds,
            ef_methods=args.ef if args.ef is not None else tuple(m for m in ("inc-int8",) if m in args.methods),
            loss_pct=args.loss,
            loss_steps=args.loss_steps,
            controls=not args.no_controls,
            bucket_cap_mb=args.bucket_mb,
        )
        check_fabric(args, fabric.topology, fabric.host_counts)
    except (ConfigError, LinkShapeError, CommandError, ValueError) as ex:
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 2
    if needs_root(prog):
        return 2
    tear_down_on_sigterm()
    from experiments.ddp.run import run_ddp

    bar = Progress(config.total_steps(), not args.no_progress and not args.json, unit="step")

    def progress(what: str, steps: int) -> None:
        bar.describe(what)
        bar.advance(what, steps)

    print(
        f"{prog}: {fabric.topology}, hosts {list(fabric.host_counts)}, models {list(config.models)}, methods "
        f"{list(fabric.methods)}, links {fabric.shape.bw_mbps or 'unshaped'} Mbit/s",
        file=sys.stderr,
    )
    try:
        result = run_ddp(config, progress=progress)
    except KeyboardInterrupt:
        bar.close()
        print("interrupted: the network was torn down; partial results are in the results folder", file=sys.stderr)
        return 130
    except run_errors() as ex:
        bar.close()
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 1
    bar.close()
    summary = R.summarize(result)
    if args.json:
        print(json.dumps(R.jsonable(summary), indent=1))
    else:
        print(R.table(summary))
        print(f"\nresults: {result.out_dir}  ({result.duration_s:.0f} s)")
    return 0 if summary["ok"] else 1
