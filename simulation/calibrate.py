"""Calibration against the emulation: read a results folder, fit per-packet costs, report the error table.

This is the only module that reads the emulation's results folders, and it
reads them as files (config.json, summary.json, raw.csv; topology.json when
present), never through the emulation package: the simulator is a layer of
its own, and the folder format is being extended (new columns, new methods,
more lanes per packet).  So everything is optional: medians come from
summary.json or, failing that, from raw.csv's measured repetitions; methods
the simulator does not know are listed and skipped; missing fields fall
back to the defaults `make emulate` uses.

Medians are the emulation's own (summary.json's `points`: the slowest worker's latency from the barrier's
release, median over the measured repetitions), with each point's `bound` label kept for the error table;
raw.csv (experiments.config.Sample rows, one per worker and repetition) fills in what summary.json
lacks, the lane count the run used and the agents' wake-ups after the release (the last one, and its lead
over the median one).

The model is the emulation preset (links at the configured rate and delay with HTB's credit, p4ina's
frames from `wireformat` and `hosts.reliable`, the controller's routes and the planner's trees) plus the
costs that physics does not give: host software per step of a host method, host and switch CPU per
packet, a switch's work per lane, its forwarding cost, a switch hop's software latency, a per-call start
and a per-rank finish.  The rest is the machine's scheduler, two cores for 20 switches and up to 16
agents: the last agent's wake-up after the barrier's release is taken as measured (a collective waits for
every member), and the agents' finish, the same queue for the same cores when their results arrive, as a
fitted multiple of how far that last wake-up trailed the median one at the same point (the machine's
measured contention then; runs of the same code differ through it (docs/simulation.md), and later
runs held out of the fit check that it predicts rather than follows).  `fit` chooses the rest to
minimise the eighth power of the log errors over every measured point (close to the largest error, which is
what the test bounds; a bounded Nelder-Mead from a coarse grid, no SciPy needed).
"""

from __future__ import annotations

import csv
import json
import logging
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.topology import Topology, TopologyError
from simulation.engine import Engine
from simulation.methods import EMULATED, canonical
from simulation.model import Evaluation, Scenario
from simulation.params import EMULATION, Preset, mbit
from wireformat import AGG
from wireformat.format import ETH_LEN, IPV4_LEN, UDP_LEN

LOG = logging.getLogger(__name__)

# Emulation method -> simulation method: one to one (the single-NIC ring and tree under the names that say so).
METHOD_MAP = {m: canonical(m) for m in EMULATED}
LANE_CANDIDATES = (16, 32, 64, 128, 256, 512, 1024)
FIT = {  # parameter: (low, high, start)
    "step_overhead": (0.0, 5e-3, 0.2e-3),
    "switch_agg_latency": (0.0, 5e-3, 0.5e-3),
    "host_packet_cost": (0.0, 2e-3, 0.1e-3),
    "switch_packet_cost": (0.0, 2e-3, 0.1e-3),
    "switch_forward_cost": (0.0, 1e-3, 0.02e-3),
    "switch_lane_cost": (0.0, 20e-6, 0.5e-6),
    "start_cost": (0.0, 50e-3, 5e-3),
    "barrier_cost": (0.0, 5e-3, 0.0),
    "finish_skew_ratio": (0.0, 4.0, 1.0),
}
GRID = {  # coarse starting points for the search (the loss has flat valleys where a cost does not bind)
    "step_overhead": (0.0,),
    "switch_agg_latency": (0.3e-3, 1e-3),
    "host_packet_cost": (0.03e-3, 0.1e-3),
    "switch_packet_cost": (0.05e-3, 0.15e-3),
    "switch_forward_cost": (0.01e-3, 0.05e-3),
    "switch_lane_cost": (0.0, 1e-6),
    "start_cost": (3e-3, 8e-3),
    "barrier_cost": (0.0, 0.3e-3),
}


class CalibrationError(ValueError):
    """A results folder the calibration cannot use; the message says what is missing."""


