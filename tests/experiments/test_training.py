"""The training experiment: its summary from rows (pure), then end to end in Mininet (CLI and notebook)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.config import ExperimentConfig
from experiments.results import jsonable
from experiments.train import results as training
from experiments.train.results import CONTROL, EXACT, EvalRow, RankStep, RunRow, TrainingConfig, TrainingResult
from hosts.training import TrainConfig
from tests.common import REPO
from tests.experiments.test_notebooks import run_notebook

N = 4


def fake_result(
    *, digest_off_at: int | None = None, accs: dict[str, float] | None = None, control_acc: float = 0.2
) -> TrainingResult:
    """Two methods, 4 ranks, 3 steps with made-up but consistent times; evaluations at steps 0 and 3."""
    cfg = TrainingConfig.make(
        ExperimentConfig(topology="leaf-spine:2x1x2", host_counts=(N,), methods=("inc-int8", "ring")),
        TrainConfig(steps=3, eval_every=3),
    )
    accs = accs or {"inc-int8": 0.95, "ring": 0.96}
    res = TrainingResult(cfg)
    for m in ("inc-int8", "ring"):
        t = 100.0
        for step in (1, 2, 3):
            release = t + 0.010  # 10 ms of gradient (+ barrier)
            for r in range(N):
                digest = "bad" if (digest_off_at == step and r == 2 and m == "ring") else f"d{step}"
                # rank r's all-reduce ends 40 + r ms after the release; 2 ms of update after it returns
                done = release + 0.040 + r * 1e-3
                res.ranks.append(
                    RankStep(
                        N,
                        m,
                        step,
                        r,
                        t_begin=t,
                        t_ready=t + 0.004 + r * 1e-3,
                        t_release=release,
                        t_done=done,
                        t_back=done,
                        t_end=done + 0.002,
                        loss=1.0 / step,
                        correct=10,
                        digest=digest,
                        sum_digest=f"s{step}",
                    )
                )
            t = release + 0.050  # the next step starts 50 ms after this release
        res.runs.append(
            RunRow(
                N,
                m,
                steps=3,
                t_end_release=t + 0.010 - 0.004,
                wire_bytes=30000,
                t_wire_s=0.12,
                t_path_s=0.001,
                cores_busy=0.5,
                ours_busy=0.45,
            )
        )
        res.evals += [
            EvalRow(N, m, "emulation", 0, 0, 2.3, 2.3, 0.1),
            EvalRow(N, m, "emulation", 0, 3, 0.1, 0.12, accs[m]),
        ]
    res.evals += [
        EvalRow(N, EXACT, EXACT, 0, 0, 2.3, 2.3, 0.1),
        EvalRow(N, EXACT, EXACT, 0, 3, 0.1, 0.12, 0.96),
        EvalRow(N, "exact x 0.0078125", CONTROL, 0, 3, 2.0, 2.0, control_acc),
    ]
    return res


def test_the_time_split_adds_up_to_the_step() -> None:
    res = fake_result()
    run = res.runs[1]
    table = training.step_table([r for r in res.ranks if r.method == "ring"], run)
    assert [t["step"] for t in table] == [1, 2, 3]
    # the critical path: rank 3 arrives last at every barrier; its update (2 ms) and its next gradient (7 ms)
    assert [t["compute_s"] for t in table] == pytest.approx([0.009, 0.009, 0.002])
    for t in table:
        assert t["allreduce_s"] == pytest.approx(0.043) == t["allreduce_slowest_s"]  # release to rank 3's sum
        assert t["other_s"] >= 0 and t["compute_s"] + t["allreduce_s"] + t["other_s"] == pytest.approx(t["step_s"])
    assert table[0]["step_s"] == pytest.approx(0.060) and table[-1]["step_s"] == pytest.approx(
        0.056
    )  # last: to the end barrier
    assert table[-1]["wall_s"] == pytest.approx(sum(t["step_s"] for t in table))
    s = training.summarize(res)
    ring = s["hosts"]["4"]["methods"]["ring"]
    assert ring["steps_per_s"] == pytest.approx(3 / table[-1]["wall_s"])
    assert ring["wire_bytes_per_step"] == 10000 and ring["bound"] == "link"  # 43 ms against 40 ms of wire per step
    assert s["ok"], s["problems"]
    assert "ok" in training.table(s) and "caught" in training.table(s)


def test_a_rank_that_differs_fails_the_summary() -> None:
    s = training.summarize(fake_result(digest_off_at=2))
    ring = s["hosts"]["4"]["methods"]["ring"]
    assert not s["ok"] and not ring["ok"] and not ring["identical_every_step"]
    assert any("differ after step 2" in p for p in s["problems"])


def test_accuracy_outside_the_tolerance_fails_and_an_uncaught_control_fails_too() -> None:
    s = training.summarize(fake_result(accs={"inc-int8": 0.93, "ring": 0.96}))
    assert not s["ok"] and not s["hosts"]["4"]["methods"]["inc-int8"]["within_tolerance"]
    assert "MISS" in training.table(s)
    s = training.summarize(fake_result(control_acc=0.95))  # a control the check lets through: the check is useless
    assert not s["ok"] and not s["hosts"]["4"]["control"]["caught"]
    assert any("cannot tell a broken all-reduce" in p for p in s["problems"])


def test_a_results_folder_round_trips(tmp_path: Path) -> None:
    res = fake_result()
    res.out_dir = tmp_path / "run"
    training.write_all(res)
    for name in (
        "config.json",
        "raw.csv",
        "evals.csv",
        "runs.csv",
        "steps.csv",
        "summary.json",
        "table.txt",
        "training.png",
        "step_times.png",
        "accuracy.png",
    ):
        assert (res.out_dir / name).exists(), name
    again, summary = training.load_results(res.out_dir)
    assert again.ranks == res.ranks and again.evals == res.evals and again.runs == res.runs
    assert json.loads((res.out_dir / "summary.json").read_text())["hosts"] == jsonable(summary)["hosts"]


def test_the_reference_runs_are_the_exact_run_the_control_and_the_seeds() -> None:
    cfg = TrainingConfig.make(ExperimentConfig(host_counts=(N,)), TrainConfig(steps=40, eval_every=20), seed_spread=2)
    rows = training.reference_evals(cfg, N)
    kinds = {(e.kind, e.seed) for e in rows}
    assert kinds == {(EXACT, 0), (CONTROL, 0), ("seed", 1), ("seed", 2)}
    exact = max((e for e in rows if e.kind == EXACT), key=lambda e: e.step)
    control = max((e for e in rows if e.kind == CONTROL), key=lambda e: e.step)
    assert exact.step == 40 and exact.test_acc > control.test_acc + 0.2


def test_the_flat_notebook_settings_make_a_configuration() -> None:
    cfg = TrainingConfig.from_dict(
        {
            "topology": "leaf-spine:2x1x2",
            "host_counts": [4],
            "methods": ["ring"],
            "shape": {"bw_mbps": 5.0},
            "steps": 60,
            "seed": 3,
            "tolerance_pp": 3.0,
        }
    )
    assert cfg.fabric.host_counts == (4,) and cfg.fabric.methods == ("ring",) and cfg.fabric.shape.bw_mbps == 5.0
    assert cfg.train.steps == 60 and cfg.train.seed == 3 and cfg.tolerance_pp == 3.0
    assert cfg.fabric.sizes == (cfg.elements,) == (2410,)
    assert TrainingConfig.from_dict(cfg.to_dict()) == cfg


# -- in Mininet ---------------------------------------------------------------------------------------
@pytest.mark.mininet
def test_cli_trains_through_the_fabric_like_the_exact_run(tmp_path: Path, leak_check: None) -> None:
    """leaf-spine 2x1x2, 4 hosts: in-network int32 and int8 lanes and the ring, 40 steps each, every check."""
    cmd = [
        sys.executable,
        "-m",
        "p4ina",
        "train",
        "--topology",
        "leaf-spine:2x1x2",
        "--hosts",
        "4",
        "--methods",
        "inc-int32,inc-int8,ring",
        "--steps",
        "40",
        "--segment",
        "15",
        "--bw",
        "20",
        "--switch",
        "embedded",
        "--out",
        str(tmp_path),
        "--no-progress",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "control caught" in done.stdout
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    result, summary = training.load_results(folder)
    assert summary["ok"], summary["problems"]
    entry = summary["hosts"]["4"]
    for m, s in entry["methods"].items():
        assert s["steps"] == 40 and s["identical_every_step"] and s["within_tolerance"], (m, s)
        assert s["mean_allreduce_s"] > 0 and s["mean_compute_s"] > 0 and s["steps_per_s"] > 0
        assert math.isclose(s["mean_step_s"], s["mean_compute_s"] + s["mean_allreduce_s"] + s["mean_other_s"])
    assert entry["control"]["caught"]
    # int8 lanes put about a quarter of int32's bytes on the busiest link
    assert (
        entry["methods"]["inc-int8"]["wire_bytes_per_step"] < 0.4 * entry["methods"]["inc-int32"]["wire_bytes_per_step"]
    )
    # 4 ranks x 40 steps per method; the checker's snapshots every 10 steps evaluated, and step 0
    assert len([r for r in result.ranks if r.method == "ring"]) == 160
    assert sorted(e.step for e in result.evals if e.method == "ring") == [0, 10, 20, 30, 40]
    env = json.loads((folder / "config.json").read_text())["environment"]
    assert env["packages"]["scikit-learn"] and env["backend"]["name"] == "embedded"


@pytest.mark.mininet
def test_training_notebook_runs_a_short_training(tmp_path: Path, leak_check: None) -> None:
    short = {
        "methods": ["inc-int16", "ring-bf16"],
        "steps": 30,
        "shape": {"bw_mbps": 20.0},
        "results_root": str(tmp_path),
    }
    nb = run_notebook("03_training.ipynb", {"P4INA_NOTEBOOK_CONFIG": json.dumps(short)}, timeout=600)
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "control caught" in text and "steps/s" in text
    images = [
        o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if "image/png" in o.get("data", {})
    ]
    assert len(images) >= 3
    assert any(p.joinpath("summary.json").exists() for p in tmp_path.iterdir())


def test_the_training_plot_shows_every_step_and_plain_labels() -> None:
    """The accuracy axis starts where the data does (the first evaluation, near chance), not at 50% with the
    early steps cut off; the log loss axes read 0.1, 1, 2, not 10^-1; one legend for the three panels, above."""
    fig = training.plot_training(fake_result(), N)
    loss, _wall, acc = fig.axes
    assert acc.get_ylim()[0] <= 10.0 <= acc.get_ylim()[1]  # step 0's 10% is on the plot
    fig.canvas.draw()
    labels = [t.get_text() for ax in (loss, _wall) for t in ax.yaxis.get_ticklabels(which="both") if t.get_text()]
    assert labels and not any("^" in x or "$" in x for x in labels) and "1" in labels
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    legend = fig.legends[0].get_window_extent()
    assert all(legend.y0 >= ax.get_window_extent().y1 for ax in fig.axes)  # above the panels, off the data
