"""From raw.csv to what a report says: repetitions, points, speed-ups, bounds and checks. Pure; no plotting.

Everything here is computed from the Sample rows alone, so `summarize(read_raw(path))`
reproduces a run's summary.json, and a reviewer can recompute it.

- A repetition's latency is its slowest worker's (t_done - t_release, one clock).
- A repetition is correct when every rank reported without error, all digests
  agree (every rank holds the same sum), and the checker rank's result meets
  the method's accuracy target (relative L2 error) and its per-element bound.
  An all-to-all's ranks hold different blocks: each rank checked every block it
  received (a wrong one is the rank's error), and their digests differ.
- A point (method, hosts, size) reports the median over its measured
  repetitions with a 95% bootstrap interval, measured / T_wire and
  measured / T_path, and what bounded it (experiments.bounds.classify).
- Speed-ups are ratios of medians, over the float32 ring, the bf16 ring and
  the best host method at that point; one is a headline only when both points
  are link- or latency-bound, otherwise the summary says why it was left out.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from experiments import bounds, stats
from experiments.config import ExperimentConfig, Sample
from experiments.results import jsonable
from hosts.methods import METHODS

GOOD_BOUNDS = ("link", "latency")
# /proc's CPU times tick every 10 ms: a repetition shorter than this has CPU shares that are mostly rounding (an 8 ms
# all-reduce read 50% of the cores busy and 0% of it ours); the words say so, and the report's note on other
# programs' load leaves those out
CPU_SHARES_MIN_S = 0.5


def _median(xs: Iterable[float]) -> float:
    vals = [x for x in xs if not math.isnan(x)]
    return statistics.median(vals) if vals else math.nan


@dataclass
class Rep:
    method: str
    hosts: int
    elements: int
    rep: int
    warmup: bool
    latency_s: float
    ok: bool
    problems: list[str]
    t_wire_s: float
    t_path_s: float
    wire_bytes: int
    wire_link: str
    host_up_bytes: int
    host_down_bytes: int
    switch_busy: float
    busiest_switch: str
    agents_busy: float
    cores_busy: float
    ours_busy: float
    retransmissions: int
    bytes_sent: int
    rel_l2_error: float
    rel_l2_target: float
    max_abs_error: float
    snr_db: float
    max_error_ratio: float
    parts: dict[str, float]
    speculated: bool = False  # in-network: the workers guessed the exponents (no exponent rounds)
    missed_exponents: int = 0  # ... chunks sent again because a guess missed (the same on every rank)
    agents_cores: float = math.nan  # where the cores went (experiments.config.Sample)
    switches_cores: float = math.nan
    kernel_cores: float = math.nan
    line_rate_cores: float = math.nan
    line_rate_kernel_cores: float = math.nan
    kernel_us_per_frame: float = math.nan

    @property
    def t_over_wire(self) -> float:
        return self.latency_s / self.t_wire_s if self.t_wire_s > 0 else math.nan

    @property
    def t_over_path(self) -> float:
        return self.latency_s / self.t_path_s if self.t_path_s > 0 else math.nan


def repetitions(samples: Sequence[Sample]) -> list[Rep]:
    """One Rep per (method, hosts, elements, rep), checked from its ranks' rows."""
    groups: dict[tuple[str, int, int, int], list[Sample]] = defaultdict(list)
    for s in samples:
        groups[(s.method, s.hosts, s.elements, s.rep)].append(s)
    out = []
    for (method, hosts, elements, rep), rows in sorted(groups.items()):
        rows.sort(key=lambda s: s.rank)
        first = rows[0]
        problems = [f"rank {s.rank}: {s.error}" for s in rows if s.error]
        ranks = {s.rank for s in rows if not s.error}
        if len(ranks) < hosts:
            missing = sorted(set(range(hosts)) - ranks)
            if not problems:
                problems.append(f"no result from ranks {missing}")
        digests = {s.digest for s in rows if not s.error}
        if len(digests) > 1 and not METHODS[method].alltoall:  # an all-to-all's ranks hold different blocks
            problems.append(f"ranks disagree on the sum ({len(digests)} different digests)")
        checker = next((s for s in rows if s.checker and not s.error), None)
        if checker is None:
            if not problems:
                problems.append("no checked result")
        else:
            if not checker.rel_l2_error <= checker.rel_l2_target:
                problems.append(
                    f"relative L2 error {checker.rel_l2_error:.3g} misses the target {checker.rel_l2_target:.3g}"
                )
            if not checker.max_error_ratio <= 1.0:
                problems.append(f"an element is {checker.max_error_ratio:.3g}x its error bound off")
        good = [s for s in rows if not s.error]
        latency = max((s.latency_s for s in good), default=math.nan) if len(ranks) == hosts else math.nan
        slowest = max(good, key=lambda s: s.latency_s) if good else first
        parts = {
            "start": slowest.t_start - slowest.t_release,
            "agree": slowest.agree_s,
            "quantize": slowest.quantize_s,
            "dequantize": slowest.dequantize_s,
            "network": slowest.network_s,
        }
        out.append(
            Rep(
                method=method,
                hosts=hosts,
                elements=elements,
                rep=rep,
                warmup=first.warmup,
                latency_s=latency,
                ok=not problems,
                problems=problems,
                t_wire_s=first.t_wire_s,
                t_path_s=first.t_path_s,
                wire_bytes=first.wire_bytes,
                wire_link=first.wire_link,
                host_up_bytes=first.host_up_bytes,
                host_down_bytes=first.host_down_bytes,
                switch_busy=first.switch_busy,
                busiest_switch=first.busiest_switch,
                agents_busy=first.agents_busy,
                cores_busy=first.cores_busy,
                ours_busy=first.ours_busy,
                retransmissions=sum(s.retransmissions for s in rows),
                bytes_sent=sum(s.bytes_sent for s in rows),
                rel_l2_error=checker.rel_l2_error if checker else math.nan,
                rel_l2_target=checker.rel_l2_target if checker else METHODS[method].rel_l2_target,
                max_abs_error=checker.max_abs_error if checker else math.nan,
                snr_db=checker.snr_db if checker else math.nan,
                max_error_ratio=checker.max_error_ratio if checker else math.nan,
                parts=parts,
                speculated=bool(good) and all(s.speculated for s in good),
                missed_exponents=max((s.missed_exponents for s in good), default=0),
                agents_cores=first.agents_cores,
                switches_cores=first.switches_cores,
                kernel_cores=first.kernel_cores,
                line_rate_cores=first.line_rate_cores,
                line_rate_kernel_cores=first.line_rate_kernel_cores,
                kernel_us_per_frame=first.kernel_us_per_frame,
            )
        )
    return out


