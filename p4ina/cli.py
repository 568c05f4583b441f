"""`p4ina VERB ...`: the one command over every layer, as mininet's `mn` is over mininet's.

Each verb belongs to the layer that owns it and has its own parser there (`p4ina VERB --help`);
this module only names the verbs and hands the rest of the command line to the owner, importing it
when it is asked for. It sits above every layer, so none of them imports it.

What every verb shares is here: a usage error is one line (argparse's usage block is left out: `--help` has
it), a refusal of bad input that reaches this far is one line and exit status 2, and output cut short by its
reader (`p4ina counters --json | head`) ends quietly, as Python's documentation of SIGPIPE recommends.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import select
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata


@dataclass(frozen=True)
class Verb:
    module: str  # the owner's module, whose main(argv[, prog]) runs the verb
    help: str
    group: str
    passes_name: bool = False  # the owner parses the verb itself (the controller's subcommands)


VERBS: dict[str, Verb] = {
    # experiments: questions asked of an emulated fabric (need root: Mininet)
    "emulate": Verb(
        "experiments.allreduce.cli",
        "all-reduce latency of every method per host count and size (make emulate)",
        "experiments",
    ),
    "train": Verb(
        "experiments.train.cli",
        "data-parallel training through the fabric, every method against an exact run",
        "experiments",
    ),
    "ddp": Verb(
        "experiments.ddp.cli",
        "PyTorch DDP training of real models through the fabric (the p4ina hook), every method against Gloo",
        "experiments",
    ),
    "faults": Verb(
        "experiments.faults.cli",
        "switch and link failures, loss, duplication, isolation, bit flips (make emulate-faults)",
        "experiments",
    ),
    "allreduce": Verb(
        "experiments.allreduce.byhand",
        "an all-reduce on the network p4ina serve keeps up (an installed job's, or a host method), checked",
        "experiments",
    ),
    # the model at cluster scale
    "simulate": Verb("simulation.cli", "the methods at 16 to 100,000 GPUs on SimGrid (make simulate)", "model"),
    # the emulated network and its parts
    "serve": Verb(
        "emulation.serve", "start an emulated network and keep it up for the verbs below (needs root)", "network"
    ),
    "clean": Verb("emulation.cleanup", "remove what a crashed emulation left behind (make clean-net)", "network"),
    "switch": Verb(
        "softswitch.cli", "the embedded switch, with simple_switch_grpc's command line (also p4ina-switch)", "network"
    ),
    "host": Verb(
        "hosts.cli", "host-side code in a namespace: an agent, an in-network worker, a ring, a coordinator", "network"
    ),
    # the controller, on a served network (or any P4Runtime switches named in a topology JSON)
    "topo": Verb("controller.cli", "the topology", "controller", passes_name=True),
    "pipeline": Verb("controller.cli", "the P4 program on the switches", "controller", passes_name=True),
    "routes": Verb("controller.cli", "IPv4 forwarding: install, show", "controller", passes_name=True),
    "job": Verb("controller.cli", "aggregation jobs: install, remove, list, show", "controller", passes_name=True),
    "counters": Verb(
        "controller.cli", "per-job counters from every switch of a job's tree", "controller", passes_name=True
    ),
    "verify": Verb(
        "controller.cli", "read the switches back and compare with the state", "controller", passes_name=True
    ),
    "reconcile": Verb(
        "controller.cli",
        "after a controller restart: compare and adopt what the switches hold",
        "controller",
        passes_name=True,
    ),
    "shell": Verb("controller.cli", "p4runtime-shell on one switch", "controller", passes_name=True),
    "controller": Verb(
        "controller.cli",
        "a controller process: serve as the primary, or stand by and take over when it dies",
        "controller",
        passes_name=True,
    ),
    # the project's own measurements
    "bench": Verb("bench.cli", "benchmarks of the code's speed, written to results/bench.json (make bench)", "project"),
}

GROUPS = {
    "experiments": "experiments on an emulated fabric",
    "model": "the model at cluster scale",
    "network": "the emulated network and its parts",
    "controller": "the controller (P4Runtime)",
    "project": "the project",
}


def version() -> str:
    try:
        return metadata.version("p4ina")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def usage() -> str:
    lines = [
        "usage: p4ina VERB [options]   (p4ina VERB --help for each verb's own options)",
        "",
        "p4ina: P4 in-network aggregation on BMv2 and an embedded switch, Mininet experiments and a model at "
        "cluster scale.",
        "",
    ]
    for group, title in GROUPS.items():
        lines.append(f"{title}:")
        lines += [f"  {name:<10} {v.help}" for name, v in VERBS.items() if v.group == group]
        lines.append("")
    lines.append("options: -h/--help this text, --version the installed version")
    return "\n".join(lines)


# The exceptions by which the layers refuse bad input (a topology, a configuration, a command's values): one line,
# exit status 2, wherever a verb lets them through. Named by module, and only looked for among the modules a verb
# has imported, so this list imports nothing.
INPUT_ERRORS = (
    ("controller.topology", "TopologyError"),
    ("experiments.cli", "CommandError"),
    ("experiments.config", "ConfigError"),
    ("emulation.shaping", "LinkShapeError"),
)


def _input_errors() -> tuple[type[BaseException], ...]:
    return tuple(
        getattr(sys.modules[module], name) for module, name in INPUT_ERRORS if hasattr(sys.modules.get(module), name)
    )


def _one_line_error(parser: argparse.ArgumentParser, message: str) -> None:
    parser.exit(2, f"{parser.prog}: error: {message} ({parser.prog} --help lists the options)\n")


@contextmanager
def _one_line_usage_errors() -> Iterator[None]:
    """Every verb's parser (each layer builds its own) reports a usage error as one line, not usage + error."""
    saved = argparse.ArgumentParser.error
    argparse.ArgumentParser.error = _one_line_error  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        argparse.ArgumentParser.error = saved  # type: ignore[method-assign]


def _stdout_gone() -> bool:
    """True when standard output is a pipe or socket whose reader has gone away."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(event & (select.POLLERR | select.POLLHUP) for _, event in poll.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        with _one_line_usage_errors():
            status = _dispatch(argv)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        if not _stdout_gone():
            raise  # a pipe of the verb's own, not its output: a real failure
        # https://docs.python.org/3/library/signal.html#note-on-sigpipe: the reader has what it wanted; Python
        # must not fail flushing the rest at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as ex:
        if not isinstance(ex, _input_errors()):
            raise
        print(f"p4ina {argv[0]}: error: {ex}", file=sys.stderr)
        return 2


def _dispatch(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"p4ina {version()}")
        return 0
    name, rest = argv[0], argv[1:]
    verb = VERBS.get(name)
    if verb is None:
        print(f"p4ina: unknown verb {name!r}; the verbs are {', '.join(VERBS)} (p4ina --help)", file=sys.stderr)
        return 2
    run = importlib.import_module(verb.module).main
    if verb.passes_name:
        return int(run(argv) or 0)
    if "prog" in inspect.signature(run).parameters:
        return int(run(rest, prog=f"p4ina {name}") or 0)
    return int(run(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
