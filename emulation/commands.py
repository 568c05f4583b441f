"""Running ip and tc commands: one place that turns a failed command into an exception with its stderr."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path


class NetnsError(RuntimeError):
    """An `ip`/`tc` command failed; the message has its stderr."""


def sh(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise NetnsError(f"{' '.join(cmd)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def interface_counters(names: Iterable[str], unit: str) -> dict[str, tuple[int, int]]:
    """(tx_<unit>, rx_<unit>) of each interface of this network namespace that still exists (unit: bytes or
    packets), from the kernel's statistics."""
    out = {}
    for name in names:
        base = Path("/sys/class/net") / name / "statistics"
        try:
            out[name] = (int((base / f"tx_{unit}").read_text()), int((base / f"rx_{unit}").read_text()))
        except OSError:
            continue
    return out
