"""The one clock every worker, the coordinator and the runner read.

CLOCK_MONOTONIC is system-wide on Linux, and Mininet hosts and our test hosts
are network namespaces, not time namespaces: a timestamp taken in one
namespace means the same instant in every other. So an all-reduce is timed
from the coordinator's barrier release to the moment the slowest worker holds
its float result, all on this clock, whatever process took each reading.
"""

from __future__ import annotations

import time


def now() -> float:
    """Seconds on CLOCK_MONOTONIC (the same clock in every process and network namespace of this machine)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)
