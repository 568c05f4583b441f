"""`p4ina simulate` / `python -m simulation` (make simulate): the all-reduce methods at 16 to 100,000 GPUs.

Without topology options it runs the default sweep (scaling to 100k GPUs on
a fat-tree, a rail-optimised fat-tree and Dragonfly+; placement of eight
jobs; failures; the emulation's own fat-tree), the four validations, and
writes a results folder with config.json, raw.csv, summary.json, table.txt
and the plots.  With --topology/--gpus it runs the grid those options name.
--calibrate RESULTS_DIR [...] fits one set of per-packet costs to emulation
results folders (each with its own links) and prints the error table.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from datetime import datetime
from itertools import product
from pathlib import Path
from typing import Any

from hosts.sizes import ELEMENT_BYTES, SizeError, human_bytes, parse_bytes, parse_elements
from simulation import sweep, topologies
from simulation.calibrate import CalibrationError, check, fit
from simulation.engine import EngineError
from simulation.fabric import FabricError
from simulation.methods import METHODS, MethodError, canonical_method
from simulation.model import Outcome, Scenario, ScenarioError
from simulation.params import PRESETS, ParamError, get_preset
from simulation.placement import POLICIES, PlacementError
from simulation.report import write_folder
from simulation.topologies import canonical_spec, controller_topology, parse_scale_spec
from simulation.trees import TreeError

LOG = logging.getLogger("simulation")

DEFAULT_SIZES = (64 << 10, 1 << 20, 256 << 20)  # bytes
ERRORS = (
    SizeError,
    ScenarioError,
    FabricError,
    ParamError,
    PlacementError,
    MethodError,
    TreeError,
    CalibrationError,
    EngineError,
)


def parse_topologies(text: str) -> tuple[str, ...]:
    """'clos:radix=64,tiers=3,rail' -> ('clos:radix=64,tiers=3', 'rail'): a builder's key=value options are
    comma-separated too, so an item that is only key=value belongs to the topology before it."""
    specs: list[str] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if "=" in item and ":" not in item and not item.endswith(".json"):
            if not specs:
                raise argparse.ArgumentTypeError(f"{text!r}: {item!r} is an option of no topology (e.g. clos:{item})")
            specs[-1] += ("," if ":" in specs[-1] else ":") + item
        else:
            specs.append(item)
    return tuple(specs)


def _list(conv: Any) -> Any:
    def parse(text: str) -> tuple[Any, ...]:
        try:
            return tuple(conv(x) for x in text.split(",") if x.strip())
        except ValueError as ex:
            raise argparse.ArgumentTypeError(f"{text!r}: {ex}") from ex

    return parse


def _override(text: str) -> tuple[str, float]:
    key, eq, value = text.partition("=")
    try:
        if not eq:
            raise ValueError
        return key.strip(), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--set {text!r}: want PARAM=NUMBER, e.g. switch_latency=1.3e-6") from None


def build_parser(prog: str = "p4ina simulate") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--calibrate",
        type=Path,
        nargs="+",
        metavar="RESULTS_DIR",
        help="fit per-packet costs to emulation results folders (or a folder of them, e.g. make emulate's "
        "bandwidth and latency runs), one set of costs for all, and print the error table",
    )
    ap.add_argument(
        "--check",
        type=Path,
        nargs="+",
        metavar="RESULTS_DIR",
        help="with --calibrate: results folders to predict with the fitted costs without fitting to them "
        "(out of sample), e.g. a later run of the same preset",
    )
    ap.add_argument(
        "--sweep", choices=("default", "quick"), help="a predefined sweep (default when no --topology is given)"
    )
    ap.add_argument(
        "--topology",
        type=parse_topologies,
        help="topologies, comma-separated: the controller's fat-tree:K, leaf-spine:LxSxH or a JSON (the "
        "emulation's); clos[:radix=R,tiers=T,oversub=O] (a fat-tree sized to the GPUs; 'fattree' is deprecated), "
        "rail[:...], dragonfly+[:radix=R]",
    )
    ap.add_argument(
        "--gpus", type=_list(int), help="GPUs per job, comma-separated (default: all hosts of a controller topology)"
    )
    units = ap.add_mutually_exclusive_group()
    units.add_argument(
        "--sizes",
        type=_list(str),
        default=None,
        help="all-reduce sizes per GPU, comma-separated, with their unit: bytes (64KiB, 4MiB, 1GiB) or float32 "
        "elements (16Ki-elem, 1Mi-elem); a bare 4K or 1024 is refused (bytes or elements?); default "
        + ",".join(human_bytes(s).replace(" ", "") for s in DEFAULT_SIZES),
    )
    units.add_argument(
        "--elements",
        type=_list(str),
        default=None,
        help="all-reduce sizes as float32 element counts, comma-separated, K/M/G = 2^10/2^20/2^30 (16K,1M), "
        "instead of --sizes",
    )
    ap.add_argument(
        "--methods",
        type=_list(str),
        default=("nccl", "hier-rail", "inc-int32", "inc-int8", "hier-inc", "adaptive"),
        help=f"methods, comma-separated, from {', '.join(METHODS)}",
    )
    ap.add_argument(
        "--preset",
        default=None,
        help=f"{', '.join(PRESETS)}, or a preset JSON (e.g. a calibration.json); default h100 for the scale "
        "topologies, emulation for the controller's",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PARAM=VALUE",
        type=_override,
        help="replace a preset parameter, e.g. --set switch_latency=1.3e-6 (repeatable; see simulation/params.py)",
    )
    ap.add_argument(
        "--jobs", type=int, default=1, help="jobs sharing the cluster, all all-reducing at once (default 1)"
    )
    ap.add_argument(
        "--cluster-gpus", type=int, help="size the fabric for this many GPUs (default: jobs x GPUs per job)"
    )
    ap.add_argument(
        "--placement",
        type=_list(str),
        default=("contiguous",),
        help=f"placements, comma-separated: {', '.join(POLICIES)}",
    )
    ap.add_argument(
        "--background",
        type=_list(float),
        default=(0.0,),
        help="background load per GPU as a share of its NIC rate, comma-separated",
    )
    ap.add_argument(
        "--fail", action="append", default=[], help="switch:NAME, link:A-B, tree-root or tree-link (repeatable)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--emulation-results",
        type=Path,
        help="the emulation results folder to calibrate and validate against "
        "(default: the fixture in tests/simulation/data)",
    )
    ap.add_argument("--no-validate", action="store_true", help="skip the four validations")
    ap.add_argument("--validate-only", action="store_true", help="only the validations")
    ap.add_argument("--workers", "-j", type=int, default=None, help="parallel processes (default: cores, at most 2)")
    ap.add_argument("--out", type=Path, default=Path("results"), help="parent of the results folder (default results/)")
    ap.add_argument("--name", default="", help="extra label for the results folder")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument(
        "--json", action="store_true", help="print summary.json's validation and findings instead of the table"
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return ap


def _sizes(args: argparse.Namespace) -> tuple[int, ...]:
    """--sizes (explicit units) or --elements (float32 counts) -> bytes per GPU; hosts.sizes refuses a bare 4K."""
    if args.elements is not None:
        return tuple(parse_elements(x) * ELEMENT_BYTES for x in args.elements)
    if args.sizes is not None:
        return tuple(parse_bytes(x) for x in args.sizes)
    return DEFAULT_SIZES


def _spellings(args: argparse.Namespace) -> None:
    """Every --topology and --methods in its one spelling; one deprecation line for each old one (e.g. fattree ->
    clos, ring -> ring-1nic)."""
    methods = []
    for m in args.methods:
        new, deprecated = canonical_method(m)
        if deprecated:
            print(f"p4ina simulate: warning: {deprecated}", file=sys.stderr)
        methods.append(new)
    args.methods = tuple(methods)
    if args.topology is None:
        return
    canon = []
    for spec in args.topology:
        new, deprecated = canonical_spec(spec)
        if deprecated:
            print(f"p4ina simulate: warning: {deprecated}", file=sys.stderr)
        canon.append(new)
    args.topology = tuple(canon)


def _scenarios(args: argparse.Namespace) -> list[Scenario]:
    if args.topology is None:
        return sweep.quick_sweep() if args.sweep == "quick" else sweep.default_sweep()
    out = []
    for topo, n, pl, bg in product(args.topology, args.gpus or (None,), args.placement, args.background):
        preset = args.preset or (
            "emulation" if topo.split(":")[0] in ("fat-tree", "leaf-spine") or topo.endswith(".json") else "h100"
        )
        out.append(
            Scenario(
                topology=topo,
                gpus=n,
                jobs=args.jobs,
                cluster_gpus=args.cluster_gpus,
                placement=pl,
                background=bg,
                fail=tuple(args.fail),
                preset=preset,
                overrides=tuple(args.set),
                methods=tuple(args.methods),
                sizes=tuple(args.sizes),
                seed=args.seed,
                label="custom",
            )
        )
    return out


def _calibrate(args: argparse.Namespace) -> int:
    calib = fit(args.calibrate)
    if args.json:  # the text says it in its first lines
        for warning in calib.warnings:
            print(f"p4ina simulate: warning: {warning}", file=sys.stderr)
    if args.check:
        check(calib, args.check)
    out = args.out / f"{datetime.now():%Y-%m-%d_%H%M%S}_simulate-calibration{'_' + args.name if args.name else ''}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "calibration.json").write_text(json.dumps(calib.to_dict(), indent=1) + "\n")
    (out / "calibration.txt").write_text(calib.text() + "\n")
    print(json.dumps(calib.to_dict(), indent=1) if args.json else calib.text())
    print(
        f"\nwritten to {out} (use --preset {out / 'calibration.json'} to simulate with the fitted costs)",
        file=sys.stderr,
    )
    return 0


def check_inputs(args: argparse.Namespace) -> None:
    """Every value of the command line that can be checked before anything runs or is written: the sizes and
    their units (converted to bytes here), the topologies in their one spelling (a controller topology
    completely, as controller.topospec checks it), the GPU counts they can hold, the scenarios and their
    presets. Raises one of ERRORS, naming the value."""
    if args.check and not args.calibrate:
        raise CalibrationError("--check predicts results folders with the costs --calibrate fits: give --calibrate too")
    if args.calibrate:
        return
    given = args.sizes is not None or args.elements is not None
    args.sizes = _sizes(args)  # bytes from here on (config.json's args record them so)
    if given and args.topology is None:
        raise ScenarioError(
            "--sizes/--elements set the sizes of a --topology grid; the default and quick sweeps have their own "
            "per study: give --topology too"
        )
    _spellings(args)
    for spec in args.topology or ():
        topo = controller_topology(spec)
        if topo is None:
            parse_scale_spec(spec)
        elif args.gpus and max(args.gpus) > len(topo.hosts):
            raise FabricError(
                f"--gpus {max(args.gpus)}: {spec} has {len(topo.hosts)} hosts; ask for at most {len(topo.hosts)}"
            )
    for s in [] if args.validate_only else _scenarios(args):
        preset = get_preset(s.preset).with_(**dict(s.overrides))
        n = s.cluster_gpus or (s.gpus * s.jobs if s.gpus else None)
        if n is not None and args.topology is not None:
            topologies.check(s.topology, preset, n)


def run(args: argparse.Namespace) -> int:
    if args.calibrate:
        return _calibrate(args)
    t0 = time.perf_counter()
    label = "_".join(filter(None, ["simulate", args.sweep or ("custom" if args.topology else "default"), args.name]))
    out = args.out / f"{datetime.now():%Y-%m-%d_%H%M%S}_{label}"
    scenarios = [] if args.validate_only else _scenarios(args)
    for s in scenarios:
        get_preset(s.preset).with_(**dict(s.overrides))  # refuse unknown presets and parameters before anything runs
    validation: dict[str, Any] = {}
    calibration = None
    if not args.no_validate:
        from simulation.validation import run_all

        LOG.info("validating (emulation, closed forms, SHARP anchor, phase vs full simulation, NCCL's published busbw)")
        validation, calib = run_all(args.emulation_results, large=args.topology is None and args.sweep != "quick")
        if calib is not None:
            calibration = calib.to_dict()
            path = out / "calibration.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"preset": calib.preset.to_dict()}, indent=1) + "\n")
            # the emulation scenarios use the fitted costs
            scenarios = [
                s.__class__(**{**s.to_dict(), "preset": str(path)}) if s.label == "emulation" else s for s in scenarios
            ]
    bar = None
    if scenarios and not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=len(scenarios), desc="simulate", unit="point")

    def progress(o: Outcome) -> None:
        if bar is not None:
            bar.set_postfix_str(f"{o.scenario.label} {o.scenario.topology} {o.fabric['gpus']} GPUs", refresh=False)
            bar.update(1)

    outcomes = sweep.run(scenarios, args.workers, progress) if scenarios else []
    if bar is not None:
        bar.close()
    duration = time.perf_counter() - t0
    config = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "scenarios": [s.to_dict() for s in scenarios],
        "presets": {s.preset: get_preset(s.preset).to_dict() for s in scenarios},
    }
    write_folder(out, outcomes, config, validation, duration, calibration)
    summary = json.loads((out / "summary.json").read_text())
    if args.json:
        print(
            json.dumps(
                {
                    "presets": summary["presets"],
                    "validation": {k: v for k, v in summary["validation"].items() if k != "details"},
                    "max_gpus": summary["max_gpus"],
                    "findings": summary["findings"],
                    "notes": summary["notes"],
                },
                indent=1,
            )
        )
    else:
        print((out / "table.txt").read_text())
        v = summary["validation"]
        if v:

            def pct(x: Any) -> str:
                return "-" if x is None else f"{x * 100:.1f}%"

            print(
                f"validation: emulation {pct(v.get('emulation_max_rel_error'))} (limit 15%; runs held out of the fit "
                f"{pct(v.get('emulation_held_out_max_rel_error'))}), closed forms "
                f"{pct(v.get('closed_form_max_rel_error'))} (2%), "
                f"SHARP anchor {pct(v.get('sharp_anchor_rel_error'))} (25%), "
                f"phase vs full {pct(v.get('phase_vs_full_max_rel_error'))} (5%), "
                f"NCCL's published busbw {pct(v.get('nccl_busbw_max_rel_error'))} (15%)"
            )
        na = summary["findings"].get("not_applicable", {})
        if na:
            print("not in this run's findings: " + "; ".join(f"{what}: {why}" for what, why in na.items()))
    sizes = ", ".join(human_bytes(s) for s in args.sizes) + " per GPU" if args.topology else "per study"
    presets = "; ".join(p["label"] for p in summary["presets"]) or "-"
    print(
        f"\nresults: {out}  ({duration:.0f} s; largest job {summary['max_gpus']} GPUs; sizes {sizes}; "
        f"presets {presets})"
    )
    return 0


def main(argv: list[str] | None = None, prog: str = "p4ina simulate") -> int:
    args = build_parser(prog).parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    if not args.verbose:
        logging.getLogger("simulation").setLevel(logging.INFO)
    try:
        check_inputs(args)
    except ERRORS as ex:  # bad input: one line, exit status 2, before anything runs
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 2
    try:
        return run(args)
    except ERRORS as ex:
        print(f"p4ina simulate: error: {ex}", file=sys.stderr)
        LOG.debug("details", exc_info=True)
        return 1
    except KeyboardInterrupt:
        return 130
