"""End to end in Mininet: a switch killed mid all-reduce is survived, loss and register bit flips leave every sum
exact, an edge failure is reported by name (experiments.faults.run, short version on a 4-switch leaf-spine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from experiments.faults.run import FaultsConfig, run_faults
from tests.common import REPO

pytestmark = pytest.mark.mininet


def only(tmp_path: Path, **phases: Any) -> FaultsConfig:
    """The short faults run on a 4-switch leaf-spine with every phase off but `phases` (FaultsConfig fields)."""
    base: dict[str, Any] = dict(
        topology="leaf-spine:2x3x2",
        hosts=4,
        size=4096,
        reps=1,
        loss_rates=(),
        sdc_flips=0,
        dup_rate=0.0,
        reorder_rate=0.0,
        isolation=False,
        edge_failure=False,
        switch_failure=False,
        link_failure=False,
        gray_failure=False,
        controller_runs=0,
        results_root=tmp_path,
    )
    return FaultsConfig(**{**base, **phases})


def test_faults_experiment_short(tmp_path: Path, leak_check: None) -> None:
    # 2 leaves x 3 spines: the root spine dies, another spine takes the job (the dead one restarts); then a link
    # of that spine goes down (the switch keeps running) and another spine takes it. No failure monitor: the
    # workers' failure timeout and the runner's probe find both (the signalled path: the test below)
    cfg = FaultsConfig(
        topology="leaf-spine:2x3x2",
        hosts=4,
        size=4096,
        reps=2,
        loss_rates=(0.01, 0.05),
        sdc_flips=5,
        failure_runs=1,
        signals=False,
        controller_runs=0,
        results_root=tmp_path,
    )
    result = run_faults(cfg, out_dir=tmp_path / "run")
    s = result.summary
    assert not s["problems"], s["problems"]
    assert s["lossless"]["exact"]
    for rate, point in s["loss"].items():
        assert point["exact"] and not point["errors"], (rate, point)
        assert point["latency_over_lossless"] > 0
    assert s["loss"]["5%"]["retransmissions"] > 0
    f = s["switch_failure"]
    assert f["exact"] and f["later_exact"] and f["later_on_new_tree"], f
    assert f["victim"] == f["old_root"] != f["new_root"]
    assert f["recovery_s"] > f["first_detected_s"] > 0 and 0 < f["redone_chunks"] <= f["chunks"]
    assert f["detect_bound_s"] >= f["failure_timeout_s"] >= cfg.failure_min_s
    assert 0 < f["first_probe_s"] < f["recovery_s"] and 0 <= f["barrier_s"] < f["recovery_s"], f
    ln = s["link_failure"]
    assert ln["exact"] and ln["later_exact"] and ln["later_on_new_tree"], ln
    assert ln["old_root"] == f["new_root"] != ln["new_root"], (f, ln)
    assert ln["old_root"] in ln["link"].split("-")  # the root's link to a switch below it
    assert ln["recovery_s"] > ln["first_detected_s"] > 0 and 0 < ln["redone_chunks"] <= ln["chunks"], ln
    assert ln["verdict"].startswith("re-planned"), ln
    e = s["edge_failure"]
    assert e["reported"], e
    assert f"edge switch {e['switch']} is down, cutting off {', '.join(e['hosts'])}" in e["message"]
    d = s["sdc"]
    # how many flips land in an open round depends on how fast rounds close (the run tries for 40-200
    # all-reduces); every one that landed must be caught, and no sum may be wrong
    assert d["exact"] and 1 <= d["injected"] <= cfg.sdc_flips and d["detected"] >= d["injected"], d
    for kind in ("switch_crash", "link_down"):
        v = s["failures"][kind]
        assert v["runs"] == 1 and v["exact"] and v["triggers"] == ["timeout"], v
    for kind in ("gray_switch", "gray_link"):  # one of each, by default; random loss moved no tree
        v = s["failures"][kind]
        assert v["runs"] == 1 and v["exact"] and v["localised"] and v["bound_met"], v
        assert v["false_alarms_under_loss"] == 0, s["loss"]
    assert all(p["gray_false_alarms"] == 0 for p in s["loss"].values()), s["loss"]
    assert s["ok"]
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    for key in ("recovery_s", "exact", "detect_bound_s"):
        assert key in saved["switch_failure"]
    assert (tmp_path / "run" / "faults.png").stat().st_size > 0


@pytest.mark.parametrize("signals", [True, False], ids=["monitor", "monitor-off"])
def test_crashes_and_cut_links_are_acted_on_when_the_switches_announce_them(
    tmp_path: Path, leak_check: None, signals: bool
) -> None:
    """failures.<kind>: two switch crashes and two cut links, each found by what the switches announce (a
    P4Runtime stream that breaks, a port whose oper-status leaves UP): every rank's wait ends on the runner's
    notice, the fail-over decides on the signalled evidence without a probe, every sum exact. With the monitor
    off the same failures are found by the failure timeout, and the checks of the signalled path fail."""
    cfg = only(tmp_path, switch_failure=True, link_failure=True, failure_runs=2, signals=signals)
    result = run_faults(cfg, out_dir=tmp_path / "run")
    s = result.summary
    assert not s["problems"], s["problems"]
    for kind in ("switch_crash", "link_down"):
        v = s["failures"][kind]
        assert v["runs"] == 2 and v["exact"], v
        assert {r["point"] for r in v["detail"]} == set(cfg.failure_points[:2]), v["detail"]
        heard = [r["signal_s"] for r in v["detail"]]
        evidence = {r["evidence"] for r in v["detail"]}
        if signals:
            assert v["triggers"] == ["notice"] and evidence == {"signalled"}, v
            assert all(h is not None and h >= 0 for h in heard), heard
        else:
            assert v["triggers"] == ["timeout"] and evidence == {"probe"} and heard == [None, None], v
        assert all(r["step_over_lossless"] > 0 for r in v["detail"]), v["detail"]
    crashed = [r["victim"] for r in s["failures"]["switch_crash"]["detail"]]
    assert len(set(crashed)) == 2, crashed  # the job moved off the first, the second root died next
    assert s["ok"]
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert set(saved["failures"]) == {"switch_crash", "link_down"}
    assert {"median", "worst"} <= set(saved["failures"]["link_down"]["step_over_lossless"])


@pytest.mark.parametrize("detect", [True, False], ids=["registers", "registers-off"])
def test_gray_switches_and_links_are_found_in_the_registers_and_routed_around(
    tmp_path: Path, leak_check: None, detect: bool
) -> None:
    """failures.gray_<kind>: the root drops every frame it receives (P4Runtime, carriers and process fine), then
    one direction of the new root's link to a leaf drops everything (up, then down). Nothing is announced and the
    probe finds the tree alive; the slot registers, read at the first stall and again at the barrier, name the
    switch or the link and its direction, and the job moves around it within the stated bound, every sum exact.
    With the register reading off the stalls stay false alarms on the same tree, and the step fails."""
    # the detector off: one run of each kind shows it (each step fails only after its false-alarm limit)
    cfg = only(tmp_path, gray_failure=True, failure_runs=2 if detect else 1, gray_detection=detect)
    result = run_faults(cfg, out_dir=tmp_path / "run")
    s = result.summary
    if not detect:
        assert not s["ok"]
        assert any(
            "registers do not say where" in e for r in s["failures"]["gray_switch"]["detail"] for e in r["errors"]
        )
        return
    assert not s["problems"], s["problems"]
    sw, ln = s["failures"]["gray_switch"], s["failures"]["gray_link"]
    for v in (sw, ln):
        assert v["runs"] == 2 and v["exact"] and v["localised"] and v["bound_met"], v
        for r in v["detail"]:
            assert r["evidence"] == "data plane" and r["verdict"].startswith("re-planned"), r
            assert r["later_on_new_tree"] and r["verdict_s"] <= r["gray_bound_s"], r
    assert [r["victim"] for r in sw["detail"]] == [r["old_root"] for r in sw["detail"]]
    assert all(r["new_root"] != r["victim"] for r in sw["detail"])
    up, down = (r["link"].split("->") for r in ln["detail"])
    assert up[1] == ln["detail"][0]["old_root"] and down[0] == ln["detail"][1]["old_root"], ln["detail"]
    assert s["ok"]


def test_a_killed_controller_is_replaced_by_its_standby_with_nothing_lost(tmp_path: Path, leak_check: None) -> None:
    """failures.controller_crash: the primary controller process killed between all-reduces, the standby primary on
    every switch and reconciled (jobs and tokens as installed, read back), then the root killed and the job moved
    by the standby; the next all-reduce, on the standby's install, exact."""
    cfg = only(tmp_path, controller_runs=2)
    s = run_faults(cfg, out_dir=tmp_path / "run").summary
    assert not s["problems"], s["problems"]
    v = s["failures"]["controller_crash"]
    assert v["runs"] == 2 and v["exact"], v
    for r in v["detail"]:
        assert r["jobs_installed"] == r["jobs_reconciled"] == r["jobs_on_switches"], r
        assert r["victim"] and all(r["victim"] not in t for t in r["jobs_after_failover"].values()), r
        assert 0 < r["detected_s"] < r["recovery_s"] and r["switch_failover_s"] > 0, r
        assert r["step_over_lossless"] > 0
    assert len({r["victim"] for r in v["detail"]}) == 2  # the second crash's root is the job's new one
    assert s["ok"]


