"""What an experiment is (configuration) and what it produced (measurements), as plain data.

No Mininet here: the runner fills these in, the report reads them back from
results.json, so a results folder can be analysed on any machine.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from emulation.topo import LinkShape
from wireformat import AGG

# Method names: in-network all-reduce with int32 results, the same with the
# switches narrowing results to int8 (data-plane quantization), and the ring.
INC_INT32, INC_INT8, RING = "inc-int32", "inc-int8", "ring"
METHODS = (INC_INT32, INC_INT8, RING)
QUANTIZE = {INC_INT32: "none", INC_INT8: "int8"}
RESULT_TYPE = {INC_INT32: "int32", INC_INT8: "int8"}

DEFAULT_SIZES = (1024, 16384, 262144)
DEFAULT_HOST_COUNTS = (4, 8, 16)
DEFAULT_BW_MBPS = 1.0
RING_WINDOW = 64
RING_FRAME = 1500 + 14  # a full ring data packet on the wire (IPv4 MTU + Ethernet header)
RING_ELEMS_PER_PACKET = (1500 - 20 - 8 - 16) // 4  # hosts.ring: UDP payload minus its 16-byte header
ETH_OVERHEAD = 14 + 20 + 8

# A measurement is called CPU-bound when the links carried less than this share of their rate
# while a switch process (or the machine) was busy at least this share of the time.
LINK_BOUND_UTIL = 0.6
CPU_BUSY = 0.6
MACHINE_BUSY = 0.85  # ... or all cores together were busy at least this share of the time
MIN_ACTIVE_S = 0.05  # below this much all-reduce time, CPU shares are noise (process wake-ups, timer ticks)


class ConfigError(ValueError):
    """An experiment configuration that cannot run; the message names the field."""


@dataclass(frozen=True)
class ExperimentConfig:
    topology: str = "fat-tree:4"  # controller.cli.load_topology syntax
    host_counts: tuple[int, ...] = DEFAULT_HOST_COUNTS
    sizes: tuple[int, ...] = DEFAULT_SIZES  # elements (float32) per all-reduce
    methods: tuple[str, ...] = METHODS
    reps: int = 3
    warmup: int = 1
    backend: str = "embedded"
    shape: LinkShape = LinkShape(bw_mbps=DEFAULT_BW_MBPS)
    slots: int = 128  # the in-network window: slots of the job on each switch
    ring_window: int = RING_WINDOW
    input_kind: str = "normal"
    seed: int = 0
    run_timeout_s: float = 600.0  # one (method, hosts, size) measurement, all repetitions
    results_root: Path = Path("results")
    name: str = ""

    def __post_init__(self) -> None:
        if not self.host_counts or any(n < 2 for n in self.host_counts):
            raise ConfigError(f"host counts {self.host_counts}: each must be >= 2 (an all-reduce of one host is a copy)")
        if not self.sizes or any(s < 1 for s in self.sizes):
            raise ConfigError(f"sizes {self.sizes}: each must be >= 1 element")
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ConfigError(f"methods {bad or '(none)'}: choose from {', '.join(METHODS)}")
        if self.reps < 1 or self.warmup < 0:
            raise ConfigError(f"reps must be >= 1 and warmup >= 0 (got {self.reps}, {self.warmup})")
        if self.iterations > 255:
            raise ConfigError("reps + warmup must stay below 256 (the epoch is 8 bits)")
        if not 1 <= self.slots <= 1024:
            raise ConfigError(f"slots {self.slots} outside 1..1024 (a switch has 1024)")

    @property
    def iterations(self) -> int:
        return self.reps + self.warmup

    def label(self) -> str:
        """Short configuration part of the results folder name."""
        topo = self.topology.replace(":", "").replace("/", "_")
        parts = [topo, self.backend, "h" + "-".join(map(str, self.host_counts))]
        s = self.shape
        if s.bw_mbps:
            parts.append(f"bw{s.bw_mbps:g}")
        if s.delay_ms:
            parts.append(f"d{s.delay_ms:g}ms")
        if s.loss_pct:
            parts.append(f"loss{s.loss_pct:g}")
        if self.name:
            parts.append(self.name)
        return "_".join(parts)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["results_root"] = str(self.results_root)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ExperimentConfig:
        kw = dict(d)
        kw["shape"] = LinkShape(**kw.get("shape", {}))
        kw["results_root"] = Path(kw.get("results_root", "results"))
        for key in ("host_counts", "sizes", "methods"):
            if key in kw:
                kw[key] = tuple(kw[key])
        return cls(**kw)

    def with_(self, **changes: Any) -> ExperimentConfig:
        return replace(self, **changes)


def frame_bytes(method: str) -> tuple[int, int]:
    """(bytes up, bytes down) on the wire per 64-element chunk for the in-network methods."""
    up = AGG.frame_bytes(AGG.elem_types["ELEM_INT32"])
    down = AGG.frame_bytes(AGG.elem_types["ELEM_INT8"]) if method == INC_INT8 else up
    return up, down


@dataclass(frozen=True)
class Rep:
    """One repetition of one all-reduce: the job finishes when its slowest worker does."""

    index: int
    warmup: bool
    latency_s: float  # max over ranks
    rank_latency_s: tuple[float, ...]
    packets_sent: int  # all ranks
    retransmissions: int
    bytes_sent: int
    max_rank_bytes: int
    packets_received: int = 0
    duplicates: int = 0  # received but not needed (late copies of results already in, other rounds)

    def goodput_bps(self, elements: int) -> float:
        return elements * 4 * 8 / self.latency_s if self.latency_s > 0 else 0.0


@dataclass
class Measurement:
    method: str
    hosts: int
    size: int
    reps: list[Rep] = field(default_factory=list)
    ok: bool = False
    problems: list[str] = field(default_factory=list)
    max_error_ratio: float | None = None
    switch_cpu_s: dict[str, float] = field(default_factory=dict)
    machine_busy: float | None = None  # share of all cores busy (anyone: switches, workers) during the all-reduces
    emulation_busy: float | None = None  # ... of which our own switch and worker processes
    wall_s: float = 0.0
    switch_counters: dict[str, int] = field(default_factory=dict)
    link_bw_mbps: float | None = None

    # -- derived figures (over the measured repetitions, not the warm-up) -----------------------
    @property
    def measured(self) -> list[Rep]:
        return [r for r in self.reps if not r.warmup]

    def latencies(self) -> list[float]:
        return [r.latency_s for r in self.measured]

    @property
    def median_s(self) -> float | None:
        lat = self.latencies()
        return statistics.median(lat) if lat else None

    @property
    def spread_s(self) -> tuple[float, float] | None:
        lat = self.latencies()
        return (min(lat), max(lat)) if lat else None

    @property
    def goodput_bps(self) -> float | None:
        m = self.median_s
        return self.size * 4 * 8 / m if m else None

    @property
    def packets(self) -> int:
        return sum(r.packets_sent for r in self.measured)

    @property
    def retransmissions(self) -> int:
        return sum(r.retransmissions for r in self.measured)

    @property
    def link_utilisation(self) -> float | None:
        """The busiest host's sent bits per second over the link rate (1.0 = the link was the limit)."""
        if not self.link_bw_mbps or not self.measured:
            return None
        utils = [r.max_rank_bytes * 8 / r.latency_s / (self.link_bw_mbps * 1e6) for r in self.measured if r.latency_s > 0]
        return statistics.median(utils) if utils else None

    @property
    def max_switch_busy(self) -> tuple[str, float] | None:
        """The switch process that used the most CPU, as a share of the time its all-reduces ran."""
        active = sum(r.latency_s for r in self.reps)
        if not self.switch_cpu_s or active < MIN_ACTIVE_S:
            return None
        name = max(self.switch_cpu_s, key=lambda k: self.switch_cpu_s[k])
        return name, self.switch_cpu_s[name] / active

    @property
    def bound(self) -> str:
        """'link', 'cpu' or 'latency': what limited this measurement, as far as we can tell."""
        util = self.link_utilisation
        busy = self.max_switch_busy
        if util is not None and util >= LINK_BOUND_UTIL:
            return "link"
        if (busy and busy[1] >= CPU_BUSY) or (self.machine_busy is not None and self.machine_busy >= MACHINE_BUSY):
            return "cpu"
        return "latency"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        busy = self.max_switch_busy
        d["derived"] = {
            "median_latency_s": self.median_s,
            "min_latency_s": self.spread_s[0] if self.spread_s else None,
            "max_latency_s": self.spread_s[1] if self.spread_s else None,
            "goodput_bps": self.goodput_bps,
            "packets": self.packets,
            "retransmissions": self.retransmissions,
            "link_utilisation": self.link_utilisation,
            "max_switch_busy": {"switch": busy[0], "share": busy[1]} if busy else None,
            "bound": self.bound,
        }
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Measurement:
        kw = {k: v for k, v in d.items() if k != "derived"}
        kw["reps"] = [Rep(**{**r, "rank_latency_s": tuple(r["rank_latency_s"])}) for r in d.get("reps", [])]
        return cls(**kw)


