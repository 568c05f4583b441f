"""`python -m simulation`: see simulation/cli.py."""

import sys

from simulation.cli import main

sys.exit(main())
