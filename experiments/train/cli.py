"""`p4ina train`: does a model trained through the fabric converge like one trained with an exact all-reduce?

Trains a small MLP on scikit-learn's digits, data-parallel over the emulated hosts, once per method,
and compares every method's loss curve and final accuracy with an exact float64 run (and with the
spread of a few more exact runs' seeds). Writes a results folder with the curves. Needs root.
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
)
from experiments.config import DEFAULT_BW_MBPS, DEFAULT_METHODS, ConfigError, ExperimentConfig
from experiments.results import jsonable
from experiments.train.results import DEFAULT_TRAIN_HOSTS, DEFAULT_TRAIN_TOPOLOGY, SEGMENT, TrainingConfig
from hosts.methods import METHODS
from hosts.training import ACCURACY_TOLERANCE_PP, TrainConfig, TrainingError

PROG = "p4ina train"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_fabric_options(
        ap, bw_default=DEFAULT_BW_MBPS, bw_help=f"link bandwidth in Mbit/s (default {DEFAULT_BW_MBPS:g}; 0 = unshaped)"
    )
    ap.add_argument(
        "--hosts",
        type=int_list,
        default=DEFAULT_TRAIN_HOSTS,
        help=f"host counts to train on, comma-separated (default {','.join(map(str, DEFAULT_TRAIN_HOSTS))})",
    )
    ap.add_argument(
        "--methods",
        type=method_list,
        default=DEFAULT_METHODS,
        help=f"any of {','.join(METHODS)} (default {','.join(DEFAULT_METHODS)})",
    )
    ap.add_argument("--delay", type=float, default=None, help="one-way delay per link, ms")
    ap.add_argument("--loss", type=float, default=0.0, help="packet loss per link and direction, percent")
    ap.add_argument("--slots", type=int, default=128, help="in-network window: aggregation slots per job (default 128)")
    ap.add_argument("--name", default="train", help="label for the results folder (default train)")
    tr = ap.add_argument_group("training")
    tr.add_argument(
        "--steps", type=int, default=TrainConfig.steps, help=f"training steps (default {TrainConfig.steps})"
    )
    tr.add_argument(
        "--batch",
        type=int,
        default=TrainConfig.batch,
        help=f"global minibatch, split evenly over the hosts (default {TrainConfig.batch})",
    )
    tr.add_argument("--lr", type=float, default=TrainConfig.lr, help=f"learning rate (default {TrainConfig.lr:g})")
    tr.add_argument(
        "--momentum", type=float, default=TrainConfig.momentum, help=f"SGD momentum (default {TrainConfig.momentum:g})"
    )
    tr.add_argument(
        "--hidden",
        type=int_list,
        default=TrainConfig.hidden,
        help=f"hidden layer widths, comma-separated (default {','.join(map(str, TrainConfig.hidden))})",
    )
    tr.add_argument(
        "--eval-every",
        type=int,
        default=TrainConfig.eval_every,
        help=f"test accuracy after every this many steps (default {TrainConfig.eval_every})",
    )
    tr.add_argument("--segment", type=int, default=SEGMENT, help=f"steps per agent command (default {SEGMENT})")
    tr.add_argument(
        "--tolerance",
        type=float,
        default=ACCURACY_TOLERANCE_PP,
        help=f"final accuracy must be within this many percentage points of the exact run's "
        f"(default {ACCURACY_TOLERANCE_PP:g}: about two binomial standard errors on the test split)",
    )
    return ap


def config_from_args(args: argparse.Namespace) -> TrainingConfig:
    shape = LinkShape(bw_mbps=args.bw or None, delay_ms=args.delay or None, loss_pct=args.loss or None)
    fabric = ExperimentConfig(
        topology=args.topology or (f"fat-tree:{args.k}" if args.k else DEFAULT_TRAIN_TOPOLOGY),
        host_counts=args.hosts,
        methods=args.methods,
        backend=backend_of(args),
        shape=shape,
        slots=args.slots,
        seed=args.seed,
        results_root=args.out,
        name=args.name,
    )
    train = TrainConfig(
        hidden=args.hidden,
        steps=args.steps,
        batch=args.batch,
        lr=args.lr,
        momentum=args.momentum,
        seed=args.seed,
        eval_every=args.eval_every,
    )
    return TrainingConfig.make(fabric, train, segment=args.segment, tolerance_pp=args.tolerance)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    """The exact run here, every method's training through the fabric, the table and the folder."""
    args = build_parser(prog).parse_args(argv)
    setup_logging(args.verbose)
    try:
        config = config_from_args(args)
        check_fabric(args, config.fabric.topology, config.fabric.host_counts)
    except (ConfigError, LinkShapeError, TrainingError, CommandError) as ex:
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 2
    if needs_root(prog):
        return 2
    tear_down_on_sigterm()

    from experiments.train import results as training
    from experiments.train.run import run_training, total_steps

    bar = Progress(total_steps(config), not args.no_progress and not args.json, unit="step")

    def progress(what: str, steps: int) -> None:
        bar.describe(what)
        bar.advance(what, steps)

    fab, tr = config.fabric, config.train
    print(
        f"{prog}: {fab.topology} on the {fab.backend} switch, hosts {list(fab.host_counts)}, methods "
        f"{list(fab.methods)}, {tr.steps} steps of {config.elements} parameters, "
        f"links {fab.shape.bw_mbps or 'unshaped'} Mbit/s",
        file=sys.stderr,
    )
    try:
        result = run_training(config, progress=progress)
    except KeyboardInterrupt:
        bar.close()
        print(
            "interrupted: the network was torn down; partial results (if any) are in the results folder",
            file=sys.stderr,
        )
        return 130
    except (*run_errors(), TrainingError) as ex:
        bar.close()
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 1
    bar.close()
    summary = training.summarize(result)
    if args.json:
        print(json.dumps(jsonable(summary), indent=1))
    else:
        print(training.table(summary))
        print(
            f"\nresults: {result.out_dir}  ({result.duration_s:.0f} s, of which {result.startup_s or 0:.0f} s start-up)"
        )
    return 0 if summary["ok"] else 1
