"""Running ip and tc commands: one place that turns a failed command into an exception with its stderr."""

from __future__ import annotations

import subprocess


class NetnsError(RuntimeError):
    """An `ip`/`tc` command failed; the message has its stderr."""


def sh(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise NetnsError(f"{' '.join(cmd)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout
