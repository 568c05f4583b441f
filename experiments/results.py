"""What every experiment's results folder shares: JSON without NaN, sizes a reader can read."""

from __future__ import annotations

import math
from typing import Any

from hosts.sizes import human_elements


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
    """float32 elements: 1024 -> '1Ki', 131072 -> '128Ki', 1000 -> '1000' (Ki = 2^10, as --sizes spells them)."""
    return human_elements(n)
