"""Figures of a benchmark run, merged into results/bench.json across runs and benchmarks (RESULTS says where)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent
# the checkout's results/bench.json (`make bench`); from an installed package (no checkout around it), the one
# under the current directory, as the experiments' results/
RESULTS = (_CHECKOUT if (_CHECKOUT / "pyproject.toml").is_file() else Path()) / "results" / "bench.json"


@dataclass(frozen=True)
class Figure:
    value: float
    unit: str
    note: str = ""


Figures = dict[str, Figure]


def merge(figures: Figures, path: Path = RESULTS) -> dict:
    """Merge figures into the JSON file ({"name": {"value", "unit", "note"}}) and return it."""
    data = json.loads(path.read_text()) if path.exists() else {}
    for name, fig in figures.items():
        data[name] = {"value": fig.value, "unit": fig.unit, **({"note": fig.note} if fig.note else {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return data


def table(figures: Figures) -> str:
    width = max((len(n) for n in figures), default=10)
    lines = [f"{'benchmark':<{width}}  {'value':>14}  unit"]
    for name, fig in figures.items():
        lines.append(f"{name:<{width}}  {fig.value:>14,.2f}  {fig.unit}" + (f"  ({fig.note})" if fig.note else ""))
    return "\n".join(lines)
