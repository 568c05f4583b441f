"""The PyTorch DDP experiment as data: configuration, the runs it plans, the rows they record, summary, plots.

`p4ina ddp` (experiments.ddp.run runs it) trains real PyTorch models (torchddp.models: a CNN on the digits, a
small transformer language model on Python's own sources) with a stock DDP loop whose gradient buckets go
through torchddp's communication hook, once per method, data-parallel over the emulated hosts, one PyTorch
process per host. Per host count and model it plans:

- the exact reference: PyTorch's own float32 all-reduce through Gloo ("gloo"), same seed and data order, and
  `seeds` more exact runs with other seeds (the seed spread: how much the seed alone moves the final metric);
- every method; the methods of `ef_methods` again with error feedback;
- the controls: the hook with a wrong scale, and one whose result is one element off (each must miss the
  tolerance where REQUIRED_CONTROLS says so), and a hook that drops one rank's result (that rank keeps its
  own gradient: the ranks' parameters must differ);
- with `loss_pct` > 0, every method and the reference again for `loss_steps` steps with that random loss on
  every link (reliable transports: the same bits as without loss, only slower; checked).

The checks that can fail (`summarize`): every rank's parameters bit-identical after every step of every run
but the dropping control; every method's final metric within the tolerance of the exact run's; the controls
caught; the lossy runs bit-identical to the lossless ones. The tolerance comes from the seed spread:
TOLERANCE_SIGMAS standard deviations of the exact run's final metric over its seeds (a difference the seed
alone makes about one run in twenty), and for the CNN's accuracy not below ACCURACY_FLOOR_PP (the test split's
own resolution: hosts.training.ACCURACY_TOLERANCE_PP says why 2 points).

No Mininet here: a results folder (config.json, runs.csv, steps.csv, evals.csv) is summarised by `summarize`
alone. Times are on the shared clock (hosts.clock): a step runs from its barrier's release to the last rank's
end of its update; its all-reduce time is the largest, over the ranks, of the time the hook spent in its
buckets' all-reduces, and compute the rest (forward, backward, update, and what the slowest rank waited for).
"""

from __future__ import annotations

import csv
import functools
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from experiments.config import ConfigError, ExperimentConfig
from experiments.plotting import STYLE, legend_outside, pyplot
from experiments.results import jsonable
from hosts.methods import METHODS
from hosts.training import ACCURACY_TOLERANCE_PP
from torchddp import models
from torchddp.hook import narrow
from torchddp.train import GLOO, RunSpec

DEFAULT_HOSTS = (4, 8)
DEFAULT_TOPOLOGY = "fat-tree:4"
DEFAULT_BW_MBPS = 10.0
ALL = ("inc-int32", "inc-int16", "inc-int8", "ring", "ring-bf16", "hier", "tree")
DEFAULT_STEPS = {"cnn": 150, "lm": 120}
SEEDS = 4  # extra exact runs
TOLERANCE_SIGMAS = 2.0
ACCURACY_FLOOR_PP = ACCURACY_TOLERANCE_PP
METRIC = {"cnn": ("test_acc", "test accuracy", +1), "lm": ("test_loss", "validation loss (nats/byte)", -1)}
EXACT, SEED, CONTROL_SCALE, CONTROL_LOCAL = "exact", "seed", "control-scale", "control-local"
CONTROL_OFFSET = "control-offset"
# The metric controls (broken hooks whose final metric must miss the tolerance), by model. A mis-scaled sum must
# miss it under SGD (the CNN: the step shrinks 128 times); AdamW divides each gradient by its own running RMS,
# so a constant scale cancels (up to its epsilon) and the LM trains as well with it: there it is reported, not
# required. The offset hook (each gradient on its neighbour's parameter) breaks training under either.
REQUIRED_CONTROLS = {"cnn": (CONTROL_SCALE, CONTROL_OFFSET), "lm": (CONTROL_OFFSET,)}


