"""`python -m bench`: the same as `p4ina bench` (bench/cli.py)."""

import sys

from bench.cli import main

sys.exit(main(prog="python -m bench"))
