"""`python -m controller` is the `p4ina` command."""

import sys

from controller.cli import main

sys.exit(main())
