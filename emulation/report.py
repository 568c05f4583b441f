"""What an experiment shows: the table, raw CSV/JSON, summary.json and the plots of a results folder.

A results folder holds config.json (configuration + environment), results.json
(every measurement with its per-repetition raw data), raw.csv (one row per
repetition), summary.json (per method, host count and size: median latency and
speed-up over the ring, plus notes on what limited the run), table.txt and
latency.png / speedup.png. `load_results(folder)` reads it back.
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emulation.experiment import (
    INC_INT8,
    INC_INT32,
    METHODS,
    RING,
    ExperimentConfig,
    Measurement,
    speedups,
    theory_ratio,
)

if TYPE_CHECKING:
    from emulation.runner import ExperimentResult

LOG = logging.getLogger(__name__)

LABELS = {INC_INT32: "in-network (int32)", INC_INT8: "in-network (int8 results)", RING: "ring (hosts)"}
STYLE = {INC_INT32: ("tab:blue", "o", "-"), INC_INT8: ("tab:green", "s", "--"), RING: ("tab:red", "^", "-")}


def human_size(n: int) -> str:
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def _ms(x: float | None) -> str:
    return "-" if x is None else (f"{x * 1e3:.1f}" if x < 10 else f"{x * 1e3:.0f}")


# -- the table ---------------------------------------------------------------------------------
def table(result: ExperimentResult) -> str:
    """One row per host count and size: median latency [min-max] per method, speed-ups, what bounded it."""
    ms = result.measurements
    methods = [m for m in METHODS if any(x.method == m for x in ms)]
    sp = speedups(ms)
    by = {(m.method, m.hosts, m.size): m for m in ms}
    keys = sorted({(m.hosts, m.size) for m in ms})
    head = ["hosts", "elements"] + [f"{LABELS[m]} ms" for m in methods]
    inc_methods = [m for m in methods if m != RING]
    if RING in methods:
        head += [f"speed-up {m.removeprefix('inc-')}" for m in inc_methods]
    head += ["bound", "retx", "check"]
    rows = []
    for n, size in keys:
        row = [str(n), human_size(size)]
        bounds, retx, checks = [], 0, []
        for method in methods:
            m = by.get((method, n, size))
            if m is None or m.median_s is None:
                row.append("failed" if m is not None else "-")
            else:
                lo, hi = m.spread_s or (None, None)
                row.append(f"{_ms(m.median_s)} [{_ms(lo)}-{_ms(hi)}]")
            if m is not None:
                bounds.append(f"{method.removeprefix('inc-')}:{m.bound}")
                retx += m.retransmissions
                checks.append(m.ok)
        if RING in methods:
            row += [f"{sp[(m, n, size)]:.2f}x" if (m, n, size) in sp else "-" for m in inc_methods]
        row += [" ".join(bounds), str(retx), "ok" if all(checks) else "FAILED"]
        rows.append(row)
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    lines = [fmt.format(*head), fmt.format(*("-" * w for w in widths))] + [fmt.format(*r) for r in rows]
    cfg = result.config
    shape = cfg.shape
    lines.insert(0, f"{cfg.topology} on the {cfg.backend} switch; links {shape.bw_mbps or 'unlimited'} Mbit/s, "
                    f"delay {shape.delay_ms or 0} ms, loss {shape.loss_pct or 0}%; median of {cfg.reps} "
                    f"repetitions after {cfg.warmup} warm-up [min-max]; speed-up = ring / in-network latency")
    for note in result.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


# -- notes: what limited the numbers -----------------------------------------------------------
def notes(result: ExperimentResult) -> list[str]:
    out = []
    ms = [m for m in result.measurements if m.ok]
    failed = [m for m in result.measurements if not m.ok]
    if failed:
        out.append(f"{len(failed)} measurement(s) failed: " + "; ".join(
            f"{m.method} {m.hosts} hosts {human_size(m.size)}: {'; '.join(m.problems) or 'no result'}" for m in failed[:5]))
    cpu = [m for m in ms if m.bound == "cpu"]
    if cpu:
        worst = max(cpu, key=lambda m: (m.machine_busy or 0.0, (m.max_switch_busy or ("", 0.0))[1]))
        busy = worst.max_switch_busy
        machine = f", all cores {worst.machine_busy * 100:.0f}% busy" if worst.machine_busy is not None else ""
        out.append(
            f"{len(cpu)} of {len(ms)} measurements were limited by CPU (switch processes and host agents share "
            f"the machine's cores), not by the links (e.g. {worst.method}, {worst.hosts} hosts, "
            f"{human_size(worst.size)}: busiest host link {(worst.link_utilisation or 0) * 100:.0f}% utilised, "
            f"switch {busy[0] if busy else '?'} busy {(busy[1] if busy else 0) * 100:.0f}%{machine}); those "
            "latencies measure the emulator, not the network. Lower --bw to keep the links the bottleneck.")
    large = [m for m in ms if m.bound == "link"]
    if large:
        out.append(f"{len(large)} of {len(ms)} measurements were link-bound (host link >= 60% utilised): "
                   "their speed-ups compare bytes on the wire, as on real hardware.")
    others = [(m.machine_busy or 0.0) - (m.emulation_busy or 0.0) for m in result.measurements
              if m.machine_busy is not None and m.emulation_busy is not None]
    if others and max(others) > 0.2:
        out.append(f"other programs on this machine used up to {max(others) * 100:.0f}% of its cores during the "
                   "all-reduces; latencies may be pessimistic (run on an otherwise idle machine)")
    if any(m.retransmissions for m in ms) and not result.config.shape.loss_pct:
        out.append("retransmissions without configured loss: queues overflowed or a timeout was too short")
    return out


# -- files -------------------------------------------------------------------------------------
def summary(result: ExperimentResult) -> dict[str, Any]:
    sp = speedups(result.measurements)
    per: dict[str, dict[str, dict[str, Any]]] = {}
    for m in result.measurements:
        entry = {
            "median_latency_s": m.median_s,
            "min_latency_s": m.spread_s[0] if m.spread_s else None,
            "max_latency_s": m.spread_s[1] if m.spread_s else None,
            "goodput_bps": m.goodput_bps,
            "speedup_over_ring": sp.get((m.method, m.hosts, m.size)),
            "theory_bandwidth_speedup": theory_ratio(m.hosts, m.method) if m.method != RING else None,
            "retransmissions": m.retransmissions,
            "bound": m.bound,
            "link_utilisation": m.link_utilisation,
            "cores_busy": m.machine_busy,
            "cores_busy_by_emulation": m.emulation_busy,
            "busiest_switch": dict(zip(("switch", "busy"), m.max_switch_busy)) if m.max_switch_busy else None,
            "ok": m.ok,
        }
        per.setdefault(m.method, {}).setdefault(str(m.hosts), {})[str(m.size)] = entry
    return {
        "config": result.config.to_dict(),
        "backend": result.config.backend,
        "duration_s": result.duration_s,
        "startup_s": result.startup_s,
        "ok": result.ok,
        "notes": result.notes,
        "methods": per,
    }


CSV_FIELDS = ["method", "hosts", "elements", "rep", "warmup", "latency_s", "goodput_bps", "packets_sent",
              "retransmissions", "bytes_sent", "max_rank_bytes", "rank_latency_s", "ok"]


def write_csv(measurements: Iterable[Measurement], path: Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_FIELDS)
        for m in measurements:
            for r in m.reps:
                w.writerow([m.method, m.hosts, m.size, r.index, int(r.warmup), f"{r.latency_s:.6f}",
                            f"{r.goodput_bps(m.size):.0f}", r.packets_sent, r.retransmissions, r.bytes_sent,
                            r.max_rank_bytes, " ".join(f"{x:.6f}" for x in r.rank_latency_s), int(m.ok)])


def write_all(result: ExperimentResult) -> Path:
    out = result.out_dir
    assert out is not None
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"config": result.config.to_dict(), "environment": result.environment}, indent=1) + "\n")
    (out / "results.json").write_text(json.dumps({
        "config": result.config.to_dict(), "environment": result.environment, "startup_s": result.startup_s,
        "duration_s": result.duration_s, "notes": result.notes,
        "measurements": [m.to_dict() for m in result.measurements]}, indent=1) + "\n")
    write_csv(result.measurements, out / "raw.csv")
    (out / "summary.json").write_text(json.dumps(summary(result), indent=1) + "\n")
    (out / "table.txt").write_text(table(result) + "\n")
    if any(m.median_s for m in result.measurements):
        try:
            plot_latency(result.measurements, out / "latency.png")
            plot_speedup(result.measurements, out / "speedup.png")
        except Exception:  # a plot must never cost the raw data written above
            LOG.exception("plotting failed; the raw results are in %s", out)
    return out


def load_results(folder: Path | str) -> ExperimentResult:
    from emulation.runner import ExperimentResult

    folder = Path(folder)
    data = json.loads((folder / "results.json").read_text())
    return ExperimentResult(
        config=ExperimentConfig.from_dict(data["config"]),
        measurements=[Measurement.from_dict(m) for m in data["measurements"]],
        out_dir=folder, environment=data.get("environment", {}), startup_s=data.get("startup_s"),
        duration_s=data.get("duration_s"), notes=data.get("notes", []))


# -- plots -------------------------------------------------------------------------------------
def _pyplot() -> Any:
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _axes(ax: Any, path: Path | None) -> tuple[Any, Callable[[], None]]:
    """The axes to draw on (a new figure when none is given) and what to call when done (save and close it)."""
    if ax is not None:
        return ax, lambda: None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))

    def done() -> None:
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=120)
            plt.close(fig)

    return ax, done


def plot_latency(measurements: Sequence[Measurement], path: Path | None = None, ax: Any = None) -> Any:
    """Median latency against size, one line per method (and per host count when there are several)."""
    ax, done = _axes(ax, path)
    ok = [m for m in measurements if m.median_s]
    counts = sorted({m.hosts for m in ok})
    widths = {n: 1.0 + 1.2 * i for i, n in enumerate(counts)}
    for method in METHODS:
        for n in counts:
            pts = sorted((m.size, m.median_s, *(m.spread_s or (m.median_s, m.median_s))) for m in ok if m.method == method and m.hosts == n)
            if not pts:
                continue
            color, marker, ls = STYLE[method]
            xs = [p[0] for p in pts]
            ys = [p[1] * 1e3 for p in pts]
            err = [[(p[1] - p[2]) * 1e3 for p in pts], [(p[3] - p[1]) * 1e3 for p in pts]]
            label = LABELS[method] + (f", {n} hosts" if len(counts) > 1 else "")
            ax.errorbar(xs, ys, yerr=err, color=color, marker=marker, linestyle=ls, linewidth=widths[n] if len(counts) > 1 else 1.5,
                        alpha=0.45 + 0.55 * (n / max(counts)), capsize=3, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("all-reduce size (float32 elements)")
    ax.set_ylabel("latency (ms, median; bars min-max)")
    ax.set_title("All-reduce latency against size")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    done()
    return ax


def plot_speedup(measurements: Sequence[Measurement], path: Path | None = None, ax: Any = None) -> Any:
    """Speed-up of in-network aggregation over the ring against host count, one line per method and size."""
    ax, done = _axes(ax, path)
    sp = speedups(measurements)
    sizes = sorted({size for (_m, _n, size) in sp})
    for method in (INC_INT32, INC_INT8):
        for i, size in enumerate(sizes):
            pts = sorted((n, v) for (mm, n, s), v in sp.items() if mm == method and s == size)
            if not pts:
                continue
            color, marker, ls = STYLE[method]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, marker=marker, linestyle=ls,
                    alpha=0.4 + 0.6 * (i + 1) / len(sizes), label=f"{LABELS[method]}, {human_size(size)} elements")
    counts = sorted({n for (_m, n, _s) in sp})
    if counts:
        ax.plot(counts, [theory_ratio(n) for n in counts], color="gray", linestyle=":",
                label="bandwidth bound (bytes on a host link)")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("hosts in the job")
    ax.set_ylabel("speed-up over ring (ring latency / in-network latency)")
    ax.set_title("In-network aggregation against the ring")
    if counts:
        ax.set_xticks(counts)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    done()
    return ax
