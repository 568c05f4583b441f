"""NCCL as users run it on multi-GPU, multi-NIC servers: ring and tree, its protocols, its tuner's choice, and
reduce-scatter / all-gather (host rings and in-network) for a workload layer to call.

What NCCL builds (src/graph/search.cc, src/init.cc) and how this module models it:

- **Channels.** On a server with one NIC per GPU (DGX/HGX H100 and A100) NCCL's topology search opens one ring
  channel per NIC: each channel's ring enters a server through one NIC, visits the server's GPUs over NVLink
  and leaves through the same NIC (rail to rail), so every NIC carries part of the tensor.  Its per-channel
  bandwidth is the first entry of search.cc's speed array (`sm90SpeedArrayInter` on Hopper, `speedArrayInter`
  otherwise) not above the NIC's speed, and `ncclTopoDupChannels` doubles the channels (halving each one's
  bandwidth) unless it is below 25 GB/s or, on Hopper, below 50 GB/s with more than 4 channels.  The tree
  graph gets the ring's channel count (init.cc: `treeGraph.maxChannels = ringGraph.nChannels`): a chain
  through the server's GPUs over NVLink per channel, and among servers NCCL's double binary tree, the two
  trees on alternate channels.  The channel count only enters through the tuner's per-channel caps.
- **Bandwidth** comes from the preset's links, not from the search's speeds: a NIC's line rate times the
  transport's payload share (the preset's frame payload and headers), and NVLink as NCCL counts it
  (src/graph/topo.h: `SM90_NVLINK_BW` 20.6 GB/s, `SM80_NVLINK_BW` 20.0 GB/s per link and direction, times
  the GPU's links: 18 on H100, 12 on A100, 8 on A800/H800).  A ring is limited by the busiest of its
  resources: each NIC carries 2(N-1)/N S / nics per node, each GPU's NVLink (g-1)/g of 2(N-1)/N S.  A tree
  moves, per server, what its busiest node of the double binary tree sends (2 S inside a big tree, S on 2
  servers: why 2-server trees beat the network's rate, NVIDIA/nccl#946), and 2 (g-1)/g S over each GPU's
  NVLink for the chain up and down.
- **Protocols and the tuner** are NCCL's own (src/graph/tuning.cc, `ncclTopoTuneModel`, at NVIDIA/nccl
  b6475625): Simple, LL128 (x0.92 on rings, x120/128 on trees, per-channel caps) and LL (x1/4 on rings,
  x1/3.8 on trees, capped by `llMaxBws`); trees x0.92 and per-channel caps `perChMaxTreeBws`, x0.85 for the
  TREE pattern; per-step latencies `baseLat` + `hwLat` (NVLink steps inside a server, network steps between,
  the network's post overhead `getNetOverhead`: 1 us on Intel CPUs, 2 us on AMD, x3 for Simple); and the
  time of `ncclTopoGetAlgoTime`: latency + bytes / bandwidth, with the tree's correction factors by size
  and the ring's Simple plateau (x1.4 latency on Ampere and later).  `nccl-ring` and `nccl-tree` are the
  tuner's best protocol for that algorithm, `nccl` its best algorithm and protocol (NCCL_ALGO unset).
- **Which tree pattern.** NCCL applies x0.85 to trees whose search ended on the TREE pattern (parent and
  children on one NIC) rather than BALANCED_TREE; which one a system gets depends on its PCI topology, which
  the model does not have.  The model applies it to every multi-server tree (docs/simulation.md: the
  published tree figure is within the tolerance either way).

Closed form on purpose: NCCL's rings and trees on a non-blocking fabric have no contention to resolve (each
channel's ring stays on its rail; a tree's edges are node pairs), so SimGrid's flow model adds nothing to the
bandwidth terms; the placement and failure studies, where flows collide, use the phase-model methods.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from hosts import tree as host_tree
from simulation.params import IncFrames, Preset, agg_elements

ALGOS = ("ring", "tree")
PROTOS = ("LL", "LL128", "Simple")
COLLECTIVES = ("all-reduce", "reduce-scatter", "all-gather")
METHODS = ("nccl-ring", "nccl-tree", "nccl")
ARCHS = ("volta", "ampere", "hopper")
GB = 1e9  # NCCL's bandwidths are GB/s, its latencies us

# src/graph/topo.h: NVLink bandwidth per link and direction as NCCL counts it (GB/s)
NVLINK_BW = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6}
NVLINK_LINE = 25.0  # GB/s per NVLink3/NVLink4 link and direction (the hardware's line rate)
# src/graph/search.cc: per-channel speeds the search tries between servers, highest first (GB/s)
SPEED_INTER = (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12)
SPEED_INTER_SM90 = (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12)
SPEED_INTRA = (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0)
SPEED_INTRA_SM90 = (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0)
MAX_RING_CHANNELS = 16  # init.cc: ringGraph.maxChannels = MAXCHANNELS/2

# src/graph/tuning.cc (b6475625), indexed [algo][proto] with protos (LL, LL128, Simple), us
BASE_LAT = {"tree": (6.8, 14.0, 0.0), "ring": (6.6, 14.0, 8.4)}
HW_LAT = {  # [hardware][algo] -> (LL, LL128, Simple)
    "nvlink": {"tree": (0.6, 1.25, 28.0), "ring": (0.6, 1.9, 3.4)},
    "pci": {"tree": (1.0, 1.9, 28.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 14.0)},
}
_ARCH_INDEX = {"volta": 0, "ampere": 1, "hopper": 2}
LL_MAX_BWS = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (87.7, 22.5, 19.0))  # [gpu arch (1 node) | cpu][nodes 1/2/>2]
PER_CH_MAX_RING_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7))
PER_CH_MAX_TREE_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0))
PER_CH_MAX_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0))
NET_OVERHEAD = {"intel": 1.0, "amd": 2.0}  # getNetOverhead, us
TREE_PATTERN_FACTOR = 0.85
# ncclTopoGetAlgoTime: trees are off the model at medium sizes; powers of two from 64 B (LL, LL128, Simple)
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0),
    (0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9),
)
RING_PLATEAU = 1.4  # Simple ring's latency on several servers once each channel's share is >= 64 B (>= Ampere)


class NcclError(ValueError):
    """Hardware or a request the NCCL model cannot describe; the message names the field."""


@dataclass(frozen=True)
class Server:
    """One server as NCCL's topology detection sees it."""

    gpus: int
    nics: int  # NICs NCCL uses (one per GPU on DGX/HGX)
    nic_line: float  # bytes/s per NIC and direction, the link's rate
    nic_payload: float  # share of the wire that is payload (per-packet headers of the transport)
    nvlinks: int  # NVLink links per GPU to the NVSwitches (0: PCI only)
    arch: str = "hopper"
    cpu: str = "intel"

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.nics < 1:
            raise NcclError(f"a server needs >= 1 GPU and >= 1 NIC, got {self.gpus} and {self.nics}")
        if self.arch not in ARCHS:
            raise NcclError(f"GPU architecture {self.arch!r}: choose from {', '.join(ARCHS)}")
        if self.cpu not in NET_OVERHEAD:
            raise NcclError(f"CPU vendor {self.cpu!r}: choose from {', '.join(NET_OVERHEAD)}")
        if not 0 < self.nic_payload <= 1 or self.nic_line <= 0:
            raise NcclError("nic_line must be > 0 and nic_payload in (0, 1]")
        if self.gpus > 1 and self.nvlinks < 1:
            raise NcclError(f"{self.gpus} GPUs a server without NVLink: the model covers NVSwitch servers only")

    @property
    def nic_bw(self) -> float:
        """Payload bytes/s one NIC carries each way."""
        return self.nic_line * self.nic_payload

    @property
    def nvlink_bw(self) -> float:
        """Bytes/s a GPU moves over NVLink each way, as NCCL counts it (topo.h's per-link figure x links)."""
        return self.nvlinks * NVLINK_BW[self.arch] * GB

    @classmethod
    def of_preset(cls, p: Preset) -> Server:
        """The server of a preset: one NIC per GPU at the preset's NIC rate, NVLink from its per-GPU rate."""
        if not p.gpu_arch:
            raise NcclError(f"preset {p.name!r} describes no GPUs (gpu_arch is empty): NCCL's methods need one")
        links = round(p.nvlink_bw / (NVLINK_LINE * GB)) if p.gpus_per_server > 1 else 0
        payload = p.mtu_payload / (p.mtu_payload + p.frame_overhead)
        return cls(p.gpus_per_server, p.gpus_per_server, p.nic_bw, payload, links, p.gpu_arch, p.nccl_cpu)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Graph:
    """What NCCL's search settles on for one algorithm: channels and their bandwidth (GB/s)."""

    channels: int
    bw: float