@dataclass(frozen=True)
class Point:
    method: str  # the emulation's name
    hosts: int
    elements: int
    median_s: float
    bound: str = ""  # what the emulation says bounded it: link, latency, cpu, unexplained ("" when not said)
    t_wire_s: float = math.nan  # the busiest link's bytes over its rate, as the emulation measured them
    start_s: float = (
        0.0  # the last worker's wake-up after the barrier's release (raw.csv; else parts_s.start), as measured
    )
    skew_s: float = 0.0  # the agents' start skew: the last wake-up after the release minus the median one (raw.csv)
    speculated: bool = False  # in-network: most repetitions guessed their exponents (no exponent rounds)


@dataclass
class Results:
    folder: Path
    topology: str
    topology_json: dict[str, Any] | None
    bw_mbps: float
    delay_ms: float
    slots: int
    cpus: float
    points: list[Point]
    skipped: dict[str, str] = field(default_factory=dict)
    lanes: int | None = None  # elements per in-network packet, inferred from raw.csv
    notes: list[str] = field(default_factory=list)

    @property
    def links(self) -> str:
        """The links the run had, e.g. '2 Mbit/s' or '100 Mbit/s, 50 ms'."""
        return f"{self.bw_mbps:g} Mbit/s" + (f", {self.delay_ms:g} ms" if self.delay_ms else "")


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as ex:
        raise CalibrationError(f"{path} is not JSON: {ex}") from ex


def _float(text: Any) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


def _truthy(text: Any) -> bool:
    return str(text).strip().lower() in ("1", "true", "yes")


def _summary_points(summary: Mapping[str, Any]) -> dict[tuple[str, int, int], dict[str, Any]]:
    """summary.json's points (the `points` list; the `methods` nesting of older folders), ok ones only."""
    entries: list[Mapping[str, Any]] = [e for e in summary.get("points") or [] if isinstance(e, Mapping)]
    if not entries:
        for method, per_hosts in (summary.get("methods") or {}).items():
            for hosts, per_size in (per_hosts or {}).items():
                for size, entry in (per_size or {}).items():
                    if isinstance(entry, Mapping):
                        entries.append({**entry, "method": method, "hosts": hosts, "elements": size})
    out: dict[tuple[str, int, int], dict[str, Any]] = {}
    for e in entries:
        try:
            key = (str(e["method"]), int(e["hosts"]), int(e["elements"]))
        except (KeyError, TypeError, ValueError):
            continue
        med = _float(e.get("median_latency_s"))
        if med > 0 and e.get("ok", True):
            start = _float((e.get("parts_s") or {}).get("start"))
            reps = int(e.get("reps") or 0)
            out[key] = {
                "median": med,
                "bound": str(e.get("bound") or ""),
                "t_wire": _float(e.get("t_wire_s")),
                "start": start if start >= 0 else 0.0,
                "speculated": reps > 0 and 2 * int(e.get("speculated_reps") or 0) > reps,
            }
    return out


