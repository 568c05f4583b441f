"""Ranks of torchddp.train as separate processes on loopback (no root): a stock DDP loop through the hook over the
host ring, against PyTorch's own Gloo all-reduce, with buckets that change in count and dtype."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hosts.coordination import CoordinatorServer
from tests.common import REPO
from tests.hosts.test_agent import free_base_ports
from torchddp import models
from torchddp.train import GLOO, Plan, RunSpec, rows_path

N = 2
STEPS = 6


def free_port() -> int:
    return free_base_ports(1)[0]


def train(tmp: Path, runs: list[RunSpec], n: int = N) -> tuple[dict[str, list[dict[str, Any]]], dict[int, Any]]:
    """Every run on n rank processes; rows by run (one per rank, in rank order), the ranks' final reports."""
    out = tmp / "rows"
    out.mkdir()
    with CoordinatorServer(f"unix:{tmp / 'c.sock'}", n, timeout_s=120) as server:
        plan = Plan(
            workers=n,
            coord=server.address,
            master=f"127.0.0.1:{free_port()}",
            out=str(out),
            peers=tuple(f"127.0.0.1:{p}" for p in free_base_ports(n)),
            runs=tuple(runs),
        )
        plan.save(tmp / "plan.json")
        cmd = [sys.executable, "-m", "torchddp", "rank", "--plan", str(tmp / "plan.json"), "--iface", "lo"]
        procs = [
            subprocess.Popen([*cmd, "--rank", str(r)], cwd=REPO, stderr=subprocess.PIPE, text=True) for r in range(n)
        ]
        try:
            logs = [p.communicate(timeout=240)[1] for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        reports = dict(server.reports)
    rows: dict[str, list[dict[str, Any]]] = {}
    for r in range(n):
        assert procs[r].returncode == 0, logs[r][-3000:]
        for line in rows_path(out, r).read_text().splitlines():
            row = json.loads(line)
            rows.setdefault(row["run"], []).append(row)
    return rows, reports


def digests(rows: list[dict[str, Any]]) -> list[set[str]]:
    return [{row["records"][k]["digest"] for row in rows} for k in range(len(rows[0]["records"]))]


@pytest.mark.slow
def test_ddp_through_the_ring_matches_gloo_and_keeps_ranks_identical(tmp_path: Path) -> None:
    cnn = models.default_config("cnn")
    small = 0.004  # MB: the CNN's 3.8K parameters in several buckets, rebuilt by DDP after its first step
    runs = [
        RunSpec("gloo", cnn, GLOO, steps=STEPS),
        RunSpec("ring", cnn, "ring", steps=STEPS, bucket_cap_mb=small),
        RunSpec("bf16", cnn, "ring-bf16", steps=STEPS, dtype="bfloat16", error_feedback=True, bucket_cap_mb=small),
        RunSpec("broken", cnn, "ring", steps=2, fault="keep-local", fault_rank=1),
    ]
    rows, reports = train(tmp_path, runs)
    assert reports == {r: {"rank": r, "ok": True} for r in range(N)}
    for run in ("gloo", "ring", "bf16"):
        assert all(len(d) == 1 for d in digests(rows[run])), f"{run}: ranks differ"
    assert [len(d) for d in digests(rows["broken"])] == [N, N], "a rank that kept its own gradient was not caught"
    ring = rows["ring"][0]["records"]
    # DDP's first step: one bucket (its first bucket takes up to 1 MB); then its rebuilt 4 KB buckets
    assert ring[0]["buckets"] == 1 and ring[-1]["buckets"] >= 3
    assert all(r["elements"] == models.parameter_count(cnn) for r in ring)
    # the float32 ring and Gloo sum two ranks' gradients: the same mean, to float32's rounding of the update
    gloo = rows["gloo"][0]["records"]
    for a, b in zip(gloo, ring):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    bf16 = rows["bf16"][0]["records"]
    assert bf16[-1]["loss"] == pytest.approx(gloo[-1]["loss"], rel=0.05)
    assert rows["gloo"][0]["evals"][-1]["step"] == STEPS  # rank 0 evaluated
