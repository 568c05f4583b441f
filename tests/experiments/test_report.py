"""The analysis and report layers on made-up rows (no root, no network): they follow from raw.csv alone."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from emulation.shaping import LinkShape, LinkShapeError
from experiments import bounds, stats
from experiments.allreduce import analysis, report
from experiments.allreduce.cli import build_parser, config_from_args
from experiments.allreduce.cli import main as emulate_main
from experiments.cli import parse_size
from experiments.config import ConfigError, ExperimentConfig, Sample, read_raw
from experiments.faults.cli import main as faults_main
from hosts.methods import METHODS
from hosts.sizes import SizeError
from tests.experiments.fake_results import fake_result, fake_results_folder


def test_summary_is_recomputed_from_raw_csv(tmp_path: Path) -> None:
    folder = fake_results_folder(tmp_path / "r")
    for name in ("config.json", "raw.csv", "summary.json", "table.txt", "latency.png", "speedup.png", "bounds.png"):
        assert (folder / name).stat().st_size > 0, name
    written = json.loads((folder / "summary.json").read_text())
    again = report.load_results(folder)
    assert json.loads(json.dumps(again.summary)) == written  # summary.json follows from raw.csv
    assert report.table(again.summary) == (folder / "table.txt").read_text().rstrip("\n")
    rows = read_raw(folder / "raw.csv")
    assert len(rows) == sum(n for n in (4, 8) for _ in range(2 * 4 * 4))  # hosts x sizes x methods x (reps + warm-up)


def test_speedup_is_baseline_median_over_in_network_median(tmp_path: Path) -> None:
    summary = report.summary_of(fake_result(tmp_path / "r"))
    by = {(p["method"], p["hosts"], p["elements"]): p for p in summary["points"]}
    p = by[("inc-int32", 8, 16384)]
    ring, bf16 = by[("ring", 8, 16384)], by[("ring-bf16", 8, 16384)]
    assert p["speedup_over_ring"]["value"] == pytest.approx(ring["median_latency_s"] / p["median_latency_s"])
    best = min((ring, bf16), key=lambda q: q["median_latency_s"])
    assert p["speedup_over_best_host"]["baseline"] == best["method"] == "ring-bf16"
    lo, hi = p["speedup_over_ring"]["ci95"]
    assert lo <= p["speedup_over_ring"]["value"] <= hi
    assert "speedup_over_ring" not in ring


def test_every_point_carries_the_bounds_accuracy_and_interval(tmp_path: Path) -> None:
    summary = report.summary_of(fake_result(tmp_path / "r"))
    for p in summary["points"]:
        assert 1.0 <= p["t_over_wire"] <= bounds.BOUND_SLACK and p["bound"] == "link" and p["headline"]
        lo, hi = p["ci95_latency_s"]
        assert lo <= p["median_latency_s"] <= hi
        assert p["rel_l2_error"] <= p["rel_l2_target"] == METHODS[p["method"]].rel_l2_target
        assert p["bytes_per_element_up"] > 0 and p["accuracy_ok"] and p["ok"]
    assert summary["left_out"] == [] and summary["ok"]


def test_a_cpu_bound_point_is_no_headline_and_says_why(tmp_path: Path) -> None:
    summary = report.summary_of(fake_result(tmp_path / "r", cpu_bound=("inc-int32", 8, 16384)))
    by = {(p["method"], p["hosts"], p["elements"]): p for p in summary["points"]}
    p = by[("inc-int32", 8, 16384)]
    assert p["bound"] == "cpu" and not p["headline"] and p["t_over_wire"] > 2
    assert not p["speedup_over_ring"]["headline"] and "cpu-bound" in p["speedup_over_ring"]["left_out_because"]
    (out,) = summary["left_out"]
    assert out["method"] == "inc-int32" and "busiest switch e1 90% busy" in out["why"]
    assert "host agents used 0.60 cores, switch processes 0.30, the kernel 0.25" in out["why"]  # where they went
    assert "3.00x T_wire (what the busiest link's bytes need at the link rate)" in out["why"]
    # a 166 ms all-reduce: its CPU figures come from a few of /proc's 10 ms ticks, and the words say so
    assert "coarse, and 0.00 means less than one tick" in out["why"]
    assert (p["agents_cores"], p["switches_cores"], p["kernel_cores"]) == (0.6, 0.3, 0.25)
    assert "line rate would take 3.50 cores (kernel 1.25)" in out["why"]
    assert (p["line_rate_cores"], p["line_rate_kernel_cores"], p["kernel_us_per_frame"]) == (3.5, 1.25, 12.5)
    assert "*" in report.table(summary)
    assert any("neither" in n for n in summary["notes"])


def _rows(tmp_path: Path) -> tuple[ExperimentConfig, list[Sample]]:
    result = fake_result(tmp_path / "r")
    return result.config, copy.deepcopy(result.samples)


def test_a_corrupted_result_fails_its_point(tmp_path: Path) -> None:
    cfg, rows = _rows(tmp_path)
    victim = next(s for s in rows if s.method == "inc-int32" and s.hosts == 4 and not s.warmup and s.rank == 2)
    victim.digest = "corrupted"  # one rank's sum differs from the others'
    p = analysis.points(rows)[("inc-int32", 4, victim.elements)]
    assert not p.ok and any("disagree" in x for r in p.reps for x in r.problems)
    checker = next(s for s in rows if s.method == "ring" and s.hosts == 8 and not s.warmup and s.checker)
    checker.rel_l2_error = 0.3  # the checked sum is far from numpy's
    assert not analysis.points(rows)[("ring", 8, checker.elements)].ok
    assert not analysis.summarize(cfg, rows)["ok"]


def test_a_missing_rank_fails_its_repetition(tmp_path: Path) -> None:
    cfg, rows = _rows(tmp_path)
    gone = next(s for s in rows if s.method == "ring-bf16" and s.hosts == 4 and s.rep == 2 and s.rank == 3)
    gone.error = "no report (agent died or the step timed out)"
    p = analysis.points(rows)[("ring-bf16", 4, gone.elements)]
    assert not p.ok and math.isnan([r for r in p.reps if r.rep == 2][0].latency_s)


def test_classification_rules() -> None:
    assert bounds.classify(1.1, 1.0, 0.5) == "link"
    assert bounds.classify(1.2, 1.0, 1.1) == "latency"
    assert bounds.classify(3.0, 1.0, 0.5, switch_busy=0.8) == "cpu"
    assert bounds.classify(3.0, 1.0, 0.5, cores_busy=0.9) == "cpu"
    assert bounds.classify(3.0, 1.0, 0.5, switch_busy=0.1, agents_busy=0.2, cores_busy=0.3) == "unexplained"
    assert bounds.classify(1.0, math.nan, math.nan) == "unexplained"


def test_bootstrap_interval_contains_the_median_and_narrows_with_agreement() -> None:
    med, lo, hi = stats.median_ci([1.0, 1.1, 0.9, 1.05, 0.95])
    assert lo <= med == 1.0 <= hi and hi - lo < 0.25
    assert stats.median_ci([2.0]) == (2.0, 2.0, 2.0)
    value, lo, hi = stats.ratio_ci([2.0, 2.1, 1.9], [1.0, 1.0, 1.0])
    assert value == 2.0 and lo <= 2.0 <= hi


def test_sizes_carry_their_unit_and_a_bare_one_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """emulate counts float32 elements, simulate bytes: a size says which (hosts.sizes), in both."""
    assert [parse_size(s) for s in ("1Ki-elem", "256Ki-elem", "4MiB", "1000elem")] == [1024, 262144, 1 << 20, 1000]
    for bare in ("1K", "1000"):
        with pytest.raises(SizeError, match="has no unit"):
            parse_size(bare)
    args = build_parser().parse_args(["--elements", "1K,16K"])  # the old spelling, where it is unambiguous
    assert config_from_args(args).sizes == (1024, 16384)
    assert emulate_main(["--sizes", "16K"]) == 2  # refused before root or Mininet is asked for
    assert faults_main(["--size", "16K"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "p4ina emulate: error: size '16K' has no unit (bytes or float32 elements?): write 16KiB or 16Ki-elem",
        "p4ina faults: error: size '16K' has no unit (bytes or float32 elements?): write 16KiB or 16Ki-elem",
    ]
    with pytest.raises(SystemExit):  # one or the other
        build_parser().parse_args(["--sizes", "4KiB", "--elements", "1K"])


def test_cli_options_become_a_config() -> None:
    args = build_parser().parse_args(
        ["--k", "2", "--hosts", "2", "--sizes", "4KiB,2Ki-elem", "--bw", "5", "--delay", "1", "--switch", "embedded"]
    )
    cfg = config_from_args(args)
    assert cfg.topology == "fat-tree:2" and cfg.sizes == (1024, 2048) and cfg.shape == LinkShape(5.0, 1.0, None)
    assert "fat-tree2_embedded_h2_bw5_d1ms" == cfg.label() and cfg.reps == 5


def test_presets_bandwidth_runs_only_large_sizes_and_sweep_adds_the_small_ones() -> None:
    """make emulate's bandwidth preset holds only sizes whose wire time dwarfs a repetition's fixed costs; the
    sweep (the simulator's calibration input) is the same runs at 1K and 16K as well; options still override."""
    bandwidth = config_from_args(build_parser().parse_args([]))
    assert bandwidth.sizes == (131072,) and bandwidth.host_counts == (4, 8, 16) and bandwidth.name == ""
    allreduce = {name for name, m in METHODS.items() if not m.alltoall}  # the all-to-alls run when asked for
    assert set(bandwidth.methods) == allreduce and bandwidth.shape == LinkShape(2.0, None, None)
    sweep = config_from_args(build_parser().parse_args(["--preset", "sweep"]))
    assert sweep.sizes == (1024, 16384, 131072) and sweep.name == "sweep"
    assert (sweep.methods, sweep.shape, sweep.host_counts) == (
        bandwidth.methods,
        bandwidth.shape,
        bandwidth.host_counts,
    )
    assert config_from_args(build_parser().parse_args(["--preset", "sweep", "--elements", "2K"])).sizes == (2048,)
    latency = config_from_args(build_parser().parse_args(["--preset", "latency"]))
    assert latency.sizes == (1024,) and latency.shape == LinkShape(100.0, 100.0, None)


@pytest.mark.parametrize(
    "bad",
    [
        dict(host_counts=(1,)),
        dict(sizes=()),
        dict(methods=("nccl",)),
        dict(reps=0),
        dict(slots=0),
        dict(methods=("ring", "ring")),
    ],
)
def test_bad_configs_are_refused_with_the_field_named(bad: dict) -> None:
    with pytest.raises(ConfigError):
        ExperimentConfig(**bad)


def test_bad_link_shapes_are_refused() -> None:
    with pytest.raises(LinkShapeError, match="bandwidth"):
        LinkShape(bw_mbps=-1)
    with pytest.raises(LinkShapeError, match="loss"):
        LinkShape(loss_pct=100)


def test_shaping_has_a_one_frame_burst() -> None:
    cmds = LinkShape(bw_mbps=1.0).shaping().commands("x")  # type: ignore[union-attr]
    cls = cmds[1]
    assert cls[cls.index("rate") + 1] == "1000000bit" and cls[cls.index("burst") + 1] == "1514"
    assert cls[cls.index("cburst") + 1] == "1514"


def test_method_order_is_shuffled_per_repetition_and_reproducible() -> None:
    from experiments.harness import method_order

    cfg = ExperimentConfig(methods=("inc-int32", "inc-int16", "inc-int8", "ring", "ring-bf16"))
    orders = [tuple(method_order(cfg, 16, 1024, rep)) for rep in range(6)]
    assert len(set(orders)) > 1 and all(sorted(o) == sorted(cfg.methods) for o in orders)
    assert orders == [tuple(method_order(cfg, 16, 1024, rep)) for rep in range(6)]


def test_one_size_is_drawn_as_a_bar_per_method_with_non_headlines_hatched(tmp_path: Path) -> None:
    """The latency preset has one size: a bar per method (a line of single points would hide methods with the
    same latency behind each other); a point that is no headline is hatched, as it is ringed in the line plot."""
    summary = report.summary_of(fake_result(tmp_path / "r", cpu_bound=("ring", 8, 1024)))
    summary["points"] = [p for p in summary["points"] if p["elements"] == 1024]
    ax = report.plot_latency(summary, tmp_path / "bars.png")
    bars = {t.get_text(): patch for t, patch in zip(ax.get_yticklabels(), ax.patches)}
    assert len(bars) == len({p["method"] for p in summary["points"]})
    assert bars[METHODS["ring"].label].get_hatch() == "//"
    assert all(not patch.get_hatch() for label, patch in bars.items() if label != METHODS["ring"].label)
    assert (tmp_path / "bars.png").stat().st_size > 0


def test_other_load_is_noted_only_from_repetitions_long_enough_for_the_cpu_clock(tmp_path: Path) -> None:
    """/proc's CPU times tick every 10 ms: an 8 ms all-reduce can read 50% of the cores busy and none of it ours.
    The note on other programs' load reads the points whose repetitions last CPU_SHARES_MIN_S or more."""
    summary = report.summary_of(fake_result(tmp_path / "r"))
    for p in summary["points"]:
        p["cores_busy"], p["ours_busy"] = 0.5, 0.45
    assert not any("other programs" in n for n in report.notes(summary))
    short, long = summary["points"][:2]
    assert short["median_latency_s"] < report.CPU_SHARES_MIN_S
    long["median_latency_s"] = 2.0
    short["ours_busy"] = 0.0  # rounding on a short repetition: no note
    assert not any("other programs" in n for n in report.notes(summary))
    long["ours_busy"] = 0.2  # a long repetition where 30% of the cores went elsewhere: noted
    assert any("other programs" in n and "30%" in n for n in report.notes(summary))


def _no_bound(summary: dict, method: str, hosts: int, elements: int) -> None:
    """A point whose bytes all went on the shaper's burst credit and whose links have no delay: no bound at all."""
    for p in summary["points"]:
        if (p["method"], p["hosts"], p["elements"]) == (method, hosts, elements):
            p.update(t_wire_s=0.0, t_over_wire=None, t_path_s=None, t_over_path=None, bound="unexplained")
            p["headline"] = False


def test_the_bounds_plot_has_a_labelled_bar_for_every_point_even_without_a_bound(tmp_path: Path) -> None:
    summary = report.summary_of(fake_result(tmp_path / "r"))
    _no_bound(summary, "inc-int8", 4, 1024)
    failed = summary["points"][-1]
    failed["ok"] = False
    ax = report.plot_bounds(summary, tmp_path / "bounds.png")
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert len(ticks) == len(summary["points"]) == 16  # one bar (or mark) per point, none dropped
    assert ticks[:4] == ["inc32", "inc8", "ring", "ring16"]  # the method under its bar ...
    groups = [t.get_text() for t in ax.texts if "hosts" in t.get_text()]
    assert groups == ["4 hosts\n1Ki elem", "4 hosts\n16Ki elem", "8 hosts\n1Ki elem", "8 hosts\n16Ki elem"]  # ...
    words = [t.get_text() for t in ax.texts]
    assert words.count("no bound") == 1 and words.count("failed") == 1  # said, not left out
    assert "bound" in ax.get_ylabel() and "point" not in ax.get_xlabel()
    ys = [line.get_ydata()[0] for line in ax.get_lines()]
    assert 1.0 in ys and bounds.BOUND_SLACK in ys  # what the network allows, and the rule's slack
    assert (tmp_path / "bounds.png").stat().st_size > 0


def _tick_labels(ax: object) -> list[str]:
    ax.figure.canvas.draw()  # type: ignore[attr-defined]
    return [
        t.get_text()
        for axis in (ax.xaxis, ax.yaxis)  # type: ignore[attr-defined]
        for t in axis.get_ticklabels(which="both")
        if t.get_text()
    ]


def test_log_axes_are_labelled_in_plain_numbers(tmp_path: Path) -> None:
    """No '10^3' or '3x10^0' (matplotlib's log labels): sizes as the tables spell them, times and ratios plain."""
    summary = report.summary_of(fake_result(tmp_path / "r", cpu_bound=("inc-int8", 8, 16384)))
    for plot in (report.plot_latency, report.plot_speedup, report.plot_bounds):
        labels = _tick_labels(plot(summary))
        assert labels and not any("^" in x or "times" in x or "$" in x for x in labels), (plot.__name__, labels)
    assert {"1Ki", "16Ki"} <= set(_tick_labels(report.plot_latency(summary)))
    assert {"1", "1.15", "2", "3"} <= set(_tick_labels(report.plot_bounds(summary)))


def test_legends_sit_outside_the_data(tmp_path: Path) -> None:
    summary = report.summary_of(fake_result(tmp_path / "r"))
    for plot in (report.plot_latency, report.plot_speedup, report.plot_bounds):
        ax = plot(summary)
        ax.figure.canvas.draw()
        legend = ax.get_legend().get_window_extent()
        assert legend.x0 >= ax.get_window_extent().x1, plot.__name__  # to the right of the axes


def test_a_point_without_a_wire_bound_says_why_in_words() -> None:
    """At 2 Mbit/s a 1Ki int8 all-reduce's busiest link carried 1,528 bytes, within the shaper's burst of two
    frames: the wire bounds nothing there (not 'no rate limit'), and with no link delay neither does the path."""
    f = {
        "ok": True,
        "bound": "unexplained",
        "t_over_wire": None,
        "t_over_path": None,
        "t_wire_s": 0.0,
        "t_path_s": None,
        "wire_bytes": 1528.0,
        "median_latency_s": 0.009,
        "switch_busy": 0.0,
        "busiest_switch": "a1",
        "agents_busy": 0.0,
        "cores_busy": 0.5,
        "agents_cores": 0.0,
        "switches_cores": 0.0,
        "kernel_cores": 0.0,
    }
    why = analysis.why_not(f)
    assert "no rate limit" not in why and "both above" not in why
    assert "no T_wire (the busiest link's 1,528 bytes fit in the shaper's burst of two frames)" in why
    assert "no T_path (the links have no delay)" in why
    assert "0.00 means less than one tick, not idle" in why  # beside 'all cores 50% busy'
    f.update(t_wire_s=None, wire_bytes=0.0)
    assert "no T_wire (the links are not rate-limited)" in analysis.why_not(f)
