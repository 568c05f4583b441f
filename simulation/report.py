"""A simulate run's results folder: config.json, raw.csv, summary.json, table.txt and the plots.

Laid out like the emulation's folders, so the same habits apply: config.json
holds the exact scenarios, presets and software versions; raw.csv one row
per (scenario, job, method, size); summary.json the validation figures, the
largest GPU count and the findings per study (scaling, placement, failure,
emulation); the plots are drawn from raw.csv's rows only.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from simulation.model import Outcome, Row

LOG = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent  # the checkout; site-packages when installed (no .git: no git info)
CSV_FIELDS = list(Row.__dataclass_fields__)
STYLE = {  # method -> (colour, marker, line style)
    "ring": ("tab:red", "^", "-"),
    "ring-addr": ("tab:pink", "v", ":"),
    "ring-bf16": ("tab:orange", "^", "--"),
    "hier": ("tab:brown", "D", "-"),
    "hier-rail": ("tab:purple", "D", "--"),
    "tree": ("tab:olive", "s", "-"),
    "rd": ("tab:gray", "x", "-"),
    "inc-int32": ("tab:blue", "o", "-"),
    "inc-int16": ("tab:cyan", "o", ":"),
    "inc-int8": ("tab:green", "o", "--"),
    "hier-inc": ("navy", "*", "-"),
    "adaptive": ("black", "", ":"),
}
TOPO_STYLE = {"fattree": "-", "rail": "--", "dragonfly+": ":"}


def human_bytes(n: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            v = n / div
            return f"{v:g} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{int(n)} B"


def environment() -> dict[str, Any]:
    def git(*args: str) -> str | None:
        if not (REPO / ".git").exists():  # an installed package (None, not the commit of a repository around it)
            return None
        try:
            return (
                subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
                or None
            )
        except (OSError, subprocess.SubprocessError):
            return None

    simgrid = subprocess.run(
        [sys.executable, "-c", "import simgrid; print(simgrid.simgrid_version)"], capture_output=True, text=True
    )
    commit = git("rev-parse", "HEAD")
    return {
        "started": datetime.now().isoformat(timespec="seconds"),
        "command": sys.argv,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "simgrid": simgrid.stdout.strip().splitlines()[-1] if simgrid.returncode == 0 else None,
        "git_commit": commit,
        "git_dirty": bool(git("status", "--porcelain")) if commit else None,
    }


def all_rows(outcomes: Iterable[Outcome]) -> list[Row]:
    return [r for o in outcomes for r in o.rows]


def write_csv(rows: Sequence[Row], path: Path) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            d = r.to_dict()
            d["time_s"] = f"{r.time_s:.9g}"
            d["algbw"] = f"{r.algbw:.6g}"
            d["busbw"] = f"{r.busbw:.6g}"
            w.writerow(d)


def read_csv(path: Path | str) -> list[Row]:
    out = []
    with Path(path).open(newline="") as fh:
        for d in csv.DictReader(fh):
            out.append(
                Row(
                    label=d["label"],
                    topology=d["topology"],
                    fabric=d["fabric"],
                    gpus=int(d["gpus"]),
                    jobs=int(d["jobs"]),
                    job=int(d["job"]),
                    placement=d["placement"],
                    background=float(d["background"]),
                    failures=d["failures"],
                    method=d["method"],
                    size=int(d["size"]),
                    time_s=float(d["time_s"]),
                    algbw=float(d["algbw"]),
                    busbw=float(d["busbw"]),
                    choice=d.get("choice", ""),
                )
            )
    return out


def _kind(topology: str) -> str:
    return topology.partition(":")[0]


def _mean_over_jobs(rows: Iterable[Row]) -> dict[tuple, tuple[float, float]]:
    """(label, topology, gpus, placement, background, failures, method, size) -> (mean time, mean busbw) over jobs."""
    acc: dict[tuple, list[Row]] = {}
    for r in rows:
        acc.setdefault(
            (r.label, r.topology, r.gpus, r.placement, r.background, r.failures, r.method, r.size), []
        ).append(r)
    return {k: (statistics.fmean(x.time_s for x in v), statistics.fmean(x.busbw for x in v)) for k, v in acc.items()}


# -- findings ----------------------------------------------------------------------------------------------------
def findings(rows: Sequence[Row]) -> dict[str, Any]:
    """Per study, the numbers docs/simulation.md quotes: largest scale, placement ratios, failures, emulation."""
    agg = _mean_over_jobs(rows)
    out: dict[str, Any] = {}
    scaling = [k for k in agg if k[0] == "scaling"]
    if scaling:
        top = max(k[2] for k in scaling)
        per: dict[str, Any] = {}
        for k in scaling:
            if k[2] != top:
                continue
            _, topo, _, _, _, _, method, size = k
            t, bus = agg[k]
            ring = agg.get((*k[:6], "ring", size))
            per.setdefault(topo, {}).setdefault(method, {})[str(size)] = {
                "time_s": t,
                "busbw": bus,
                "speedup_over_ring": ring[0] / t if ring else None,
            }
        out["scaling"] = {"gpus": top, "topologies": per}
    place = [k for k in agg if k[0] == "placement"]
    if place:
        res: dict[str, Any] = {}
        for k in place:
            _, topo, gpus, pl, bg, _, method, size = k
            if pl != "scattered":
                continue
            cont = agg.get((k[0], topo, gpus, "contiguous", bg, k[5], method, size))
            if cont:
                res.setdefault(topo, {}).setdefault(f"background {bg:g}", {}).setdefault(method, {})[str(size)] = {
                    "contiguous_busbw": cont[1],
                    "scattered_busbw": agg[k][1],
                    "scattered_over_contiguous": agg[k][1] / cont[1],
                }
        out["placement"] = res
    fails = [k for k in agg if k[0] == "failure" and k[5]]
    if fails:
        res = {}
        for k in fails:
            base = agg.get((*k[:5], "", *k[6:]))
            if base:
                res.setdefault(k[1], {}).setdefault(k[5], {}).setdefault(k[6], {})[str(k[7])] = {
                    "time_s": agg[k][0],
                    "healthy_time_s": base[0],
                    "slowdown": agg[k][0] / base[0],
                }
        out["failure"] = res
    emu = [k for k in agg if k[0] == "emulation"]
    if emu:
        res = {}
        for k in emu:
            res.setdefault(k[6], {}).setdefault(str(k[2]), {})[str(k[7] // 4)] = {"time_s": agg[k][0]}
        out["emulation"] = {"elements": res}
    return out


def summary(
    outcomes: Sequence[Outcome],
    validation: Mapping[str, Any],
    duration_s: float,
    calibration: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    rows = all_rows(outcomes)
    max_gpus = max((r.gpus for r in rows), default=0)  # the largest job simulated
    return {
        "validation": {**validation, "max_gpus": max_gpus} if validation else {},
        "max_gpus": max_gpus,
        "duration_s": duration_s,
        "findings": findings(rows),
        "calibration": dict(calibration) if calibration else None,
        "scenarios": [
            {
                "scenario": o.scenario.to_dict(),
                "fabric": o.fabric,
                "seconds": o.seconds,
                "skipped": o.skipped,
                "trees": o.trees,
                "flowsets": o.flowsets,
            }
            for o in outcomes
        ],
    }


def table(rows: Sequence[Row]) -> str:
    """One line per (study, topology, GPUs, placement, background, failures, size): time of each method."""
    agg = _mean_over_jobs(rows)
    methods = [m for m in STYLE if any(k[6] == m for k in agg)]
    keys = sorted({k[:6] + (k[7],) for k in agg}, key=lambda k: (k[0], k[1], k[2], k[3], k[4], k[5], k[6]))
    head = ["study", "topology", "GPUs", "placement", "bg", "failure", "size"] + methods
    lines = [head]
    for k in keys:
        row = [k[0], k[1], str(k[2]), k[3], f"{k[4]:g}", k[5] or "-", human_bytes(k[6])]
        for m in methods:
            v = agg.get((*k[:6], m, k[6]))
            row.append("-" if v is None else _time(v[0]))
        lines.append(row)
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in lines)


def _time(t: float) -> str:
    if t >= 1:
        return f"{t:.2f}s"
    if t >= 1e-3:
        return f"{t * 1e3:.2f}ms"
    return f"{t * 1e6:.1f}us"


# -- plots -----------------------------------------------------------------------------------------------------------
def _pyplot() -> Any:
    import matplotlib

    backend = matplotlib.get_backend().lower()
    if backend != "agg" and "inline" not in backend:  # headless runs draw into files; notebooks keep their own
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path | None, layout: bool = True) -> None:
    if layout:
        fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
        _pyplot().close(fig)


def plot_scaling(
    rows: Sequence[Row], path: Path | None = None, sizes: Sequence[int] | None = None, speedup: bool = False
) -> Any:
    """Time (or speed-up over the ring) against GPU count: a column per topology, a row per message size."""
    plt = _pyplot()
    agg = _mean_over_jobs(r for r in rows if r.label == "scaling")
    topos = sorted({k[1] for k in agg}, key=lambda t: list(TOPO_STYLE).index(_kind(t)) if _kind(t) in TOPO_STYLE else 9)
    all_sizes = sorted({k[7] for k in agg})
    sizes = [
        s
        for s in (
            sizes
            or [
                all_sizes[len(all_sizes) // 2 - 1] if len(all_sizes) > 2 else all_sizes[0],
                all_sizes[-2] if len(all_sizes) > 1 else all_sizes[-1],
            ]
        )
        if s in all_sizes
    ]
    sizes = sorted(set(sizes))
    fig, axes = plt.subplots(
        len(sizes), len(topos), figsize=(4.6 * len(topos), 3.6 * len(sizes)), squeeze=False, sharex=True
    )
    for i, size in enumerate(sizes):
        for j, topo in enumerate(topos):
            ax = axes[i][j]
            for method, (colour, marker, ls) in STYLE.items():
                pts = sorted((k[2], v[0]) for k, v in agg.items() if k[1] == topo and k[6] == method and k[7] == size)
                if not pts:
                    continue
                if speedup:
                    ring = {k[2]: v[0] for k, v in agg.items() if k[1] == topo and k[6] == "ring" and k[7] == size}
                    pts = [(n, ring[n] / t) for n, t in pts if n in ring]
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    color=colour,
                    marker=marker,
                    linestyle=ls,
                    label=method,
                    markersize=4,
                )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title(f"{topo}, {human_bytes(size)}", fontsize=9)
            if i == len(sizes) - 1:
                ax.set_xlabel("GPUs in the job")
            if j == 0:
                ax.set_ylabel("speed-up over ring" if speedup else "all-reduce time (s)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    if handles:
        fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 9), fontsize=8, bbox_to_anchor=(0.5, 1.0))
    _save(fig, path, layout=False)
    return fig


def plot_fabrics(
    rows: Sequence[Row],
    path: Path | None = None,
    methods: Sequence[str] = ("ring", "hier-rail", "tree", "inc-int32", "hier-inc"),
    size: int | None = None,
) -> Any:
    """Left: bus bandwidth against GPU count per topology (fat-tree solid, rail dashed, Dragonfly+ dotted), one
    job placed contiguously.  Right: what scattered placement keeps of it, per topology (the placement study)."""
    plt = _pyplot()
    agg = _mean_over_jobs(r for r in rows if r.label == "scaling")
    place = _mean_over_jobs(r for r in rows if r.label == "placement" and r.background == 0)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [1.4, 1]})
    sizes = sorted({k[7] for k in agg})
    if sizes:
        size = size if size in sizes else sizes[-2] if len(sizes) > 1 else sizes[-1]
        for topo in sorted({k[1] for k in agg}):
            for method in methods:
                pts = sorted((k[2], v[1]) for k, v in agg.items() if k[1] == topo and k[6] == method and k[7] == size)
                if pts:
                    colour, marker, _ = STYLE[method]
                    ax.plot(
                        [p[0] for p in pts],
                        [p[1] / 1e9 for p in pts],
                        color=colour,
                        marker=marker,
                        linestyle=TOPO_STYLE.get(_kind(topo), "-"),
                        label=f"{method}, {topo}",
                        markersize=4,
                    )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("GPUs in the job")
        ax.set_ylabel("bus bandwidth (GB/s, nccl-tests' busbw)")
        ax.set_title(
            f"one job, contiguous, {human_bytes(size)}: fat-tree (solid), rail (dashed), Dragonfly+ (dotted)",
            fontsize=9,
        )
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=3)
    if place:
        psize = max(k[7] for k in place)
        topos = sorted({k[1] for k in place})
        meths = [m for m in STYLE if any(k[6] == m for k in place)]
        width = 0.8 / len(topos)
        for i, topo in enumerate(topos):
            vals = []
            for m in meths:
                c = [
                    v[1]
                    for k, v in place.items()
                    if k[1] == topo and k[3] == "contiguous" and k[6] == m and k[7] == psize
                ]
                sc = [
                    v[1]
                    for k, v in place.items()
                    if k[1] == topo and k[3] == "scattered" and k[6] == m and k[7] == psize
                ]
                vals.append(sc[0] / c[0] if c and sc else 0.0)
            bx.bar(
                [x + (i - (len(topos) - 1) / 2) * width for x in range(len(meths))],
                vals,
                width=width,
                label=topo,
                hatch=["", "//", "..", "xx"][i % 4],
                alpha=0.8,
            )
        bx.axhline(1.0, color="black", linewidth=0.8)
        bx.axhline(0.5, color="gray", linewidth=0.8, linestyle=":")
        bx.set_xticks(range(len(meths)))
        bx.set_xticklabels(meths, rotation=45, fontsize=8)
        bx.set_ylabel("scattered / contiguous bus bandwidth")
        jobs = max(k for k in {r.jobs for r in rows if r.label == "placement"})
        bx.set_title(f"{jobs} jobs sharing the cluster, {human_bytes(psize)} (dotted: half)", fontsize=9)
        bx.grid(True, axis="y", alpha=0.3)
        bx.legend(fontsize=7)
    _save(fig, path)
    return fig


def plot_placement(rows: Sequence[Row], path: Path | None = None, size: int | None = None) -> Any:
    """Bus bandwidth per method, contiguous against scattered placement: a panel per topology and background load."""
    plt = _pyplot()
    agg = _mean_over_jobs(r for r in rows if r.label == "placement")
    if not agg:
        return None
    sizes = sorted({k[7] for k in agg})
    size = size if size in sizes else sizes[-1]
    topos = sorted({k[1] for k in agg})
    bgs = sorted({k[4] for k in agg})
    methods = [m for m in STYLE if any(k[6] == m for k in agg)]
    fig, axes = plt.subplots(
        len(bgs), len(topos), figsize=(4.2 * len(topos), 3.4 * len(bgs)), squeeze=False, sharey=True
    )
    for row, bg in enumerate(bgs):
        for col, topo in enumerate(topos):
            ax = axes[row][col]
            xs = range(len(methods))
            for off, pl, hatch in ((-0.2, "contiguous", ""), (0.2, "scattered", "//")):
                vals = []
                for m in methods:
                    v = [
                        val[1]
                        for k, val in agg.items()
                        if k[1] == topo and k[4] == bg and k[3] == pl and k[6] == m and k[7] == size
                    ]
                    vals.append(v[0] / 1e9 if v else 0.0)
                ax.bar(
                    [x + off for x in xs],
                    vals,
                    width=0.4,
                    label=pl,
                    hatch=hatch,
                    color=[STYLE[m][0] for m in methods],
                    alpha=0.85 if pl == "contiguous" else 0.45,
                )
            ax.set_xticks(list(xs))
            ax.set_xticklabels(methods, rotation=45, fontsize=7)
            ax.set_yscale("log")
            ax.set_title(f"{topo}, background {bg:g}", fontsize=8)
            ax.grid(True, axis="y", alpha=0.3)
            if col == 0:
                ax.set_ylabel(f"bus bandwidth per job (GB/s)\n{human_bytes(size)}", fontsize=8)
    axes[0][0].legend(fontsize=7)
    _save(fig, path)
    return fig


PLOTS: dict[str, Callable[[Sequence[Row], Path | None], Any]] = {
    "scaling_time.png": lambda rows, p: plot_scaling(rows, p),
    "scaling_speedup.png": lambda rows, p: plot_scaling(rows, p, speedup=True),
    "fabrics.png": plot_fabrics,
    "placement.png": plot_placement,
}


def write_folder(
    out: Path,
    outcomes: Sequence[Outcome],
    config: Mapping[str, Any],
    validation: Mapping[str, Any],
    duration_s: float,
    calibration: Mapping[str, Any] | None = None,
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(
        json.dumps({"config": dict(config), "environment": environment()}, indent=1, default=str) + "\n"
    )
    rows = all_rows(outcomes)
    write_csv(rows, out / "raw.csv")
    (out / "summary.json").write_text(
        json.dumps(summary(outcomes, validation, duration_s, calibration), indent=1, default=_json_default) + "\n"
    )
    (out / "table.txt").write_text(table(rows) + "\n")
    if rows:
        for name, fn in PLOTS.items():
            try:
                if any(r.label == ("placement" if name.startswith("placement") else "scaling") for r in rows):
                    fn(rows, out / name)
            except Exception:  # a plot must never cost the raw data written above
                LOG.exception("plot %s failed; the raw results are in %s", name, out)
    return out


def _json_default(x: Any) -> Any:
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return None
    if hasattr(x, "item"):
        return x.item()
    return str(x)