@dataclass(frozen=True)
class DdpConfig:
    """The fabric part is an ExperimentConfig (topology, hosts, methods, links); the rest is training."""

    fabric: ExperimentConfig = ExperimentConfig(
        topology=DEFAULT_TOPOLOGY, host_counts=DEFAULT_HOSTS, methods=ALL, sizes=(1,), reps=1, warmup=0, name="ddp"
    )
    models: tuple[str, ...] = models.MODELS
    steps: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_STEPS))
    eval_every: int = 10
    seeds: int = SEEDS
    ef_methods: tuple[str, ...] = ("inc-int8",)
    loss_pct: float = 1.0  # 0: no lossy runs
    loss_steps: int = 15
    controls: bool = True
    bucket_cap_mb: float = 25.0
    # a barrier no rank reaches for this long fails every rank (a rank that died without reporting)
    barrier_timeout_s: float = 600.0
    # one host count's runs may take this much per step (and a start-up allowance); longer, the ranks are
    # stopped. The slowest steps measured: about 4 s (a host method's step under 1% loss at 8 hosts)
    step_allowance_s: float = 10.0

    def __post_init__(self) -> None:
        for name in self.models:
            cfg = models.default_config(name)
            for n in self.fabric.host_counts:
                if cfg.batch % n:
                    raise ConfigError(f"{name}: global batch {cfg.batch} does not split evenly over {n} hosts")
            if self.steps.get(name, 0) < 1:
                raise ConfigError(f"steps of {name}: want >= 1, got {self.steps.get(name)}")
        bad = [m for m in self.ef_methods if m not in self.fabric.methods or not narrow(METHODS[m])]
        if bad:
            raise ConfigError(f"error feedback for {bad}: only narrow methods among --methods (int16, int8, bf16)")
        if self.seeds < 1:
            raise ConfigError(f"seeds {self.seeds}: the tolerance needs at least one more exact run (>= 1)")
        if not 0 <= self.loss_pct < 100 or self.loss_steps < 1 or self.eval_every < 1:
            raise ConfigError("loss_pct must be in [0, 100), loss_steps and eval_every >= 1")
        if self.fabric.shape.loss_pct:
            raise ConfigError("the lossy runs set their loss themselves (loss_pct): start the fabric without loss")

    def model(self, name: str) -> models.ModelConfig:
        return models.default_config(name)

    def runs(self) -> list[RunSpec]:
        """Every run of one host count, in order (the lossless ones first: the loss is set once, for the rest)."""
        out: list[RunSpec] = []
        seed = self.fabric.seed
        lossy: list[RunSpec] = []
        for name in self.models:
            cfg, steps = self.model(name), self.steps[name]

            spec = functools.partial(self._spec, name, cfg)
            out.append(spec(EXACT, GLOO))
            out += [spec(f"{SEED}{k}", GLOO, seed=seed + k) for k in range(1, self.seeds + 1)]
            for m in self.fabric.methods:
                out.append(spec(m, m))
                if m in self.ef_methods:
                    out.append(spec(f"{m}+ef", m, error_feedback=True))
            if self.controls:
                inc = next((m for m in self.fabric.methods if METHODS[m].in_network), self.fabric.methods[0])
                out.append(spec(CONTROL_SCALE, inc, fault="scale"))
                out.append(spec(CONTROL_OFFSET, inc, fault="offset"))
                out.append(spec(CONTROL_LOCAL, inc, fault="keep-local", fault_rank=1, steps=min(steps, 3)))
            if self.loss_pct:
                for m in (GLOO, *self.fabric.methods):
                    run = EXACT if m == GLOO else m
                    lossy.append(spec(f"{run}@loss", m, steps=min(steps, self.loss_steps), loss_pct=self.loss_pct))
        return out + lossy

    def _spec(self, name: str, cfg: models.ModelConfig, run: str, method: str, **kw: Any) -> RunSpec:
        base: dict[str, Any] = dict(
            seed=self.fabric.seed, steps=self.steps[name], eval_every=self.eval_every, bucket_cap_mb=self.bucket_cap_mb
        )
        base.update(kw)
        return RunSpec(f"{name}/{run}", cfg, method, **base)

    def timeout_s(self) -> float:
        """How long one host count's runs may take."""
        return 300.0 + self.step_allowance_s * sum(r.steps for r in self.runs())

    def total_steps(self) -> int:
        return len(self.fabric.host_counts) * sum(r.steps for r in self.runs())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fabric"] = self.fabric.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DdpConfig:
        """Either {"fabric": {...}, ...} (config.json) or flat ExperimentConfig and DdpConfig fields."""
        own = {f.name for f in fields(cls)} - {"fabric"}
        fabric_d = dict(d.get("fabric") or {k: v for k, v in d.items() if k not in own})
        defaults = cls.__dataclass_fields__["fabric"].default
        assert isinstance(defaults, ExperimentConfig)
        fabric = ExperimentConfig.from_dict({**defaults.to_dict(), **fabric_d})
        kw = {k: v for k, v in d.items() if k in own}
        for key in ("models", "ef_methods"):
            if key in kw:
                kw[key] = tuple(kw[key])
        if "steps" in kw:
            kw["steps"] = {**DEFAULT_STEPS, **{k: int(v) for k, v in dict(kw["steps"]).items()}}
        return cls(fabric=fabric, **kw)


