"""`python -m emulation` (make emulate): how much faster is an all-reduce when the switches aggregate?

Starts a Mininet fat-tree of P4 switches (the embedded switch unless BMv2 is
asked for), installs routes and aggregation jobs with the controller, and for
each host count and size runs the in-network all-reduce with int32, int16 and
int8 lanes and the host baselines (a float32 ring, a bfloat16 ring), in a
shuffled order per repetition, timed the same way. Prints a table with the
speed-ups, what bounded each point (the wire, the chain of hops, or the CPUs)
and whether each sum met its accuracy target, and writes a results folder
(raw.csv, summary.json, plots). Needs root.

`--experiment train` asks the question after that: does a model trained
through the fabric converge like one trained with an exact all-reduce? It
trains a small MLP on scikit-learn's digits, data-parallel over the hosts,
once per method, and compares every method's loss curve and final accuracy
with an exact float64 run (emulation.training).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from emulation.experiment import (
    DEFAULT_BW_MBPS,
    DEFAULT_HOST_COUNTS,
    DEFAULT_METHODS,
    DEFAULT_REPS,
    PRESETS,
    ConfigError,
    ExperimentConfig,
    Sample,
)
from hosts.methods import METHODS
from hosts.training import ACCURACY_TOLERANCE_PP, TrainConfig, TrainingError
from emulation.nodes import BACKENDS, default_backend
from emulation.shaping import LinkShape, LinkShapeError
from emulation.training import DEFAULT_TRAIN_HOSTS, SEGMENT, TrainingConfig

LOG = logging.getLogger("emulation")


def parse_size(text: str) -> int:
    """'1K' -> 1024, '256k' -> 262144, '1M' -> 1048576, '1000' -> 1000."""
    t = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20}.get(t[-1:], 1)
    digits = t[:-1] if mult > 1 else t
    if not digits.isdigit() or int(digits) < 1:
        raise argparse.ArgumentTypeError(f"size {text!r} is not a positive number of elements (e.g. 1024, 16K, 1M)")
    return int(digits) * mult


def int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as ex:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from ex


def size_list(text: str) -> tuple[int, ...]:
    return tuple(parse_size(x) for x in text.split(",") if x.strip())


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m emulation", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    topo = ap.add_mutually_exclusive_group()
    topo.add_argument("--k", type=int, help="fat-tree arity (default 4: 16 hosts, 20 switches)")
    topo.add_argument("--topology", help="fat-tree:K, leaf-spine:LxSxH or a topology JSON (instead of --k)")
    ap.add_argument("--experiment", choices=("allreduce", "train", "faults"), default="allreduce",
                    help="allreduce (default): latency of every method per host count and size; train: data-parallel "
                         "training of an MLP on the digits through the fabric, every method against an exact run; "
                         "faults: a switch killed mid all-reduce, a loss sweep, register bit flips (emulation.faults; "
                         "--hosts/--sizes take their largest/first value)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="bandwidth",
                    help="the sweep's defaults: " + "; ".join(f"{k}: {v.doc} (hosts {','.join(map(str, v.host_counts))}, "
                    f"sizes {','.join(map(str, v.sizes))}, {v.bw_mbps:g} Mbit/s, delay {v.delay_ms:g} ms)"
                    for k, v in sorted(PRESETS.items())) + "; options given here override it")
    ap.add_argument("--hosts", type=int_list, default=None,
                    help=f"host counts to sweep, comma-separated (default {','.join(map(str, DEFAULT_HOST_COUNTS))}; "
                         f"train: {','.join(map(str, DEFAULT_TRAIN_HOSTS))})")
    ap.add_argument("--sizes", type=size_list, default=None,
                    help="all-reduce sizes in float32 elements, K/M suffixes allowed (default: the preset's)")
    ap.add_argument("--methods", default=None, help=f"any of {','.join(METHODS)} (default: the preset's)")
    ap.add_argument("--reps", type=int, default=DEFAULT_REPS, help=f"measured repetitions per point (default {DEFAULT_REPS})")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up all-reduces before them, not counted (default 1)")
    ap.add_argument("--switch", choices=(*BACKENDS, "auto"), default="embedded",
                    help=f"switch back end (default embedded, so runs compare across machines; auto = bmv2 when "
                         f"simple_switch_grpc is installed, here {default_backend()})")
    ap.add_argument("--bw", type=float, default=None,
                    help=f"link bandwidth in Mbit/s (default {DEFAULT_BW_MBPS:g}; 0 = unshaped, then the switches' CPU is the limit)")
    ap.add_argument("--delay", type=float, default=None,
                    help="one-way delay per link, ms (netem where the kernel has it, else the embedded switch's delay stage)")
    ap.add_argument("--loss", type=float, default=0.0, help="packet loss per link and direction, percent")
    ap.add_argument("--slots", type=int, default=128, help="in-network window: aggregation slots per job (default 128)")
    ap.add_argument("--input", default="normal", help="worker input kind (hosts.workload.KINDS)")
    ap.add_argument("--seed", type=int, default=0)
    tr = ap.add_argument_group("training (--experiment train)")
    tr.add_argument("--steps", type=int, default=TrainConfig.steps, help=f"training steps (default {TrainConfig.steps})")
    tr.add_argument("--batch", type=int, default=TrainConfig.batch,
                    help=f"global minibatch, split evenly over the hosts (default {TrainConfig.batch})")
    tr.add_argument("--lr", type=float, default=TrainConfig.lr, help=f"learning rate (default {TrainConfig.lr:g})")
    tr.add_argument("--momentum", type=float, default=TrainConfig.momentum, help=f"SGD momentum (default {TrainConfig.momentum:g})")
    tr.add_argument("--hidden", type=int_list, default=TrainConfig.hidden,
                    help=f"hidden layer widths, comma-separated (default {','.join(map(str, TrainConfig.hidden))})")
    tr.add_argument("--eval-every", type=int, default=TrainConfig.eval_every,
                    help=f"test accuracy after every this many steps (default {TrainConfig.eval_every})")
    tr.add_argument("--segment", type=int, default=SEGMENT, help=f"steps per agent command (default {SEGMENT})")
    tr.add_argument("--tolerance", type=float, default=ACCURACY_TOLERANCE_PP,
                    help=f"final accuracy must be within this many percentage points of the exact run's "
                         f"(default {ACCURACY_TOLERANCE_PP:g}: about two binomial standard errors on the test split)")
    ap.add_argument("--out", type=Path, default=Path("results"), help="parent of the results folder (default results/)")
    ap.add_argument("--name", default="", help="extra label for the results folder")
    ap.add_argument("--loss-rates", default="0.1,1,5", help="faults: loss rates to sweep, percent (default 0.1,1,5)")
    ap.add_argument("--victim", default="root", help="faults: root, aggregation or a switch name to kill")
    ap.add_argument("--flips", type=int, default=20, help="faults: register bit flips to land in live rounds")
    ap.add_argument("--dup", type=float, default=1.0, help="faults: percent of packets duplicated per link end (default 1)")
    ap.add_argument("--reorder", type=float, default=2.0,
                    help="faults: percent of packets held back behind later ones per link end (default 2)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--json", action="store_true", help="print summary.json instead of the table")
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return ap


def config_from_args(args: argparse.Namespace) -> ExperimentConfig:
    topology = args.topology or f"fat-tree:{args.k or 4}"
    preset = PRESETS[getattr(args, "preset", "bandwidth")]
    methods = (tuple(m.strip() for m in args.methods.split(",") if m.strip()) if args.methods is not None
               else preset.methods)
    bw = preset.bw_mbps if args.bw is None else args.bw
    delay = preset.delay_ms if args.delay is None else args.delay
    shape = LinkShape(bw_mbps=bw or None, delay_ms=delay or None, loss_pct=args.loss or None)
    name = args.name or ("" if preset is PRESETS["bandwidth"] else getattr(args, "preset", ""))
    return ExperimentConfig(
        topology=topology, host_counts=args.hosts or preset.host_counts, sizes=args.sizes or preset.sizes, methods=methods,
        reps=args.reps, warmup=args.warmup, backend=default_backend() if args.switch == "auto" else args.switch, shape=shape,
        slots=args.slots, input_kind=args.input, seed=args.seed, results_root=args.out, name=name)


def training_config_from_args(args: argparse.Namespace) -> TrainingConfig:
    """--experiment train: the fabric options as for the sweep (sizes and repetitions do not apply), the model's own."""
    fabric = config_from_args(args).with_(host_counts=args.hosts or DEFAULT_TRAIN_HOSTS, name=args.name or "train")
    if args.methods is None:  # the five that train (hier and tree add float32 sums like the ring's)
        fabric = fabric.with_(methods=DEFAULT_METHODS)
    train = TrainConfig(hidden=args.hidden, steps=args.steps, batch=args.batch, lr=args.lr, momentum=args.momentum,
                        seed=args.seed, eval_every=args.eval_every)
    return TrainingConfig.make(fabric, train, segment=args.segment, tolerance_pp=args.tolerance)