@dataclass
class Point:
    method: str
    hosts: int
    elements: int
    reps: list[Rep] = field(default_factory=list)  # measured ones, not the warm-up

    @property
    def ok(self) -> bool:
        return bool(self.reps) and all(r.ok for r in self.reps)

    @property
    def latencies(self) -> list[float]:
        return [r.latency_s for r in self.reps if not math.isnan(r.latency_s)]

    def median_ci(self) -> tuple[float, float, float]:
        lat = self.latencies
        return stats.median_ci(lat, seed=self.hosts * 1000 + self.elements % 997) if lat else (math.nan,) * 3

    @property
    def bound(self) -> str:
        if not self.ok:
            return "failed"
        return bounds.classify(
            self.median_ci()[0],
            _median(r.t_wire_s for r in self.reps),
            _median(r.t_path_s for r in self.reps),
            switch_busy=_median(r.switch_busy for r in self.reps),
            agents_busy=_median(r.agents_busy for r in self.reps),
            cores_busy=_median(r.cores_busy for r in self.reps),
        )

    @property
    def headline(self) -> bool:
        return self.bound in GOOD_BOUNDS

    def figures(self) -> dict[str, Any]:
        med, lo, hi = self.median_ci()
        reps = self.reps
        worst = max(reps, key=lambda r: r.rel_l2_error if not math.isnan(r.rel_l2_error) else math.inf, default=None)
        t_wire = _median(r.t_wire_s for r in reps)
        t_path = _median(r.t_path_s for r in reps)
        busiest = statistics.mode([r.busiest_switch for r in reps]) if reps else ""
        return {
            "method": self.method,
            "hosts": self.hosts,
            "elements": self.elements,
            "median_latency_s": med,
            "ci95_latency_s": [lo, hi],
            "min_latency_s": min(self.latencies, default=math.nan),
            "max_latency_s": max(self.latencies, default=math.nan),
            "reps": len(reps),
            "ok": self.ok,
            "problems": sorted({p for r in reps for p in r.problems}),
            "goodput_bps": self.elements * 32 / med if med > 0 else math.nan,
            "t_wire_s": t_wire,
            "t_over_wire": med / t_wire if t_wire > 0 else math.nan,
            "t_path_s": t_path,
            "t_over_path": med / t_path if t_path > 0 else math.nan,
            "bound": self.bound,
            "headline": self.headline,
            "busiest_link": statistics.mode([r.wire_link for r in reps]) if reps else "",
            "wire_bytes": _median(r.wire_bytes for r in reps),
            "bytes_per_element_up": _median(r.host_up_bytes / self.elements for r in reps),
            "bytes_per_element_down": _median(r.host_down_bytes / self.elements for r in reps),
            "retransmissions": sum(r.retransmissions for r in reps),
            "speculated_reps": sum(r.speculated for r in reps),
            "missed_exponents": sum(r.missed_exponents for r in reps),
            "rel_l2_error": worst.rel_l2_error if worst else math.nan,
            "rel_l2_target": METHODS[self.method].rel_l2_target,
            "accuracy_ok": all(r.rel_l2_error <= r.rel_l2_target and r.max_error_ratio <= 1.0 for r in reps),
            "max_abs_error": max((r.max_abs_error for r in reps), default=math.nan),
            "snr_db": min((r.snr_db for r in reps), default=math.nan),
            "max_error_ratio": max((r.max_error_ratio for r in reps), default=math.nan),
            "parts_s": {
                k: _median(r.parts[k] for r in reps) for k in ("start", "agree", "quantize", "dequantize", "network")
            },
            "switch_busy": _median(r.switch_busy for r in reps),
            "busiest_switch": busiest,
            "agents_busy": _median(r.agents_busy for r in reps),
            "cores_busy": _median(r.cores_busy for r in reps),
            "ours_busy": _median(r.ours_busy for r in reps),
            "agents_cores": _median(r.agents_cores for r in reps),
            "switches_cores": _median(r.switches_cores for r in reps),
            "kernel_cores": _median(r.kernel_cores for r in reps),
            "line_rate_cores": _median(r.line_rate_cores for r in reps),
            "line_rate_kernel_cores": _median(r.line_rate_kernel_cores for r in reps),
            "kernel_us_per_frame": _median(r.kernel_us_per_frame for r in reps),
        }