# -- rows ------------------------------------------------------------------------------------------------------
@dataclass
class RunRow:
    """One run on one host count, as the runner saw it (the link counters bracket its steps)."""

    hosts: int
    run: str  # model/variant
    model: str
    method: str
    seed: int
    steps: int
    error_feedback: bool = False
    fault: str = ""
    loss_pct: float = 0.0
    parameters: int = 0
    wire_bytes: int = 0  # on the busiest link, over the run's steps
    wire_link: str = ""
    t_wire_s: float = 0.0
    duration_s: float = 0.0  # from the run's start barrier to its end barrier
    cores_busy: float = float("nan")
    error: str = ""


@dataclass
class StepRow:
    """One rank's record of one step (torchddp.train)."""

    hosts: int
    run: str
    rank: int
    step: int
    t_release: float
    t_end: float
    allreduce_s: float
    buckets: int
    elements: int
    bytes_sent: int
    retransmissions: int
    loss: float
    correct: int
    total: int
    digest: str


@dataclass
class EvalRow:
    hosts: int
    run: str
    step: int
    test_loss: float
    test_acc: float


@dataclass
class DdpResult:
    config: DdpConfig
    runs: list[RunRow] = field(default_factory=list)
    steps: list[StepRow] = field(default_factory=list)
    evals: list[EvalRow] = field(default_factory=list)
    out_dir: Path | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    startup_s: float | None = None


def _write_rows(path: Path, rows: Sequence[Any], cls: type) -> None:
    names = [f.name for f in fields(cls)]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(names)
        for r in rows:
            w.writerow([getattr(r, n) for n in names])


def _read_rows(path: Path, cls: type) -> list[Any]:
    types = {f.name: f.type for f in fields(cls)}
    conv = {"int": int, "float": float, "str": str, "bool": lambda s: s == "True"}
    out = []
    with path.open() as f:
        for row in csv.DictReader(f):
            out.append(cls(**{k: conv[str(types[k])](v) for k, v in row.items() if k in types}))
    return out


def write_all(result: DdpResult) -> None:
    out = result.out_dir
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(
        json.dumps(
            jsonable(
                {
                    "config": result.config.to_dict(),
                    "environment": result.environment,
                    "problems": result.problems,
                    "duration_s": result.duration_s,
                    "startup_s": result.startup_s,
                }
            ),
            indent=1,
        )
    )
    _write_rows(out / "runs.csv", result.runs, RunRow)
    _write_rows(out / "steps.csv", result.steps, StepRow)
    _write_rows(out / "evals.csv", result.evals, EvalRow)
    summary = summarize(result)
    (out / "summary.json").write_text(json.dumps(jsonable(summary), indent=1))
    for n in result.config.fabric.host_counts:
        for name in result.config.models:
            if any(r.hosts == n and r.model == name for r in result.runs):
                plot_curves(result, n, name, out / f"curves_{name}_n{n}.png")


def load_results(folder: Path) -> tuple[DdpResult, dict[str, Any]]:
    meta = json.loads((folder / "config.json").read_text())
    result = DdpResult(
        DdpConfig.from_dict(meta["config"]),
        _read_rows(folder / "runs.csv", RunRow),
        _read_rows(folder / "steps.csv", StepRow),
        _read_rows(folder / "evals.csv", EvalRow),
        out_dir=folder,
        environment=meta.get("environment", {}),
        problems=list(meta.get("problems", [])),
        duration_s=float(meta.get("duration_s") or 0.0),
        startup_s=meta.get("startup_s"),
    )
    return result, summarize(result)


