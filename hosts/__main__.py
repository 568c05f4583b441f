"""`python -m hosts`: see hosts.cli."""

import sys

from hosts.cli import main

sys.exit(main())
