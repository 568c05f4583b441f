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

from hosts.sizes import human_bytes
from simulation.model import EQUAL_TIMES, Outcome, Row
from simulation.params import Preset, get_preset

LOG = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent  # the checkout; site-packages when installed (no .git: no git info)
CSV_FIELDS = list(Row.__dataclass_fields__)
STYLE = {  # method -> (colour, marker, line style)
    "ring-1nic": ("tab:red", "^", "-"),
    "ring-addr": ("tab:pink", "v", ":"),
    "ring-1nic-bf16": ("tab:orange", "^", "--"),
    "hier": ("tab:brown", "D", "-"),
    "hier-rail": ("tab:purple", "D", "--"),
    "tree-1nic": ("tab:olive", "s", "-"),
    "nccl-ring": ("darkred", "P", "-"),
    "nccl-tree": ("darkolivegreen", "P", "--"),
    "nccl": ("dimgray", "P", "-"),
    "rd": ("tab:gray", "x", "-"),
    "inc-int32": ("tab:blue", "o", "-"),
    "inc-int16": ("tab:cyan", "o", ":"),
    "inc-int8": ("tab:green", "o", "--"),
    "hier-inc": ("navy", "*", "-"),
    "adaptive": ("black", "", ":"),
    "a2a-direct": ("tab:olive", "P", ":"),  # all-to-alls (a different collective: never an all-reduce's choice)
    "a2a-hier": ("darkgoldenrod", "P", "--"),
}
TOPO_STYLE = {"clos": "-", "rail": "--", "dragonfly+": ":", "rail-only": "-."}
# the speed-ups are over NCCL as it runs (its tuner's choice), or else over the single-NIC ring
BASELINES = ("nccl", "ring-1nic")


def baseline_of(methods: Any) -> str | None:
    """The strongest baseline among `methods` (a set of method names), None when neither ran."""
    return next((b for b in BASELINES if b in methods), None)


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


# -- studies ------------------------------------------------------------------------------------------------------
# A custom run (--topology ...) is labelled "custom"; its rows count for the studies whose question they answer:
# one job, contiguous, no load, no failure is a scaling point; a grid with both placements a placement study;
# failures have a healthy twin only when the grid has one.
def _alone(r: Row) -> bool:
    return r.jobs == 1 and r.placement == "contiguous" and r.background == 0 and not r.failures


def scaling_rows(rows: Iterable[Row]) -> list[Row]:
    return [r for r in rows if r.label == "scaling" or (r.label == "custom" and _alone(r))]


def placement_rows(rows: Iterable[Row]) -> list[Row]:
    custom = [r for r in rows if r.label == "custom" and not r.failures]
    both = {r.placement for r in custom} >= {"contiguous", "scattered"}
    return [r for r in rows if r.label == "placement"] + (custom if both else [])


def failure_rows(rows: Iterable[Row]) -> list[Row]:
    return [r for r in rows if r.label in ("failure", "custom")]


def not_applicable(rows: Sequence[Row]) -> dict[str, str]:
    """Per finding a custom run cannot make, why (and which options would); empty for the sweeps' own studies."""
    custom = [r for r in rows if r.label == "custom"]
    if not custom:
        return {}
    out: dict[str, str] = {}
    if not scaling_rows(custom):
        out["scaling"] = "no point with one job, contiguous, no background load and no failure"
    elif baseline_of({r.method for r in custom}) is None:
        out["speedup_over_baseline"] = "neither nccl nor ring-1nic is among --methods"
    if not placement_rows(custom):
        out["placement"] = (
            "the grid has one placement; give --placement contiguous,scattered (and --jobs N) to compare them"
        )
    if not any(r.failures for r in custom):
        out["failure"] = "no --fail given"
    elif not any(not r.failures for r in custom):
        out["failure"] = "every point of the grid has the --fail failures: no healthy twin to compare with"
    out["emulation"] = "the emulation's own sweep runs only in the default and quick sweeps"
    return out


