"""The `p4ina` command: one entry point above every layer (see p4ina/cli.py)."""
