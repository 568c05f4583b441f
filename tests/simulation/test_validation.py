"""The four validations of issue 11, each as a test (the larger versions run in `make simulate`)."""

from __future__ import annotations

import copy
import csv
import shutil
from pathlib import Path

import pytest

from simulation.anchors import PUBLISHED, sharp_anchor
from simulation.calibrate import Calibration, CalibrationError, check, fit, read_results, result_folders
from simulation.closedform import checks
from simulation.engine import Engine
from simulation.fullsim import compare
from simulation.params import EMULATION, NDR
from simulation.validation import full_cases
from tests.simulation.conftest import DATA, needs_simgrid

FIXTURE = (
    DATA / "emulation-k4"
)  # the runs fitted: sweep/, latency/, and 1k-a/ and 1k-b/ (the sweep's 1K points, 21 reps)
HELD_OUT = DATA / "emulation-k4-held-out"  # later runs of the sweep preset, never fitted
SWEEP = FIXTURE / "sweep"


# 1. against the emulation ---------------------------------------------------------------------------------
@needs_simgrid
def test_one_set_of_costs_predicts_every_emulation_point_within_15_percent_and_a_run_it_never_saw(
    engine: Engine, emulation_fit: Calibration
):
    """Issue 11: every method and point within 15%. One set of costs, fitted to four runs at once (the sweep
    preset: 2 Mbit/s, 4/8/16 hosts, 1K/16K/128K; two more runs of its 1K points; the latency preset: 100 Mbit/s
    links of 100 ms), each with its own links and its own measured wake-ups, and then, without refitting, two later
    runs of the sweep preset it was not fitted to (the first seen while the model was chosen, the second made
    after). The 1K points are 6-63 ms all-reduces in which the machine's scheduler weighs as much as the network,
    and the same point measured up to 30% apart in two runs: a fit that followed one run's noise would miss the
    held-out runs."""
    calib = check(copy.copy(emulation_fit), HELD_OUT, engine=engine)  # the session's fit to FIXTURE (conftest)
    assert [r.folder.name for r in calib.results] == ["1k-a", "1k-b", "latency", "sweep"]
    assert len(calib.table) == 21 + 21 + 7 + 63  # every method at every point of the four runs, none dropped
    assert {r["links"] for r in calib.table} == {"2 Mbit/s", "100 Mbit/s, 100 ms"}
    assert sum(e["points"] for b, e in calib.by_bound().items() if b == "unexplained") > 40  # not only easy points
    misses = [
        (r["folder"], r["method"], r["hosts"], r["elements"], f"{r['rel_error']:+.1%}")
        for r in calib.table + calib.held_out
        if abs(r["rel_error"]) > 0.15
    ]
    assert not misses, misses
    assert len(calib.held_out) == 2 * 63 and {r["folder"] for r in calib.held_out} == {"sweep-3", "sweep-4"}
    # the stored emulation preset is this fit (the costs that bind somewhere in the runs)
    for name in (
        "host_packet_cost",
        "switch_forward_cost",
        "step_overhead",
        "barrier_cost",
        "switch_packet_cost",
        "switch_agg_latency",
        "switch_lane_cost",
    ):
        assert getattr(EMULATION, name) == pytest.approx(calib.fitted[name], rel=0.2, abs=1e-7), name
    # the preset's start is the fitted per-call cost plus the sweep's median measured wake-up and finish (a few ms),
    # and it simulates the sweep's links (2 Mbit/s, no delay), as `make emulate`'s bandwidth preset has them
    assert 0 < EMULATION.start_cost - calib.fitted["start_cost"] < 0.015
    assert EMULATION.start_cost == pytest.approx(calib.preset.start_cost, rel=0.05)
    assert calib.preset.nic_bw == EMULATION.nic_bw and calib.preset.cable_latency == 0
    assert calib.preset.finish_skew_ratio == 0  # folded into start_cost: a simulation has no measured skew


