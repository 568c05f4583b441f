"""`p4ina simulate --model`: the breakdown printed, bad input refused in one line; notebook 06 runs headless."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.common import REPO
from tests.simulation.conftest import needs_simgrid


def _simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simulation", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--model", "llama3-7b"], "unknown model 'llama3-7b'"),
        (["--model", "llama3-8b", "--layout", "tp=8,bogus=1"], "unknown key 'bogus'"),
        (["--model", "llama3-8b", "--layout", "tp=8,dp=3,gbs=4"], "not a whole number"),
        (["--model", "llama3-8b", "--layout", "tp=8,dp=2", "--dp-methods", "nccl,nope"], "--dp-methods nope"),
        (["--model", "llama3-8b", "--layout", "tp=8,dp=2", "--gpu", "v100"], "unknown GPU 'v100'"),
        (["--model", "llama3-8b", "--layout", "tp=8,dp=2", "--topology", "torus:4"], "unknown topology"),
        (["--model", "deepseek-v3", "--layout", "dp=8,ep=3"], "ep=3 must divide dp=8"),
    ],
)
def test_bad_input_is_refused_in_one_line(args: list[str], words: str) -> None:
    run = _simulate(*args)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], run.stderr


@needs_simgrid
def test_a_step_breakdown_is_printed_per_method() -> None:
    run = _simulate(
        "--model", "llama3-70b", "--layout", "tp=8,pp=2,dp=4,gbs=32,sharding=zero1", "--topology", "rail:radix=16",
        "--dp-methods", "nccl,inc-int8",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "llama3-70b" in out and "64 H100 GPUs" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("nccl ", "inc-int8 "))]
    assert [r[0] for r in rows] == ["nccl", "inc-int8"]
    header = next(line.split() for line in out.splitlines() if line.startswith("dp method"))
    for r in rows:
        parts = dict(zip(header[4:], map(float, r[3:])))
        assert sum(parts.values()) == pytest.approx(float(r[1]), abs=1e-3)  # the split adds up to the step
        assert 0 < float(r[2].rstrip("%")) < 100
    base, inc = (float(r[1]) for r in rows)
    assert inc <= base


@needs_simgrid
def test_the_workload_notebook_runs_headless(tmp_path: Path) -> None:
    nb = nbformat.read(REPO / "notebooks" / "06_workload.ipynb", as_version=4)
    env = {"P4INA_WORKLOAD_NOTEBOOK_SMALL": "1", "P4INA_WORKLOAD_NOTEBOOK_OUT": str(tmp_path)}
    os.environ.update(env)
    try:
        NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    finally:
        for k in env:
            os.environ.pop(k, None)
    images = [
        o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if "image/png" in o.get("data", {})
    ]
    assert len(images) == 2
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "held-out max" in text and "MFU (%)" in text and "inc-int8" in text


@needs_simgrid
def test_make_simulate_adds_the_study_and_the_validation_to_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """simulation.cli's default run calls workload_cli.study on its results folder (here one small point)."""
    import json

    from simulation.workload import cli, study

    small = study.Point("llama3-405b", 2048, "clos:radix=32", "contiguous", ("nccl", "inc-int8", "adaptive"))
    monkeypatch.setattr(study, "points", lambda: [small])
    (tmp_path / "summary.json").write_text(json.dumps({"validation": {"closed_form_max_rel_error": 0.001}}))
    line = cli.study(tmp_path, 1, no_validate=False)
    summary = json.loads((tmp_path / "summary.json").read_text())
    v = summary["validation"]
    assert v["closed_form_max_rel_error"] == 0.001  # kept
    assert 0 < v["workload_max_rel_error"] <= v["workload_tolerance"] == 0.10
    assert summary["workload"]["plots"] == ["workload_mfu.png", "workload_breakdown.png"]
    assert all((tmp_path / f).is_file() for f in ("workload.json", "workload_table.txt", "workload_mfu.png"))
    assert "held-out max" in line and "MFU (%)" in (tmp_path / "workload_table.txt").read_text()
