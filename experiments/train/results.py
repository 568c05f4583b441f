"""The training experiment as data: configuration, the rows a run records, the summary, the table and plots.

`p4ina train` (experiments.train.run runs it)
trains hosts.training's MLP on the digits with every chosen all-reduce method
through the emulated fabric, and checks three things that can fail:

1. every rank holds bit-identical parameters after every step (each rank
   reports a digest of its float64 parameters per step; they are compared);
2. each method's final test accuracy is within `tolerance_pp` percentage
   points of the exact run's (hosts.training.ACCURACY_TOLERANCE_PP says why
   2), the exact run being the same training with a float64 all-reduce in one
   process, same seed and data order;
3. the check itself has teeth: a control run whose all-reduce is the exact
   sum times a wrong scale (hosts.training.mis_scaled) must miss the
   tolerance, or the summary fails.

No Mininet here: a results folder (config.json, raw.csv with one row per rank
and step, evals.csv, runs.csv) is summarised by `summarize` alone, so it can
be re-analysed anywhere. Times are on the shared clock (hosts.clock):

- step time: from one step's barrier release to the next's (the last step
  ends at a barrier after it), so the steps of a run add up to its wall time;
- its split follows the critical path (step_table): the rank whose arrival
  released the next step spent it in its all-reduce (from the release to its
  float32 sum), its update and the next gradient (compute); "other" is the
  rest: a host method's tail after its sum is complete (the ring returns once
  its last datagrams are acknowledged), the coordinator's round trip, the
  runner's segment hand-over;
- the slowest rank's all-reduce (release to the last sum, as the measurement
  experiment times it) is reported beside it and decides the bound.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from experiments import bounds
from experiments.config import ConfigError, ExperimentConfig
from experiments.plotting import STYLE, legend_outside, plain_log, pyplot
from experiments.results import jsonable
from hosts.methods import METHODS
from hosts.training import ACCURACY_TOLERANCE_PP, BROKEN_SCALE, MLP, TrainConfig, within_tolerance

LOG = logging.getLogger(__name__)

DIGITS_FEATURES, DIGITS_CLASSES = 64, 10  # load_digits: 8x8 pixels, ten classes (hosts.training checks)
DEFAULT_TRAIN_HOSTS = (8,)
DEFAULT_TRAIN_TOPOLOGY = "fat-tree:4"
SEGMENT = 25  # steps per agent command: the runner checks digests and shows progress between segments
SEED_SPREAD = 4  # extra exact runs with seeds seed+1 .. seed+4: how much the seed alone moves the accuracy
EXACT, CONTROL, SEED = "exact", "control", "seed"
STALL_FACTOR = 10.0


def model_size(train: TrainConfig) -> int:
    """Parameters (= float32 elements per all-reduce) of the model the configuration trains."""
    return MLP(DIGITS_FEATURES, train.hidden, DIGITS_CLASSES).size


@dataclass(frozen=True)
class TrainingConfig:
    """The fabric part (topology, hosts, methods, links, back end) is an ExperimentConfig; the rest is training."""

    fabric: ExperimentConfig = ExperimentConfig(
        topology=DEFAULT_TRAIN_TOPOLOGY,
        host_counts=DEFAULT_TRAIN_HOSTS,
        sizes=(model_size(TrainConfig()),),
        reps=1,
        warmup=0,
        name="train",
    )
    train: TrainConfig = TrainConfig()
    segment: int = SEGMENT
    tolerance_pp: float = ACCURACY_TOLERANCE_PP
    control_scale: float = BROKEN_SCALE
    seed_spread: int = SEED_SPREAD

    def __post_init__(self) -> None:
        for n in self.fabric.host_counts:
            if self.train.batch % n:
                raise ConfigError(f"global batch {self.train.batch} does not split evenly over {n} hosts")
        a2a = [m for m in self.fabric.methods if METHODS[m].alltoall]
        if a2a:
            raise ConfigError(f"methods {', '.join(a2a)}: an all-to-all sums no gradient; train with an all-reduce")
        if self.segment < 1:
            raise ConfigError(f"segment {self.segment} must be >= 1 step")
        if not self.tolerance_pp > 0:
            raise ConfigError(f"tolerance {self.tolerance_pp} must be > 0 percentage points")
        if self.seed_spread < 0:
            raise ConfigError(f"seed_spread {self.seed_spread} must be >= 0")
        if self.fabric.sizes != (model_size(self.train),):
            raise ConfigError(
                f"fabric sizes {self.fabric.sizes}: the all-reduce is the model, "
                f"{model_size(self.train)} elements (use TrainingConfig.make)"
            )

    @classmethod
    def make(
        cls, fabric: ExperimentConfig | None = None, train: TrainConfig | None = None, **kw: Any
    ) -> TrainingConfig:
        """A configuration whose fabric's size is the model's (the one thing the two parts share)."""
        train = train or TrainConfig()
        fabric = fabric or cls.__dataclass_fields__["fabric"].default  # type: ignore[assignment]
        assert isinstance(fabric, ExperimentConfig)
        fabric = replace(fabric, sizes=(model_size(train),), reps=1, warmup=0)
        return cls(fabric=fabric, train=train, **kw)

    @property
    def elements(self) -> int:
        return model_size(self.train)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fabric": self.fabric.to_dict(),
            "train": self.train.to_dict(),
            "segment": self.segment,
            "tolerance_pp": self.tolerance_pp,
            "control_scale": self.control_scale,
            "seed_spread": self.seed_spread,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainingConfig:
        """Also takes a flat dict (the notebook's): ExperimentConfig fields, TrainConfig fields, and ours."""
        if "fabric" in d or "train" in d:
            fab, tr = d.get("fabric", {}), d.get("train", {})
            rest = {k: v for k, v in d.items() if k not in ("fabric", "train")}
        else:
            fab_keys = {f.name for f in fields(ExperimentConfig)}
            tr_keys = {f.name for f in fields(TrainConfig)}
            fab = {k: v for k, v in d.items() if k in fab_keys and k != "seed"}
            tr = {k: v for k, v in d.items() if k in tr_keys}
            rest = {k: v for k, v in d.items() if k not in fab_keys | tr_keys}
        base = ExperimentConfig(topology=DEFAULT_TRAIN_TOPOLOGY, host_counts=DEFAULT_TRAIN_HOSTS, name="train")
        fabric = ExperimentConfig.from_dict({**base.to_dict(), **fab})
        train = TrainConfig.from_dict(tr)
        return cls.make(fabric, train, **{k: v for k, v in rest.items() if k in {f.name for f in fields(cls)}})


# -- what a run records ------------------------------------------------------------------------------
@dataclass
class RankStep:
    """One rank's view of one step (raw.csv): hosts.training.run_segment's record."""

    hosts: int
    method: str
    step: int
    rank: int
    t_begin: float
    t_ready: float
    t_release: float
    t_done: float
    t_back: float
    t_end: float
    loss: float
    correct: int
    digest: str
    sum_digest: str
    retransmissions: int = 0
    bytes_sent: int = 0


@dataclass
class EvalRow:
    """The parameters after `step` evaluated (evals.csv): the emulation's, the exact run's, a control's, a seed's."""

    hosts: int
    method: str
    kind: str  # "emulation", EXACT, CONTROL or SEED
    seed: int
    step: int
    train_loss: float
    test_loss: float
    test_acc: float


@dataclass
class RunRow:
    """One method's whole training run on one host count, as the runner saw it (runs.csv)."""

    hosts: int
    method: str
    steps: int = 0  # steps every rank completed
    t_end_release: float = math.nan  # the barrier after the last step
    wire_bytes: int = 0  # the busiest link direction over the run
    wire_link: str = ""
    t_wire_s: float = math.nan  # what those bytes need at the link rate
    t_path_s: float = math.nan  # one all-reduce's chain of dependent hops (experiments.bounds)
    switch_busy: float = math.nan
    agents_busy: float = math.nan
    cores_busy: float = math.nan
    ours_busy: float = math.nan
    error: str = ""


def _write_rows(rows: Iterable[Any], cls: type, path: Path) -> None:
    names = [f.name for f in fields(cls)]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(names)
        for r in rows:
            w.writerow(
                [
                    "" if isinstance(v, float) and math.isnan(v) else (repr(v) if isinstance(v, float) else v)
                    for v in (getattr(r, n) for n in names)
                ]
            )


def _read_rows(cls: type, path: Path) -> list[Any]:
    kinds = {f.name: (f.type if isinstance(f.type, str) else f.type.__name__) for f in fields(cls)}
    out = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            kw: dict[str, Any] = {}
            for name, kind in kinds.items():
                text = row.get(name, "")
                kw[name] = (
                    (int(text) if text else 0)
                    if kind == "int"
                    else (float(text) if text else math.nan)
                    if kind == "float"
                    else text
                )
            out.append(cls(**kw))
    return out


@dataclass
class TrainingResult:
    config: TrainingConfig
    ranks: list[RankStep] = field(default_factory=list)
    evals: list[EvalRow] = field(default_factory=list)
    runs: list[RunRow] = field(default_factory=list)
    out_dir: Path | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    startup_s: float | None = None
    duration_s: float | None = None
    problems: list[str] = field(default_factory=list)


# -- the exact run and the controls, in this process -------------------------------------------------
def reference_evals(config: TrainingConfig, hosts: int) -> list[EvalRow]:
    """The exact run, the mis-scaled control and the seed spread, for `hosts` ranks (seconds, no network)."""
    from hosts import training

    rows = []
    tc = config.train
    runs: list[tuple[str, str, TrainConfig, training.ReduceFn]] = [
        (EXACT, EXACT, tc, training.exact_allreduce),
        (
            f"exact x {config.control_scale:g}",
            CONTROL,
            tc,
            training.mis_scaled(training.exact_allreduce, config.control_scale),
        ),
    ]
    runs += [
        (EXACT, SEED, replace(tc, seed=tc.seed + k), training.exact_allreduce) for k in range(1, config.seed_spread + 1)
    ]
    for name, kind, cfg, reduce in runs:
        history = training.simulate(cfg, hosts, reduce, method=name)
        if (
            history.diverged_at() is not None
        ):  # one sum for all ranks: cannot happen unless the model is not deterministic
            raise training.TrainingError(f"{name}: ranks diverged at step {history.diverged_at()} in one process")
        rows += [
            EvalRow(hosts, name, kind, cfg.seed, e.step, e.train_loss, e.test_loss, e.test_acc) for e in history.evals
        ]
    return rows


# -- from rows to a summary ----------------------------------------------------------------------------
def _max(xs: Iterable[float]) -> float:
    vals = [x for x in xs if not math.isnan(x)]
    return max(vals) if vals else math.nan


def step_table(ranks: Sequence[RankStep], run: RunRow | None = None) -> list[dict[str, Any]]:
    """Per step of one (hosts, method) run: loss, batch accuracy, the time split, whether the ranks agree.

    The split follows the step's critical path: the rank that arrived last at the next step's barrier (it
    set the next release) spent the step in its all-reduce (release to its sum), its tail (until the call
    returned), its update, and the next step's gradient; what is left is waiting and coordination. So the
    parts are never negative and add up to the step. `allreduce_slowest_s` is the slowest rank's all-reduce,
    the latency the measurement experiment reports.
    """
    by_step: dict[int, dict[int, RankStep]] = defaultdict(dict)
    for r in ranks:
        by_step[r.step][r.rank] = r
    steps = sorted(by_step)
    end = run.t_end_release if run is not None else math.nan
    out = []
    wall = 0.0
    for i, s in enumerate(steps):
        rs = by_step[s]
        nxt = by_step.get(steps[i + 1]) if i + 1 < len(steps) else None
        release = next(iter(rs.values())).t_release
        if nxt is not None:  # the last to arrive at the next barrier
            crit = max(nxt.values(), key=lambda r: r.t_ready)
            me = rs.get(crit.rank)
            next_release = next(iter(nxt.values())).t_release
            grad_next = crit.t_ready - crit.t_begin
        else:  # the last step: it ends at the barrier after it
            me = max(rs.values(), key=lambda r: r.t_end)
            next_release = end if not math.isnan(end) else me.t_end
            grad_next = 0.0
        step_s = next_release - release
        if me is None:  # the critical rank has no row for this step (a failed run): no split
            compute = allreduce = tail = math.nan
        else:
            allreduce = me.t_done - release
            tail = me.t_back - me.t_done
            compute = (me.t_end - me.t_back) + grad_next
        wall += step_s
        out.append(
            {
                "step": s,
                "ranks": len(rs),
                "loss": statistics.fmean(r.loss for r in rs.values()),
                "correct": sum(r.correct for r in rs.values()),
                "compute_s": compute,
                "allreduce_s": allreduce,
                "tail_s": tail,
                "step_s": step_s,
                "other_s": step_s - compute - allreduce,
                "wall_s": wall,
                "allreduce_slowest_s": _max(r.t_done - r.t_release for r in rs.values()),
                "identical": len({r.digest for r in rs.values()}) == 1,
                "same_sum": len({r.sum_digest for r in rs.values()}) == 1,
                "retransmissions": sum(r.retransmissions for r in rs.values()),
                "releases_agree": len({r.t_release for r in rs.values()}) == 1,
            }
        )
    return out


def _final(evals: Sequence[EvalRow]) -> EvalRow | None:
    return max(evals, key=lambda e: e.step) if evals else None


def summarize(result: TrainingResult) -> dict[str, Any]:
    """Everything the table, the plots and docs/training.md say, from the rows alone."""
    cfg = result.config
    tol = cfg.tolerance_pp
    steps_wanted = cfg.train.steps
    per_hosts: dict[str, Any] = {}
    problems = list(result.problems)
    ok = True
    for n in cfg.fabric.host_counts:
        evals = [e for e in result.evals if e.hosts == n]
        exact = [e for e in evals if e.kind == EXACT]
        control = [e for e in evals if e.kind == CONTROL]
        seeds = [e for e in evals if e.kind == SEED]
        ex = _final(exact)
        if ex is None:
            problems.append(f"{n} hosts: no exact run")
            ok = False
            continue
        ref_acc = ex.test_acc
        seed_final = {s: _final([e for e in seeds if e.seed == s]) for s in sorted({e.seed for e in seeds})}
        seed_accs = [ex.test_acc] + [e.test_acc for e in seed_final.values() if e is not None]
        se_pp = 100 * math.sqrt(ref_acc * (1 - ref_acc) / max(1, _test_size(cfg)))
        entry: dict[str, Any] = {
            "exact": {
                "final_test_acc": ref_acc,
                "final_train_loss": ex.train_loss,
                "final_test_loss": ex.test_loss,
                "steps": ex.step,
                "binomial_se_pp": se_pp,
                "seed_spread": {
                    "seeds": [cfg.train.seed, *seed_final],
                    "test_acc": seed_accs,
                    "range_pp": 100 * (max(seed_accs) - min(seed_accs)),
                },
            },
            "methods": {},
        }
        ctl = _final(control)
        if ctl is not None:
            caught = not within_tolerance(ctl.test_acc, ref_acc, tol)
            entry["control"] = {
                "name": ctl.method,
                "scale": cfg.control_scale,
                "final_test_acc": ctl.test_acc,
                "delta_pp": 100 * (ctl.test_acc - ref_acc),
                "caught": caught,
            }
            if not caught:
                ok = False
                problems.append(
                    f"{n} hosts: the mis-scaled control ({ctl.method}) reached {ctl.test_acc:.3f}, within "
                    f"{tol} points of the exact run: the accuracy check cannot tell a broken all-reduce"
                )
        for m in cfg.fabric.methods:
            entry["methods"][m] = _method_summary(result, n, m, ref_acc, steps_wanted)
            if not entry["methods"][m]["ok"]:
                ok = False
                problems += [f"{n} hosts, {m}: {p}" for p in entry["methods"][m]["problems"]]
        per_hosts[str(n)] = entry
    return {
        "ok": ok and bool(per_hosts),
        "config": cfg.to_dict(),
        "tolerance_pp": tol,
        "hosts": per_hosts,
        "problems": problems,
        "duration_s": result.duration_s,
        "startup_s": result.startup_s,
        "notes": _notes(per_hosts, cfg),
    }


def _test_size(cfg: TrainingConfig) -> int:
    from hosts.training import digits

    return len(digits(cfg.train.test_fraction).y_test)


def _method_summary(result: TrainingResult, n: int, m: str, ref_acc: float, steps_wanted: int) -> dict[str, Any]:
    cfg = result.config
    run = next((r for r in result.runs if r.hosts == n and r.method == m), None)
    ranks = [r for r in result.ranks if r.hosts == n and r.method == m]
    evals = [e for e in result.evals if e.hosts == n and e.method == m and e.kind == "emulation"]
    table = step_table(ranks, run)
    problems: list[str] = []
    if run is None:
        problems.append("not run")
    elif run.error:
        problems.append(run.error)
    complete = [t for t in table if t["ranks"] == n]
    if len(complete) < steps_wanted:
        problems.append(f"{len(complete)} of {steps_wanted} steps completed by every rank")
    diverged = next((t["step"] for t in table if not t["identical"]), None)
    if diverged is not None:
        problems.append(f"ranks' parameters differ after step {diverged} (digests)")
    if any(not t["same_sum"] for t in table):
        problems.append("ranks got different all-reduce sums")
    if any(not t["releases_agree"] for t in table):
        problems.append("ranks saw different barrier releases")
    fin = _final(evals)
    final_acc = fin.test_acc if fin is not None and fin.step == steps_wanted else math.nan
    within = within_tolerance(final_acc, ref_acc, cfg.tolerance_pp)
    if not within:
        problems.append(
            f"final test accuracy {final_acc:.4f} is not within {cfg.tolerance_pp} points of the exact "
            f"run's {ref_acc:.4f}"
        )
    total = sum(t["step_s"] for t in table)
    k = len(table)

    def mean(key: str) -> float:
        return statistics.fmean(t[key] for t in table) if table else math.nan

    def median(key: str) -> float:
        return statistics.median(t[key] for t in table) if table else math.nan

    # a step 10x slower than the median one is a stall of the machine (every rank stops at once), not the method
    med = median("step_s")
    stalls = [t for t in table if t["step_s"] > STALL_FACTOR * med] if table else []
    wire_per_step = t_wire_per_step = math.nan
    bound = ""
    if run is not None and k:
        wire_per_step = run.wire_bytes / k
        t_wire_per_step = run.t_wire_s / k if not math.isnan(run.t_wire_s) else math.nan
        bound = bounds.classify(
            mean("allreduce_slowest_s"),
            t_wire_per_step,
            run.t_path_s,
            switch_busy=run.switch_busy,
            agents_busy=run.agents_busy,
            cores_busy=run.cores_busy,
        )
    return {
        "ok": not problems,
        "problems": problems,
        "label": METHODS[m].label,
        "final_test_acc": final_acc,
        "delta_pp": 100 * (final_acc - ref_acc),
        "within_tolerance": within,
        "final_train_loss": fin.train_loss if fin else math.nan,
        "final_test_loss": fin.test_loss if fin else math.nan,
        "steps": k,
        "identical_every_step": diverged is None and bool(table),
        "wall_s": total,
        "steps_per_s": k / total if total > 0 else math.nan,
        "mean_step_s": mean("step_s"),
        "mean_compute_s": mean("compute_s"),
        "mean_allreduce_s": mean("allreduce_s"),
        "mean_other_s": mean("other_s"),
        "median_step_s": med,
        "median_allreduce_s": median("allreduce_s"),
        "median_compute_s": median("compute_s"),
        "mean_tail_s": mean("tail_s"),
        "mean_allreduce_slowest_s": mean("allreduce_slowest_s"),
        "median_allreduce_slowest_s": median("allreduce_slowest_s"),
        "stalls": len(stalls),
        "stall_s": sum(t["step_s"] for t in stalls),
        "longest_step_s": max((t["step_s"] for t in table), default=math.nan),
        "retransmissions": sum(t["retransmissions"] for t in table),
        "wire_bytes_per_step": wire_per_step,
        "t_wire_per_step_s": t_wire_per_step,
        "t_path_s": run.t_path_s if run else math.nan,
        "bound": bound,
        "cores_busy": run.cores_busy if run else math.nan,
        "ours_busy": run.ours_busy if run else math.nan,
    }


def _notes(per_hosts: Mapping[str, Any], cfg: TrainingConfig) -> list[str]:
    out = []
    for n, entry in per_hosts.items():
        ex = entry["exact"]
        spread = ex["seed_spread"]
        out.append(
            f"{n} hosts: exact run {ex['final_test_acc']:.4f} after {ex['steps']} steps; binomial standard error "
            f"{ex['binomial_se_pp']:.2f} points; the exact run over seeds {spread['seeds']} spans "
            f"{spread['range_pp']:.2f} points; tolerance {cfg.tolerance_pp} points"
        )
        if "control" in entry:
            c = entry["control"]
            out.append(
                f"{n} hosts: control '{c['name']}' reached {c['final_test_acc']:.4f} ({c['delta_pp']:+.1f} points): "
                + ("caught by the check" if c["caught"] else "NOT caught: the check is too loose")
            )
        cpu = [m for m, s in entry["methods"].items() if s["bound"] and s["bound"] not in ("link", "latency")]
        if cpu:
            out.append(
                f"{n} hosts: the all-reduces of {', '.join(cpu)} were not link- or latency-bound (on average "
                f"more than {bounds.BOUND_SLACK}x the time their busiest link's bytes need): their step times "
                "measure the emulator's CPUs as much as the network"
            )
        stalled = {m: s for m, s in entry["methods"].items() if s["stalls"]}
        if stalled:
            out.append(
                f"{n} hosts: steps that took more than {STALL_FACTOR:g}x the median step (the whole machine "
                "stopped: every rank at once): "
                + ", ".join(
                    f"{m} {s['stalls']} ({s['stall_s']:.1f} s of {s['wall_s']:.1f} s)" for m, s in stalled.items()
                )
                + "; they are in the means and steps per second, the medians are not moved by them"
            )
        busy = [
            s["cores_busy"] - s["ours_busy"]
            for s in entry["methods"].values()
            if not (math.isnan(s["cores_busy"]) or math.isnan(s["ours_busy"]))
        ]
        if busy and max(busy) > 0.2:
            out.append(
                f"{n} hosts: work outside our processes and their frames' interrupts (other programs, kernel "
                f"threads, the hypervisor's steal) used up to {max(busy) * 100:.0f}% of the cores during "
                "training; step times may be pessimistic"
            )
    return out


# -- text ------------------------------------------------------------------------------------------------
def _ms(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x * 1e3:.1f}"


def table(summary: Mapping[str, Any]) -> str:
    cfg = TrainingConfig.from_dict(summary["config"])
    fab, tr = cfg.fabric, cfg.train
    shape = fab.shape
    lines = [
        f"training {tr.steps} steps of an MLP {DIGITS_FEATURES}-{'-'.join(map(str, tr.hidden))}-{DIGITS_CLASSES} "
        f"({cfg.elements} parameters) on digits, global batch {tr.batch}, lr {tr.lr:g}, momentum {tr.momentum:g}, "
        f"seed {tr.seed}; {fab.topology} on the {fab.backend} switch, links {shape.bw_mbps or 'unshaped'} Mbit/s"
        + (f", delay {shape.delay_ms:g} ms" if shape.delay_ms else "")
        + f"; tolerance {summary['tolerance_pp']} points",
        "units: final acc = test accuracy after the last step (fraction of the test set); vs exact = percentage "
        "points; steps/s over the whole run; '... ms' = mean per step in milliseconds; retx = retransmitted packets",
    ]
    head = [
        "hosts",
        "method",
        "final acc",
        "vs exact",
        "check",
        "identical",
        "steps/s",
        "step ms",
        "compute ms",
        "all-reduce ms",
        "other ms",
        "bound",
        "retx",
    ]
    rows = []
    for n, entry in summary["hosts"].items():
        ex = entry["exact"]
        rows.append(
            [n, "exact (float64, one process)", f"{ex['final_test_acc']:.4f}", "", "", "", "", "", "", "", "", "", ""]
        )
        for m, s in entry["methods"].items():
            acc = s["final_test_acc"]
            rows.append(
                [
                    n,
                    m,
                    "-" if math.isnan(acc) else f"{acc:.4f}",
                    "-" if math.isnan(acc) else f"{s['delta_pp']:+.2f}",
                    "ok" if s["within_tolerance"] else "MISS",
                    "yes" if s["identical_every_step"] else "NO",
                    f"{s['steps_per_s']:.1f}",
                    _ms(s["mean_step_s"]),
                    _ms(s["mean_compute_s"]),
                    _ms(s["mean_allreduce_s"]),
                    _ms(s["mean_other_s"]),
                    s["bound"] or "-",
                    str(s["retransmissions"]),
                ]
            )
        if "control" in entry:
            c = entry["control"]
            rows.append(
                [
                    n,
                    f"control: {c['name']}",
                    f"{c['final_test_acc']:.4f}",
                    f"{c['delta_pp']:+.2f}",
                    "caught" if c["caught"] else "NOT CAUGHT",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                ]
            )
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    fmt = "  ".join(f"{{:>{w}}}" if i not in (1,) else f"{{:<{w}}}" for i, w in enumerate(widths))
    lines += [fmt.format(*head), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in rows]
    lines += [f"note: {x}" for x in summary.get("notes", [])]
    lines += [f"problem: {x}" for x in summary.get("problems", [])]
    lines.append(
        "check: "
        + (
            "every method within tolerance, ranks identical after every step, control caught"
            if summary["ok"]
            else "FAILED (see the problems above)"
        )
    )
    return "\n".join(lines)


# -- plots -------------------------------------------------------------------------------------------------
def curves(result: TrainingResult, hosts: int) -> dict[str, dict[str, list[float]]]:
    """Per method: step, batch loss, wall time; and the evaluations (step, train loss, test accuracy)."""
    out: dict[str, dict[str, list[float]]] = {}
    for m in result.config.fabric.methods:
        run = next((r for r in result.runs if r.hosts == hosts and r.method == m), None)
        t = step_table([r for r in result.ranks if r.hosts == hosts and r.method == m], run)
        ev = sorted(
            (e for e in result.evals if e.hosts == hosts and e.method == m and e.kind == "emulation"),
            key=lambda e: e.step,
        )
        wall = {row["step"]: row["wall_s"] for row in t}
        wall[0] = 0.0
        out[m] = {
            "step": [row["step"] for row in t],
            "loss": [row["loss"] for row in t],
            "wall_s": [row["wall_s"] for row in t],
            "eval_step": [e.step for e in ev],
            "eval_wall_s": [wall.get(e.step, math.nan) for e in ev],
            "train_loss": [e.train_loss for e in ev],
            "test_acc": [e.test_acc for e in ev],
        }
    ex = sorted((e for e in result.evals if e.hosts == hosts and e.kind == EXACT), key=lambda e: e.step)
    out[EXACT] = {
        "eval_step": [e.step for e in ex],
        "train_loss": [e.train_loss for e in ex],
        "test_acc": [e.test_acc for e in ex],
    }
    return out


def plot_training(result: TrainingResult, hosts: int, path: Path | None = None) -> Any:
    """Three panels: training loss against step and against wall time, test accuracy against step.

    The loss lines are the whole training set's at every evaluation step, the faint ones (left) each step's
    minibatch loss (the mean of the ranks' slices); wall time is the sum of the step times (from the first release).
    """
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    c = curves(result, hosts)
    for m, d in c.items():
        if m == EXACT:
            continue
        color, _marker, ls = STYLE.get(m, ("gray", "o", "-"))
        label = METHODS[m].label
        # faint: each step's minibatch loss (what the ranks computed); bold: the whole training set's, every eval step
        axes[0].plot(d["step"], d["loss"], color=color, linewidth=0.6, alpha=0.3)
        axes[0].plot(d["eval_step"], d["train_loss"], color=color, linestyle=ls, label=label)
        axes[1].plot(d["eval_wall_s"], d["train_loss"], color=color, linestyle=ls, label=label)
        axes[2].plot(d["eval_step"], [100 * a for a in d["test_acc"]], color=color, linestyle=ls, label=label)
    ex = c[EXACT]
    axes[0].plot(ex["eval_step"], ex["train_loss"], color="black", linestyle=":", linewidth=2, label="exact (float64)")
    axes[2].plot(
        ex["eval_step"],
        [100 * a for a in ex["test_acc"]],
        color="black",
        linestyle=":",
        linewidth=2,
        label="exact (float64)",
    )
    for ax in axes[:2]:
        ax.set_yscale("log")
        plain_log(ax.yaxis)
        ax.set_ylabel("training loss, whole training set")
    axes[0].set_ylabel("training loss (faint: each step's minibatch)")
    axes[0].set_xlabel("step")
    axes[1].set_xlabel("wall time through the emulated fabric, s")
    axes[2].set_xlabel("step")
    axes[2].set_ylabel("test accuracy, %")
    accs = [a for d in c.values() for a in d["test_acc"] if not math.isnan(a)]
    # from where the data starts (the first evaluations, near chance), so no step is cut off
    axes[2].set_ylim(max(0.0, 100 * min(accs, default=0.0) - 3), 100)
    axes[0].set_title(f"loss against step, {hosts} hosts")
    axes[1].set_title("loss against wall time")
    axes[2].set_title("test accuracy")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()  # the same methods in every panel: one legend, above
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 6), fontsize=8, bbox_to_anchor=(0.5, 1.0))
    if path is not None:
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return fig


