"""End to end in Mininet: the controller installs a job, the hosts all-reduce through the switches, sums are exact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from emulation.experiment import INC_INT8, INC_INT32, RING, ExperimentConfig
from emulation.runner import run_experiment
from emulation.topo import LinkShape
from tests.e2e.conftest import BACKENDS, REPO

pytestmark = pytest.mark.mininet

# 2 leaves x 1 spine x 2 hosts: 4 hosts, 3 switches, a two-level aggregation tree.
TINY = dict(topology="leaf-spine:2x1x2", host_counts=(4,), sizes=(200,), reps=1, warmup=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_job_both_methods_give_exact_sums(backend: str, tmp_path: Path, leak_check: None) -> None:
    # 'ones' inputs (rank + 1 everywhere) are integers: int32 fixed point and float32 sums are exact.
    cfg = ExperimentConfig(**TINY, methods=(INC_INT32, INC_INT8, RING), backend=backend, shape=LinkShape(bw_mbps=50),
                           input_kind="ones", results_root=tmp_path)
    result = run_experiment(cfg, out_dir=tmp_path / "run")
    assert result.ok, result.notes
    by = {m.method: m for m in result.measurements}
    assert set(by) == {INC_INT32, INC_INT8, RING}
    for method in (INC_INT32, RING):
        assert by[method].max_error_ratio == 0.0, f"{method} sum is not exact"
    assert by[INC_INT8].max_error_ratio is not None and by[INC_INT8].max_error_ratio <= 1.0
    for m in result.measurements:
        assert len(m.measured) == 1 and m.median_s and m.median_s > 0
    assert set(result.environment["switch_idle_cpu_per_s"]) == {"l1", "l2", "s1"}, "switch CPU is not being watched"
    # the switches counted the job's contributions: 4 hosts x 4 chunks (200 elements) x 2 all-reduces at the leaves
    assert by[INC_INT32].switch_counters.get("contributions", 0) >= 4 * 4 * 2
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["methods"][INC_INT32]["4"]["200"]["speedup_over_ring"] > 0


def test_cli_tiny_run_prints_the_table_and_writes_the_folder(tmp_path: Path, leak_check: None) -> None:
    cmd = [sys.executable, "-m", "emulation", "--topology", "leaf-spine:2x1x2", "--hosts", "2,4", "--sizes", "64,1K",
           "--reps", "2", "--warmup", "1", "--bw", "20", "--switch", "embedded", "--out", str(tmp_path), "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "speed-up int32" in done.stdout and "FAILED" not in done.stdout
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert "leaf-spine2x1x2_embedded_h2-4_bw20" in folder.name
    for name in ("config.json", "results.json", "raw.csv", "summary.json", "table.txt", "latency.png", "speedup.png"):
        assert (folder / name).exists(), name
    summary = json.loads((folder / "summary.json").read_text())
    for n in ("2", "4"):
        for size in ("64", "1024"):
            assert summary["methods"][INC_INT32][n][size]["median_latency_s"] > 0
            assert summary["methods"][INC_INT32][n][size]["speedup_over_ring"] > 0
    env = json.loads((folder / "config.json").read_text())["environment"]
    assert env["backend"]["name"] == "embedded" and env["program"]["bmv2_json_sha256"]