# -- findings ----------------------------------------------------------------------------------------------------
def findings(rows: Sequence[Row]) -> dict[str, Any]:
    """Per study, the numbers docs/simulation.md quotes: largest scale, placement ratios, failures, emulation;
    for a custom run, what of it applies, and under `not_applicable` why the rest does not."""
    out: dict[str, Any] = {}
    agg = _mean_over_jobs(scaling_rows(rows))
    scaling = list(agg)
    if scaling:
        top = max(k[2] for k in scaling)
        per: dict[str, Any] = {}
        for k in scaling:
            if k[2] != top:
                continue
            _, topo, _, _, _, _, method, size = k
            t, bus = agg[k]
            ring = agg.get((*k[:6], "ring-1nic", size))
            tuned = agg.get((*k[:6], "nccl", size))
            per.setdefault(topo, {}).setdefault(method, {})[str(size)] = {
                "time_s": t,
                "busbw": bus,
                "speedup_over_ring": ring[0] / t if ring else None,  # the single-NIC ring (ring-1nic)
                "speedup_over_nccl": tuned[0] / t if tuned else None,  # NCCL's tuner's choice
            }
        out["scaling"] = {"gpus": top, "topologies": per}
    place = _mean_over_jobs(placement_rows(rows))
    if place:
        res: dict[str, Any] = {}
        for k in place:
            _, topo, gpus, pl, bg, _, method, size = k
            if pl != "scattered":
                continue
            cont = place.get((k[0], topo, gpus, "contiguous", bg, k[5], method, size))
            if cont:
                res.setdefault(topo, {}).setdefault(f"background {bg:g}", {}).setdefault(method, {})[str(size)] = {
                    "contiguous_busbw": cont[1],
                    "scattered_busbw": place[k][1],
                    "scattered_over_contiguous": place[k][1] / cont[1],
                }
        out["placement"] = res
    fail = _mean_over_jobs(failure_rows(rows))
    fails = [k for k in fail if k[5]]
    res = {}
    for k in fails:
        base = fail.get((*k[:5], "", *k[6:]))
        if base:
            res.setdefault(k[1], {}).setdefault(k[5], {}).setdefault(k[6], {})[str(k[7])] = {
                "time_s": fail[k][0],
                "healthy_time_s": base[0],
                "slowdown": fail[k][0] / base[0],
            }
    if res:
        out["failure"] = res
    emu = [k for k in _mean_over_jobs(rows) if k[0] == "emulation"]
    if emu:
        agg = _mean_over_jobs(r for r in rows if r.label == "emulation")
        res = {}
        for k in emu:
            res.setdefault(k[6], {}).setdefault(str(k[2]), {})[str(k[7] // 4)] = {"time_s": agg[k][0]}
        out["emulation"] = {"elements": res}
    na = not_applicable(rows)
    if na:
        out["not_applicable"] = na
    return out


# -- what was assumed: the presets and their links ------------------------------------------------------------------
def rate_text(bytes_per_s: float) -> str:
    """A link rate in bits per second, as links are quoted: 50e9 B/s -> '400 Gbit/s', 250e3 -> '2 Mbit/s'."""
    bits = bytes_per_s * 8
    for unit, div in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bits >= div:
            return f"{bits / div:.4g} {unit}"
    return f"{bits:.4g} bit/s"


def _preset_of(spec: str, overrides: Sequence[tuple[str, float]]) -> Preset:
    p = get_preset(spec)
    return p.with_(**dict(overrides)) if overrides else p


def preset_text(p: Preset) -> str:
    """The links and latencies a preset assumes, in one line."""
    links = f"links (each direction) NIC {rate_text(p.nic_bw)} per GPU, switch to switch {rate_text(p.fabric_bw)}"
    if p.gpus_per_server > 1:
        links += f", NVLink {p.nvlink_bw / 1e9:g} GB/s per GPU; {p.gpus_per_server} GPUs a server"
    lat = f"{p.switch_latency * 1e6:.3g} us a switch, {p.cable_latency * 1e9:.3g} ns a cable"
    if p.emulator_cores:
        lat += f"; hosts and switches sharing {p.emulator_cores:g} cores"
    return f"{links}; {lat}"


def presets_used(outcomes: Sequence[Outcome]) -> list[dict[str, Any]]:
    """Every preset the outcomes ran on (with --set's replacements), its links, and the studies that used it."""
    out: dict[tuple[str, tuple[tuple[str, float], ...]], dict[str, Any]] = {}
    for o in outcomes:
        s = o.scenario
        key = (s.preset, tuple(s.overrides))
        if key not in out:
            p = _preset_of(*key)
            name = p.name if s.preset in (p.name,) else f"{p.name} (from {s.preset})"
            set_ = ", ".join(f"{k}={v:g}" for k, v in s.overrides)
            out[key] = {
                "preset": s.preset,
                "name": p.name,
                "label": name + (f" with {set_}" if set_ else ""),
                "description": p.description,
                "overrides": dict(s.overrides),
                "links": preset_text(p),
                "nic_bit_s": p.nic_bw * 8,
                "fabric_bit_s": p.fabric_bw * 8,
                "nvlink_byte_s": p.nvlink_bw,
                "gpus_per_server": p.gpus_per_server,
                "switch_latency_s": p.switch_latency,
                "cable_latency_s": p.cable_latency,
                "used_by": {},
            }
        used = out[key]["used_by"].setdefault(s.label or "-", [])
        if s.topology not in used:
            used.append(s.topology)
    return list(out.values())


def _counts(values: Iterable[int]) -> str:
    v = sorted(set(values))
    return " and ".join(f"{g:,}" for g in v) if len(v) <= 2 else f"{v[0]:,} to {v[-1]:,}"


def notes_of(outcomes: Sequence[Outcome]) -> list[str]:
    """One line per (study, topology, methods, cause): methods that put different bytes on the wire but take the
    same time, where (GPU counts and sizes), and what set their time instead (Evaluation.equal_times)."""
    groups: dict[tuple[str, str, tuple[str, ...], str], list[dict[str, Any]]] = {}
    for o in outcomes:
        for n in o.notes:
            groups.setdefault((n["label"], n["topology"], tuple(n["methods"]), n["limit"]), []).append(n)
    lines = []
    for (label, topo, methods, _limit), ns in groups.items():
        last = max(ns, key=lambda n: (n["gpus"], n["size"]))
        frames = last.get("host_frame_bytes") or []
        if all(frames):
            differ = f"though their frames on the hosts' links are {', '.join(map(str, frames))} bytes"
        else:
            differ = f"though {methods[-1]} puts about half the bytes on the wire"
        at: dict[tuple[int, ...], list[int]] = {}  # GPU counts -> the sizes equal at all of them
        for size in sorted({n["size"] for n in ns}):
            at.setdefault(tuple(sorted({n["gpus"] for n in ns if n["size"] == size})), []).append(size)
        where = "; ".join(f"{', '.join(map(human_bytes, sz))} at {_counts(g)} GPUs" for g, sz in at.items())
        lines.append(
            f"{label or '-'} on {topo} ({where}): {' = '.join(methods)} within {EQUAL_TIMES:.0%}, {differ}. "
            f"Why: {last['why']} (at {last['gpus']:,} GPUs, {human_bytes(last['size'])})."
        )
    return lines


def summary(
    outcomes: Sequence[Outcome],
    validation: Mapping[str, Any],
    duration_s: float,
    calibration: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    rows = all_rows(outcomes)
    max_gpus = max((r.gpus for r in rows), default=0)  # the largest job simulated
    return {
        "presets": presets_used(outcomes),
        "units": UNITS,
        "validation": {**validation, "max_gpus": max_gpus} if validation else {},
        "max_gpus": max_gpus,
        "duration_s": duration_s,
        "findings": findings(rows),
        "notes": notes_of(outcomes),
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


UNITS = {
    "size": "bytes of float32 gradient per GPU (KiB, MiB, GiB: 2^10, 2^20, 2^30)",
    "time_s": "seconds per all-reduce, from the first send to the last result; the mean over the jobs",
    "algbw": "bytes/s: size / time",
    "busbw": "bytes/s: algbw x 2(N-1)/N (nccl-tests' bus bandwidth)",
    "background": "share of each GPU's NIC rate sent as background traffic",
}


def table(rows: Sequence[Row], presets: Sequence[Mapping[str, Any]] | None = None, notes: Sequence[str] = ()) -> str:
    """The presets and links assumed, the units, then one line per (study, topology, GPUs, placement, background,
    failures, size) with each method's time; then the notes on methods whose equal times need a reason."""
    agg = _mean_over_jobs(rows)
    methods = [m for m in STYLE if any(k[6] == m for k in agg)]
    keys = sorted({k[:6] + (k[7],) for k in agg}, key=lambda k: (k[0], k[1], k[2], k[3], k[4], k[5], k[6]))
    head = ["study", "topology", "GPUs", "placement", "bg", "failure", "size/GPU"] + methods
    lines = [head]
    for k in keys:
        row = [k[0], k[1], str(k[2]), k[3], f"{k[4]:g}", k[5] or "-", human_bytes(k[6])]
        for m in methods:
            v = agg.get((*k[:6], m, k[6]))
            row.append("-" if v is None else _time(v[0]))
        lines.append(row)
    widths = [max(len(r[i]) for r in lines) for i in range(len(head))]
    out = []
    for p in presets or ():
        used = "; ".join(f"{study}: {', '.join(topos)}" for study, topos in p["used_by"].items())
        out.append(f"preset {p['label']}: {p['links']} [{used}]")
    out.append(
        "size/GPU: bytes of float32 gradient per GPU (KiB = 2^10); method columns: time of one all-reduce "
        "(us, ms, s; mean over the jobs); bg: background load, share of each NIC; -: not run or not applicable"
    )
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in lines]
    out += [f"note: {n}" for n in notes]
    return "\n".join(out)


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


def tick_time(t: float) -> str:
    """A time axis' tick label: 1e-05 -> '10 us', 0.002 -> '2 ms'."""
    for unit, div in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= div:
            return f"{t / div:.3g} {unit}"
    return f"{t * 1e9:.3g} ns"


def tick_number(v: float) -> str:
    """A plain tick label: 1000 -> '1,000', 0.5 -> '0.5' (never '10^3' or '3x10^0')."""
    return f"{v:,.0f}" if v >= 1 and v == round(v) else f"{v:.3g}"


def plain_log(axis: Any, fmt: Callable[[float], str] = tick_number, ticks: Sequence[float] | None = None) -> None:
    """Label a log axis with plain numbers: at `ticks` (e.g. the GPU counts simulated), else at 1, 2, 5 times each
    power of ten over a short range (1 over a long one); no minor-tick labels (matplotlib's '3x10^0')."""
    from matplotlib import ticker

    if ticks is not None:
        axis.set_major_locator(ticker.FixedLocator(sorted(set(ticks))))
    else:
        lo, hi = sorted(axis.get_view_interval())
        decades = math.log10(hi / lo) if lo > 0 and hi > 0 else 99.0
        subs = (1.0, 2.0, 5.0) if decades <= 2.5 else (1.0,)
        axis.set_major_locator(ticker.LogLocator(base=10, subs=subs, numticks=12))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _pos: fmt(v)))
    axis.set_minor_formatter(ticker.NullFormatter())


def _save(fig: Any, path: Path | None, layout: bool = True) -> None:
    if layout:
        fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
        _pyplot().close(fig)


def plot_scaling(
    rows: Sequence[Row], path: Path | None = None, sizes: Sequence[int] | None = None, speedup: bool = False
) -> Any:
    """Time (or speed-up over nccl, else ring-1nic) against GPU count: a column per topology, a row per size."""
    plt = _pyplot()
    agg = _mean_over_jobs(scaling_rows(rows))
    base = baseline_of({k[6] for k in agg}) or "nccl"
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
                    ref = {k[2]: v[0] for k, v in agg.items() if k[1] == topo and k[6] == base and k[7] == size}
                    pts = [(n, ref[n] / t) for n, t in pts if n in ref]
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
            plain_log(ax.xaxis, ticks=[k[2] for k in agg if k[1] == topo])
            ax.tick_params(axis="x", labelsize=7, labelrotation=45)
            plain_log(ax.yaxis, tick_number if speedup else tick_time)
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title(f"{topo}, {human_bytes(size)} per GPU", fontsize=9)
            if i == len(sizes) - 1:
                ax.set_xlabel("GPUs in the job")
            if j == 0:
                ax.set_ylabel(f"speed-up over {base} (x)" if speedup else "time of one all-reduce")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    if handles:
        fig.legend(
            handles, labels, loc="upper center", ncol=min(len(labels), 12), fontsize=8, bbox_to_anchor=(0.5, 1.0)
        )
    _save(fig, path, layout=False)
    return fig


def plot_fabrics(
    rows: Sequence[Row],
    path: Path | None = None,
    methods: Sequence[str] = ("nccl", "ring-1nic", "hier-rail", "inc-int32", "inc-int8", "hier-inc"),
    size: int | None = None,
) -> Any:
    """Left: bus bandwidth against GPU count per topology (fat-tree solid, rail dashed, Dragonfly+ dotted), one
    job placed contiguously.  Right: what scattered placement keeps of it, per topology (the placement study)."""
    plt = _pyplot()
    agg = _mean_over_jobs(scaling_rows(rows))
    place = _mean_over_jobs(r for r in placement_rows(rows) if r.background == 0)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 6.4), gridspec_kw={"width_ratios": [1.4, 1]})
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
        plain_log(ax.xaxis, ticks=[k[2] for k in agg])
        ax.tick_params(axis="x", labelsize=7, labelrotation=45)
        plain_log(ax.yaxis)
        ax.set_xlabel("GPUs in the job")
        ax.set_ylabel("bus bandwidth (GB/s, nccl-tests' busbw)")
        ax.set_title(
            f"one job, contiguous, {human_bytes(size)} per GPU: clos (solid), rail (dashed), Dragonfly+ (dotted)",
            fontsize=9,
        )
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # below the axes: inside, it covers the lines
            ax.legend(fontsize=6, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    for panel, empty, why in (
        (ax, not sizes, "no point with one job alone on the cluster\n(one job, contiguous, no load, no failure)"),
        (bx, not place, "no placement study in this run\n(--placement contiguous,scattered --jobs N)"),
    ):
        if empty:  # say so, rather than an empty frame
            panel.axis("off")
            panel.text(0.5, 0.5, why, ha="center", va="center", fontsize=10, color="gray", transform=panel.transAxes)
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
        jobs = max(r.jobs for r in placement_rows(rows))
        bx.set_title(f"{jobs} jobs sharing the cluster, {human_bytes(psize)} per GPU (dotted: half)", fontsize=9)
        bx.grid(True, axis="y", alpha=0.3)
        bx.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(3, len(topos)))
    _save(fig, path)
    return fig