def points(samples: Sequence[Sample]) -> dict[tuple[str, int, int], Point]:
    out: dict[tuple[str, int, int], Point] = {}
    for r in repetitions(samples):
        p = out.setdefault((r.method, r.hosts, r.elements), Point(r.method, r.hosts, r.elements))
        if not r.warmup:
            p.reps.append(r)
    return out


HOST_BASELINES = ("ring", "ring-bf16", "hier", "tree")


def speedup(num: Point | None, den: Point | None) -> dict[str, Any] | None:
    """num's latency over den's: how much faster den is (None when either is missing or failed)."""
    if num is None or den is None or not num.ok or not den.ok or not num.latencies or not den.latencies:
        return None
    value, lo, hi = stats.ratio_ci(num.latencies, den.latencies, seed=den.hosts + den.elements % 991)
    headline = num.headline and den.headline
    why = (
        None
        if headline
        else (f"{den.method} is {den.bound}-bound" if not den.headline else f"{num.method} is {num.bound}-bound")
    )
    return {"value": value, "ci95": [lo, hi], "baseline": num.method, "headline": headline, "left_out_because": why}


def summarize(config: ExperimentConfig, samples: Sequence[Sample], **extra: Any) -> dict[str, Any]:
    """summary.json: per point the figures, speed-ups and checks; which points are headlines and why not."""
    pts = points(samples)
    out_points = []
    for key in sorted(pts, key=lambda k: (k[1], k[2], config.methods.index(k[0]) if k[0] in config.methods else 99)):
        p = pts[key]
        fig = p.figures()
        method, n, size = key
        if METHODS[method].in_network:
            hosts_here = [pts[(b, n, size)] for b in HOST_BASELINES if (b, n, size) in pts and pts[(b, n, size)].ok]
            for b in HOST_BASELINES:  # None where that baseline did not run (or failed) at this point
                fig[f"speedup_over_{b.replace('-', '_')}"] = speedup(pts.get((b, n, size)), p)
            best = min(hosts_here, key=lambda q: q.median_ci()[0], default=None)
            fig["speedup_over_best_host"] = speedup(best, p)
        out_points.append(fig)
    left_out = [
        {
            "method": f["method"],
            "hosts": f["hosts"],
            "elements": f["elements"],
            "bound": f["bound"],
            "t_over_wire": f["t_over_wire"],
            "t_over_path": f["t_over_path"],
            "why": why_not(f),
        }
        for f in out_points
        if not f["headline"]
    ]
    nested: dict[str, dict[str, dict[str, Any]]] = {}
    for f in out_points:
        nested.setdefault(f["method"], {}).setdefault(str(f["hosts"]), {})[str(f["elements"])] = f
    summary = {
        "config": config.to_dict(),
        "backend": config.backend,
        "ok": bool(out_points) and all(f["ok"] for f in out_points) and not extra.get("problems"),
        "points": out_points,
        "methods": nested,
        "left_out": left_out,
        "bound_rule": {"slack": bounds.BOUND_SLACK, "cpu_busy": bounds.CPU_BUSY, "machine_busy": bounds.MACHINE_BUSY},
        "accuracy_targets": {m: METHODS[m].rel_l2_target for m in config.methods},
    }
    summary.update({k: v for k, v in extra.items() if k != "problems"})
    summary["problems"] = list(extra.get("problems") or [])
    return jsonable(summary)


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def why_not(f: dict[str, Any]) -> str:
    """Why a point is no headline, in words a reader can check against the table (works on raw figures and on the
    NaN-free summary.json form): how far it was from each bound and why a bound is missing, then what the CPUs did,
    with how much those CPU figures can be trusted for an all-reduce this short."""
    if not f["ok"]:
        return "failed: " + "; ".join(f["problems"][:3])
    tw, tp = _num(f["t_over_wire"]), _num(f["t_over_path"])
    t_wire, wire_bytes = _num(f.get("t_wire_s")), _num(f.get("wire_bytes"))
    if t_wire == 0 and wire_bytes > 0:  # shaped links, but all the bytes went on the shaper's burst credit
        no_wire = f"the busiest link's {wire_bytes:,.0f} bytes fit in the shaper's burst of two frames"
    else:
        no_wire = "the links are not rate-limited"
    have = [
        f"{r:.2f}x {name} ({what})"
        for r, name, what in (
            (tw, "T_wire", "what the busiest link's bytes need at the link rate"),
            (tp, "T_path", "the method's chain of hops"),
        )
        if not math.isnan(r)
    ]
    missing = [
        f"no {name} ({why})"
        for r, name, why in ((tw, "T_wire", no_wire), (tp, "T_path", "the links have no delay"))
        if math.isnan(r)
    ]
    if have:
        out = (
            f"{f['bound']}: measured {' and '.join(have)}, above the {bounds.BOUND_SLACK}x within which a bound "
            "explains a point" + (f"; {missing[0]}" if missing else "")
        )
    else:
        out = f"{f['bound']}: {' and '.join(missing)}: nothing in the network bounds it, the time is the software's"
    sb, ab, cb = _num(f["switch_busy"]), _num(f["agents_busy"]), _num(f["cores_busy"])
    ac, sc, kc = (_num(f.get(k)) for k in ("agents_cores", "switches_cores", "kernel_cores"))
    if not math.isnan(cb):
        out += f". CPU during the all-reduce: all cores {cb * 100:.0f}% busy (any process)"
        if not (math.isnan(ac) or math.isnan(sc) or math.isnan(kc)):
            out += f"; host agents used {ac:.2f} cores, switch processes {sc:.2f}, the kernel {kc:.2f}"
        if not math.isnan(sb):
            out += f"; busiest switch {f['busiest_switch']} {sb * 100:.0f}% busy, busiest host agent {ab * 100:.0f}%"
        lc, lk = _num(f.get("line_rate_cores")), _num(f.get("line_rate_kernel_cores"))
        if f["bound"] == "cpu" and not (math.isnan(lc) or math.isnan(lk)):
            out += f"; line rate would take {lc:.2f} cores (kernel {lk:.2f})"
        latency = _num(f.get("median_latency_s"))
        if not math.isnan(latency) and latency < CPU_SHARES_MIN_S:
            out += (
                f" (read from /proc's 10 ms ticks over a {latency * 1e3:.0f} ms all-reduce: coarse, and 0.00 means "
                "less than one tick, not idle)"
            )
    return out


def rep_table(samples: Sequence[Sample]) -> list[dict[str, Any]]:
    """Every repetition as a flat dict (for notebooks)."""
    rows = []
    for r in repetitions(samples):
        d = asdict(r)
        d["t_over_wire"], d["t_over_path"] = r.t_over_wire, r.t_over_path
        rows.append(d)
    return rows
