"""What every experiment's plots share: a headless pyplot and one colour, marker and line per method."""

from __future__ import annotations

from typing import Any

SHORT = {
    "inc-int32": "inc32",
    "inc-int16": "inc16",
    "inc-int8": "inc8",
    "ring": "ring",
    "ring-bf16": "ring16",
    "hier": "hier",
    "tree": "tree",
}
STYLE = {
    "inc-int32": ("tab:blue", "o", "-"),
    "inc-int16": ("tab:cyan", "D", "-"),
    "inc-int8": ("tab:green", "s", "--"),
    "ring": ("tab:red", "^", "-"),
    "ring-bf16": ("tab:orange", "v", "--"),
    "hier": ("tab:purple", "P", ":"),
    "tree": ("tab:brown", "X", ":"),
}


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg back end (no display here), unless a notebook already chose its own."""
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