# -- summary ---------------------------------------------------------------------------------------------------
def _final(evals: Iterable[EvalRow], model: str) -> float:
    rows = sorted(evals, key=lambda e: e.step)
    if not rows:
        return float("nan")
    return float(getattr(rows[-1], METRIC[model][0]))


def tolerance(model: str, finals: Sequence[float]) -> float:
    """TOLERANCE_SIGMAS sample standard deviations of the exact runs' final metric over their seeds; for the
    CNN's accuracy at least ACCURACY_FLOOR_PP points (the test split's resolution)."""
    good = [v for v in finals if math.isfinite(v)]
    sigma = statistics.stdev(good) if len(good) >= 2 else float("nan")
    tol = TOLERANCE_SIGMAS * sigma
    if model == "cnn":
        tol = max(tol, ACCURACY_FLOOR_PP / 100.0) if math.isfinite(tol) else ACCURACY_FLOOR_PP / 100.0
    return tol


def step_times(steps: Sequence[StepRow]) -> dict[str, float]:
    """Per step: release to the last rank's end; its all-reduce the slowest rank's hook time; compute the rest."""
    by_step: dict[int, list[StepRow]] = defaultdict(list)
    for r in steps:
        by_step[r.step].append(r)
    wall = ar = 0.0
    walls = []
    for rows in by_step.values():
        w = max(r.t_end for r in rows) - rows[0].t_release
        walls.append(w)
        wall += w
        ar += min(w, max(r.allreduce_s for r in rows))
    k = max(1, len(by_step))
    return {
        "steps": len(by_step),
        "wall_s": wall,
        "mean_step_s": wall / k,
        # a process's first DDP step can take seconds (the Gloo reference's, as its first run): the median shows it
        "median_step_s": statistics.median(walls) if walls else float("nan"),
        "mean_allreduce_s": ar / k,
        "mean_compute_s": (wall - ar) / k,
        "allreduce_share": ar / wall if wall > 0 else float("nan"),
        "steps_per_s": len(by_step) / wall if wall > 0 else float("nan"),
        "buckets_per_step": statistics.mean(r.buckets for rs in by_step.values() for r in rs) if by_step else 0.0,
        "retransmissions": sum(r.retransmissions for rs in by_step.values() for r in rs),
    }


def identical(steps: Sequence[StepRow], n: int) -> tuple[bool, int | None]:
    """(every step has n rows and one digest, the first step where ranks differ or one is missing)."""
    by_step: dict[int, set[str]] = defaultdict(set)
    count: dict[int, int] = defaultdict(int)
    for r in steps:
        by_step[r.step].add(r.digest)
        count[r.step] += 1
    bad = sorted(s for s in by_step if len(by_step[s]) > 1 or count[s] != n)
    return (not bad and bool(by_step)), (bad[0] if bad else None)


