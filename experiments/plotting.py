"""What every experiment's plots share: a headless pyplot and one colour, marker and line per method."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

SHORT = {
    "inc-int32": "inc32",
    "inc-int16": "inc16",
    "inc-int8": "inc8",
    "ring": "ring",
    "ring-bf16": "ring16",
    "hier": "hier",
    "tree": "tree",
    "a2a-direct": "a2a",
    "a2a-hier": "a2a-hier",
}
STYLE = {
    "inc-int32": ("tab:blue", "o", "-"),
    "inc-int16": ("tab:cyan", "D", "-"),
    "inc-int8": ("tab:green", "s", "--"),
    "ring": ("tab:red", "^", "-"),
    "ring-bf16": ("tab:orange", "v", "--"),
    "hier": ("tab:purple", "P", ":"),
    "tree": ("tab:brown", "X", ":"),
    "a2a-direct": ("tab:olive", "*", "-"),
    "a2a-hier": ("tab:pink", "h", "--"),
}


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg back end (no display here), unless a notebook already chose its own."""
    import matplotlib

    # a notebook's inline back end: "inline" as IPython 9 names it, the module path as IPython 7 did
    if matplotlib.get_backend().lower() not in ("agg", "inline", "module://matplotlib_inline.backend_inline"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def tick_number(v: float) -> str:
    """A plain tick label: 1000 -> '1,000', 1.15 -> '1.15' (never '10^3' or '3x10^0')."""
    return f"{v:,.0f}" if v >= 10 and v == round(v) else f"{v:.3g}"


def plain_log(axis: Any, fmt: Callable[[float], str] = tick_number, ticks: Sequence[float] | None = None) -> None:
    """Label a log axis with plain numbers: at `ticks` (e.g. the sizes measured), else at 1, 2, 5 times each power
    of ten over a short range (1 over a long one); no minor-tick labels (matplotlib's '3x10^0')."""
    from matplotlib import ticker

    if ticks is not None:
        axis.set_major_locator(ticker.FixedLocator(sorted(set(ticks))))
    else:
        lo, hi = sorted(axis.get_view_interval())
        decades = math.log10(hi / lo) if lo > 0 and hi > 0 else 99.0
        subs = (1.0, 2.0, 5.0) if decades <= 2.5 else (1.0,)
        axis.set_major_locator(ticker.LogLocator(base=10, subs=subs, numticks=12))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _pos: fmt(v)))
    axis.set_minor_formatter(ticker.NullFormatter())


def legend_outside(ax: Any, **kw: Any) -> None:
    """The legend to the right of the axes, where it covers no data."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **{"fontsize": 7, **kw})