def ring_graph(server: Server, nodes: int) -> Graph:
    """Channels of the ring graph: one per NIC between servers (the NIC's speed rounded down to search.cc's
    array), else as many NVLink rings as fit; then ncclTopoDupChannels."""
    hopper = server.arch == "hopper"
    if nodes > 1:
        nic = server.nic_line / GB  # NCCL's NIC speed: the port's rate (Mb/s / 8000)
        speeds = SPEED_INTER_SM90 if hopper else SPEED_INTER
        bw = next((s for s in speeds if s <= nic), speeds[-1])
        channels = server.nics
    else:
        nv = server.nvlink_bw / GB
        speeds = SPEED_INTRA_SM90 if hopper else SPEED_INTRA
        bw = next((s for s in speeds if s <= nv), speeds[-1])
        channels = max(1, min(MAX_RING_CHANNELS, int(nv // bw)))
    if bw >= 25.0 and not (hopper and bw < 50.0 and channels > 4):
        dup = min(2 * channels, MAX_RING_CHANNELS)
        bw /= math.ceil(dup / channels)
        channels = dup
    return Graph(channels, bw)


@lru_cache(maxsize=64)
def tree_node_load(nodes: int) -> float:
    """The most any server sends (= receives) in NCCL's double binary tree, in units of the tensor S: each tree
    carries S/2, a node sends it up to its parent and down to each of its children."""
    if nodes < 2:
        return 0.0
    load = [0.0] * nodes
    for t in host_tree.double_binary_tree(nodes):
        for child, parent in enumerate(t.parent):
            if parent >= 0:
                load[child] += 0.5  # up
                load[int(parent)] += 0.5  # down to this child
    return max(load)


def _index2(nodes: int) -> int:
    return 0 if nodes <= 1 else 1 if nodes == 2 else 2


@dataclass(frozen=True)
class Tuned:
    """One algorithm and protocol as NCCL's tuner models it for a communicator."""

    algo: str
    proto: str
    latency_us: float
    bandwidth: float  # GB/s, algorithm bandwidth (0: disabled)
    channels: int


def physical_busbw(coll: str, algo: str, server: Server, nodes: int, g: int) -> float:
    """Bus bandwidth (GB/s) the links allow at large sizes (before NCCL's protocol and tree efficiencies)."""
    nic = server.nics * server.nic_bw / GB
    nv = server.nvlink_bw / GB
    if algo == "ring":
        limits = []
        if nodes > 1:
            limits.append(nic)
        if g > 1:  # each GPU's NVLink carries (g-1)/g of the ring's bytes (all of them on one server)
            limits.append(nv * g / (g - 1) if nodes > 1 else nv)
        return min(limits)
    # tree (all-reduce): algbw = S / t, with t the busiest of the NICs and the NVLink chain; busBw = 2 algbw
    t = []
    if nodes > 1:
        t.append(tree_node_load(nodes) / nic)
    if g > 1:
        t.append(2 * (g - 1) / g / nv)
    return 2.0 / max(t)


def tune(coll: str, server: Server, nodes: int, gpus_per_node: int | None = None) -> list[Tuned]:
    """NCCL's tuner (ncclTopoTuneModel) for one collective on `nodes` servers of `gpus_per_node` GPUs."""
    if coll not in COLLECTIVES:
        raise NcclError(f"collective {coll!r}: choose from {', '.join(COLLECTIVES)}")
    g = gpus_per_node or server.gpus
    ranks = nodes * g
    if ranks < 2:
        raise NcclError("a collective needs >= 2 GPUs")
    arch = _ARCH_INDEX[server.arch]
    i2 = _index2(nodes)
    ll_max = LL_MAX_BWS[arch if nodes == 1 else (1 if server.cpu == "amd" else 0)][i2]
    graph = ring_graph(server, nodes)
    allreduce = coll == "all-reduce"
    nsteps = 2 * (ranks - 1) if allreduce else ranks - 1
    inter_steps = (2 * nodes if nodes > 1 else 0) if allreduce else nodes - 1
    intra_hw = "nvlink" if g > 1 else "pci"
    out: list[Tuned] = []
    for algo in ALGOS:
        if algo == "tree" and not allreduce:
            continue  # NCCL's reduce-scatter and all-gather are rings (tuning.cc skips trees for them)
        phys = physical_busbw(coll, algo, server, nodes, g)
        for pi, proto in enumerate(PROTOS):
            bus = phys
            ch = graph.channels
            if algo == "ring" and proto == "LL":
                bus = min(ll_max, bus * (0.25 if nodes > 1 or allreduce else 1 / 3))
            if algo == "ring" and proto == "LL128":
                bus = min(bus * (0.7 if ranks / nodes < 2 else 0.92), ch * PER_CH_MAX_RING_LL128[arch][i2])
            if algo == "tree":
                bus = min(bus * 0.92, ch * PER_CH_MAX_TREE[arch][i2])
                if proto == "LL":
                    bus = min(bus / 3.8, ll_max)
                if proto == "LL128":
                    bus = min(bus * (7 / 9 if nodes == 1 else 120 / 128), ch * PER_CH_MAX_TREE_LL128[arch][i2])
                if nodes > 1:
                    bus *= TREE_PATTERN_FACTOR
            ratio = ranks / nsteps if algo == "ring" else 0.5
            lat = BASE_LAT[algo][pi]
            intra = HW_LAT[intra_hw][algo][pi]
            inter = HW_LAT["net"][algo][pi]  # + the graph's latencyInter: 0 for InfiniBand and RoCE NICs
            if algo == "ring":
                overhead = NET_OVERHEAD[server.cpu] * (3 if proto == "Simple" else 1) if nodes > 1 else 0.0
                lat += (nsteps - inter_steps) * max(intra, overhead) + inter_steps * inter
            else:
                lat += 2 * ((g - 1) * intra + int(math.log2(nodes)) * inter) if nodes > 1 else 2 * (g - 1) * intra
            out.append(Tuned(algo, proto, lat, bus * ratio, ch))
    return out


def algo_time(t: Tuned, coll: str, nbytes: int, nodes: int, ranks: int, arch: str) -> float:
    """Seconds for `nbytes` (NCCL's nBytes: the whole buffer) by one tuned algorithm (ncclTopoGetAlgoTime)."""
    if t.bandwidth <= 0:
        return math.inf
    bw = t.bandwidth
    log_size = int(math.log2(max(1, nbytes >> 6)))
    if t.algo == "tree" and log_size < len(TREE_CORRECTION[0]):
        bw *= TREE_CORRECTION[PROTOS.index(t.proto)][log_size]
    lat = t.latency_us
    if (
        t.algo == "ring"
        and t.proto == "Simple"
        and nodes > 1
        and coll == "all-reduce"
        and nbytes / (t.channels * ranks) >= 64
    ):
        lat *= RING_PLATEAU if arch != "volta" else 1.9
    return (lat + nbytes / (1000 * bw)) * 1e-6


@dataclass(frozen=True)
class CollectiveTime:
    """One collective's time and what it moved; `nbytes` is the whole buffer S (all-reduce's tensor,
    reduce-scatter's input, all-gather's output), as nccl-tests counts it."""

    collective: str
    method: str
    choice: str  # "ring/Simple", "tree/LL128", "inc/int32"
    ranks: int
    nbytes: int
    time_s: float
    sent_per_rank: float  # bytes each rank sends (over its NIC and NVLink together), payload only

    @property
    def algbw(self) -> float:
        return self.nbytes / self.time_s

    @property
    def busbw(self) -> float:
        """nccl-tests' bus bandwidth: algbw x 2(n-1)/n for all-reduce, x (n-1)/n for the others."""
        n = self.ranks
        return self.algbw * (2 if self.collective == "all-reduce" else 1) * (n - 1) / n

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "algbw": self.algbw, "busbw": self.busbw}


def _sent(coll: str, algo: str, nbytes: int, nodes: int, g: int) -> float:
    n = nodes * g
    if algo == "ring":
        return (2 if coll == "all-reduce" else 1) * (n - 1) / n * nbytes
    # tree: the chain sends S up and S down except at its ends; the busiest server's NIC share on top
    return 2 * (g - 1) / g * nbytes + tree_node_load(nodes) * nbytes / g


def nccl_collective(
    coll: str, server: Server, nodes: int, nbytes: int, method: str = "nccl", gpus_per_node: int | None = None
) -> CollectiveTime:
    """NCCL's time for one collective: `method` nccl-ring / nccl-tree (the tuner's best protocol for that
    algorithm, as NCCL_ALGO=Ring/Tree) or nccl (its best algorithm and protocol)."""
    if method not in METHODS:
        raise NcclError(f"method {method!r}: choose from {', '.join(METHODS)}")
    if nbytes < 1:
        raise NcclError(f"a collective of {nbytes} bytes moves nothing")
    g = gpus_per_node or server.gpus
    algos = ALGOS if method == "nccl" else (method.removeprefix("nccl-"),)
    if coll != "all-reduce" and algos == ("tree",):
        raise NcclError(f"NCCL has no tree {coll} (tuning.cc: rings only); use nccl-ring or nccl")
    best: tuple[float, Tuned] | None = None
    for t in tune(coll, server, nodes, g):
        if t.algo in algos:
            s = algo_time(t, coll, nbytes, nodes, nodes * g, server.arch)
            if best is None or s < best[0]:
                best = (s, t)
    assert best is not None
    s, t = best
    return CollectiveTime(
        coll, method, f"{t.algo}/{t.proto}", nodes * g, nbytes, s, _sent(coll, t.algo, nbytes, nodes, g)
    )


def inc_collective(
    coll: str,
    preset: Preset,
    nodes: int,
    nbytes: int,
    lanes: str = "int32",
    gpus_per_node: int | None = None,
    depth: int = 3,
) -> CollectiveTime:
    """In-network aggregation of one collective on the preset's links (switches sum at line rate).

    Per GPU and NIC: reduce-scatter sends its whole buffer up (contributions) and the switches deliver each
    reduced shard only to its owner (S/N down); all-gather sends its own shard up and the switches replicate
    every shard to every member (S down), as NVLink SHARP does inside a server; all-reduce sends S up and
    gets S down.  With several GPUs on NVLink a server first reduce-scatters (or last all-gathers) over
    NVLink and its GPUs run one tree per rail on S/g each (hier-inc's structure).  The time is one round trip
    up and down `depth` switch tiers plus the busier direction's frames (wire format v2.1's, `lanes` wide; no
    exponent rounds: the workers' guesses hold in steady state) at the NIC's rate.
    """
    if coll not in COLLECTIVES:
        raise NcclError(f"collective {coll!r}: choose from {', '.join(COLLECTIVES)}")
    g = gpus_per_node or preset.gpus_per_server
    n = nodes * g
    if n < 2 or nbytes < 1:
        raise NcclError("an in-network collective needs >= 2 GPUs and >= 1 byte")
    hier = g > 1 and preset.nvlink_bw > 0 and nodes > 1
    share = nbytes / g if hier else nbytes  # bytes each rail's tree carries per GPU
    members = nodes if hier else n
    frames = IncFrames.of(lanes, members)
    lanes_per = agg_elements()
    per_elem = {"int32": 4, "int16": 2, "int8": 1}[lanes]

    def wire(data: float, frame: int) -> float:  # float32 data carried in `lanes` frames
        return math.ceil(data / 4 / lanes_per) * frame if data > 0 else 0.0

    up = {"all-reduce": share, "reduce-scatter": share, "all-gather": share / members}[coll]
    down = {"all-reduce": share, "reduce-scatter": share / members, "all-gather": share}[coll]
    up_wire, down_wire = wire(up, frames.host_up), wire(down, frames.down)
    rtt = 2 * depth * (preset.cable_latency + preset.switch_latency) + preset.step_overhead
    t = rtt + max(up_wire, down_wire) / preset.nic_bw
    sent = up * per_elem / 4
    if hier:  # NVLink reduce-scatter before (or all-gather after) the rail trees; all-reduce does both
        nv = (g - 1) / g * nbytes
        steps = {"all-reduce": 2, "reduce-scatter": 1, "all-gather": 1}[coll]
        t += steps * (nv / preset.nvlink_bw + (g - 1) * preset.nvlink_step_overhead)
        sent += steps * nv
    return CollectiveTime(coll, f"inc-{lanes}", f"inc/{lanes}", n, nbytes, t, sent)


def all_reduce(server: Server, nodes: int, nbytes: int, method: str = "nccl") -> CollectiveTime:
    return nccl_collective("all-reduce", server, nodes, nbytes, method)


def reduce_scatter(server: Server, nodes: int, nbytes: int, method: str = "nccl") -> CollectiveTime:
    return nccl_collective("reduce-scatter", server, nodes, nbytes, method)


def all_gather(server: Server, nodes: int, nbytes: int, method: str = "nccl") -> CollectiveTime:
    return nccl_collective("all-gather", server, nodes, nbytes, method)


def table(server: Server, nodes: int, sizes: Sequence[int], coll: str = "all-reduce") -> list[dict[str, Any]]:
    """Every method's time per size, for notebooks and the docs."""
    return [nccl_collective(coll, server, nodes, s, m).to_dict() for s in sizes for m in METHODS]
