"""The notebooks run headless: the analysis one on a made-up results folder, the experiment one in Mininet."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.common import REPO
from tests.experiments.fake_results import fake_results_folder

NOTEBOOKS = REPO / "notebooks"


def run_notebook(name: str, env: dict[str, str], timeout: int) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        NotebookClient(
            nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
        ).execute()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb


def _text(nb: nbformat.NotebookNode) -> str:
    return "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def test_analysis_notebook_reproduces_table_and_plots(tmp_path: Path) -> None:
    folder = fake_results_folder(tmp_path / "run")
    nb = run_notebook("02_analyse_results.ipynb", {"P4INA_RESULTS": str(folder)}, timeout=180)
    text = _text(nb)
    assert "vs best host" in text and "bandwidth bound" in text
    images = [
        o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if "image/png" in o.get("data", {})
    ]
    assert images, "the plots were not drawn"


@pytest.mark.mininet
def test_experiment_notebook_runs_a_tiny_experiment(tmp_path: Path, leak_check: None) -> None:
    tiny = {"host_counts": [2], "sizes": [128], "reps": 1, "warmup": 1, "results_root": str(tmp_path)}
    nb = run_notebook("01_run_experiment.ipynb", {"P4INA_NOTEBOOK_CONFIG": json.dumps(tiny)}, timeout=600)
    assert "vs best host" in _text(nb)
    assert any(p.joinpath("summary.json").exists() for p in tmp_path.iterdir())


def test_the_documented_front_end_opens_a_notebook(tmp_path: Path) -> None:
    """docs/notebooks.md's command: `jupyter nbconvert --execute` from the venv renders a notebook to HTML."""
    import subprocess
    import sys

    folder = fake_results_folder(tmp_path / "run")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "html",
            "--execute",
            str(NOTEBOOKS / "02_analyse_results.ipynb"),
            "--output-dir",
            str(tmp_path / "html"),
        ],
        cwd=REPO,
        env={**os.environ, "P4INA_RESULTS": str(folder)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    html = (tmp_path / "html" / "02_analyse_results.html").read_text()
    assert "vs best host" in html and "data:image/png;base64" in html