def faults_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "p4ina", "faults", *args, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )


def test_faults_cli_refuses_a_bad_loss_rate(tmp_path: Path) -> None:
    done = faults_cli(tmp_path, "--loss-rates", "150")
    assert done.returncode == 2 and "fractions in (0, 1)" in done.stderr, done.stderr


def test_faults_cli_refuses_a_bad_host_policy(tmp_path: Path) -> None:
    done = faults_cli(tmp_path, "--host-policy", "shrink,respawn")
    assert done.returncode == 2 and "unknown host policy respawn" in done.stderr, done.stderr
    done = faults_cli(tmp_path, "--hosts", "4", "--host-policy", "shrink", "--host-runs", "3")
    assert done.returncode == 2 and "fewer than 2 of 4 hosts" in done.stderr, done.stderr


def test_duplication_and_reordering_keep_every_sum_exact(tmp_path: Path, leak_check: None) -> None:
    # no loss sweep, no flips, no kill: every link end copies 3% of its packets and holds 5% back
    cfg = only(tmp_path, topology="leaf-spine:2x2x2", reps=3, isolation=True, dup_rate=0.03, reorder_rate=0.05)
    result = run_faults(cfg, out_dir=tmp_path / "run")
    s = result.summary
    assert not s["problems"], s["problems"]
    d = s["dup_reorder"]
    assert d["exact"] and not d["errors"] and d["allreduces"] == cfg.reps, d
    # the links made copies and held packets back, and both ends saw them: a copied contribution is a
    # repeat at the switch (its child's bit is already set), a copied result a duplicate at the worker
    assert d["duplicated_packets"] > 0 and d["held_packets"] > 0, d
    assert d["switch_retransmissions"] > 0 and d["worker_duplicates"] > 0, d
    assert s["ok"] and "switch_failure" not in s
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["dup_reorder"]["exact"] is True


