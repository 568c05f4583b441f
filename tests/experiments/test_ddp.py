"""The DDP experiment: its plan and summary from rows (pure, each check shown able to fail), then PyTorch ranks
trained through the embedded switches in Mininet's namespaces against Gloo, and the notebook."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from experiments.config import ConfigError
from experiments.ddp import results as R
from experiments.ddp.results import DdpConfig, DdpResult, EvalRow, RunRow, StepRow
from tests.experiments.test_notebooks import run_notebook

N = 4
STEPS = 4
SMALL: dict[str, Any] = {
    "topology": "leaf-spine:2x1x2",
    "host_counts": [N],
    "methods": ["inc-int8", "ring"],
    "models": ["cnn"],
    "steps": {"cnn": STEPS},
    "seeds": 2,
    "loss_steps": 2,
    "eval_every": 2,
}
FINALS = {"exact": 0.90, "seed1": 0.91, "seed2": 0.89, "inc-int8": 0.905, "inc-int8+ef": 0.90, "ring": 0.90}


def fake(
    finals: dict[str, float] | None = None,
    off: tuple[str, int] | None = None,
    control_local_caught: bool = True,
    lossy_differs: bool = False,
) -> DdpResult:
    """Rows for every run of the small plan: identical digests (per run, step) unless told, made-up times."""
    cfg = DdpConfig.from_dict(SMALL)
    finals = {**FINALS, "control-scale": 0.2, "control-offset": 0.1, **(finals or {})}
    res = DdpResult(cfg)
    for spec in cfg.runs():
        variant = spec.run.split("/", 1)[1]
        lossless = variant.removesuffix("@loss")
        res.runs.append(RunRow(N, spec.run, "cnn", spec.method, spec.seed, spec.steps, wire_bytes=1000 * spec.steps))
        t = 10.0
        for step in range(1, spec.steps + 1):
            for rank in range(N):
                digest = f"{lossless}-{step}"
                if off == (variant, step) and rank == 2:
                    digest = "off"
                if variant == "control-local" and control_local_caught and rank == 1:
                    digest = "own"
                if lossy_differs and variant == "ring@loss" and step == 2:
                    digest = "lossy"
                ar = 0.02 + 0.001 * rank
                res.steps.append(
                    StepRow(
                        N, spec.run, rank, step, t, t + 0.05 + 0.001 * rank, ar, 1, 3818, 900, 0, 1.0, 5, 16, digest
                    )
                )
            t += 0.1
        final = finals.get(variant, 0.9)
        res.evals += [EvalRow(N, spec.run, 0, 2.3, 0.1), EvalRow(N, spec.run, spec.steps, 0.3, final)]
    return res


def test_the_plan_has_the_reference_seeds_methods_controls_and_lossy_runs() -> None:
    runs = [r.run for r in DdpConfig.from_dict(SMALL).runs()]
    assert runs == [
        "cnn/exact",
        "cnn/seed1",
        "cnn/seed2",
        "cnn/inc-int8",
        "cnn/inc-int8+ef",
        "cnn/ring",
        "cnn/control-scale",
        "cnn/control-offset",
        "cnn/control-local",
        "cnn/exact@loss",
        "cnn/inc-int8@loss",
        "cnn/ring@loss",
    ]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"ef_methods": ["ring"]}, "error feedback for ['ring']"),
        ({"host_counts": [3]}, "does not split evenly over 3 hosts"),
        ({"seeds": 0}, "at least one more exact run"),
        ({"shape": {"loss_pct": 1.0}}, "start the fabric without loss"),
    ],
)
def test_a_configuration_that_cannot_run_is_refused(change: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("[", r"\[").replace("]", r"\]")):
        DdpConfig.from_dict({**SMALL, **change})


def test_tolerance_follows_the_seed_spread_with_the_accuracy_floor() -> None:
    assert R.tolerance("lm", [3.0, 3.1, 2.9]) == pytest.approx(2 * 0.1)
    assert R.tolerance("cnn", [0.90, 0.91, 0.89]) == pytest.approx(0.02)  # 2 sd = 0.02, the floor: 2 points
    assert R.tolerance("cnn", [0.80, 0.90, 0.85]) == pytest.approx(0.1)
    assert math.isnan(R.tolerance("lm", [3.0]))


def test_a_consistent_run_is_ok_and_survives_the_folder(tmp_path: Path) -> None:
    res = fake()
    summary = R.summarize(res)
    assert summary["ok"], summary["problems"]
    m = summary["hosts"][str(N)]["cnn"]
    assert set(m["methods"]) == {"exact", "inc-int8", "inc-int8+ef", "ring"}
    assert m["control_scale"]["caught"] and m["control_offset"]["caught"] and m["control_local"]["caught"]
    assert all(s["same_bits_as_lossless"] for s in m["lossy"].values())
    s = m["methods"]["ring"]
    # every step: released at t, last rank done 53 ms later, the slowest hook 23 ms of it
    assert s["mean_step_s"] == pytest.approx(0.053) and s["mean_allreduce_s"] == pytest.approx(0.023)
    assert s["allreduce_share"] == pytest.approx(0.023 / 0.053) and s["wire_bytes_per_step"] == 1000
    res.out_dir = tmp_path / "run"
    R.write_all(res)
    again = R.load_results(res.out_dir)[1]
    assert json.dumps(R.jsonable(again), sort_keys=True) == json.dumps(R.jsonable(summary), sort_keys=True)
    assert (res.out_dir / "curves_cnn_n4.png").stat().st_size > 10_000
    assert "ok" in R.table(summary).splitlines()[-1]


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"off": ("ring", 3)}, "ring: ranks' parameters differ after step 3"),
        ({"finals": {"inc-int8": 0.85}}, "inc-int8: final test_acc 0.8500 is -0.0500 from the exact run's 0.9000"),
        ({"finals": {"control-scale": 0.9}}, "the mis-scaled hook stayed within the tolerance"),
        ({"finals": {"control-offset": 0.9}}, "the offset hook stayed within the tolerance"),
        ({"control_local_caught": False}, "a rank that dropped its result was not caught"),
        ({"lossy_differs": True}, "ring@loss: with loss, the parameters differ from the run without"),
    ],
)
def test_each_check_fails_when_its_condition_is_broken(kw: dict[str, Any], says: str) -> None:
    summary = R.summarize(fake(**kw))
    assert not summary["ok"]
    assert any(says in p for p in summary["problems"]), summary["problems"]


@pytest.mark.mininet
@pytest.mark.slow
def test_ddp_ranks_train_through_the_embedded_switches_and_match_gloo(tmp_path: Path, leak_check: None) -> None:
    """Two PyTorch processes, one in each emulated host's namespace, train the CNN with DDP through the hook: the
    in-network int32 job and the host ring, beside PyTorch's own Gloo all-reduce over the same links."""
    from experiments.ddp.run import run_ddp

    cfg = DdpConfig.from_dict(
        {
            **SMALL,
            "host_counts": [2],
            "methods": ["inc-int32", "ring"],
            "ef_methods": [],
            "steps": {"cnn": 40},  # enough to learn: the exact run far above the controls' chance level
            "seeds": 1,
            "loss_steps": 3,
            "eval_every": 20,
            "shape": {"bw_mbps": 20.0},
            "results_root": str(tmp_path),
        }
    )
    res = run_ddp(cfg)
    summary = R.summarize(res)
    assert summary["ok"], summary["problems"]
    m = summary["hosts"]["2"]["cnn"]
    for name in ("exact", "inc-int32", "ring"):
        s = m["methods"][name]
        assert s["steps"] == 40 and s["identical_every_step"], name
        assert s["mean_allreduce_s"] > 0 and s["wire_bytes_per_step"] > 0, name
    # in-network int32 lanes keep float32's precision: its model follows Gloo's to float32 rounding
    exact = [r.loss for r in res.steps if r.run == "cnn/exact" and r.rank == 0]
    inc = [r.loss for r in res.steps if r.run == "cnn/inc-int32" and r.rank == 0]
    assert inc == pytest.approx(exact, rel=1e-4)
    assert m["control_scale"]["caught"] and m["control_offset"]["caught"] and m["control_local"]["caught"]
    assert all(s["same_bits_as_lossless"] for s in m["lossy"].values())
    assert any(r.wire_link and r.wire_bytes > 0 for r in res.runs if r.method == "inc-int32")


@pytest.mark.mininet
@pytest.mark.slow
def test_pytorch_notebook_trains_a_short_run(tmp_path: Path, leak_check: None) -> None:
    # 40 steps: the CNN learns enough for the controls (at chance level) to fall outside the tolerance
    short = {"host_counts": [2], "methods": ["inc-int8", "ring"], "steps": {"cnn": 40}, "loss_steps": 3}
    short["results_root"] = str(tmp_path)
    nb = run_notebook("05_pytorch.ipynb", {"P4INA_NOTEBOOK_CONFIG": json.dumps(short)}, timeout=900)
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "final test accuracy" in text
    images = [
        o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if "image/png" in o.get("data", {})
    ]
    assert images, "the curves were not drawn"
