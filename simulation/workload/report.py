"""The workload study's output: a table, two plots, findings, and the validation entries for summary.json."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from simulation.workload.runs import Validation

BREAKDOWN_ORDER = (
    "compute",
    "bubble",
    "tp",
    "a2a",
    "pp",
    "dp-allreduce",
    "dp-reduce-scatter",
    "param-all-gather",
    "fsdp",
    "optimizer",
)


def rows_of(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for p in points for r in p["rows"]]


def _scale(n: int) -> str:
    return f"{n / 1000:.0f}k" if n < 50_000 else f"{round(n / 1000, -1):.0f}k"


def table(points: Sequence[dict[str, Any]]) -> str:
    """MFU per model and scale: a row per method, a column per fabric and placement."""
    rows = rows_of(points)
    out: list[str] = []
    for model in dict.fromkeys(r["model"] for r in rows):
        for gpus in sorted({r["gpus"] for r in rows if r["model"] == model}):
            sel = [r for r in rows if r["model"] == model and r["gpus"] == gpus]
            cols = list(dict.fromkeys((r["topology"].split(":")[0], r["placement"][:4]) for r in sel))
            out.append(f"{model} on {gpus:,} GPUs: MFU (%)")
            out.append(f"{'method':<26}" + "".join(f"{t + '/' + p:>18}" for t, p in cols))
            methods = list(dict.fromkeys((r["dp_method"], r["a2a_method"]) for r in sel))
            for dm, am in methods:
                label = dm if am == "a2a-direct" else f"{dm} + {am}"
                cells = []
                for t, p in cols:
                    hit = [
                        r
                        for r in sel
                        if r["topology"].split(":")[0] == t
                        and r["placement"][:4] == p
                        and (r["dp_method"], r["a2a_method"]) == (dm, am)
                    ]
                    cells.append(f"{hit[0]['mfu'] * 100:>18.1f}" if hit else f"{'-':>18}")
                out.append(f"{label:<26}" + "".join(cells))
            out.append("")
    skipped = [(p["model"], p["gpus"], p["topology"], p["placement"], p["skipped"]) for p in points if p["skipped"]]
    for model, gpus, topo, pl, why in skipped:
        for what, reason in why.items():
            out.append(f"not in the table: {model} {gpus:,} {topo} {pl} {what}: {reason}")
    return "\n".join(out)


def findings(points: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per model and scale (fat-tree, contiguous): MFU of NCCL (its tuner, the baseline), the best method and
    what it is, and the step's shares (bubble, exposed all-to-all, exposed gradient reduction) under NCCL."""
    rows = rows_of(points)
    out: dict[str, Any] = {}
    for p in points:
        if p["topology"].split(":")[0] != "clos" or p["placement"] != "contiguous" or not p["rows"]:
            continue
        by = {r["dp_method"]: r for r in p["rows"] if r["a2a_method"] == "a2a-direct"}
        base = by.get("nccl")
        if base is None:
            continue
        best = max(by.values(), key=lambda r: r["mfu"])
        step = base["step_s"]
        bd = base["breakdown"]
        dp = sum(v for k, v in bd.items() if k.startswith("dp-") or k in ("param-all-gather", "fsdp"))
        key = f"{p['model']}@{p['gpus']}"
        out[key] = {
            "mfu_nccl": base["mfu"],
            "mfu_best": best["mfu"],
            "best_method": best["dp_method"],
            "share_bubble": bd.get("bubble", 0.0) / step,
            "share_a2a": bd.get("a2a", 0.0) / step,
            "share_tp": bd.get("tp", 0.0) / step,
            "share_dp_exposed_nccl": dp / step,
            "share_compute": bd.get("compute", 0.0) / step,
        }
    # the spread over fabrics and placements per model, scale and method
    spread: dict[str, Any] = {}
    for r in rows:
        k = f"{r['model']}@{r['gpus']}:{r['dp_method']}+{r['a2a_method']}"
        lo, hi = spread.get(k, (1.0, 0.0))
        spread[k] = (min(lo, r["mfu"]), max(hi, r["mfu"]))
    return {"per_point": out, "mfu_range_over_fabrics": spread}


