"""What the experiments' commands share: the fabric's options, value parsers, progress, root and signals.

Each experiment has its own parser (experiments/<name>/cli.py) built from these pieces, with its own
defaults, so no command guesses what the user meant from the value of another's default.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from controller.fattree import SUPPORTED_K
from controller.topology import Topology, TopologyError
from controller.topospec import load_topology
from emulation.nodes import BACKENDS, backend_missing, default_backend
from hosts import sizes
from hosts.methods import METHODS

LOG = logging.getLogger(__name__)


class CommandError(Exception):
    """A command's input is unusable; the message names it and the fix (printed as one line, exit 2)."""


def parse_size(text: str) -> int:
    """A size with its unit -> float32 elements: '16Ki-elem' -> 16384, '64KiB' -> 16384 (hosts.sizes: a bare
    '16K' or '1024' is refused, bytes or elements?)."""
    return sizes.elements_of(text)


def size_arg(text: str) -> int:
    """parse_size as an argparse type: argparse prints an ArgumentTypeError's own message (else "invalid value")."""
    try:
        return parse_size(text)
    except sizes.SizeError as ex:
        raise argparse.ArgumentTypeError(str(ex)) from ex


def int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError as ex:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from ex


def words(text: str) -> tuple[str, ...]:
    """'a, b,c' -> ('a', 'b', 'c'): a list read as text, converted (and refused in one line) after parsing."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


SIZES_HELP = (
    "with their unit: bytes (64KiB, 4MiB) or float32 elements (16Ki-elem, 1Mi-elem); a bare 16K or 1024 is "
    "refused (bytes or elements?)"
)


def add_size_options(ap: argparse.ArgumentParser, what: str) -> None:
    """--sizes (explicit units) and --elements (bare counts of float32 elements), one or the other."""
    group = ap.add_mutually_exclusive_group()
    group.add_argument(
        "--sizes", type=words, default=None, help=f"all-reduce sizes, comma-separated, {SIZES_HELP}; {what}"
    )
    group.add_argument(
        "--elements",
        type=words,
        default=None,
        help="all-reduce sizes as float32 element counts, comma-separated, K/M = 2^10/2^20 (1K,16K,128K), "
        "instead of --sizes",
    )


def sizes_of(args: argparse.Namespace) -> tuple[int, ...] | None:
    """The --sizes or --elements given, in float32 elements (None: neither); sizes.SizeError names a bad one."""
    if args.sizes is not None:
        return tuple(parse_size(x) for x in args.sizes)
    if args.elements is not None:
        return tuple(sizes.parse_elements(x) for x in args.elements)
    return None


def method_list(text: str) -> tuple[str, ...]:
    names = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in names if m not in METHODS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown method(s) {', '.join(unknown) or '(none given)'}: choose from {','.join(METHODS)}"
        )
    return names


def add_fabric_options(ap: argparse.ArgumentParser, *, bw_default: float | None, bw_help: str) -> None:
    """The emulated network: topology, switch back end, links, results folder, output."""
    topo = ap.add_mutually_exclusive_group()
    topo.add_argument("--k", type=int, help="fat-tree arity (default 4: 16 hosts, 20 switches)")
    topo.add_argument("--topology", help="fat-tree:K, leaf-spine:LxSxH or a topology JSON (instead of --k)")
    ap.add_argument(
        "--switch",
        choices=(*BACKENDS, "auto"),
        default="embedded",
        help=f"switch back end (default embedded, so runs compare across machines; auto = bmv2 when "
        f"simple_switch_grpc is installed, here {default_backend()})",
    )
    ap.add_argument("--bw", type=float, default=bw_default, help=bw_help)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("results"), help="parent of the results folder (default results/)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--json", action="store_true", help="print summary.json instead of the table")
    ap.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def topology_of(args: argparse.Namespace) -> str:
    return str(args.topology or f"fat-tree:{args.k or 4}")


def backend_of(args: argparse.Namespace) -> str:
    return default_backend() if args.switch == "auto" else str(args.switch)


def check_fabric(args: argparse.Namespace, topology: str, host_counts: Sequence[int]) -> Topology:
    """The fabric a command asks for, checked before anything starts: --k, the topology (completely:
    controller.topospec), the host counts against its hosts and the switch back end against this machine.
    A refusal is a CommandError naming the option and the fix."""
    if args.k is not None and args.k not in SUPPORTED_K:
        raise CommandError(
            f"--k {args.k}: want an even k, {SUPPORTED_K[0]}..{SUPPORTED_K[-1]} (--k 4: 16 hosts on 20 switches)"
        )
    try:
        model = load_topology(topology)
    except TopologyError as ex:
        raise CommandError(str(ex)) from None
    most = max(host_counts, default=0)
    if most > len(model.hosts):
        raise CommandError(
            f"--hosts {most}: {topology} has {len(model.hosts)} hosts; ask for at most {len(model.hosts)} "
            "or for a larger topology (--k, --topology)"
        )
    missing = backend_missing(backend_of(args))
    if missing:
        raise CommandError(f"--switch {args.switch}: {missing}")
    return model


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def needs_root(prog: str) -> bool:
    """True (and says so) when this process cannot start Mininet."""
    if os.geteuid() != 0:
        print(f"{prog}: needs root (Mininet); run it with sudo or as root", file=sys.stderr)
        return True
    return False


def _terminate(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM tears down like Ctrl-C does


def tear_down_on_sigterm() -> None:
    signal.signal(signal.SIGTERM, _terminate)


def run_errors() -> tuple[type[BaseException], ...]:
    """The failures of a run that a user can act on: printed as one line, exit 1 (imported late: they pull in
    the controller and Mininet)."""
    from controller.client import SwitchError
    from controller.fabric import FabricError
    from controller.installer import InstallError
    from emulation.network import NetworkError
    from emulation.nodes import SwitchStartError
    from experiments.config import ConfigError
    from experiments.harness import ExperimentError

    errors = (ExperimentError, ConfigError, NetworkError, SwitchStartError, InstallError, FabricError, SwitchError)
    return (*errors, TopologyError)


class Progress:
    """A tqdm bar over a run's units (points or steps), with the last result as its postfix."""

    def __init__(self, total: int, enabled: bool, unit: str = "point") -> None:
        self.bar: Any = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit=unit, file=sys.stderr, dynamic_ncols=True)

    def describe(self, what: str) -> None:
        if self.bar is not None:
            self.bar.set_description(what)
        else:
            LOG.info("running %s", what)

    def advance(self, what: str, n: int = 1, postfix: str = "") -> None:
        if self.bar is not None:
            if postfix:
                self.bar.set_postfix_str(postfix)
            self.bar.update(n)
        else:
            LOG.info("%s: %s", what, postfix or "done")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
