"""The faults plot draws failures.<kind> (each run's step over its loss-free reference) from a summary alone."""

from __future__ import annotations

import json
from pathlib import Path

from experiments.faults.run import plot, series_summary


def run(point: float, ratio: float) -> dict[str, object]:
    return {"point": point, "step_over_lossless": ratio, "exact": True, "later_exact": True, "triggers": ["notice"]}


def test_the_plot_has_a_panel_of_every_failure_run(tmp_path: Path) -> None:
    summary = {
        "lossless": {"latency_s": 0.1, "latencies_s": [0.1], "rto_floor_s": 0.09},
        "loss": {},
        "failures": {
            "switch_crash": series_summary([run(0.1, 1.4), run(0.5, 1.5), run(0.8, 1.6)]),
            "link_down": series_summary([run(0.1, 1.3)]),
        },
    }
    assert summary["failures"]["switch_crash"]["goal_met"] is True
    assert series_summary([run(0.1, 1.4), run(0.5, 2.1)])["goal_met"] is False  # the worst over 2x misses
    out = tmp_path / "faults.png"
    plot(json.loads(json.dumps(summary)), out)
    assert out.stat().st_size > 0
