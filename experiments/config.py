"""What an experiment is (configuration) and what it measured (one row per worker and repetition), as plain data.

No Mininet here: the runner fills these in and writes raw.csv; everything a
report says (summary.json, the table, the plots) is computed from raw.csv by
experiments.allreduce.analysis, so a results folder can be re-analysed on any machine and
a test can check that the summary follows from the raw rows.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from emulation.shaping import LinkShape
from hosts.methods import METHODS

# The methods of an ExperimentConfig (and of the training experiment) unless told; the bandwidth preset, which
# `make emulate` runs, adds the host baselines hier and tree (ALL_METHODS).
DEFAULT_METHODS = ("inc-int32", "inc-int16", "inc-int8", "ring", "ring-bf16")
DEFAULT_SIZES = (1024, 16384, 131072)
DEFAULT_HOST_COUNTS = (4, 8, 16)
# With the switches on the C engine (a few % of a core each at this rate), the 16 Python host agents are what
# the two cores must keep up with: at 2 Mbit/s an int8 job's agents handle about 780 frames/s each, and the
# points stay link-bound on an idle machine (at 10 Mbit/s the int32 job was 1.66x and int8 4.2x its wire bound,
# all cores busy, the switches 5%). Long sweeps: --bw, --sizes (e.g. 1Mi-elem) and the time they take.
DEFAULT_BW_MBPS = 2.0
DEFAULT_REPS = 5
RING_WINDOW = 64
ALL_METHODS = ("inc-int32", "inc-int16", "inc-int8", "ring", "ring-bf16", "hier", "tree")


@dataclass(frozen=True)
class Preset:
    """A named sweep: what `make emulate` runs (the command line's own options override any of it)."""

    doc: str
    host_counts: tuple[int, ...]
    sizes: tuple[int, ...]
    methods: tuple[str, ...]
    bw_mbps: float
    delay_ms: float = 0.0


PRESETS: dict[str, Preset] = {
    # links slow enough for the switches and agents to keep up, so the wire is the limit. Only sizes whose wire
    # time dwarfs a repetition's fixed costs: the slowest of 16 agents starting after the barrier's release, the
    # exponent round and a tree's pipeline fill and drain. At 1K elements those costs are all there is, and at
    # 16K they are a large share (docs/experiments.md, Presets). Small all-reduces are the latency preset's
    # question, asked with a delay that dominates those costs.
    "bandwidth": Preset(
        "large all-reduces where the links' rate sets the pace",
        DEFAULT_HOST_COUNTS,
        (131072,),
        ALL_METHODS,
        DEFAULT_BW_MBPS,
    ),
    # The bandwidth preset with small sizes as well (about 9 minutes): the calibration input of `p4ina simulate
    # --calibrate` (tests/simulation/data/emulation-k4), where the small points fit the model's per-packet costs.
    "sweep": Preset(
        "the bandwidth preset at 1Ki, 16Ki and 128Ki elements (the simulator's calibration input)",
        DEFAULT_HOST_COUNTS,
        DEFAULT_SIZES,
        ALL_METHODS,
        DEFAULT_BW_MBPS,
    ),
    # small all-reduces over links whose propagation delay dwarfs a software hop and a frame's serialization:
    # the O(log N) methods against the ring's 2(N-1) steps. After the barrier's release an in-network round
    # trip waits for the last of 16 agents (woken at once on 2 cores) to start and, once its results arrive
    # together, for the last to take its own: tens of ms that 100 ms per link (a 600 ms path) make a few
    # percent (docs/experiments.md, Presets). One size keeps the preset under 5 minutes.
    "latency": Preset(
        "small all-reduces where each hop's delay sets the pace", (16,), (1024,), ALL_METHODS, 100.0, delay_ms=100.0
    ),
}


class ConfigError(ValueError):
    """An experiment configuration that cannot run; the message names the field."""


@dataclass(frozen=True)
class ExperimentConfig:
    topology: str = "fat-tree:4"  # controller.topospec.load_topology syntax
    host_counts: tuple[int, ...] = DEFAULT_HOST_COUNTS
    sizes: tuple[int, ...] = DEFAULT_SIZES  # elements (float32) per all-reduce
    methods: tuple[str, ...] = DEFAULT_METHODS
    reps: int = DEFAULT_REPS
    warmup: int = 1
    backend: str = "embedded"
    shape: LinkShape = LinkShape(bw_mbps=DEFAULT_BW_MBPS)
    slots: int = 128  # the in-network window: slots of the job on each switch
    ring_window: int = RING_WINDOW
    input_kind: str = "normal"
    seed: int = 0  # inputs and the order of methods within each repetition follow from it
    step_timeout_s: float = 120.0  # one all-reduce of one method; longer and the step has failed
    results_root: Path = Path("results")
    name: str = ""

    def __post_init__(self) -> None:
        if not self.host_counts or any(n < 2 for n in self.host_counts):
            raise ConfigError(
                f"host counts {self.host_counts}: each must be >= 2 (an all-reduce of one host is a copy)"
            )
        if not self.sizes or any(s < 1 for s in self.sizes):
            raise ConfigError(f"sizes {self.sizes}: each must be >= 1 element")
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ConfigError(f"methods {bad or '(none)'}: choose from {', '.join(METHODS)}")
        if len(set(self.methods)) != len(self.methods):
            raise ConfigError(f"methods {self.methods} lists one twice")
        if self.reps < 1 or self.warmup < 0:
            raise ConfigError(f"reps must be >= 1 and warmup >= 0 (got {self.reps}, {self.warmup})")
        if self.iterations * len(self.sizes) > 250:
            raise ConfigError("(reps + warmup) x sizes must stay below 250 all-reduces per job (the epoch is 8 bits)")
        if not 1 <= self.slots <= 512:
            raise ConfigError(f"slots {self.slots} outside 1..512 (a switch has 512)")
        if self.step_timeout_s <= 0:
            raise ConfigError(f"step_timeout_s must be > 0, got {self.step_timeout_s}")

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
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["shape"] = LinkShape(**kw.get("shape", {}))
        kw["results_root"] = Path(kw.get("results_root", "results"))
        for key in ("host_counts", "sizes", "methods"):
            if key in kw:
                kw[key] = tuple(kw[key])
        return cls(**kw)

    def with_(self, **changes: Any) -> ExperimentConfig:
        return replace(self, **changes)


@dataclass
class Sample:
    """One worker's view of one repetition of one method, plus what the runner saw of that repetition.

    Times are seconds on the shared clock (hosts.clock). The per-repetition columns (rep_*, wire_*, ...)
    are the same on every rank's row of a repetition: raw.csv then holds everything the report needs.
    """

    method: str
    hosts: int
    elements: int
    rep: int
    warmup: bool
    order: int  # position of this method within the repetition (methods run in a shuffled order)
    step: int
    rank: int
    t_release: float = math.nan  # the barrier's release: the common start
    t_start: float = math.nan  # this worker began
    t_done: float = math.nan  # its float32 result was complete
    latency_s: float = math.nan  # t_done - t_release
    agree_s: float = 0.0
    quantize_s: float = 0.0
    dequantize_s: float = 0.0
    network_s: float = math.nan  # the rest: latency - wake-up - agree - quantize - dequantize
    packets_sent: int = 0
    retransmissions: int = 0
    bytes_sent: int = 0
    packets_received: int = 0
    duplicates: int = 0
    speculated: bool = False  # in-network: no exponent rounds (the previous all-reduce's exponents were the guess)
    missed_exponents: int = 0  # ... chunks sent again because the guess was not the agreed exponent
    digest: str = ""
    checker: bool = False
    rel_l2_error: float = math.nan
    max_abs_error: float = math.nan
    snr_db: float = math.nan
    max_error_ratio: float = math.nan
    rel_l2_target: float = math.nan
    error: str = ""
    # -- the repetition, as the runner saw it ---------------------------------------------------------
    wire_bytes: int = 0  # bytes the busiest link direction carried during the repetition
    wire_link: str = ""  # which one (switch:port>neighbour or neighbour>switch:port)
    t_wire_s: float = math.nan  # wire_bytes * 8 / link rate: what the wire allows
    t_path_s: float = math.nan  # the method's chain of dependent hops (experiments.bounds)
    host_up_bytes: int = 0  # the busiest host's uplink (what it sent), for bytes per element
    host_down_bytes: int = 0  # ... and downlink (what it received)
    switch_busy: float = math.nan  # the busiest switch process's CPU share during the repetition
    busiest_switch: str = ""
    agents_busy: float = math.nan  # the busiest host agent's CPU share
    cores_busy: float = math.nan  # all cores, anyone's work
    ours_busy: float = math.nan  # of which our switches, agents and runner, and the interrupts of our frames
    # Where the cores went, in cores (1.0 = one core for the whole repetition): what explains a cpu-bound point.
    agents_cores: float = math.nan  # every host agent (user + system time of their processes)
    switches_cores: float = math.nan  # every switch process
    kernel_cores: float = math.nan  # all cores' system, irq and softirq time (includes the processes' system time)
    # What line rate would take: the repetition's CPU time (all cores, anyone's) and the kernel's, over T_wire;
    # and the kernel's CPU per frame on the wire (every link transmission counted once).
    line_rate_cores: float = math.nan
    line_rate_kernel_cores: float = math.nan
    wire_frames: int = 0
    kernel_us_per_frame: float = math.nan

    @classmethod
    def columns(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def row(self) -> list[str]:
        out = []
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool):
                out.append(str(int(v)))
            elif isinstance(v, float):
                out.append("" if math.isnan(v) else repr(v))
            else:
                out.append(str(v))
        return out

    @classmethod
    def from_row(cls, row: Mapping[str, str]) -> Sample:
        kw: dict[str, Any] = {}
        for f in fields(cls):
            text = row.get(f.name, "")
            kind = f.type if isinstance(f.type, str) else f.type.__name__
            if kind == "bool":
                kw[f.name] = text not in ("", "0", "False")
            elif kind == "int":
                kw[f.name] = int(text) if text else 0
            elif kind == "float":
                kw[f.name] = float(text) if text not in ("",) else math.nan
            else:
                kw[f.name] = text
        return cls(**kw)


def write_raw(samples: Iterable[Sample], path: Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(Sample.columns())
        for s in samples:
            w.writerow(s.row())


def read_raw(path: Path) -> list[Sample]:
    with open(path, newline="") as fh:
        return [Sample.from_row(r) for r in csv.DictReader(fh)]


@dataclass
class ExperimentResult:
    config: ExperimentConfig
    samples: list[Sample] = field(default_factory=list)
    out_dir: Path | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    startup_s: float | None = None
    duration_s: float | None = None
    problems: list[str] = field(default_factory=list)  # what went wrong outside any one repetition