def plot_placement(rows: Sequence[Row], path: Path | None = None, size: int | None = None) -> Any:
    """Bus bandwidth per method, contiguous against scattered placement: a panel per topology and background load."""
    plt = _pyplot()
    agg = _mean_over_jobs(placement_rows(rows))
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
            plain_log(ax.yaxis)
            ax.set_title(f"{topo}, background {bg:g}", fontsize=8)
            ax.grid(True, axis="y", alpha=0.3)
            if col == 0:
                ax.set_ylabel(f"bus bandwidth per job (GB/s)\n{human_bytes(size)} per GPU", fontsize=8)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    fig.legend(handles, labels, loc="upper center", ncol=2, fontsize=8, bbox_to_anchor=(0.5, 1.0))  # above, not on bars
    _save(fig, path, layout=False)
    return fig


PLOTS: dict[str, Callable[[Sequence[Row], Path | None], Any]] = {
    "scaling_time.png": lambda rows, p: plot_scaling(rows, p),
    "scaling_speedup.png": lambda rows, p: plot_scaling(rows, p, speedup=True),
    "fabrics.png": plot_fabrics,
    "placement.png": plot_placement,
}


def plot_applies(name: str, rows: Sequence[Row]) -> str | None:
    """Why a plot of PLOTS cannot be drawn from these rows (None: it can)."""
    scaling, placement = scaling_rows(rows), placement_rows(rows)
    if name == "placement.png" and not placement:
        return "no placement study (a custom run needs --placement contiguous,scattered)"
    if name == "fabrics.png" and not (scaling or placement):
        return "no point with one job alone on the cluster, and no placement study"
    if name.startswith("scaling") and not scaling:
        return "no point with one job, contiguous, no background load and no failure"
    if name == "scaling_speedup.png" and baseline_of({r.method for r in scaling}) is None:
        return "the speed-up is over nccl (or ring-1nic), neither of which was run"
    return None


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
    summ = summary(outcomes, validation, duration_s, calibration)
    (out / "table.txt").write_text(table(rows, summ["presets"], summ["notes"]) + "\n")
    plots: dict[str, str] = {}
    for name, fn in PLOTS.items() if rows else ():
        why = plot_applies(name, rows)
        if why:
            plots[name] = f"not drawn: {why}"
            continue
        try:
            fn(rows, out / name)
            plots[name] = "drawn"
        except Exception as ex:  # a plot must never cost the raw data written above
            LOG.exception("plot %s failed; the raw results are in %s", name, out)
            plots[name] = f"failed: {ex}"
    summ["plots"] = plots
    (out / "summary.json").write_text(json.dumps(summ, indent=1, default=_json_default) + "\n")
    return out


def _json_default(x: Any) -> Any:
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return None
    if hasattr(x, "item"):
        return x.item()
    return str(x)
