"""Validation against published nccl-tests bus bandwidths (simulation/data/nccl_busbw.json).

Each figure names its setup (GPU architecture, GPUs and NVLink links a server, servers, NICs and their rate,
InfiniBand or RoCE, the algorithm forced or NCCL's default, the size) and its source with the quote.  The
model (simulation/nccl.py) is built from the setup alone: NCCL's constants and the hardware's rates, nothing
fitted to a figure; every figure must come within the file's tolerance.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from simulation.nccl import Server, nccl_collective
from simulation.params import H100, gbit

DATA = Path(__file__).resolve().parent / "data" / "nccl_busbw.json"
# payload share of a NIC's wire per transport, 4096-byte MTU: InfiniBand as the h100 preset frames it (local
# route, base transport and CRC headers); RoCEv2 on Ethernet: preamble and start 8, Ethernet header 14, FCS 4,
# interframe gap 12, IPv4 20, UDP 8, base transport header 12, invariant CRC 4 (82 bytes a packet)
ROCE_OVERHEAD = 8 + 14 + 4 + 12 + 20 + 8 + 12 + 4
TRANSPORT = {"ib": (H100.mtu_payload, H100.frame_overhead), "roce": (4096, ROCE_OVERHEAD)}


class NcclAnchorError(ValueError):
    """A figure of the data file that cannot be modelled; the message names it and the field."""


@dataclass(frozen=True)
class Figure:
    id: str
    setup: str
    source: str
    who: str
    quote: str
    method: str
    nodes: int
    size_bytes: int
    published: float  # GB/s
    model: float  # GB/s
    choice: str

    @property
    def rel_error(self) -> float:
        return (self.model - self.published) / self.published

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rel_error": self.rel_error}


def server_of(fig: dict[str, Any]) -> Server:
    try:
        payload, overhead = TRANSPORT[fig["transport"]]
        return Server(
            gpus=int(fig["gpus_per_node"]),
            nics=int(fig["nics"]),
            nic_line=gbit(float(fig["nic_gbit"])),
            nic_payload=payload / (payload + overhead),
            nvlinks=int(fig["nvlinks"]),
            arch=str(fig["arch"]),
            cpu=str(fig["cpu"]),
        )
    except (KeyError, ValueError) as ex:
        raise NcclAnchorError(f"{DATA.name}: figure {fig.get('id', '?')!r}: {ex!r}") from ex


def load(path: Path = DATA) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def figures(path: Path = DATA) -> list[Figure]:
    """Every published figure with the model's bus bandwidth for its setup."""
    out = []
    for fig in load(path)["figures"]:
        server = server_of(fig)
        r = nccl_collective("all-reduce", server, int(fig["nodes"]), int(fig["size_bytes"]), str(fig["method"]))
        out.append(
            Figure(
                fig["id"],
                fig["setup"],
                fig["source"],
                fig["who"],
                fig["quote"],
                fig["method"],
                int(fig["nodes"]),
                int(fig["size_bytes"]),
                float(fig["published_busbw_gbs"]),
                r.busbw / 1e9,
                r.choice,
            )
        )
    return out


def check(path: Path = DATA) -> dict[str, Any]:
    """The validation entry for summary.json: the largest error and every figure."""
    figs = figures(path)
    return {
        "nccl_busbw_max_rel_error": max(abs(f.rel_error) for f in figs),
        "tolerance": float(load(path)["tolerance"]),
        "figures": [f.to_dict() for f in figs],
    }
