"""What an experiment shows: a results folder, its tables, notes and plots, all derived from raw.csv.

A results folder holds config.json (configuration + environment), raw.csv (one
row per worker and repetition: experiments.config.Sample), summary.json
(experiments.allreduce.analysis.summarize of raw.csv), table.txt, latency.png,
speedup.png and bounds.png. `load_results(folder)` reads it back and
recomputes the summary from raw.csv.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments import bounds
from experiments.allreduce import analysis
from experiments.config import ExperimentConfig, ExperimentResult, Sample, read_raw, write_raw
from experiments.plotting import SHORT, STYLE, legend_outside, plain_log, pyplot
from experiments.results import human_size
from hosts.methods import METHODS

LOG = logging.getLogger(__name__)
CPU_SHARES_MIN_S = analysis.CPU_SHARES_MIN_S  # shorter repetitions' CPU shares are mostly /proc's tick rounding


def _ms(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x * 1e3:.2f}" if x < 0.01 else (f"{x * 1e3:.1f}" if x < 10 else f"{x * 1e3:.0f}")


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _grid(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    return [fmt.format(*head), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in rows]


# -- the tables ----------------------------------------------------------------------------------
def table(summary: dict[str, Any]) -> str:
    """Latency per method (median [95% CI]) and speed-ups; then, per point, the bounds and the checks."""
    cfg = ExperimentConfig.from_dict(summary["config"])
    pts = summary["points"]
    methods = [m for m in cfg.methods if any(p["method"] == m for p in pts)]
    inc = [m for m in methods if METHODS[m].in_network]
    by = {(p["method"], p["hosts"], p["elements"]): p for p in pts}
    keys = sorted({(p["hosts"], p["elements"]) for p in pts})
    head = ["hosts", "elements"] + [f"{SHORT[m]} ms" for m in methods]
    head += [f"{SHORT[m]} vs best host" for m in inc] + [f"{SHORT[m]} vs ring" for m in inc]
    rows = []
    for n, size in keys:
        row = [str(n), human_size(size)]
        for m in methods:
            p = by.get((m, n, size))
            if p is None:
                row.append("-")
            elif not p["ok"]:
                row.append("FAILED")
            else:
                lo, hi = p["ci95_latency_s"]
                row.append(f"{_ms(p['median_latency_s'])} [{_ms(lo)}-{_ms(hi)}]")
        for key in ("speedup_over_best_host", "speedup_over_ring"):
            for m in inc:
                sp = (by.get((m, n, size)) or {}).get(key)
                if sp is None:
                    row.append("-")
                else:
                    mark = "" if sp["headline"] else "*"
                    base = f" {SHORT.get(sp['baseline'], sp['baseline'])}" if key == "speedup_over_best_host" else ""
                    row.append(f"{sp['value']:.2f}x{mark}{base}")
        rows.append(row)
    shape = cfg.shape
    lines = [
        f"{cfg.topology} on the {cfg.backend} switch; links {shape.bw_mbps or 'unlimited'} Mbit/s, delay "
        f"{shape.delay_ms or 0} ms, loss {shape.loss_pct or 0}%; median of {cfg.reps} repetitions after "
        f"{cfg.warmup} warm-up [95% bootstrap CI], methods in a shuffled order per repetition; latency from the "
        "common start to the slowest worker's float32 result; speed-up = baseline / in-network latency, "
        "* = not a headline (a point not link- or latency-bound)",
        "units: elements = float32 elements per all-reduce (Ki = 1024, Mi = 2^20); '... ms' = median latency in "
        "milliseconds [95% CI]; 'vs' columns = speed-up (x), with the baseline method",
    ]
    lines += _grid(head, rows)
    lines.append("")
    lines += bounds_table(summary)
    for note in summary.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)


def bounds_table(summary: dict[str, Any]) -> list[str]:
    """Per point: measured over the wire and path bounds, the verdict, bytes per element, accuracy, checks."""
    head = [
        "method",
        "hosts",
        "elements",
        "t/T_wire",
        "t/T_path",
        "bound",
        "B/elem up",
        "B/elem down",
        "rel L2",
        "target",
        "retx",
        "check",
    ]
    rows = []
    units = [
        "units: t/T_wire, t/T_path = measured latency over each bound (x; '-': no such bound); B/elem = bytes the "
        "busiest host sent (up) and received (down) per float32 element; rel L2 = the sum's relative L2 error, "
        "target its limit; retx = retransmitted packets"
    ]
    for p in summary["points"]:
        rows.append(
            [
                p["method"],
                str(p["hosts"]),
                human_size(p["elements"]),
                _x(p["t_over_wire"]),
                _x(p["t_over_path"]),
                p["bound"],
                _x(p["bytes_per_element_up"]),
                _x(p["bytes_per_element_down"]),
                "-" if p["rel_l2_error"] is None else f"{p['rel_l2_error']:.2g}",
                f"{p['rel_l2_target']:.2g}",
                str(p["retransmissions"]),
                "ok" if p["ok"] else "FAILED",
            ]
        )
    return units + _grid(head, rows)


# -- notes: what limited the numbers ------------------------------------------------------------
def notes(summary: dict[str, Any], environment: dict[str, Any] | None = None) -> list[str]:
    out = []
    pts = summary["points"]
    failed = [p for p in pts if not p["ok"]]
    if failed:
        out.append(
            f"{len(failed)} point(s) failed: "
            + "; ".join(
                f"{p['method']} {p['hosts']} hosts {human_size(p['elements'])}: "
                f"{'; '.join(p['problems'][:2]) or 'no result'}"
                for p in failed[:4]
            )
        )
    for problem in summary.get("problems", []):
        out.append(problem)
    good = [p for p in pts if p["ok"]]
    link = [p for p in good if p["bound"] == "link"]
    lat = [p for p in good if p["bound"] == "latency"]
    rest = [p for p in good if p["bound"] not in analysis.GOOD_BOUNDS]
    if good:
        out.append(
            f"{len(link)} of {len(good)} points were link-bound (measured <= {bounds.BOUND_SLACK} x what the "
            f"busiest link's bytes allow) and {len(lat)} latency-bound (<= {bounds.BOUND_SLACK} x the method's "
            "chain of hops): only those are headlines."
        )
    if rest:
        worst = max(rest, key=lambda p: p["t_over_wire"] or 0.0)
        cpu = [p for p in rest if p["bound"] == "cpu"]
        out.append(
            f"{len(rest)} point(s) were neither ({len(cpu)} cpu, {len(rest) - len(cpu)} unexplained); they measure the "
            f"emulator, not the network (worst: {worst['method']}, {worst['hosts']} hosts, "
            f"{human_size(worst['elements'])}: {analysis.why_not(worst)})."
        )
    others = [
        (p["cores_busy"] or 0.0) - (p["ours_busy"] or 0.0)
        for p in pts
        if p["cores_busy"] is not None
        and p["ours_busy"] is not None
        and (p["median_latency_s"] or 0.0) >= CPU_SHARES_MIN_S
    ]
    if others and max(others) > 0.2:
        out.append(
            f"work outside our processes and their frames' interrupts (other programs, kernel threads, the "
            f"hypervisor's steal) used up to {max(others) * 100:.0f}% of the cores during the all-reduces of "
            f"{CPU_SHARES_MIN_S:g} s or more (shorter ones are not checked); latencies may be pessimistic "
            "(run on an otherwise idle machine)"
        )
    cfg = summary["config"]
    if any(p["retransmissions"] for p in good) and not (cfg.get("shape") or {}).get("loss_pct"):
        out.append("retransmissions without configured loss: queues overflowed or a timeout was too short")
    misses = [p for p in good if not p["accuracy_ok"]]
    if misses:
        out.append(
            "accuracy targets missed: "
            + ", ".join(f"{p['method']} {p['hosts']}h {human_size(p['elements'])}" for p in misses[:5])
        )
    return out


# -- files ---------------------------------------------------------------------------------------
def summary_of(result: ExperimentResult) -> dict[str, Any]:
    s = analysis.summarize(
        result.config,
        result.samples,
        problems=result.problems,
        duration_s=result.duration_s,
        startup_s=result.startup_s,
    )
    s["notes"] = notes(s, result.environment)
    return s


def write_all(result: ExperimentResult) -> Path:
    out = result.out_dir
    assert out is not None
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(
        json.dumps(
            {
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
    write_raw(result.samples, out / "raw.csv")
    summary = summary_of(result)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / "table.txt").write_text(table(summary) + "\n")
    if any(p["median_latency_s"] for p in summary["points"]):
        try:
            plot_latency(summary, out / "latency.png")
            plot_speedup(summary, out / "speedup.png")
            plot_bounds(summary, out / "bounds.png")
        except Exception:  # a plot must never cost the raw data written above
            LOG.exception("plotting failed; the raw results are in %s", out)
    return out


@dataclass
class LoadedResults:
    config: ExperimentConfig
    samples: list[Sample]
    summary: dict[str, Any]
    environment: dict[str, Any] = field(default_factory=dict)
    folder: Path | None = None


class ResultsFolderError(ValueError):
    """A folder that is not a readable results folder of the all-reduce experiment; the message says why."""


def measured(folder: Path) -> bool:
    """The folder holds at least one repetition a worker reported (a run that failed before measuring has none)."""
    try:
        return any(not s.error for s in read_raw(folder / "raw.csv"))
    except (OSError, ValueError, KeyError):
        return False


def newest_results(root: Path = Path("results")) -> Path:
    """The newest results folder under root that measured something; folders of failed runs are skipped."""
    runs = sorted((p.parent for p in root.glob("**/raw.csv")), key=lambda p: p.stat().st_mtime, reverse=True)
    for run in runs:
        if measured(run):
            return run
        LOG.warning("skipping %s: the run measured nothing (see its config.json's problems)", run)
    raise FileNotFoundError(f"no results folder with measurements under {root.resolve()}: run `make emulate` first")


def load_results(folder: Path | str) -> LoadedResults:
    """A results folder read back; the summary recomputed from raw.csv (it must equal summary.json)."""
    folder = Path(folder)
    missing = [name for name in ("config.json", "raw.csv") if not (folder / name).is_file()]
    if missing:
        raise ResultsFolderError(f"{folder}: no {' or '.join(missing)}; not a results folder of `p4ina emulate`")
    try:
        meta = json.loads((folder / "config.json").read_text())
    except ValueError as ex:
        raise ResultsFolderError(f"{folder / 'config.json'}: not valid JSON ({ex})") from ex
    result = ExperimentResult(
        ExperimentConfig.from_dict(meta["config"]),
        read_raw(folder / "raw.csv"),
        folder,
        meta.get("environment", {}),
        meta.get("startup_s"),
        meta.get("duration_s"),
        list(meta.get("problems", [])),
    )
    return LoadedResults(result.config, result.samples, summary_of(result), result.environment, folder)


# -- plots ---------------------------------------------------------------------------------------
def _axes(ax: Any, path: Path | None) -> tuple[Any, Callable[[], None]]:
    """The axes to draw on (a new figure when none is given) and what to call when done (save and close it)."""
    if ax is not None:
        return ax, lambda: None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10.5, 4.8))  # the legend goes to the right of the axes

    def done() -> None:
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=120)
            plt.close(fig)

    return ax, done


def _methods(summary: dict[str, Any]) -> list[str]:
    return [m for m in summary["config"]["methods"] if any(p["method"] == m for p in summary["points"])]


def plot_latency(summary: dict[str, Any], path: Path | None = None, ax: Any = None) -> Any:
    """Median latency (95% CI bars) against size, per method, at the largest host count; with one size (the
    latency preset), a bar per method, where a line of single points would hide methods behind each other."""
    ax, done = _axes(ax, path)
    pts = [p for p in summary["points"] if p["ok"] and p["median_latency_s"]]
    n = max((p["hosts"] for p in pts), default=0)
    if len({p["elements"] for p in pts if p["hosts"] == n}) == 1:
        _latency_bars(ax, [p for p in pts if p["hosts"] == n], summary, n)
        done()
        return ax
    for m in _methods(summary):
        sel = sorted((p for p in pts if p["method"] == m and p["hosts"] == n), key=lambda p: p["elements"])
        if not sel:
            continue
        color, marker, ls = STYLE.get(m, ("gray", "o", "-"))
        ys = [p["median_latency_s"] * 1e3 for p in sel]
        err = [
            [y - p["ci95_latency_s"][0] * 1e3 for y, p in zip(ys, sel)],
            [p["ci95_latency_s"][1] * 1e3 - y for y, p in zip(ys, sel)],
        ]
        ax.errorbar(
            [p["elements"] for p in sel],
            ys,
            yerr=err,
            color=color,
            marker=marker,
            linestyle=ls,
            capsize=3,
            label=METHODS[m].label,
        )
        for p, y in zip(sel, ys):
            if not p["headline"]:
                ax.plot([p["elements"]], [y], marker="o", markersize=11, markerfacecolor="none", color="gray")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = sorted({p["elements"] for p in pts if p["hosts"] == n})
    plain_log(ax.xaxis, human_size, ticks=sizes)
    plain_log(ax.yaxis)
    ax.set_xlabel("all-reduce size, float32 elements (Ki = 1024)")
    ax.set_ylabel("latency, ms (median, 95% CI)")
    ax.set_title(f"All-reduce latency, {n} hosts (grey rings: not link- or latency-bound)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    legend_outside(ax)
    done()
    return ax


def _latency_bars(ax: Any, pts: list[dict[str, Any]], summary: dict[str, Any], n: int) -> None:
    by = {p["method"]: p for p in pts}
    methods = [m for m in _methods(summary) if m in by]
    ys = [by[m]["median_latency_s"] * 1e3 for m in methods]
    err = [
        [y - by[m]["ci95_latency_s"][0] * 1e3 for y, m in zip(ys, methods)],
        [by[m]["ci95_latency_s"][1] * 1e3 - y for y, m in zip(ys, methods)],
    ]
    colors = [STYLE.get(m, ("gray", "o", "-"))[0] for m in methods]
    bars = ax.barh(range(len(methods)), ys, xerr=err, color=colors, capsize=3)
    for bar, m, y in zip(bars, methods, ys):
        if not by[m]["headline"]:
            bar.set_hatch("//")
            bar.set_edgecolor("gray")
        ax.text(y + max(ys) * 0.02, bar.get_y() + bar.get_height() / 2, f"{y:,.0f} ms", va="center", fontsize=8)
    ax.set_yticks(range(len(methods)), [METHODS[m].label for m in methods], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(ys) * 1.2)
    ax.set_xlabel("latency, ms (median, 95% CI)")
    ax.set_title(
        f"All-reduce latency, {n} hosts, {human_size(pts[0]['elements'])} float32 elements\n"
        "(hatched: not link- or latency-bound)",
        fontsize=10,
    )
    ax.grid(True, axis="x", alpha=0.3)


def plot_speedup(
    summary: dict[str, Any], path: Path | None = None, ax: Any = None, key: str = "speedup_over_best_host"
) -> Any:
    """Speed-up of each in-network method over the best host method, against host count, one line per size."""
    ax, done = _axes(ax, path)
    pts = [p for p in summary["points"] if METHODS[p["method"]].in_network and p.get(key)]
    sizes = sorted({p["elements"] for p in pts})
    for m in [m for m in _methods(summary) if METHODS[m].in_network]:
        color, marker, ls = STYLE.get(m, ("gray", "o", "-"))
        for i, size in enumerate(sizes):
            sel = sorted((p for p in pts if p["method"] == m and p["elements"] == size), key=lambda p: p["hosts"])
            if not sel:
                continue
            xs = [p["hosts"] for p in sel]
            ys = [p[key]["value"] for p in sel]
            ax.plot(
                xs,
                ys,
                color=color,
                marker=marker,
                linestyle=ls,
                alpha=0.35 + 0.65 * (i + 1) / len(sizes),
                label=f"{METHODS[m].label}, {human_size(size)} elements",
            )
            for p, x, y in zip(sel, xs, ys):
                if not p[key]["headline"]:
                    ax.plot([x], [y], marker="o", markersize=11, markerfacecolor="none", color="gray")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("hosts in the job")
    ax.set_ylabel("speed-up (best host method latency / in-network latency)")
    ax.set_title("In-network aggregation against the best host method (grey rings: not headlines)", fontsize=10)
    counts = sorted({p["hosts"] for p in pts})
    if counts:
        ax.set_xticks(counts)
    ax.grid(True, alpha=0.3)
    legend_outside(ax, fontsize=6)
    done()
    return ax


def bound_ratio(p: dict[str, Any]) -> tuple[float | None, str]:
    """A point's measured latency over the larger of its bounds (1: all the network allows), and which bound that
    is ('wire' or 'path'); (None, '') when it has neither (unshaped links without delay)."""
    ratios = [(r, k) for r, k in ((p["t_over_wire"], "wire"), (p["t_over_path"], "path")) if r is not None]
    if not ratios:
        return None, ""
    return min(ratios)


def plot_bounds(summary: dict[str, Any], path: Path | None = None, ax: Any = None) -> Any:
    """One bar per point (method, hosts, size), in the table's order: measured latency over the larger of its two
    bounds (T_wire, the busiest link's bytes at the link rate; T_path, the method's chain of hops), so 1 is all the
    network allows and a bar under the 1.15 line is a link- or latency-bound point (a headline). A point without
    a bound, or that failed, keeps its place and says so."""
    plt = pyplot()
    pts = summary["points"]
    methods = _methods(summary)
    by = {(p["method"], p["hosts"], p["elements"]): p for p in pts}
    groups = sorted({(p["hosts"], p["elements"]) for p in pts})
    placed: list[tuple[float, dict[str, Any]]] = []
    centers: list[tuple[float, tuple[int, int]]] = []
    x = 0.0
    for g in groups:
        first = x
        for m in methods:
            if (m, *g) in by:
                placed.append((x, by[(m, *g)]))
                x += 1
        centers.append(((first + x - 1) / 2, g))
        x += 0.8  # a gap between (hosts, size) groups
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(9.0, 5.0 + 0.28 * len(placed)), 5.4))  # room for the legend
    else:
        fig = None
    ratios = [bound_ratio(p)[0] for _x, p in placed if p["ok"]]
    top = max([r for r in ratios if r is not None] + [bounds.BOUND_SLACK * 1.2])
    base = 0.8
    for xi, p in placed:
        color = STYLE.get(p["method"], ("gray",))[0]
        r, which = bound_ratio(p)
        if not p["ok"]:
            ax.text(xi, base * 1.02, "failed", rotation=90, ha="center", va="bottom", fontsize=7, color="tab:red")
        elif r is None:
            ax.bar(xi, 1.0 - base, bottom=base, color="white", edgecolor="gray", hatch="//", width=0.8)
            ax.text(xi, base * 1.02, "no bound", rotation=90, ha="center", va="bottom", fontsize=7, color="gray")
        else:
            ax.bar(xi, r - base, bottom=base, color=color, width=0.8, hatch=".." if which == "path" else None)
    ax.set_yscale("log")
    ax.set_ylim(base, top * 1.25)
    ticks = [t for t in (0.8, 1.0, bounds.BOUND_SLACK, 1.5, 2, 3, 5, 10, 20, 50, 100, 200, 500) if t <= top * 1.25]
    plain_log(ax.yaxis, ticks=ticks)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(bounds.BOUND_SLACK, color="black", linestyle="--", linewidth=0.8)
    ax.set_xticks([xi for xi, _p in placed], [SHORT.get(p["method"], p["method"]) for _xi, p in placed])
    ax.tick_params(axis="x", labelrotation=90, labelsize=7)
    ax.set_xlim(-0.8, x - 0.2)
    for cx, (n, size) in centers:  # the group under its bars: host count and size
        ax.annotate(
            f"{n} hosts\n{human_size(size)} elem",
            (cx, 0),
            xycoords=("data", "axes fraction"),
            xytext=(0, -38),
            textcoords="offset points",
            ha="center",
            va="top",
            fontsize=8,
        )
    ax.set_ylabel("measured latency / the larger bound\n(1 = all the network allows)")
    ax.set_title(
        "Each point against what the network allows\n"
        "(a bar under the dashed line is link- or latency-bound: a headline)",
        fontsize=10,
    )
    ax.grid(True, axis="y", which="major", alpha=0.3)
    from matplotlib.patches import Patch

    handles = [Patch(color=STYLE.get(m, ("gray",))[0], label=METHODS[m].label) for m in methods]
    handles += [
        Patch(facecolor="lightgray", label="plain: over T_wire (the busiest link's bytes at the link rate)"),
        Patch(facecolor="lightgray", hatch="..", label="dotted: over T_path (the method's chain of hops)"),
        Patch(
            facecolor="white", edgecolor="gray", hatch="//", label="no bound: bytes within the shaper's burst, no delay"
        ),
        plt.Line2D([], [], color="black", linestyle="--", label=f"{bounds.BOUND_SLACK}: the bound rule"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=7)
    if fig is not None:
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=120)
            plt.close(fig)
    return ax


def points_of(summary: dict[str, Any], method: str) -> Sequence[dict[str, Any]]:
    return [p for p in summary["points"] if p["method"] == method]