def test_faults_cli_refuses_a_bad_duplication_rate(tmp_path: Path) -> None:
    done = faults_cli(tmp_path, "--dup", "120")
    assert done.returncode == 2 and "duplication 1.2 and reorder 0.02: fractions in [0, 1)" in done.stderr, done.stderr


def test_four_jobs_and_a_ring_at_once_stay_exact_and_isolated(tmp_path: Path, leak_check: None) -> None:
    # the k=4 fat-tree: four 3-host jobs spread over the pods (sharing edge, aggregation and core switches,
    # distinct slot ranges) and a 4-host ring, all at once; only the loss-free baseline besides
    cfg = only(tmp_path, topology="fat-tree:4", hosts=16, isolation=True, isolation_reps=2)
    result = run_faults(cfg, out_dir=tmp_path / "run")
    s = result.summary
    assert not s["problems"], s["problems"]
    iso = s["isolation"]
    assert len(iso["jobs"]) == 4 and iso["ring"]["hosts"], iso
    for job, v in iso["jobs"].items():
        assert v["exact"] and not v["errors"], (job, v)
        assert not v["counter_mismatches"] and not v["foreign_drops"], (job, v)
        assert v["slowdown"] > 0 and all(c > 0 for c in v["completions_per_allreduce"].values()), (job, v)
    assert iso["ring"]["exact"] and iso["ring"]["slowdown"] > 0, iso["ring"]
    # the trees really share switches, and the read-back saw every job's cells hold its own token only
    assert iso["shared_switches"], iso
    assert iso["register_cells_checked"] > 0 and iso["foreign_cells"] == 0 and iso["stray_cells"] == 0, iso
    assert iso["unused_cells"] < iso["register_cells_checked"]
    assert iso["exact"] and iso["isolated"] and s["ok"]
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert set(saved["isolation"]["slowdowns"]) == set(iso["jobs"]) | {"ring"}


