"""`python -m emulation.softswitch`: see emulation/softswitch/cli.py."""

from emulation.softswitch.cli import main

raise SystemExit(main())