def summarize(result: DdpResult) -> dict[str, Any]:
    cfg = result.config
    steps_by: dict[tuple[int, str], list[StepRow]] = defaultdict(list)
    for s in result.steps:
        steps_by[(s.hosts, s.run)].append(s)
    evals_by: dict[tuple[int, str], list[EvalRow]] = defaultdict(list)
    for e in result.evals:
        evals_by[(e.hosts, e.run)].append(e)
    problems = list(result.problems)
    out: dict[str, Any] = {"hosts": {}, "problems": problems}
    for n in cfg.fabric.host_counts:
        entry: dict[str, Any] = {}
        for name in cfg.models:
            key, label, _sign = METRIC[name]
            runs = {r.run.split("/", 1)[1]: r for r in result.runs if r.hosts == n and r.model == name}
            if not runs:
                continue

            def final(variant: str) -> float:
                return _final(evals_by[(n, f"{name}/{variant}")], name)  # noqa: B023

            exact = final(EXACT)
            seeds = [exact] + [final(f"{SEED}{k}") for k in range(1, cfg.seeds + 1)]
            tol = tolerance(name, seeds)
            good_seeds = [v for v in seeds if math.isfinite(v)]
            m_entry: dict[str, Any] = {
                "metric": key,
                "label": label,
                "exact": exact,
                "seed_finals": seeds,
                "seed_sd": statistics.stdev(good_seeds) if len(good_seeds) >= 2 else float("nan"),
                "tolerance": tol,
                "methods": {},
                "lossy": {},
            }
            for variant, row in runs.items():
                rows = steps_by[(n, row.run)]
                same, first_bad = identical(rows, n)
                times = step_times(rows)
                s: dict[str, Any] = {
                    "method": row.method,
                    "final": final(variant),
                    "identical_every_step": same,
                    "diverged_at": first_bad,
                    "wire_bytes_per_step": row.wire_bytes / max(1, times["steps"]),
                    "wire_link": row.wire_link,
                    # the busiest link's bytes at the link rate, per step: the all-reduce's bound (experiments.bounds)
                    "t_wire_per_step_s": row.t_wire_s / max(1, times["steps"]),
                    "error": row.error,
                    **times,
                }
                s["delta"] = s["final"] - exact
                s["allreduce_over_wire"] = (
                    s["mean_allreduce_s"] / s["t_wire_per_step_s"] if s["t_wire_per_step_s"] > 0 else float("nan")
                )
                if row.error:
                    problems.append(f"{n} hosts, {row.run}: {row.error}")
                if variant.endswith("@loss"):
                    base = steps_by[(n, f"{name}/{variant.removesuffix('@loss')}")]
                    want = {(r.step, r.rank): r.digest for r in base}
                    got = {(r.step, r.rank): r.digest for r in rows}
                    s["same_bits_as_lossless"] = bool(got) and all(want.get(k) == d for k, d in got.items())
                    if not s["same_bits_as_lossless"]:
                        problems.append(f"{n} hosts, {row.run}: with loss, the parameters differ from the run without")
                    m_entry["lossy"][variant.removesuffix("@loss")] = s
                    continue
                if variant == CONTROL_LOCAL:
                    s["caught"] = not same
                    m_entry["control_local"] = s
                    if same:
                        problems.append(f"{n} hosts, {row.run}: a rank that dropped its result was not caught")
                    continue
                s["within_tolerance"] = math.isfinite(s["delta"]) and abs(s["delta"]) <= tol
                if variant in (CONTROL_SCALE, CONTROL_OFFSET):
                    s["caught"] = not s["within_tolerance"]
                    s["required"] = variant in REQUIRED_CONTROLS[name]
                    m_entry[variant.replace("-", "_")] = s
                    if s["required"] and not s["caught"]:
                        what = "mis-scaled" if variant == CONTROL_SCALE else "offset"
                        problems.append(f"{n} hosts, {row.run}: the {what} hook stayed within the tolerance")
                    continue
                if not same:
                    problems.append(f"{n} hosts, {row.run}: ranks' parameters differ after step {first_bad}")
                if variant.startswith(SEED):
                    continue
                if not s["within_tolerance"]:
                    problems.append(
                        f"{n} hosts, {row.run}: final {key} {s['final']:.4f} is {s['delta']:+.4f} from the exact "
                        f"run's {exact:.4f}, beyond the tolerance {tol:.4f}"
                    )
                m_entry["methods"][variant] = s
            entry[name] = m_entry
        out["hosts"][str(n)] = entry
    out["ok"] = not problems
    return out