def plot_step_times(summary: Mapping[str, Any], hosts: int, path: Path | None = None) -> Any:
    """Mean time per step by method, stacked: compute, all-reduce, other; steps per second on top."""
    plt = pyplot()
    entry = summary["hosts"][str(hosts)]
    methods = list(entry["methods"])
    fig, ax = plt.subplots(figsize=(10.5, 4.6))  # the legend to the right
    bottom = [0.0] * len(methods)
    for key, color, label in (
        ("mean_compute_s", "tab:gray", "compute (gradient + update, critical rank)"),
        ("mean_allreduce_s", "tab:blue", "all-reduce (release to its sum)"),
        ("mean_other_s", "tab:olive", "other (tail, waiting, coordination)"),
    ):
        vals = [
            max(0.0, entry["methods"][m][key] * 1e3) if not math.isnan(entry["methods"][m][key]) else 0.0
            for m in methods
        ]
        ax.bar(methods, vals, bottom=bottom, color=color, label=label)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, m in enumerate(methods):
        sps = entry["methods"][m]["steps_per_s"]
        if not math.isnan(sps):
            ax.text(i, bottom[i], f"{sps:.1f}/s", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("time per step, ms (mean)")
    ax.set_title(f"Time per training step, {hosts} hosts (steps per second on top)")
    ax.grid(True, axis="y", alpha=0.3)
    legend_outside(ax)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return fig


def plot_final_accuracy(summary: Mapping[str, Any], hosts: int, path: Path | None = None) -> Any:
    """Final test accuracy per method against the exact run's and its tolerance band; the control, far below, too."""
    plt = pyplot()
    entry = summary["hosts"][str(hosts)]
    ref = entry["exact"]["final_test_acc"] * 100
    tol = summary["tolerance_pp"]
    names = list(entry["methods"]) + (["control"] if "control" in entry else [])
    vals = [entry["methods"][m]["final_test_acc"] * 100 for m in entry["methods"]]
    if "control" in entry:
        vals.append(entry["control"]["final_test_acc"] * 100)
    lo, hi = ref - 4 * tol, min(100.0, ref + 2 * tol)
    fig, ax = plt.subplots(figsize=(10.5, 4.2))  # the legend to the right
    ax.axhspan(ref - tol, ref + tol, color="tab:green", alpha=0.15, label=f"exact +/- {tol:g} points (the check)")
    ax.axhline(ref, color="black", linestyle=":", label=f"exact (float64): {ref:.1f}%")
    for i, (name, v) in enumerate(zip(names, vals)):
        color = "tab:red" if name == "control" else STYLE.get(name, ("tab:blue",))[0]
        if math.isnan(v):
            ax.text(i, ref, "no result", ha="center", fontsize=8)
        elif v < lo:  # off the scale (the control): an arrow down and the value
            ax.plot([i], [lo + 0.3 * tol], marker="v", markersize=10, color=color)
            ax.text(i, lo + 0.6 * tol, f"{v:.1f}%", ha="center", va="bottom", fontsize=8)
        else:
            ax.plot([i], [v], marker="o", markersize=9, color=color)
            ax.text(i + 0.12, v, f"{v:.1f}", va="center", fontsize=8)
    ax.set_xticks(
        range(len(names)),
        [f"control\n({entry['control']['name']})" if n == "control" else n for n in names],
        fontsize=8,
    )
    ax.set_xlim(-0.5, len(names) - 0.5)
    ax.set_ylim(lo, hi)
    ax.set_ylabel("final test accuracy, %")
    ax.set_title(f"Final test accuracy, {hosts} hosts")
    ax.grid(True, axis="y", alpha=0.3)
    legend_outside(ax)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return fig


# -- files ------------------------------------------------------------------------------------------------
def write_all(result: TrainingResult) -> Path:
    """config.json, raw.csv, evals.csv, runs.csv, summary.json, table.txt and the plots."""
    out = result.out_dir
    assert out is not None
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(
        json.dumps(
            {
                "experiment": "train",
                "config": result.config.to_dict(),
                "environment": result.environment,
                "startup_s": result.startup_s,
                "duration_s": result.duration_s,
                "problems": result.problems,
            },
            indent=1,
        )
        + "\n"
    )
    _write_rows(result.ranks, RankStep, out / "raw.csv")
    _write_rows(result.evals, EvalRow, out / "evals.csv")
    _write_rows(result.runs, RunRow, out / "runs.csv")
    summary = summarize(result)
    (out / "summary.json").write_text(json.dumps(jsonable(summary), indent=1) + "\n")
    (out / "table.txt").write_text(table(summary) + "\n")
    _write_steps(result, out / "steps.csv")
    try:
        for n in result.config.fabric.host_counts:
            if str(n) not in summary["hosts"]:
                continue
            suffix = "" if len(result.config.fabric.host_counts) == 1 else f"-h{n}"
            plot_training(result, n, out / f"training{suffix}.png")
            plot_step_times(summary, n, out / f"step_times{suffix}.png")
            plot_final_accuracy(summary, n, out / f"accuracy{suffix}.png")
    except Exception:  # a plot must never cost the rows written above
        LOG.exception("plotting failed; the rows are in %s", out)
    return out


def _write_steps(result: TrainingResult, path: Path) -> None:
    """Per host count, method and step: loss, accuracy, the time split (derived from raw.csv, for reading)."""
    names = [
        "hosts",
        "method",
        "step",
        "loss",
        "batch_acc",
        "compute_s",
        "allreduce_s",
        "other_s",
        "step_s",
        "wall_s",
        "identical",
        "test_acc",
        "train_loss",
    ]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(names)
        for n in result.config.fabric.host_counts:
            for m in result.config.fabric.methods:
                run = next((r for r in result.runs if r.hosts == n and r.method == m), None)
                ev = {e.step: e for e in result.evals if e.hosts == n and e.method == m and e.kind == "emulation"}
                for t in step_table([r for r in result.ranks if r.hosts == n and r.method == m], run):
                    e = ev.get(t["step"])
                    w.writerow(
                        [
                            n,
                            m,
                            t["step"],
                            repr(t["loss"]),
                            repr(t["correct"] / result.config.train.batch),
                            repr(t["compute_s"]),
                            repr(t["allreduce_s"]),
                            repr(t["other_s"]),
                            repr(t["step_s"]),
                            repr(t["wall_s"]),
                            int(t["identical"]),
                            repr(e.test_acc) if e else "",
                            repr(e.train_loss) if e else "",
                        ]
                    )


def load_results(folder: Path | str) -> tuple[TrainingResult, dict[str, Any]]:
    """A results folder read back, and its summary recomputed from the rows."""
    folder = Path(folder)
    meta = json.loads((folder / "config.json").read_text())
    result = TrainingResult(
        TrainingConfig.from_dict(meta["config"]),
        _read_rows(RankStep, folder / "raw.csv"),
        _read_rows(EvalRow, folder / "evals.csv"),
        _read_rows(RunRow, folder / "runs.csv"),
        folder,
        meta.get("environment", {}),
        meta.get("startup_s"),
        meta.get("duration_s"),
        list(meta.get("problems", [])),
    )
    return result, summarize(result)
