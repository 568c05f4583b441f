"""End to end in Mininet: the controller installs jobs, agents run every method through the switches, every
sum is checked, and the bound rule labels what limited each point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from emulation.shaping import LinkShape
from experiments import bounds
from experiments.allreduce import analysis, report
from experiments.allreduce.run import run_experiment
from experiments.config import ExperimentConfig, read_raw
from hosts.methods import METHODS
from tests.common import BACKENDS, REPO

pytestmark = pytest.mark.mininet

ALL = ("inc-int32", "inc-int16", "inc-int8", "ring", "ring-bf16")
# 2 leaves x 1 spine x 2 hosts: 4 hosts, 3 switches, a two-level aggregation tree.
TINY = dict(topology="leaf-spine:2x1x2", host_counts=(4,))


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_method_gives_checked_sums(backend: str, tmp_path: Path, leak_check: None) -> None:
    # 'ones' inputs (rank + 1 + iteration everywhere) are small integers: int32 lanes and float32 sums are exact.
    cfg = ExperimentConfig(
        **TINY,
        sizes=(600,),
        methods=ALL,
        reps=2,
        warmup=1,
        backend=backend,
        shape=LinkShape(bw_mbps=20),
        input_kind="ones",
        results_root=tmp_path,
    )
    result = run_experiment(cfg, out_dir=tmp_path / "run")
    summary = report.summary_of(result)
    assert summary["ok"], summary["notes"]
    assert len(result.samples) == len(ALL) * cfg.iterations * 4
    for p in summary["points"]:
        assert p["ok"] and p["reps"] == 2 and p["median_latency_s"] > 0, p
        assert p["rel_l2_error"] <= p["rel_l2_target"] == METHODS[p["method"]].rel_l2_target
        # the wire bound holds (a few frames fit the shaper's credit: then T_wire is 0 and the ratio undefined);
        # the path bound counts link delay only, and these links have none
        assert p["t_path_s"] is None, p
        assert p["t_wire_s"] >= 0 and (p["t_over_wire"] is None or p["t_over_wire"] >= 1.0), p
        if p["method"] in ("inc-int32", "ring"):
            assert p["max_abs_error"] == 0.0, f"{p['method']} sum is not exact"
    # each repetition ran the methods in its own shuffled order
    orders = {
        rep: tuple(
            s.method for s in sorted((s for s in result.samples if s.rep == rep and s.rank == 0), key=lambda s: s.order)
        )
        for rep in range(cfg.iterations)
    }
    assert len(set(orders.values())) > 1 or len(ALL) < 3
    # the summary follows from raw.csv alone
    again = analysis.summarize(cfg, read_raw(tmp_path / "run" / "raw.csv"))
    assert [p["median_latency_s"] for p in again["points"]] == [p["median_latency_s"] for p in summary["points"]]


def test_link_bound_points_sit_within_the_bound(tmp_path: Path, leak_check: None) -> None:
    """At a link rate the switches carry easily, every method takes at least what its busiest link's bytes
    allow and at most 15% more (no burst credit, no free agreement, nothing off the clock)."""
    cfg = ExperimentConfig(
        **TINY, sizes=(16384,), methods=ALL, reps=2, warmup=1, shape=LinkShape(bw_mbps=0.5), results_root=tmp_path
    )
    summary = report.summary_of(run_experiment(cfg, out_dir=tmp_path / "run"))
    for p in summary["points"]:
        assert p["ok"], p["problems"]
        assert 1.0 <= p["t_over_wire"] <= bounds.BOUND_SLACK, (p["method"], p["t_over_wire"])
        assert p["bound"] == "link" and p["headline"]
    inc = {p["method"]: p for p in summary["points"]}
    # narrow lanes cut the bytes: int8 lanes carry about a quarter of int32's
    assert inc["inc-int8"]["bytes_per_element_up"] < 0.35 * inc["inc-int32"]["bytes_per_element_up"]


def test_a_point_made_cpu_bound_is_not_called_link_bound(tmp_path: Path, leak_check: None) -> None:
    """At 500 Mbit/s a Python switch cannot keep up: measured >> T_wire, and the point is no headline."""
    cfg = ExperimentConfig(
        **TINY,
        sizes=(16384,),
        methods=("inc-int32", "ring"),
        reps=1,
        warmup=1,
        shape=LinkShape(bw_mbps=500),
        results_root=tmp_path,
    )
    summary = report.summary_of(run_experiment(cfg, out_dir=tmp_path / "run"))
    p = next(p for p in summary["points"] if p["method"] == "inc-int32")
    assert p["ok"] and p["t_over_wire"] > bounds.BOUND_SLACK, p
    assert p["bound"] != "link" and not p["headline"]
    assert any(o["method"] == "inc-int32" for o in summary["left_out"])


def test_cli_tiny_run_prints_the_table_and_writes_the_folder(tmp_path: Path, leak_check: None) -> None:
    cmd = [
        sys.executable,
        "-m",
        "p4ina",
        "emulate",
        "--topology",
        "leaf-spine:2x1x2",
        "--hosts",
        "2,4",
        "--sizes",
        "64elem,1Ki-elem",
        "--methods",
        "inc-int32,ring",
        "--reps",
        "2",
        "--warmup",
        "1",
        "--bw",
        "20",
        "--switch",
        "embedded",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "inc32 vs best host" in done.stdout and "FAILED" not in done.stdout
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert "leaf-spine2x1x2_embedded_h2-4_bw20" in folder.name
    for name in ("config.json", "raw.csv", "summary.json", "table.txt", "latency.png", "speedup.png", "bounds.png"):
        assert (folder / name).exists(), name
    summary = json.loads((folder / "summary.json").read_text())
    for n in ("2", "4"):
        for size in ("64", "1024"):
            point = summary["methods"]["inc-int32"][n][size]
            assert point["median_latency_s"] > 0 and point["speedup_over_ring"]["value"] > 0
    env = json.loads((folder / "config.json").read_text())["environment"]
    assert env["backend"]["name"] == "embedded" and env["program"]["bmv2_json_sha256"]
    assert env["shaping"]["burst_bytes"] == 1514
    assert abs(int(env["shaping"]["tc_class"]["burst"].rstrip("b")) - 1514) <= 15  # tc stores it in time units


def test_link_delay_is_on_the_path_of_every_method(tmp_path: Path, leak_check: None) -> None:
    """Without netem the embedded switches hold each link's delay: every method takes at least its chain of
    hops' delay (T_path; a lower bound only, so a loaded machine cannot fail it), and the in-network tree's
    chain of hops is shorter than the ring's 2(N-1) steps."""
    cfg = ExperimentConfig(
        **TINY,
        sizes=(1024,),
        methods=("inc-int32", "ring", "tree"),
        reps=2,
        warmup=1,
        shape=LinkShape(bw_mbps=100, delay_ms=10),
        results_root=tmp_path,
    )
    summary = report.summary_of(run_experiment(cfg, out_dir=tmp_path / "run"))
    pts = {p["method"]: p for p in summary["points"]}
    for p in pts.values():
        assert p["ok"], p["problems"]
        assert p["t_path_s"] > 0 and p["t_over_path"] >= 1.0, (p["method"], p["t_path_s"], p["median_latency_s"])
    assert pts["inc-int32"]["t_path_s"] < pts["tree"]["t_path_s"] < pts["ring"]["t_path_s"]
