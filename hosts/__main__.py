"""`python -m hosts`: the same as `p4ina host` (hosts/cli.py); how the experiments start an agent on a host."""

import sys

from hosts.cli import main

sys.exit(main(prog="python -m hosts"))