def table(summary: Mapping[str, Any]) -> str:
    lines = []
    for n, entry in summary["hosts"].items():
        for name, m in entry.items():
            lines.append(
                f"\n{n} hosts, {name}: final {m['label']}, exact {m['exact']:.4f}, seed sd {m['seed_sd']:.4f}, "
                f"tolerance +-{m['tolerance']:.4f}"
            )
            lines.append(
                f"{'method':16} {'final':>8} {'delta':>8} {'ok':>3} {'same':>4} {'steps/s':>8} {'step ms':>8} "
                f"{'AR ms':>8} {'AR %':>5} {'link B/step':>11} {'AR/wire':>7} | "
                f"{'1% loss: steps/s':>16} {'AR %':>5} {'resent':>6}"
            )
            for variant, s in m["methods"].items():
                lossy = m["lossy"].get(variant) or (m["lossy"].get(EXACT) if variant == EXACT else None)
                tail = (
                    f"{lossy['steps_per_s']:16.2f} {100 * lossy['allreduce_share']:5.0f} {lossy['retransmissions']:6d}"
                    if lossy
                    else ""
                )
                lines.append(
                    f"{variant:16} {s['final']:8.4f} {s['delta']:+8.4f} {'y' if s['within_tolerance'] else 'N':>3} "
                    f"{'y' if s['identical_every_step'] else 'N':>4} {s['steps_per_s']:8.2f} "
                    f"{1e3 * s['mean_step_s']:8.1f} {1e3 * s['mean_allreduce_s']:8.1f} "
                    f"{100 * s['allreduce_share']:5.0f} {s['wire_bytes_per_step']:11.0f} "
                    f"{s['allreduce_over_wire']:7.2f} | {tail}"
                )
            for c in ("control_scale", "control_offset", "control_local"):
                if c in m:
                    need = "" if m[c].get("required", True) else " (not required: AdamW cancels a scale)"
                    lines.append(f"{c:16} final {m[c]['final']:.4f}, caught: {m[c]['caught']}{need}")
    lines.append("\nok" if summary["ok"] else "\nPROBLEMS:\n" + "\n".join(summary["problems"]))
    return "\n".join(lines)


def _style(variant: str) -> tuple[str, str]:
    if variant in (EXACT, "gloo"):
        return "black", ":"
    base = variant.removesuffix("+ef")
    color, _marker, line = STYLE.get(base, ("grey", "o", "-"))
    return color, ("-." if variant.endswith("+ef") else line)


def plot_curves(result: DdpResult, hosts: int, model: str, path: Path | None = None) -> Any:
    """Training loss (mean over ranks) against step and against wall time, per method, the exact run dotted and
    its seeds' range shaded."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    by_run: dict[str, dict[int, list[StepRow]]] = defaultdict(lambda: defaultdict(list))
    for s in result.steps:
        if s.hosts == hosts and s.run.startswith(f"{model}/") and "@" not in s.run and "control" not in s.run:
            by_run[s.run.split("/", 1)[1]][s.step].append(s)

    def smooth(v: list[float], k: int = 5) -> list[float]:
        return [statistics.mean(v[max(0, i - k + 1) : i + 1]) for i in range(len(v))]

    seeds = [v for v in by_run if v.startswith(SEED)]
    if seeds:
        curves = [[statistics.mean(r.loss for r in by_run[v][k]) for k in sorted(by_run[v])] for v in seeds + [EXACT]]
        length = min(len(c) for c in curves)
        lo = [min(smooth(c)[i] for c in curves) for i in range(length)]
        hi = [max(smooth(c)[i] for c in curves) for i in range(length)]
        axes[0].fill_between(range(1, length + 1), lo, hi, color="grey", alpha=0.25, label="exact, seed range")
    for variant, per_step in by_run.items():
        if variant.startswith(SEED):
            continue
        ks = sorted(per_step)
        loss = smooth([statistics.mean(r.loss for r in per_step[k]) for k in ks])
        wall, t = [], 0.0
        for k in ks:
            t += max(r.t_end for r in per_step[k]) - per_step[k][0].t_release
            wall.append(t)
        color, line = _style(variant)
        label = "exact (Gloo float32)" if variant == EXACT else variant
        axes[0].plot(ks, loss, color=color, linestyle=line, label=label)
        axes[1].plot(wall, loss, color=color, linestyle=line, label=label)
    axes[0].set_xlabel("step")
    axes[1].set_xlabel("wall time of the steps (s)")
    for ax in axes:
        ax.set_ylabel("training loss (5-step mean)")
        ax.grid(alpha=0.3)
    axes[0].set_title(f"{model}, {hosts} hosts: loss per step")
    axes[1].set_title("loss against wall time")
    legend_outside(axes[1])
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
    return fig


def with_fabric(config: DdpConfig, **changes: Any) -> DdpConfig:
    return replace(config, fabric=replace(config.fabric, **changes))