def plot(points: Sequence[dict[str, Any]], folder: Path) -> list[str]:
    """workload_mfu.png (MFU by method, fabric and placement) and workload_breakdown.png (where the step goes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = rows_of(points)
    if not rows:
        return []
    panels = list(dict.fromkeys((r["model"], r["gpus"]) for r in rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2), squeeze=False)
    for ax, (model, gpus) in zip(axes[0], panels):
        sel = [r for r in rows if r["model"] == model and r["gpus"] == gpus]
        methods = list(
            dict.fromkeys(r["dp_method"] if r["a2a_method"] == "a2a-direct" else r["a2a_method"] for r in sel)
        )
        topos = list(dict.fromkeys(r["topology"] for r in sel))
        width = 0.8 / max(1, len(topos))
        for j, t in enumerate(topos):
            for pl, marker in (("contiguous", None), ("scattered", "x")):
                ys, xs = [], []
                for i, m in enumerate(methods):
                    hit = [
                        r
                        for r in sel
                        if r["topology"] == t
                        and r["placement"] == pl
                        and (r["dp_method"] if r["a2a_method"] == "a2a-direct" else r["a2a_method"]) == m
                    ]
                    if hit:
                        xs.append(i + (j - (len(topos) - 1) / 2) * width)
                        ys.append(hit[0]["mfu"] * 100)
                if marker is None:
                    ax.bar(xs, ys, width, label=t.split(":")[0], color=f"C{j}")
                else:
                    ax.plot(xs, ys, "kx", ms=4, label="scattered" if j == 0 else None)
        ax.set_xticks(range(len(methods)))
        ax.set_xticklabels(methods, rotation=60, ha="right", fontsize=7)
        ax.set_title(f"{model}, {gpus:,} GPUs", fontsize=9)
        ax.set_ylabel("MFU (%)")
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "workload_mfu.png", dpi=110)
    plt.close(fig)
    # breakdown: fat-tree, contiguous; ring, inc-int8 and the adaptive choice
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.0), squeeze=False)
    for ax, (model, gpus) in zip(axes[0], panels):
        sel = [
            r
            for r in rows
            if r["model"] == model
            and r["gpus"] == gpus
            and r["placement"] == "contiguous"
            and r["topology"].startswith("clos")
            and r["a2a_method"] == "a2a-direct"
            and r["dp_method"] in ("nccl", "ring-1nic", "inc-int32", "inc-int8", "adaptive")
        ]
        bottom = [0.0] * len(sel)
        for k, part in enumerate(BREAKDOWN_ORDER):
            vals = [r["breakdown"].get(part, 0.0) / r["step_s"] * 100 for r in sel]
            if any(vals):
                ax.bar(range(len(sel)), vals, bottom=bottom, label=part, color=f"C{k}")
                bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_xticks(range(len(sel)))
        ax.set_xticklabels([r["dp_method"] for r in sel], rotation=45, ha="right", fontsize=8)
        ax.set_title(f"{model}, {gpus:,} GPUs (fat-tree)", fontsize=9)
        ax.set_ylabel("share of the step (%)")
    axes[0][-1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(folder / "workload_breakdown.png", dpi=110)
    plt.close(fig)
    return ["workload_mfu.png", "workload_breakdown.png"]


def validation_entries(v: Validation) -> dict[str, Any]:
    """What summary.json's `validation` gains."""
    return {"workload_max_rel_error": v.max_rel_error, "workload_tolerance": v.tolerance}


def write(folder: Path, points: Sequence[dict[str, Any]], v: Validation | None, seconds: float) -> dict[str, Any]:
    """workload.json, workload_table.txt and the plots; summary.json (if there) gains `workload` and the
    validation entries.  Returns the summary's workload section."""
    folder.mkdir(parents=True, exist_ok=True)
    plots = plot(points, folder)
    text = table(points)
    if v is not None:
        text = v.table() + "\n\n" + text
    (folder / "workload_table.txt").write_text(text + "\n")
    section = {
        "findings": findings(points),
        "plots": plots,
        "seconds": seconds,
        "point_seconds": {f"{p['model']}@{p['gpus']}:{p['topology']}:{p['placement']}": p["seconds"] for p in points},
        "validation": v.to_dict() if v else None,
    }
    (folder / "workload.json").write_text(json.dumps({"points": list(points), **section}, indent=1) + "\n")
    summary_path = folder / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        if v is not None:
            summary.setdefault("validation", {}).update(validation_entries(v))
        summary["workload"] = {k: section[k] for k in ("findings", "plots", "seconds", "point_seconds")}
        summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    return section
