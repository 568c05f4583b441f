"""`p4ina ...`: the user's command, dispatching to the layer that owns each subcommand.

It sits above every layer so that none of them imports one above it: `p4ina
simulate ...` is the simulation's (simulation/cli.py), everything else is the
controller's (controller/cli.py: topology, pipeline, routes, jobs, counters,
verify, shell).
"""

from __future__ import annotations

import sys

UPPER = {"simulate": ("simulation.cli", "the all-reduce methods at cluster scale on SimGrid (make simulate)")}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] and argv[0] in UPPER:
        import importlib

        return int(importlib.import_module(UPPER[argv[0]][0]).main(argv[1:]) or 0)
    from controller.cli import main as controller_main

    if not argv or argv[0] in ("-h", "--help"):
        try:
            controller_main(["--help"])
        except SystemExit:  # argparse's --help
            pass
        print("\nand, above the controller:")
        for name, (_module, text) in UPPER.items():
            print(f"  {name:<18} {text} (`p4ina {name} --help`)")
        return 0 if argv else 2
    return controller_main(argv)


if __name__ == "__main__":
    sys.exit(main())