class Progress:
    """A tqdm bar over the steps (one method's all-reduce), with the last latency as its postfix."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.bar: Any = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="point", file=sys.stderr, dynamic_ncols=True)

    def __call__(self, what: str, s: Sample | None) -> None:
        if s is None:
            if self.bar is not None:
                self.bar.set_description(what)
            else:
                LOG.info("running %s", what)
            return
        text = "FAILED" if s.error else f"{s.latency_s * 1e3:.1f} ms"
        if self.bar is not None:
            self.bar.set_postfix_str(f"last: {text}")
            self.bar.update(1)
        else:
            LOG.info("%s: %s", what, text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _terminate(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM tears down like Ctrl-C does


def _faults(args: argparse.Namespace, config: ExperimentConfig) -> int:
    from emulation.faults import FaultsConfig, FaultsError, run_faults

    try:
        cfg = FaultsConfig(
            topology=config.topology, hosts=max(config.host_counts),
            size=16384 if args.sizes is None else config.sizes[0],
            slots=32 if args.slots == 128 else args.slots,
            bw_mbps=10.0 if args.bw == DEFAULT_BW_MBPS else (args.bw or 10.0),
            loss_rates=tuple(float(x) / 100 for x in args.loss_rates.split(",") if x.strip()),
            reps=args.reps if args.reps != DEFAULT_REPS else FaultsConfig.reps, victim=args.victim, sdc_flips=args.flips,
            dup_rate=args.dup / 100, reorder_rate=args.reorder / 100,
            backend=config.backend, results_root=args.out, seed=args.seed)
    except (FaultsError, ValueError) as ex:
        print(f"python -m emulation: error: {ex}", file=sys.stderr)
        return 2
    print(f"p4ina faults: {cfg.topology}, {cfg.hosts} hosts, {cfg.size} elements, {cfg.bw_mbps:g} Mbit/s, "
          f"loss {list(cfg.loss_rates)}, kill the {cfg.victim}", file=sys.stderr)
    try:
        result = run_faults(cfg)
    except KeyboardInterrupt:
        print("interrupted: the network was torn down", file=sys.stderr)
        return 130
    print(json.dumps(result.summary, indent=1, default=str) if args.json else _faults_table(result.summary))
    print(f"\nresults: {result.out_dir}", file=sys.stderr)
    return 0 if result.summary.get("ok") else 1


def _faults_table(s: dict[str, Any]) -> str:
    lines = [f"loss-free: {s['lossless'].get('latency_s', float('nan')) * 1e3:.1f} ms, exact {s['lossless'].get('exact')}, "
             f"timer floor {s['lossless'].get('rto_floor_s', float('nan')) * 1e3:.1f} ms"]
    for name, v in s.get("loss", {}).items():
        ratio = v["latency_over_lossless"]
        spread = sorted(v.get("latencies_s") or [])
        lines.append(f"loss {name:>5}: exact {v['exact']}, {v['retransmissions']} retransmissions "
                     f"({v.get('early_retransmissions', 0)} early), latency x{ratio:.2f} (median of {len(spread)}: "
                     f"{spread[0] * 1e3:.0f}-{spread[-1] * 1e3:.0f} ms)" if ratio and spread else f"loss {name}: {v['errors']}")
    dr = s.get("dup_reorder")
    if dr:
        lines.append(f"duplication {dr['dup'] * 100:g}% / reorder {dr['reorder'] * 100:g}%: exact {dr['exact']}, "
                     f"{dr['duplicated_packets']} copied and {dr['held_packets']} held back on the links, switches "
                     f"saw {dr['switch_retransmissions']} repeats and dropped {dr['switch_stale_drops']} stale, "
                     f"workers {dr['worker_duplicates']} duplicates")
    iso = s.get("isolation")
    if iso and "skipped" in iso:
        lines.append(f"isolation: skipped ({iso['skipped']})")
    elif iso:
        slow = ", ".join(f"{k} x{v:.2f}" for k, v in iso["slowdowns"].items())
        lines.append(f"isolation: {len(iso['jobs'])} jobs and a ring at once, exact {iso['exact']}, isolated "
                     f"{iso['isolated']} ({iso['foreign_cells']} foreign of {iso['register_cells_checked']} cells read "
                     f"back); slowdowns {slow}")
    f = s.get("switch_failure")
    if f:
        lines.append(f"switch failure: {f['victim']} killed, {f['verdict']}; recovered in {f['recovery_s']} s "
                     f"(detection bound {f['detect_bound_s']:.2f} s, goal {f['goal_s']:.2f} s), exact {f['exact']}, "
                     f"later all-reduces exact {f['later_exact']}")
    ln = s.get("link_failure")
    if ln:
        lines.append(f"link failure: {ln['link']} down, {ln['verdict']}; recovered in {ln['recovery_s']} s "
                     f"(goal {ln['goal_s']:.2f} s), exact {ln['exact']}, later all-reduces exact {ln['later_exact']}")
    e = s.get("edge_failure")
    if e:
        lines.append(f"edge failure: {e['switch']} ({', '.join(e['hosts'])}) reported {e['reported']}: {e['message']}")
    d = s.get("sdc")
    if d:
        lines.append(f"silent corruption: {d['detected']} detected / {d['injected']} injected, exact {d['exact']}"
                     + (f", {d['false_alarm_redos']} stalled round(s) redone on the same tree"
                        if d.get("false_alarm_redos") else ""))
    lines.append("problems: " + ("; ".join(s["problems"]) or "none"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.experiment == "train":
        return main_train(args)
    try:
        config = config_from_args(args)
    except (ConfigError, LinkShapeError) as ex:
        print(f"python -m emulation: error: {ex}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("python -m emulation: needs root (Mininet); run it with sudo or as root", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)
    if args.experiment == "faults":
        return _faults(args, config)

    from controller.client import SwitchError
    from controller.fabric import FabricError
    from controller.installer import InstallError
    from emulation import report
    from emulation.network import NetworkError
    from emulation.nodes import SwitchStartError
    from emulation.runner import ExperimentError, run_experiment

    total = len(config.host_counts) * len(config.sizes) * len(config.methods) * config.iterations
    bar = Progress(total, not args.no_progress and not args.json)
    print(f"p4ina: {config.topology} on the {config.backend} switch, hosts {list(config.host_counts)}, "
          f"sizes {[report.human_size(s) for s in config.sizes]}, {config.reps} reps + {config.warmup} warm-up, "
          f"links {config.shape.bw_mbps or 'unshaped'} Mbit/s", file=sys.stderr)
    try:
        result = run_experiment(config, progress=bar)
    except KeyboardInterrupt:
        bar.close()
        print("interrupted: the network was torn down; partial results (if any) are in the results folder", file=sys.stderr)
        return 130
    except (ExperimentError, ConfigError, NetworkError, SwitchStartError, InstallError, FabricError, SwitchError) as ex:
        bar.close()
        print(f"python -m emulation: error: {ex}", file=sys.stderr)
        return 1
    bar.close()
    summary = report.summary_of(result)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(report.table(summary))
        print(f"\nresults: {result.out_dir}  ({result.duration_s:.0f} s, of which {result.startup_s or 0:.0f} s start-up)")
    return 0 if summary["ok"] else 1


def main_train(args: argparse.Namespace) -> int:
    """--experiment train: the exact run here, every method's training through the fabric, the table and the folder."""
    try:
        config = training_config_from_args(args)
    except (ConfigError, LinkShapeError, TrainingError) as ex:
        print(f"python -m emulation: error: {ex}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("python -m emulation: needs root (Mininet); run it with sudo or as root", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)

    from controller.client import SwitchError
    from controller.fabric import FabricError
    from controller.installer import InstallError
    from emulation import training
    from emulation.network import NetworkError
    from emulation.nodes import SwitchStartError
    from emulation.runner import ExperimentError
    from emulation.training_runner import run_training, total_steps

    bar: Any = None
    if not args.no_progress and not args.json:
        from tqdm import tqdm

        bar = tqdm(total=total_steps(config), unit="step", file=sys.stderr, dynamic_ncols=True)

    def progress(what: str, steps: int) -> None:
        if bar is not None:
            bar.set_description(what)
            bar.update(steps)
        else:
            LOG.info("%s", what)

    fab, tr = config.fabric, config.train
    print(f"p4ina train: {fab.topology} on the {fab.backend} switch, hosts {list(fab.host_counts)}, methods "
          f"{list(fab.methods)}, {tr.steps} steps of {config.elements} parameters, links {fab.shape.bw_mbps or 'unshaped'} "
          "Mbit/s", file=sys.stderr)
    try:
        result = run_training(config, progress=progress)
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        print("interrupted: the network was torn down; partial results (if any) are in the results folder", file=sys.stderr)
        return 130
    except (ExperimentError, ConfigError, NetworkError, SwitchStartError, InstallError, FabricError, SwitchError,
            TrainingError) as ex:
        if bar is not None:
            bar.close()
        print(f"python -m emulation: error: {ex}", file=sys.stderr)
        return 1
    if bar is not None:
        bar.close()
    summary = training.summarize(result)
    if args.json:
        print(json.dumps(training._clean(summary), indent=1))
    else:
        print(training.table(summary))
        print(f"\nresults: {result.out_dir}  ({result.duration_s:.0f} s, of which {result.startup_s or 0:.0f} s start-up)")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
