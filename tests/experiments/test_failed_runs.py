"""A run that fails before measuring says so in its folder, and readers skip it instead of failing on it."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from emulation.network import NetworkError
from experiments.allreduce import report
from experiments.allreduce import run as allreduce_run
from experiments.config import ExperimentConfig
from tests.experiments.fake_results import fake_results_folder


@contextmanager
def _network_that_fails(*_a: Any, **_kw: Any) -> Iterator[None]:
    raise NetworkError("s1 did not start (made up for the test)")
    yield


def test_a_run_that_fails_before_measuring_records_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allreduce_run, "emulated_fabric", _network_that_fails)
    cfg = ExperimentConfig(topology="fat-tree:2", host_counts=(2,), sizes=(64,), methods=("ring",), reps=1, warmup=0)
    out = tmp_path / "failed"
    with pytest.raises(NetworkError):
        allreduce_run.run_experiment(cfg, out_dir=out)
    meta = json.loads((out / "config.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert any("failed: NetworkError: s1 did not start" in p for p in meta["problems"]), meta["problems"]
    assert summary["ok"] is False and summary["problems"] == meta["problems"]
    assert not report.measured(out)


def test_the_newest_folder_that_measured_is_read_and_failed_ones_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    good = fake_results_folder(tmp_path / "results" / "2026-12-01_good")
    monkeypatch.setattr(allreduce_run, "emulated_fabric", _network_that_fails)
    cfg = ExperimentConfig(topology="fat-tree:2", host_counts=(2,), sizes=(64,), methods=("ring",), reps=1, warmup=0)
    failed = tmp_path / "results" / "2026-12-02_failed"
    with pytest.raises(NetworkError):
        allreduce_run.run_experiment(cfg, out_dir=failed)
    later = time.time() + 10
    os.utime(failed / "raw.csv", (later, later))  # the failed one is the newest
    assert report.newest_results(tmp_path / "results") == good
    assert any("skipping" in r.message and "measured nothing" in r.message for r in caplog.records)
    with pytest.raises(FileNotFoundError, match="no results folder with measurements"):
        report.newest_results(tmp_path / "empty")


def test_a_folder_that_is_not_a_results_folder_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(report.ResultsFolderError, match="raw.csv"):
        report.load_results(tmp_path)
    (tmp_path / "raw.csv").write_text("")
    with pytest.raises(report.ResultsFolderError, match="config.json: not valid JSON"):
        report.load_results(tmp_path)
