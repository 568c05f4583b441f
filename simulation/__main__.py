"""`python -m simulation`: the same as `p4ina simulate` (simulation/cli.py)."""

import sys

from simulation.cli import main

sys.exit(main(prog="python -m simulation"))