def test_the_last_wake_up_and_its_lead_over_the_median_are_read_per_repetition(tmp_path: Path):
    """A collective waits for its last member: the start taken as measured is the last agent's wake-up after the
    release (not the wake-up of the agent that finished last), and the finish's measure of the machine's queue
    is how far that wake-up trailed the median one; both are medians over the repetitions."""
    out = tmp_path / "r"
    out.mkdir()
    (out / "config.json").write_text('{"config": {"shape": {"bw_mbps": 2}, "slots": 128}}')
    rows = []
    # three workers; the one that finishes last woke first: (wake-ups in ms per repetition, latencies)
    for rep, wakes in enumerate(([1, 2, 6], [1, 3, 9], [2, 2, 4])):
        for rank, w in enumerate(wakes):
            rows.append(
                {
                    "method": "ring",
                    "hosts": 3,
                    "elements": 1024,
                    "rep": rep,
                    "warmup": 0,
                    "rank": rank,
                    "t_release": 10.0 * rep,
                    "t_start": 10.0 * rep + w / 1e3,
                    "latency_s": 0.02 - rank * 1e-3,
                }
            )
    with (out / "raw.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (pt,) = read_results(out).points
    assert pt.median_s == pytest.approx(0.02)
    assert pt.start_s == pytest.approx(6e-3)  # medians of 6, 9 and 4 ms
    assert pt.skew_s == pytest.approx(4e-3)  # medians of 6-2, 9-3 and 4-2 ms


def test_a_folder_of_results_folders_is_fitted_as_one_and_a_folder_of_neither_is_refused(tmp_path: Path):
    assert result_folders(FIXTURE) == [FIXTURE / n for n in ("1k-a", "1k-b", "latency", "sweep")]
    assert result_folders(SWEEP) == [SWEEP]
    (tmp_path / "nothing" / "empty").mkdir(parents=True)
    with pytest.raises(CalibrationError, match="neither a results folder"):
        result_folders(tmp_path / "nothing")
    with pytest.raises(CalibrationError, match="is not a results folder"):
        result_folders(tmp_path / "absent")


def _copy_without(
    tmp: Path, drop_column: str | None = None, drop_summary: bool = False, extra_method: bool = False
) -> Path:
    out = tmp / "results"
    shutil.copytree(SWEEP, out)
    if drop_summary:
        (out / "summary.json").unlink()
    rows = list(csv.DictReader((out / "raw.csv").open()))
    fields = [f for f in rows[0] if f != drop_column]
    if extra_method:
        rows.append({**rows[0], "method": "tree-future", "latency_s": "0.5", "warmup": "0"})
    with (out / "raw.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields + ["timing_parts"], extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**{k: r[k] for k in fields}, "timing_parts": "1 2 3"})
    return out


def test_a_held_out_check_refuses_a_folder_that_was_fitted():
    from simulation.calibrate import Calibration

    calib = Calibration([read_results(SWEEP)], EMULATION, {}, [])
    with pytest.raises(CalibrationError, match="was fitted"):
        check(calib, FIXTURE)  # sweep/ is one of its folders


def test_a_raw_csv_without_wake_ups_keeps_summary_jsons_start(tmp_path: Path):
    """Older raw.csv files have no t_start: the start then comes from summary.json's parts_s.start, not 0."""
    import json

    res = read_results(_copy_without(tmp_path, drop_column="t_start"))
    summary = json.loads((SWEEP / "summary.json").read_text())
    parts = {(p["method"], p["hosts"], p["elements"]): p["parts_s"]["start"] for p in summary["points"]}
    assert len(res.points) == 63
    for pt in res.points:
        assert pt.start_s == pytest.approx(parts[(pt.method, pt.hosts, pt.elements)]) and pt.skew_s == 0
    assert all(pt.start_s > 0 for pt in res.points)


def test_results_folders_are_read_with_columns_and_methods_missing_or_new(tmp_path: Path):
    res = read_results(_copy_without(tmp_path, drop_column="packets_sent", drop_summary=True, extra_method=True))
    assert len(res.points) == 63 and res.lanes is None
    assert "tree-future" in res.skipped
    full = read_results(SWEEP)
    assert full.lanes == 256 and len(full.points) == 63
    assert {pt.bound for pt in full.points} == {"link", "cpu", "unexplained"}  # 2 Mbit/s: no point is latency-bound
    assert all(0 <= pt.start_s < 0.05 for pt in full.points)
    assert all(pt.skew_s > 0 for pt in full.points if pt.hosts == 16)  # 16 agents never all wake at once
    (tmp_path / "empty").mkdir()
    with pytest.raises(CalibrationError, match="no measured latencies"):
        read_results(tmp_path / "empty")


# 2. against closed forms ---------------------------------------------------------------------------------------
@needs_simgrid
def test_non_blocking_fabrics_reduce_to_the_closed_forms_within_2_percent(engine: Engine):
    got = checks(engine=engine)
    assert len(got) == 4
    for c in got:
        assert abs(c.rel_error) <= 0.02, c


# 3. against the published SHARP figure ------------------------------------------------------------------------
@needs_simgrid
def test_ndr_preset_reproduces_sharp_for_128_hosts_within_25_percent(engine: Engine):
    stored = sharp_anchor(NDR, fit=False, engine=engine)
    assert stored.max_rel_error <= 0.25, stored.errors()
    refit = sharp_anchor(
        NDR.with_(step_overhead=1e-6, switch_agg_latency=0.0, host_byte_cost=0.0), fit=True, engine=engine
    )
    assert refit.predicted_rel_error <= 0.25  # SHARP at 4 KiB and its speed-up were not fitted
    for name, value in refit.fitted.items():
        assert getattr(NDR, name) == pytest.approx(value, rel=0.05), name
    ratio = refit.model[4096]["rd"] / refit.model[4096]["inc-int32"]
    assert ratio == pytest.approx(PUBLISHED[4096]["rd"] / PUBLISHED[4096]["inc-int32"], rel=0.25)


# 4. phase composition against an actor-per-rank simulation -------------------------------------------------------
@needs_simgrid
@pytest.mark.parametrize("case", [0, 2, 3, 4], ids=["ring-contended", "tree", "tree-contended", "inc-contended"])
def test_phase_composition_agrees_with_full_simulation_within_5_percent(case: int):
    name, scenario, method, size, preset = full_cases()[case]
    model, full = compare(scenario, method, size, preset)
    assert model == pytest.approx(full, rel=0.05), name


@needs_simgrid
def test_the_model_puts_the_bytes_the_emulation_counted_on_its_busiest_link(engine: Engine):
    """The wire accounting on its own (no fitted cost): frames, headers, acks, exponent rounds and the
    controller's routes give every 128K point's busiest link the bytes the emulation's counters measured (the
    largest size: at 1K a few acks more or fewer are several per cent of the bytes)."""
    import json

    from simulation.model import Evaluation, Scenario

    summary = json.loads((SWEEP / "summary.json").read_text())
    checked, misses = 0, []
    for pt in summary["points"]:
        if pt["elements"] != 131072 or pt["retransmissions"]:
            continue
        checked += 1
        ev = Evaluation(
            Scenario(
                topology=str(SWEEP / "topology.json"),
                gpus=pt["hosts"],
                methods=(pt["method"],),
                sizes=(4 * pt["elements"],),
            ),
            EMULATION,
            engine,
        )
        ev.build()
        ev.solve()
        busiest = float(ev.link_bytes(ev.plans[0], 4 * pt["elements"]).max())
        # the tree's acks are batched in the model by the rate of all its flows at once, which counts a few
        # more acks than the emulation's per-peer timers send (+1.05% at 4 hosts): known, and only upwards.
        # hier's members are paced by their results (hosts/hier.py), in bursts of the member window: the model
        # batches their acks at the members' solo rate and counts fewer than the emulation's timers send (8
        # hosts: 725-730 datagrams a member against 591-602 before the pacing, -1.06% of the busiest link's
        # bytes); a fluid pace (bytes over the phase's time) overshoots instead (+1.4% at 4 hosts).
        rel = 0.02 if pt["method"] in ("tree", "hier") else 0.01
        one_sided = (pt["method"] == "tree" and busiest < 0.99 * pt["wire_bytes"]) or (
            pt["method"] == "hier" and busiest > 1.01 * pt["wire_bytes"]
        )  # the known errors go one way each
        if busiest != pytest.approx(pt["wire_bytes"], rel=rel) or one_sided:
            misses.append((pt["method"], pt["hosts"], pt["elements"], busiest, pt["wire_bytes"]))
    assert checked == 21  # every method at every host count
    assert not misses
