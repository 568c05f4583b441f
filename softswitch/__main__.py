"""`python -m softswitch`: the same as `p4ina switch` (softswitch/cli.py); how the emulation starts a switch."""

from softswitch.cli import main

raise SystemExit(main())