def _lanes_of(method: str, elements: int, packets: int, nbytes: int | None, slots: int) -> int | None:
    """The lane count that explains one worker's packets: chunks plus one exponent round per slot used, with
    the bytes of wire format v2 where raw.csv has them; or else chunks alone (older formats)."""
    width = {"inc-int32": 4, "inc-int16": 2, "inc-int8": 1}.get(method, 4)
    frame = ETH_LEN + IPV4_LEN + UDP_LEN + AGG.header_bytes
    for lanes in LANE_CANDIDATES:
        chunks = -(-elements // lanes)
        used = min(slots, chunks)
        if packets == chunks + used and (nbytes is None or nbytes == chunks * (frame + lanes * width) + used * frame):
            return lanes
    for lanes in LANE_CANDIDATES:
        if packets == -(-elements // lanes):
            return lanes
    return None


def _raw_points(raw: Path, slots: int) -> tuple[dict[tuple[str, int, int], dict[str, Any]], int | None]:
    """Medians from raw.csv: a repetition's latency is its slowest worker's (experiments.config.Sample
    rows, one per worker); older folders have one row per repetition.  Where the rows have the wake-ups
    (t_start - t_release), also the last one and its lead over the median one (`start`, `skew`).  Warm-ups,
    failed rows and repetitions with a failed worker are left out."""
    reps: dict[tuple[str, int, int, str], list[float]] = {}
    wake: dict[tuple[str, int, int, str], list[float]] = {}  # every worker's wake-up after the release
    bad: set[tuple[str, int, int, str]] = set()
    wire: dict[tuple[str, int, int], list[float]] = {}
    lanes_seen: list[int] = []
    guessed: dict[tuple[str, int, int], list[bool]] = {}
    with raw.open(newline="") as fh:
        for row in csv.DictReader(fh):
            try:
                key = (row["method"], int(row["hosts"]), int(row["elements"]))
                lat = float(row["latency_s"])
            except (KeyError, TypeError, ValueError):
                continue
            if _truthy(row.get("warmup", "0")):
                continue
            rep = (*key, str(row.get("rep", len(reps))))
            if row.get("error") or row.get("ok", "1") in ("0", "False", "false") or not lat > 0:
                bad.add(rep)
                continue
            reps.setdefault(rep, []).append(lat)
            guessed.setdefault(key, []).append(_truthy(row.get("speculated", "0")))
            up = _float(row.get("t_start")) - _float(row.get("t_release"))
            if up >= 0:
                wake.setdefault(rep, []).append(up)
            tw = _float(row.get("t_wire_s"))
            if tw > 0:
                wire.setdefault(key, []).append(tw)
            if (
                key[0].startswith("inc-")
                and row.get("packets_sent")
                and row.get("retransmissions", "0") in ("0", "")
                and not _truthy(row.get("speculated", "0"))
            ):
                per = int(row["packets_sent"])
                if "rank" not in row:  # one row per repetition: packets of all workers together
                    per //= max(1, key[1])
                nbytes = int(row["bytes_sent"]) if row.get("bytes_sent", "").isdigit() and "rank" in row else None
                lanes = _lanes_of(key[0], key[2], per, nbytes, slots)
                if lanes:
                    lanes_seen.append(lanes)
    per_point: dict[tuple[str, int, int], list[float]] = {}
    start: dict[tuple[str, int, int], list[float]] = {}
    skew: dict[tuple[str, int, int], list[float]] = {}
    for rep, lats in reps.items():
        if rep not in bad:
            per_point.setdefault(rep[:3], []).append(max(lats))
            if rep in wake:
                # the last agent's wake-up: a collective waits for every member's contribution, so the slowest
                # to start (not summary.json's parts_s.start, the wake-up of the slowest to finish) holds it up
                ups = wake[rep]
                start.setdefault(rep[:3], []).append(max(ups))
                skew.setdefault(rep[:3], []).append(max(ups) - statistics.median(ups))
    out = {
        k: {
            "median": statistics.median(v),
            "bound": "",
            "t_wire": statistics.median(wire[k]) if k in wire else math.nan,
            "start": statistics.median(start[k]) if k in start else None,  # None: no wake-ups in these rows
            "skew": statistics.median(skew[k]) if k in skew else 0.0,
            "speculated": 2 * sum(guessed.get(k, [])) > len(guessed.get(k, [])),
        }
        for k, v in per_point.items()
    }
    lanes = statistics.mode(lanes_seen) if lanes_seen else None
    return out, lanes


def read_results(folder: Path | str) -> Results:
    """Median latency per (method, hosts, elements) and the configuration of an emulation results folder.

    summary.json's points are the emulation's own medians (and bounds); raw.csv fills in what summary.json
    lacks (or the whole table when it is missing) and gives the lane count the run used."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CalibrationError(f"{folder} is not a results folder")
    config_file = _json(folder / "config.json")
    summary = _json(folder / "summary.json")
    cfg = config_file.get("config") or summary.get("config") or {}
    env = config_file.get("environment", {})
    shape = cfg.get("shape") or {}
    slots = int(cfg.get("slots") or 128)
    found = _summary_points(summary)
    lanes = None
    raw = folder / "raw.csv"
    if raw.exists():
        from_raw, lanes = _raw_points(raw, slots)
        for key, entry in from_raw.items():
            if key in found:
                if math.isnan(found[key]["t_wire"]):
                    found[key]["t_wire"] = entry["t_wire"]
                if entry["start"] is not None:  # else summary.json's parts_s.start (the only wake-up it has)
                    found[key]["start"], found[key]["skew"] = entry["start"], entry["skew"]
                found[key]["speculated"] = found[key]["speculated"] or entry["speculated"]
            else:
                found[key] = entry
    if not found:
        raise CalibrationError(f"{folder}: no measured latencies in summary.json or raw.csv")
    skipped = {}
    points = []
    for (method, hosts, elements), e in sorted(found.items()):
        if method not in METHOD_MAP:
            skipped[method] = "the simulator has no model of this method"
            continue
        points.append(
            Point(
                method,
                hosts,
                elements,
                e["median"],
                e["bound"],
                e["t_wire"],
                e.get("start") or 0.0,
                e.get("skew", 0.0),
                bool(e.get("speculated", False)),
            )
        )
    topo_json = _json(folder / "topology.json") or None
    res = Results(
        folder,
        str(cfg.get("topology", "fat-tree:4")),
        topo_json,
        float(shape.get("bw_mbps") or 0.0),
        float(shape.get("delay_ms") or 0.0),
        slots,
        float(env.get("cpus") or 2),
        points,
        skipped,
        lanes,
    )
    if res.bw_mbps <= 0:
        raise CalibrationError(
            f"{folder}: links were unshaped (bw 0); the model needs the link rate the emulation ran at"
        )
    if lanes and lanes != AGG.num_lanes:
        res.notes.append(
            f"the results were made with {lanes} lanes per packet, this tree's wire format has {AGG.num_lanes}: "
            "re-run the emulation or check out the matching commit"
        )
    loaded = [n for n in summary.get("notes") or [] if "other programs" in str(n)]
    res.notes += [f"the emulation's own note: {n}" for n in loaded]
    return res


def base_preset(res: Results) -> Preset:
    return EMULATION.with_(
        name="emulation-calibrated",
        nic_bw=mbit(res.bw_mbps),
        fabric_bw=mbit(res.bw_mbps),
        cable_latency=res.delay_ms / 1e3,
        inc_slots=min(res.slots, EMULATION.switch_slots),
        emulator_cores=res.cpus,
        description=f"fitted to {res.folder.name}: {res.topology}, {res.bw_mbps:g} Mbit/s links",
    )


def with_params(p: Preset, values: Mapping[str, float]) -> Preset:
    return p.with_(**dict(values))


def finish_queue(pt: Point, cores: float) -> float:
    """The measured start skew scaled to the finish's queue: the skew (the last wake-up's lead over the median one)
    is about half the agents' per-call work queued for the cores, (N / 2) / C of it; at the finish the agents
    beyond the cores queue, (N - C) / C of it. So 2 (N - C) / N skews: none while every agent has a core."""
    return pt.skew_s * (2 * max(0.0, pt.hosts - cores) / pt.hosts if cores > 0 else 1.0)


def scheduler_s(pt: Point, preset: Preset) -> float:
    """The machine's part of a point, from its measurements: the last wake-up, and the finish (finish_queue)."""
    return pt.start_s + preset.finish_skew_ratio * finish_queue(pt, preset.emulator_cores)


class Model:
    """The evaluations of every (host count) of a results folder, built once; predict() for any costs."""

    def __init__(self, res: Results, engine: Engine | None = None) -> None:
        self.res = res
        self.base = base_preset(res)
        engine = engine or Engine()
        spec = res.topology
        tmp = None
        if res.topology_json is not None:
            try:
                Topology.from_dict(res.topology_json)
                tmp = res.folder / "topology.json"
            except TopologyError:
                tmp = None
        if tmp is not None:
            spec = str(tmp)
        self.evals: dict[int, Evaluation] = {}
        for hosts in sorted({pt.hosts for pt in res.points}):
            methods = tuple(sorted({METHOD_MAP[pt.method] for pt in res.points if pt.hosts == hosts}))
            sizes = tuple(sorted({pt.elements * 4 for pt in res.points if pt.hosts == hosts}))
            ev = Evaluation(
                Scenario(topology=spec, gpus=hosts, methods=methods, sizes=sizes, preset="emulation"), self.base, engine
            )
            ev.build()
            ev.solve()
            self.evals[hosts] = ev

    def predict(self, preset: Preset) -> list[float]:
        """The model's time for every point.  The last agent's wake-up after the barrier's release is a cost of
        the machine's scheduler, which the emulation measures per repetition (t_start - t_release); it is taken
        as measured, on top of the fitted per-call cost.  Their finish is the same queue for the same cores (every
        agent handles its result at about the same time), so it costs `finish_skew_ratio` times the start's skew
        (the last wake-up minus the median one) measured at the same point, scaled to the agents that queue at
        the finish (finish_queue): how busy the machine was then."""
        out = []
        for pt in self.res.points:
            ev = self.evals[pt.hosts]
            ev.preset = preset.with_(start_cost=preset.start_cost + scheduler_s(pt, preset), speculate=pt.speculated)
            plan = next(pl for pl in ev.plans if pl.method == METHOD_MAP[pt.method])
            out.append(ev.times(plan, pt.elements * 4))
        return out


def _nelder_mead(
    f: Callable[[list[float]], float], x0: list[float], steps: list[float], iters: int = 400
) -> list[float]:
    """Minimise f from x0 (a plain Nelder-Mead: reflection, expansion, contraction, shrink)."""
    pts = [x0] + [[x + (s if i == j else 0.0) for j, x in enumerate(x0)] for i, s in enumerate(steps)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(len(pts)), key=vals.__getitem__)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) < 1e-12:
            break
        centre = [sum(p[j] for p in pts[:-1]) / (len(pts) - 1) for j in range(len(x0))]
        refl = [c + (c - w) for c, w in zip(centre, pts[-1])]
        fr = f(refl)
        if fr < vals[0]:
            exp = [c + 2 * (c - w) for c, w in zip(centre, pts[-1])]
            fe = f(exp)
            pts[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = refl, fr
        else:
            con = [c + 0.5 * (w - c) for c, w in zip(centre, pts[-1])]
            fc = f(con)
            if fc < vals[-1]:
                pts[-1], vals[-1] = con, fc
            else:
                pts = [pts[0]] + [[b + 0.5 * (x - b) for x, b in zip(p, pts[0])] for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    return pts[min(range(len(pts)), key=vals.__getitem__)]


@dataclass
class Calibration:
    results: list[Results]  # the folders fitted together
    preset: Preset
    fitted: dict[str, float]
    table: list[dict[str, Any]]
    held_out: list[dict[str, Any]] = field(
        default_factory=list
    )  # check(): folders predicted with these costs, not fitted
    warnings: list[str] = field(default_factory=list)  # e.g. fewer points than free parameters

    @property
    def skipped(self) -> dict[str, str]:
        """Methods of any folder that the simulator has no model of, and why."""
        return {m: why for r in self.results for m, why in r.skipped.items()}

    @property
    def max_rel_error(self) -> float:
        return max((abs(r["rel_error"]) for r in self.table), default=math.nan)

    @property
    def held_out_max_rel_error(self) -> float:
        return max((abs(r["rel_error"]) for r in self.held_out), default=math.nan)

    def by_bound(self) -> dict[str, dict[str, float]]:
        """Largest and median |error| over the points the emulation labels link-, latency- or cpu-bound (or else)."""
        out: dict[str, dict[str, float]] = {}
        for bound in sorted({r["bound"] or "unlabelled" for r in self.table}):
            errs = [abs(r["rel_error"]) for r in self.table if (r["bound"] or "unlabelled") == bound]
            out[bound] = {"points": len(errs), "max_rel_error": max(errs), "median_rel_error": statistics.median(errs)}
        return out

    def to_dict(self) -> dict[str, Any]:
        first = self.results[0]
        return {
            "folder": str(first.folder),
            "folders": [str(r.folder) for r in self.results],
            "topology": first.topology,
            "fitted": self.fitted,
            "max_rel_error": self.max_rel_error,
            "by_bound": self.by_bound(),
            "skipped_methods": self.skipped,
            "notes": [n for r in self.results for n in r.notes],
            "lanes_in_results": first.lanes,
            "lanes_in_model": AGG.num_lanes,
            "table": self.table,
            "held_out": self.held_out,
            "held_out_max_rel_error": self.held_out_max_rel_error if self.held_out else None,  # JSON has no NaN
            "free_parameters": len(self.fitted),
            "points": len(self.table),
            "warnings": self.warnings,
            "preset": self.preset.to_dict(),
        }

    def text(self) -> str:
        lines = [f"warning: {w}" for w in self.warnings]
        lines += [f"calibration against {r.folder} ({r.topology}, {r.links})" for r in self.results]
        lines += [
            "fitted: " + ", ".join(f"{k} {v:.4g}" for k, v in self.fitted.items()),
            f"{'method':<10} {'hosts':>5} {'elements':>9} {'links':>18} {'bound':>11} {'emulation ms':>13}"
            f" {'model ms':>10} {'error':>8}",
        ]
        lines += [_row_text(r) for r in self.table]
        lines.append(f"max |error| {self.max_rel_error * 100:.1f}% over {len(self.table)} points")
        for bound, e in self.by_bound().items():
            lines.append(
                f"  {bound}-bound (the emulation's label): {e['points']} points, max |error| "
                f"{e['max_rel_error'] * 100:.1f}%, median {e['median_rel_error'] * 100:.1f}%"
            )
        if self.held_out:
            lines.append("held out (predicted with the fitted costs, not fitted to):")
            lines += [f"{r['folder']}: " + _row_text(r) for r in self.held_out]
            lines.append(
                f"held out: max |error| {self.held_out_max_rel_error * 100:.1f}% over {len(self.held_out)} points"
            )
        for m, why in self.skipped.items():
            lines.append(f"skipped {m}: {why}")
        lines += [f"note: {n}" for r in self.results for n in r.notes]
        return "\n".join(lines)


def _row_text(r: Mapping[str, Any]) -> str:
    return (
        f"{r['method']:<10} {r['hosts']:>5} {r['elements']:>9} {r['links']:>18} {r['bound'] or '-':>11} "
        f"{r['measured_s'] * 1e3:>13.1f} {r['predicted_s'] * 1e3:>10.1f} {r['rel_error'] * 100:>+7.1f}%"
    )


def _table(pairs: Sequence[tuple[Results, Point]], predicted: Sequence[float]) -> list[dict[str, Any]]:
    return [
        {
            "folder": r.folder.name,
            "method": pt.method,
            "hosts": pt.hosts,
            "elements": pt.elements,
            "links": r.links,
            "bound": pt.bound,
            "measured_s": pt.median_s,
            "predicted_s": p,
            "rel_error": (p - pt.median_s) / pt.median_s,
            "wake_up_s": pt.start_s,
            "skew_s": pt.skew_s,
        }
        for (r, pt), p in zip(pairs, predicted)
    ]


def _read_all(folders: Path | str | Sequence[Path | str]) -> list[Results]:
    paths = [folders] if isinstance(folders, (str, Path)) else list(folders)
    results = [read_results(f) for p in paths for f in result_folders(p)]
    if not results:
        raise CalibrationError("no results folder given")
    empty = [r for r in results if not r.points]
    if empty:
        raise CalibrationError(f"{empty[0].folder}: none of its methods ({', '.join(empty[0].skipped)}) has a model")
    return results


def check(calib: Calibration, folders: Path | str | Sequence[Path | str], engine: Engine | None = None) -> Calibration:
    """Predict results folders that the costs were not fitted to (out of sample), with their own links and their
    own measured wake-ups; the error table goes to `calib.held_out`.  A fit can follow its own points' noise; a
    run it never saw cannot be followed."""
    pairs, predicted = [], []
    fitted = {r.folder.resolve() for r in calib.results}
    for res in _read_all(folders):
        if res.folder.resolve() in fitted:
            raise CalibrationError(f"{res.folder} was fitted: a held-out check needs a run the fit did not see")
        model = Model(res, engine)
        predicted += model.predict(with_params(model.base, calib.fitted))
        pairs += [(res, pt) for pt in res.points]
    calib.held_out = _table(pairs, predicted)
    LOG.info("held out: max error %.1f%% over %d points", calib.held_out_max_rel_error * 100, len(pairs))
    return calib


def result_folders(path: Path | str) -> list[Path]:
    """A results folder, or a folder of them (e.g. the sweep and latency runs of
    tests/simulation/data/emulation-k4): the folders fitted together."""
    path = Path(path)
    if not path.is_dir():
        raise CalibrationError(f"{path} is not a results folder")
    marks = ("config.json", "summary.json", "raw.csv")
    if any((path / m).exists() for m in marks):
        return [path]
    subs = sorted(p for p in path.iterdir() if p.is_dir() and any((p / m).exists() for m in marks))
    if not subs:
        raise CalibrationError(
            f"{path}: neither a results folder (config.json, summary.json, raw.csv) nor a folder of them"
        )
    return subs


def fit(
    folders: Path | str | Sequence[Path | str], params: Sequence[str] = tuple(FIT), engine: Engine | None = None
) -> Calibration:
    """Fit `params` (a subset of FIT) to the medians of one or more results folders with one set of costs (each
    folder keeps its own links: rate, delay); the others keep the emulation preset's values. The preset returned
    simulates the links of the largest folder without a link delay (the bandwidth runs, which the emulation
    preset describes), or of the first folder when every one has a delay."""
    results = _read_all(folders)
    unknown = set(params) - set(FIT)
    if unknown:
        raise CalibrationError(f"cannot fit {sorted(unknown)}; fittable: {', '.join(FIT)}")
    models = [Model(r, engine) for r in results]
    points = [(r, pt) for r in results for pt in r.points]  # in the order predict() gives them
    measured = [pt.median_s for _, pt in points]
    names = list(params)
    lo = [FIT[n][0] for n in names]
    hi = [FIT[n][1] for n in names]
    start = {n: FIT[n][2] for n in names}

    def predict(values: Mapping[str, float]) -> list[float]:
        return [t for m in models for t in m.predict(with_params(m.base, values))]

    def decode(x: list[float]) -> dict[str, float]:  # a logistic map keeps every parameter inside its bounds
        return {n: lo[i] + (hi[i] - lo[i]) / (1 + math.exp(-x[i])) for i, n in enumerate(names)}

    def encode(v: Mapping[str, float]) -> list[float]:
        out = []
        for i, n in enumerate(names):
            q = min(max((v[n] - lo[i]) / (hi[i] - lo[i]), 1e-6), 1 - 1e-6)
            out.append(math.log(q / (1 - q)))
        return out

    def loss(x: list[float]) -> float:
        pred = predict(decode(x))
        # the eighth power of the log errors: close to minimising the largest error (what the 15% test asks)
        return sum(math.log(p / m) ** 8 for p, m in zip(pred, measured) if p > 0 and m > 0)

    import itertools

    def loss_at(v: Mapping[str, float]) -> float:
        return loss(encode(v))

    grid = [dict(zip(names, combo)) for combo in itertools.product(*(GRID.get(n, (start[n],)) for n in names))]
    starts = sorted(grid, key=loss_at)[:3] + [start]
    best, best_loss = None, math.inf
    for v in starts:
        x = _nelder_mead(loss, encode(v), [1.0] * len(names))
        x = _nelder_mead(loss, x, [0.3] * len(names))  # restart: Nelder-Mead stalls on flat valleys
        if loss(x) < best_loss:
            best, best_loss = x, loss(x)
    assert best is not None
    fitted = decode(best)
    pred = predict(fitted)
    # the preset for simulating this emulation elsewhere: the fit on the largest undelayed folder's links, plus
    # the median over its points of the measured last wake-up and the fitted finish
    first = max((m for m in models if not m.res.delay_ms), key=lambda m: len(m.res.points), default=models[0])
    costs = with_params(first.base, fitted)
    wake = statistics.median(scheduler_s(pt, costs) for pt in first.res.points)
    preset = costs.with_(start_cost=costs.start_cost + wake, finish_skew_ratio=0.0)
    table = _table(points, pred)
    LOG.info("calibration: max error %.1f%% over %d points", max(abs(r["rel_error"]) for r in table) * 100, len(table))
    return Calibration(results, preset, fitted, table, warnings=underdetermined(len(names), len(points)))


def underdetermined(params: int, points: int) -> list[str]:
    """The warning for a fit of more free parameters than measured points (empty when there are enough)."""
    if points >= params:
        return []
    return [
        f"under-determined fit: {params} free parameters fitted to {points} points; the costs are not "
        "identified by these runs (many sets fit them equally well) and the error table cannot show it: "
        "fit more points (more host counts, sizes or methods, or several results folders together)"
    ]