def rep_from_reports(reports: Sequence[Mapping[str, Any]], warmup: int) -> list[Rep]:
    """Per-iteration figures from the workers' reports (each has a 'runs' list, one per iteration)."""
    runs = [r["runs"] for r in reports]
    count = min(len(r) for r in runs) if runs else 0
    out = []
    for i in range(count):
        per = [r[i] for r in runs]
        lat = tuple(float(p["latency_s"]) for p in per)
        out.append(Rep(
            index=i, warmup=i < warmup, latency_s=max(lat), rank_latency_s=lat,
            packets_sent=sum(int(p["packets_sent"]) for p in per),
            retransmissions=sum(int(p["retransmissions"]) for p in per),
            bytes_sent=sum(int(p["bytes_sent"]) for p in per),
            max_rank_bytes=max(int(p["bytes_sent"]) for p in per),
            packets_received=sum(int(p.get("packets_received", 0)) for p in per),
            duplicates=sum(int(p.get("duplicates", 0)) for p in per),
        ))
    return out


def speedups(measurements: Iterable[Measurement]) -> dict[tuple[str, int, int], float]:
    """(method, hosts, size) -> ring median / method median, for every in-network method that has a ring twin."""
    by = {(m.method, m.hosts, m.size): m for m in measurements if m.ok and m.median_s}
    out = {}
    for (method, n, size), m in by.items():
        ring = by.get((RING, n, size))
        if method == RING:
            continue
        if ring is not None and m.median_s:
            out[(method, n, size)] = ring.median_s / m.median_s  # type: ignore[operator]
    return out


def theory_ratio(hosts: int, method: str = INC_INT32) -> float:
    """Bandwidth-bound speed-up expected from bytes on the busiest host link (ring bytes / in-network bytes)."""
    ring_per_elem = 2 * (hosts - 1) / hosts * (RING_FRAME / RING_ELEMS_PER_PACKET)
    up, _down = frame_bytes(method)
    return ring_per_elem / (up / AGG.num_lanes)