@pytest.mark.parametrize("policy", ["shrink", "spare"])
def test_a_host_killed_mid_allreduce_is_survived_by_policy(tmp_path: Path, leak_check: None, policy: str) -> None:
    """failures.host_crash_<policy>: the last host's agent is SIGKILLed mid all-reduce; every other rank's step
    fails naming it, the job is re-planned over the survivors (shrink: their sum, reported as theirs) or over
    them and a standby host's agent in its place (spare: the full sum, its input rebuilt), and the redone step
    and the next are checked against numpy's sum over exactly those inputs."""
    # h1-h3 on l1, h4 on l2; the spare is h5, on l2 too
    cfg = only(tmp_path, topology="leaf-spine:2x2x3", signals=False, host_policies=(policy,), host_runs=1)
    result = run_faults(cfg, out_dir=tmp_path / "run")
    s = result.summary
    assert not s["problems"], s["problems"]
    v = s["failures"][f"host_crash_{policy}"]
    (run,) = v["detail"]
    assert v["runs"] == 1 and v["exact"], v
    assert run["victim"] == "h4" and run["victim_rank"] == 3 and run["named"], run
    if policy == "shrink":
        assert run["sum_over"] == [0, 1, 2] and not run["full_sum"] and run["members"] == 3, run
    else:
        assert run["sum_over"] == [0, 1, 2, 3] and run["full_sum"] and run["spare"] == "h5", run
    assert run["detected_s"] > 0 and run["step_over_lossless"] > 1.0, run
    for key in ("detection_s", "recovery_s", "step_over_lossless"):
        assert {"median", "worst"} <= set(v[key]), v
    assert s["ok"]


def test_a_fabric_with_no_spare_host_lends_the_jobs_last_host_as_the_spare(tmp_path: Path, leak_check: None) -> None:
    """The k=4 fat-tree's case (make emulate-faults): every host of the fabric in the job, so the job's last host
    stands by for the host-crash phase; the job goes on over the others, the victim is the last of those, the
    standby takes its place and input, and the sum is over the three inputs of the job as it then was."""
    cfg = only(tmp_path, topology="leaf-spine:2x2x2", signals=False, host_policies=("spare",), host_runs=1)
    s = run_faults(cfg, out_dir=tmp_path / "run").summary
    assert not s["problems"], s["problems"]
    (run,) = s["failures"]["host_crash_spare"]["detail"]
    assert run["spare"] == "h4" and run["victim"] == "h3" and run["named"], run
    assert run["sum_over"] == [0, 1, 2] and run["members"] == 3 and run["exact"], run
    assert s["ok"]
