"""`python -m p4ina`: the same as `p4ina`."""

import sys

from p4ina.cli import main

sys.exit(main())
