"""What every experiment's results folder shares: JSON without NaN, sizes a reader can read."""

from __future__ import annotations

import math
from typing import Any


def jsonable(x: Any) -> Any:
    """NaN and inf become null, recursively (JSON has neither)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x


def human_size(n: int) -> str:
    """1024 -> '1K', 131072 -> '128K', 1000 -> '1000'."""
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)
