"""Physical and system parameters of a simulated cluster, and the named presets.

Everything here is a number with a unit and a reason: link rates and latencies
are the network's physics; per-step, per-packet and per-byte costs are what
the hosts and switches add on top, which is what calibration fits (see
simulation/calibrate.py).  SI units throughout: bytes, seconds, bytes/second.

Packet formats are not repeated here: the in-network frames come from
`wireformat.AGG` (lane count, header, the exponent round's empty frame) and
the lane widths each job needs from `wireformat.fixedpoint` (the shift a
job's fan-in asks for, the partial sums' width); the host methods' data and
acknowledgement datagrams from `hosts.reliable` (the transport ring, hier and
tree share), so a change of either wire format changes the model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from controller.names import NUM_SLOTS
from hosts.inc_worker import speculates
from hosts.reliable import (
    ACK_ENTRY,
    ACK_HDR,
    DATA_HDR,
    FRAME_OVERHEAD,
    MAX_UDP_PAYLOAD,
    WIRE_BYTES,
    CollectiveConfig,
    elements_per_packet,
)
from wireformat import AGG
from wireformat import fixedpoint as fxp


class ParamError(ValueError):
    """A parameter set that cannot describe a cluster; the message names the field."""


def gbit(x: float) -> float:
    """Gbit/s -> bytes/s."""
    return x * 1e9 / 8


def mbit(x: float) -> float:
    """Mbit/s -> bytes/s."""
    return x * 1e6 / 8


# The emulation's host methods (hosts/reliable.py, shared by ring, hier and tree): values in MTU-sized UDP
# datagrams behind a data header (float32 and bfloat16 datagrams carry the same bytes of payload), and
# batched selective acknowledgements: one ack datagram per `ack_every` data datagrams from a peer, or once
# the oldest unacknowledged one is `ack_delay_s` old, each ack a header plus one entry per datagram.
EMU_RING_PAYLOAD = elements_per_packet("float32") * WIRE_BYTES["float32"]
EMU_RING_OVERHEAD = FRAME_OVERHEAD + DATA_HDR.size
_TRANSPORT = {f.name: f.default for f in fields(CollectiveConfig)}
EMU_ACK_EVERY = int(_TRANSPORT["ack_every"])
EMU_ACK_DELAY = float(_TRANSPORT["ack_delay_s"])
EMU_ACK_OVERHEAD = FRAME_OVERHEAD + ACK_HDR.size
EMU_ACK_ENTRY = ACK_ENTRY.itemsize
# The emulation's shaped links (emulation/shaping.py): HTB at the link rate with a one-frame burst (1514 B), and
# HTB sends a frame whenever its bucket is not negative, so a link passes at most its burst plus the frame that
# takes the bucket below zero beyond its rate (Preset.credit_bytes): two full frames for the host methods' MTU
# datagrams, less for the in-network methods' narrower frames.
EMU_FULL_FRAME = FRAME_OVERHEAD + MAX_UDP_PAYLOAD
EMU_LINK_BURST = float(EMU_FULL_FRAME)
EXPONENT_FRAME = AGG.frame_bytes(AGG.elem_types["ELEM_NONE"])  # a slot's first round: header only, no lanes


def agg_frame(lanes: str) -> int:
    """Bytes on the wire of one in-network packet of `lanes` (Ethernet/IPv4/UDP/agg header/lanes)."""
    return AGG.frame_bytes(fxp.lane_elem(lanes))


def agg_elements() -> int:
    """float32 elements one in-network packet carries (the lane count of the wire format)."""
    return AGG.num_lanes


@dataclass(frozen=True)
class IncFrames:
    """The frames of one in-network job (wire format v2.1): hosts send `lanes`-wide contributions, the switches
    sum in int32, inner switches send partial sums up as `partial` lanes, the root narrows the sum back to
    `lanes` with the job's default shift, and every slot opens with an exponent round (header-only frames up
    and down: SwitchML's in-band per-block exponent agreement).

    On a balanced tree (every member at the same depth: the planner's trees on fat-trees and leaf-spines, the
    structural ones on Clos fabrics) narrow partial sums stay as narrow as the lanes on every level: each level
    shifts its sums right by the bits its additions gained (controller.planner._shifts), so `partial` is
    `lanes`.  On an unbalanced tree (a Dragonfly+ job over several groups: the root spine's own leaves are one
    level closer than the other groups' spines) the planner cannot shift by levels and keeps the partial sums
    unshifted, as wide as wireformat.fixedpoint.partial_bits says (int16 for int8 lanes of up to 256
    workers, else int32)."""

    lanes: str
    partial: str
    host_up: int  # bytes of a contribution frame, host -> its switch
    switch_up: int  # bytes of a partial-sum frame, switch -> parent switch
    down: int  # bytes of a result frame, every link down
    exponent: int  # bytes of an exponent-round frame, both ways

    @classmethod
    def of(cls, lanes: str, workers: int, balanced: bool = True) -> IncFrames:
        if workers < 1:
            raise ValueError(f"an in-network job needs at least one worker, got {workers}")
        bits = fxp.bits_of(lanes)  # refuses an unknown lane type by name
        partial = lanes
        if not balanced and bits < 32:
            shift = fxp.default_shift(workers, bits, bits)
            partial = {32: "int32", 16: "int16"}[fxp.partial_bits(workers, bits, bits, shift)]
        return cls(lanes, partial, agg_frame(lanes), agg_frame(partial), agg_frame(lanes), EXPONENT_FRAME)


@dataclass(frozen=True)
class Preset:
    """One cluster: link physics, host and switch costs, protocol sizes.

    A GPU is an endpoint with its own NIC (`nic_bw`); with `gpus_per_server` > 1
    the GPUs of a server also share an NVSwitch (`nvlink_bw` per GPU and
    direction).  `switch_latency` is paid at every switch a packet crosses and
    `cable_latency` on every link.
    """

    name: str
    description: str
    nic_bw: float  # bytes/s per direction, endpoint <-> first switch
    fabric_bw: float  # bytes/s per direction, switch <-> switch
    cable_latency: float  # s per link (propagation + serdes)
    switch_latency: float  # s per switch traversal (cut-through or store-and-forward of a small packet)
    gpus_per_server: int = 1
    nvlink_bw: float = 0.0  # bytes/s per GPU and direction to the server's NVSwitch; 0 = no NVLink
    nvlink_latency: float = 0.0  # s per NVLink hop
    # system: what software adds
    step_overhead: float = 0.0  # s per algorithm step over the network (send + receive software path)
    nvlink_step_overhead: float = 0.0  # s per algorithm step over NVLink
    host_packet_cost: float = 0.0  # s of host CPU per packet sent or received (caps a flow at one packet per cost)
    switch_packet_cost: float = 0.0  # s per aggregation packet in a switch (0 = line-rate ASIC)
    switch_lane_cost: float = 0.0  # s per lane of a data packet a switch aggregates (a software switch's lane work)
    switch_forward_cost: float = 0.0  # s per forwarded (non-aggregation) packet in a switch
    switch_agg_latency: float = 0.0  # s an aggregating switch adds to a packet's trip (not a throughput limit)
    host_byte_cost: float = 0.0  # s per byte of one pass over memory: a reduction, or staging data in or out
    emulator_cores: float = 0.0  # > 0: hosts and switches are processes sharing this many cores (an emulator)
    link_burst_bytes: float = 0.0  # a shaped link's token bucket (tc's burst): an all-reduce's first bytes pass at once
    # s per rank and call (the emulation: the agents handling their results); on an emulator, per rank beyond its
    # cores: the first `emulator_cores` agents run at once, the others queue for a core
    barrier_cost: float = 0.0
    # an emulator's finish, in units of its measured start skew (the last agent's wake-up minus the median one)
    # scaled to the agents beyond its cores (simulation.calibrate.finish_queue): the same agents queue for the
    # same cores when their results arrive. Only the calibration, which has the measured skew of every point,
    # applies it; a preset for simulating folds its median into start_cost.
    finish_skew_ratio: float = 0.0
    start_cost: float = (
        0.0  # s per call before the first packet leaves (the emulation: a Python call on a shared machine)
    )
    # protocol sizes
    mtu_payload: int = EMU_RING_PAYLOAD  # data bytes per frame of the host-based methods
    frame_overhead: int = EMU_RING_OVERHEAD  # header bytes per such frame on the wire
    ack_every: int = 0  # data frames per acknowledgement datagram at most (0: no acks on the wire, e.g. RDMA)
    ack_delay: float = 0.0  # s: an ack goes once its oldest entry is this old, even with fewer entries
    ack_overhead: int = 0  # bytes of one ack datagram on the wire besides its entries
    ack_entry: int = 0  # bytes per acknowledged data frame in an ack
    pipeline_chunk: int = 1 << 20  # bytes per pipelined chunk (tree, ring segments larger than this)
    inc_slots: int = 128  # in-network window: aggregation slots per job on each switch
    exponent_rounds: bool = (
        True  # p4ina's v2 format opens each slot with an exponent round (False: SHARP-like float sums)
    )
    # ... except where every slot carries one chunk: then p4ina's workers guess the exponents from the previous
    # all-reduce of the tensor (hosts.inc_worker) and skip the rounds. The model takes the guesses to hold
    # (the steady state of a training job; the emulation reports its misses per point).
    speculate: bool = True
    switch_slots: int = NUM_SLOTS  # slots per switch, shared by the jobs on it
    routing: str = "dmodk"  # "dmodk" (destination-based, InfiniBand ftree-like) or "ecmp" (hash of the flow)
    # NCCL's per-architecture constants (simulation/nccl.py): "hopper", "ampere", "volta"; "" = no GPUs (no nccl-*)
    gpu_arch: str = ""
    nccl_cpu: str = "intel"  # the servers' CPU vendor: NCCL's network post overhead (tuning.cc getNetOverhead)

    def __post_init__(self) -> None:
        for name in _PRESET_FIELDS:
            v = getattr(self, name)
            if isinstance(v, float | int) and not isinstance(v, bool) and (v < 0 or math.isnan(v)):
                raise ParamError(f"preset {self.name!r}: {name} = {v} must be >= 0")
        if self.nic_bw <= 0 or self.fabric_bw <= 0:
            raise ParamError(f"preset {self.name!r}: nic_bw and fabric_bw must be > 0")
        if self.gpus_per_server < 1:
            raise ParamError(f"preset {self.name!r}: gpus_per_server must be >= 1")
        if self.gpus_per_server > 1 and self.nvlink_bw <= 0:
            raise ParamError(f"preset {self.name!r}: {self.gpus_per_server} GPUs per server need nvlink_bw > 0")
        if self.mtu_payload < 4 or self.pipeline_chunk < 1:
            raise ParamError(f"preset {self.name!r}: mtu_payload must be >= 4 bytes and pipeline_chunk >= 1")
        if not 1 <= self.inc_slots <= self.switch_slots:
            raise ParamError(
                f"preset {self.name!r}: inc_slots {self.inc_slots} must be in 1..switch_slots ({self.switch_slots})"
            )
        if self.routing not in ("dmodk", "ecmp"):
            raise ParamError(f"preset {self.name!r}: routing must be 'dmodk' or 'ecmp', got {self.routing!r}")

    def exponent_slots(self, packets: int, window: int, lanes: str = "int32") -> int:
        """Slots that open with an exponent round in an in-network all-reduce of `packets` chunks of `lanes`."""
        if not self.exponent_rounds or (self.speculate and speculates(packets, window, fxp.lane_type(lanes))):
            return 0
        return min(max(1, window), packets)

    def with_(self, **changes: Any) -> Preset:
        unknown = set(changes) - set(_PRESET_FIELDS)
        if unknown:
            raise ParamError(f"preset has no parameter(s) {sorted(unknown)}")
        return replace(self, **changes)

    # -- derived ---------------------------------------------------------------------------------
    def wire_bytes(self, data: float, rate: Any = None) -> Any:
        """Bytes on the wire for `data` bytes of a host-based method: frames, headers and acknowledgements.

        `rate` (bytes/s, a number or an array) is the pace the frames arrive at, which decides how many
        a batched ack covers: every `ack_delay` at most, `ack_every` at least (None: full batches).  The
        acks travel the other way; for the methods' symmetric patterns (each rank receives about what it
        sends) a link direction carries the acks of as many frames as it carries frames, so they are
        counted on the data's flow.
        """
        if data <= 0:
            return 0.0 if rate is None or np.isscalar(rate) else np.zeros(np.shape(rate))
        frames = math.ceil(data / self.mtu_payload)
        return data + frames * (self.frame_overhead + self.ack_bytes(min(data, self.mtu_payload), rate, frames))

    def ack_bytes(self, frame_data: float, rate: Any = None, frames: int | None = None) -> Any:
        """Acknowledgement bytes per data frame of `frame_data` bytes arriving at `rate` bytes/s."""
        if self.ack_every <= 0:
            return 0.0 if rate is None or np.isscalar(rate) else np.zeros(np.shape(rate))
        cap = self.ack_every if frames is None else max(1, min(self.ack_every, frames))
        if rate is None:
            batch: Any = float(cap)
        elif isinstance(rate, float | int | np.floating):  # the same formula without numpy's per-call cost
            gap = (frame_data + self.frame_overhead) / max(float(rate), 1e-300)
            q = self.ack_delay / gap
            batch = float(cap) if q >= cap else min(max(1.0 + math.floor(q), 1.0), float(cap))
        else:
            gap = (frame_data + self.frame_overhead) / np.maximum(np.asarray(rate, dtype=np.float64), 1e-300)
            batch = np.clip(1.0 + np.floor(self.ack_delay / gap), 1.0, cap)
            if np.ndim(batch) == 0:
                batch = float(batch)
        return self.ack_overhead / batch + self.ack_entry

    def credit_bytes(self, frame: float) -> float:
        """Bytes a shaped link with a full bucket passes at once when it sends frames of `frame` bytes: the
        burst, and the frame that takes the bucket below zero (HTB charges a frame after sending it); 0 unshaped."""
        return self.link_burst_bytes + frame if self.link_burst_bytes > 0 else 0.0

    @property
    def host_frame(self) -> int:
        """Bytes on the wire of a full data frame of the host-based methods."""
        return self.mtu_payload + self.frame_overhead

    def frames(self, data: float) -> int:
        return math.ceil(data / self.mtu_payload) if data > 0 else 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Preset:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ParamError(f"preset: unknown parameter(s) {sorted(unknown)}")
        return cls(**d)


# looked up once: the calibration builds hundreds of thousands of presets
_PRESET_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Preset))


# The emulation's default (`make emulate`'s bandwidth preset): k=4 fat-tree, every link shaped to 2 Mbit/s by tc (HTB,
# a one-frame burst), host agents (the in-network ones' stream loop in C) and the embedded switch (its C engine, link
# delays held in its C port loop) on the machine's two cores. The costs are the calibration's one fit to the four
# committed runs (tests/simulation/data/emulation-k4: the sweep preset, two more runs of its 1K points and the latency
# preset with 100 ms links; `p4ina simulate --calibrate`), which also predicts two later runs it was not fitted to
# (tests/simulation/data/emulation-k4-held-out): 10 us per packet in a host agent, 22 us per packet a switch forwards,
# 33 us per step of a host method, and about nothing per aggregation packet beyond forwarding, per lane, per switch
# hop or per rank. The start (10.7 ms) is the fitted per-call cost (1.5 ms) plus the sweep's median measured wake-up
# of the last agent and its finish (0.79 x the start's skew scaled to the agents beyond the cores: the same agents
# queueing for the same cores), which the calibration takes per point. On two shared cores the agents' and the
# switches' per-packet work add up (the emulator's term), so the latencies alone do not tell them apart, and where a
# cost does not bind anywhere in the runs the fit leaves it near zero: read them together.

EMULATION = Preset(
    name="emulation",
    description=(
        "make emulate: k=4 fat-tree, 2 Mbit/s tc-shaped links, "
        "host agents and the embedded switch (C engine) on 2 cores"
    ),
    nic_bw=mbit(2.0),
    fabric_bw=mbit(2.0),
    cable_latency=0.0,
    switch_latency=0.0,
    step_overhead=32.5e-6,
    host_packet_cost=10.2e-6,
    switch_packet_cost=0.0,
    switch_lane_cost=0.0,
    switch_forward_cost=22.4e-6,
    switch_agg_latency=0.0,
    emulator_cores=2.0,
    link_burst_bytes=EMU_LINK_BURST,
    start_cost=1.52e-3 + 9.20e-3,
    barrier_cost=0.0,
    ack_every=EMU_ACK_EVERY,
    ack_delay=EMU_ACK_DELAY,
    ack_overhead=EMU_ACK_OVERHEAD,
    ack_entry=EMU_ACK_ENTRY,
    pipeline_chunk=EMU_RING_PAYLOAD,
    routing="ecmp",
)

# An NDR InfiniBand cluster of CPU hosts (one NIC each), the setting of NVIDIA's published SHARP figures.
# Switch traversal and host costs are the values the SHARP anchor fits (simulation/anchors.py, docs/simulation.md).
NDR = Preset(
    name="ndr",
    description="NDR 400 Gb/s InfiniBand cluster of CPU hosts, one NIC each, MPI-like host software",
    nic_bw=gbit(400),
    fabric_bw=gbit(400),
    cable_latency=25e-9,
    switch_latency=0.13e-6,
    step_overhead=0.578e-6,
    switch_agg_latency=0.576e-6,
    host_byte_cost=1.41e-9,
    mtu_payload=4096,
    frame_overhead=30,
    pipeline_chunk=1 << 20,
    inc_slots=512,
    switch_slots=4096,
    routing="dmodk",
)

# H100-class servers: 8 GPUs, NVLink4 (900 GB/s per GPU counting both directions = 450 GB/s each way) on an
# NVSwitch, one 400 Gb/s NIC per GPU, NDR fabric.  Per-step software latencies are NCCL's own tuning
# constants for its LL protocol (src/graph/tuning.cc: 2.7 us per network ring step, 0.47 us per NVLink step).
H100 = Preset(
    name="h100",
    description=(
        "H100-class servers (8 GPUs, NVLink 900 GB/s, 8x400G NICs) on an NDR 400 Gb/s fabric, NCCL-like software"
    ),
    nic_bw=gbit(400),
    fabric_bw=gbit(400),
    cable_latency=25e-9,
    switch_latency=0.13e-6,
    gpus_per_server=8,
    nvlink_bw=450e9,
    nvlink_latency=0.1e-6,
    step_overhead=2.7e-6,
    nvlink_step_overhead=0.47e-6,
    host_byte_cost=1e-12,  # ~1 TB/s reduction in HBM
    # a 400G switch must keep more packets in flight than p4ina's 1024-slot program (a window of 128
    # 314-byte packets covers only ~0.8 us at 400 Gb/s): 512 slots a job, 4096 a switch, an assumption
    mtu_payload=4096,
    frame_overhead=30,
    pipeline_chunk=1 << 20,
    inc_slots=512,
    switch_slots=4096,
    routing="dmodk",
    gpu_arch="hopper",  # DGX H100: Intel Xeon CPUs (nccl_cpu's default)
)

PRESETS: dict[str, Preset] = {p.name: p for p in (EMULATION, NDR, H100)}


def get_preset(name_or_path: str) -> Preset:
    """A named preset, or a preset JSON file (e.g. the `calibration.json` that --calibrate writes)."""
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    path = Path(name_or_path)
    if path.suffix == ".json" or path.exists():
        try:
            data = json.loads(path.read_text())
        except OSError as ex:
            raise ParamError(f"cannot read preset file {path}: {ex.strerror}") from ex
        except json.JSONDecodeError as ex:
            raise ParamError(f"preset file {path} is not JSON: {ex}") from ex
        return Preset.from_dict(data.get("preset", data))
    raise ParamError(f"unknown preset {name_or_path!r}; choose from {', '.join(PRESETS)} or give a preset JSON file")
