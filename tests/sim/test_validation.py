"""The four validations of issue 11, each as a test (the larger versions run in `make simulate`)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from simulation.anchors import PUBLISHED, sharp_anchor
from simulation.calibrate import CalibrationError, fit, read_results, result_folders
from simulation.closedform import checks
from simulation.engine import Engine
from simulation.fullsim import compare
from simulation.params import EMULATION, NDR
from simulation.validation import full_cases
from tests.sim.conftest import DATA, needs_simgrid

FIXTURE = DATA / "emulation-k4"  # sweep/ (the sweep preset: 2 Mbit/s, 1K-128K) and latency/ (100 ms links, 1K)
SWEEP = FIXTURE / "sweep"


# 1. against the emulation ---------------------------------------------------------------------------------
@needs_simgrid
def test_one_set_of_costs_predicts_every_network_bound_emulation_point_within_15_percent(engine: Engine):
    """Issue 11 asks for every point within 15%. One set of costs, fitted to the sweep preset (2 Mbit/s; 4/8/16
    hosts; 1K, 16K, 128K) and the latency preset (100 Mbit/s links of 100 ms) at once, each run with its own
    links, holds it for every point the emulation calls link-, latency- or cpu-bound (47 of 70). It does not for
    the 1K (and two 16K) points the emulation calls unexplained: 8-45 ms all-reduces whose time is a few ms of
    scheduling 36 processes on 2 cores (6 of them missed by up to 21% when this fixture was made); those are
    reported (README, Simulation), and issue 11 stays open for them."""
    calib = fit(FIXTURE, engine=engine)
    assert [r.folder.name for r in calib.results] == ["latency", "sweep"]
    assert len(calib.table) == 7 + 63  # every method at every point of both runs, none dropped
    assert {r["links"] for r in calib.table} == {"2 Mbit/s", "100 Mbit/s, 100 ms"}
    assert {b: e["points"] for b, e in calib.by_bound().items()} == {"link": 38, "latency": 7, "cpu": 2, "unexplained": 23}
    misses = [(r["method"], r["hosts"], r["elements"], r["links"], r["bound"], f"{r['rel_error']:+.1%}")
              for r in calib.table if abs(r["rel_error"]) > 0.15 and r["bound"] != "unexplained"]
    assert not misses, misses
    # the stored emulation preset is this fit (the costs that bind somewhere in the two runs)
    for name in ("host_packet_cost", "switch_packet_cost", "switch_forward_cost", "step_overhead", "switch_agg_latency",
                 "barrier_cost"):
        assert getattr(EMULATION, name) == pytest.approx(calib.fitted[name], rel=0.2, abs=1e-7), name
    # the preset's start is the fitted per-call cost plus the sweep's median measured wake-up (a few ms), and it
    # simulates the sweep's links (2 Mbit/s, no delay), as `make emulate`'s bandwidth preset has them
    assert 0 < EMULATION.start_cost - calib.fitted["start_cost"] < 0.015
    assert calib.preset.nic_bw == EMULATION.nic_bw and calib.preset.cable_latency == 0


def test_a_folder_of_results_folders_is_fitted_as_one_and_a_folder_of_neither_is_refused(tmp_path: Path):
    assert result_folders(FIXTURE) == [FIXTURE / "latency", FIXTURE / "sweep"]
    assert result_folders(SWEEP) == [SWEEP]
    (tmp_path / "nothing" / "empty").mkdir(parents=True)
    with pytest.raises(CalibrationError, match="neither a results folder"):
        result_folders(tmp_path / "nothing")
    with pytest.raises(CalibrationError, match="is not a results folder"):
        result_folders(tmp_path / "absent")


def _copy_without(tmp: Path, drop_column: str | None = None, drop_summary: bool = False, extra_method: bool = False) -> Path:
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


def test_results_folders_are_read_with_columns_and_methods_missing_or_new(tmp_path: Path):
    res = read_results(_copy_without(tmp_path, drop_column="packets_sent", drop_summary=True, extra_method=True))
    assert len(res.points) == 63 and res.lanes is None
    assert "tree-future" in res.skipped
    full = read_results(SWEEP)
    assert full.lanes == 256 and len(full.points) == 63
    assert {pt.bound for pt in full.points} == {"link", "cpu", "unexplained"}  # 2 Mbit/s: no point is latency-bound
    assert all(0 <= pt.start_s < 0.05 for pt in full.points)
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
    refit = sharp_anchor(NDR.with_(step_overhead=1e-6, switch_agg_latency=0.0, host_byte_cost=0.0), fit=True, engine=engine)
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
        ev = Evaluation(Scenario(topology=str(SWEEP / "topology.json"), gpus=pt["hosts"], methods=(pt["method"],),
                                 sizes=(4 * pt["elements"],)), EMULATION, engine)
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
            pt["method"] == "hier" and busiest > 1.01 * pt["wire_bytes"])  # the known errors go one way each
        if busiest != pytest.approx(pt["wire_bytes"], rel=rel) or one_sided:
            misses.append((pt["method"], pt["hosts"], pt["elements"], busiest, pt["wire_bytes"]))
    assert checked == 21  # every method at every host count
    assert not misses
