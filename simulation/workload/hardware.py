"""GPUs and the clusters they sit in: peak and sustained compute rates, memory bandwidth, the network preset.

Compute is FLOPs at a sustained rate.  The rate a transformer layer sustains is not the GEMMs' alone: the
memory-bound work beside them (norms, activations, residuals, softmax, optimizer) grows with the hidden size h
per token while the GEMMs grow with h^2, so the sustained share of the GEMM rate is 1 / (1 + h_half / h):
`gemm_flops` is the rate of the GEMMs themselves and `h_half` the hidden size at which the rest takes as long.
Both are fitted (simulation.workload.runs.fit_compute) to two published runs of one GPU generation and
predict the others; the fitted values are stored here with the runs they came from, and a test refits them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from simulation.params import H100, Preset, gbit


class HardwareError(ValueError):
    """An unknown GPU or cluster; the message names the choices."""


@dataclass(frozen=True)
class GpuSpec:
    name: str
    peak_flops: float  # dense bf16/fp16 tensor-core FLOP/s: what MFU divides by
    peak_source: str
    gemm_flops: float  # sustained GEMM FLOP/s (fitted, see module doc)
    h_half: float  # hidden size at which the memory-bound work takes as long as the GEMMs (fitted)
    fit_source: str
    hbm_bw: float  # bytes/s of HBM: the optimizer's pass over its state
    hbm_source: str

    def sustained(self, hidden: int) -> float:
        """FLOP/s a transformer layer of this hidden size sustains on one GPU."""
        return self.gemm_flops / (1.0 + self.h_half / hidden)

    def with_(self, **changes: Any) -> GpuSpec:
        return GpuSpec(**{**asdict(self), **changes})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


H_HALF_FROM = "a100"  # a GPU fitted to one run takes this GPU's h_half, scaled by their FLOP/byte ratios


def flop_byte_ratio(gpu: GpuSpec) -> float:
    """Peak FLOPs per byte of HBM: how much longer memory-bound work is against the GEMMs."""
    return gpu.peak_flops / gpu.hbm_bw


# Fitted by simulation.workload.runs.fit_compute (tests/simulation/workload/test_runs.py refits them):
# A100 to Narayanan et al. 2021 Table 1's gpt-145b and gpt-1t rows, H100's gemm_flops to the Llama 3 paper's
# 8,192-GPU row with A100's h_half scaled by the H100's FLOP/byte ratio over the A100's (989/3.35 : 312/1.555).
A100_GEMM, A100_H_HALF = 224.69e12, 2217.6
H100_GEMM = 686.72e12
H100_H_HALF = A100_H_HALF * (989e12 / 3.35e12) / (312e12 / 1.555e12)

GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        GpuSpec(
            "a100",
            312e12,
            "NVIDIA A100 datasheet: 312 TFLOP/s dense BF16/FP16 tensor core",
            A100_GEMM,
            A100_H_HALF,
            "fitted to Narayanan et al. 2021 Table 1 (gpt-145b, gpt-1t)",
            1.555e12,
            "NVIDIA A100 40GB datasheet: 1,555 GB/s HBM2",
        ),
        GpuSpec(
            "h100",
            989e12,
            "NVIDIA H100 SXM datasheet: 989 TFLOP/s dense BF16 tensor core",
            H100_GEMM,
            H100_H_HALF,
            "gemm_flops fitted to the Llama 3 paper's Table 4, 8,192 GPUs; h_half A100's scaled by FLOP/byte",
            3.35e12,
            "NVIDIA H100 SXM datasheet: 3.35 TB/s HBM3",
        ),
    )
}

# The networks: the simulator's h100 preset (8 GPUs a server, NVLink 450 GB/s each way, a 400 Gb/s NIC a GPU,
# NCCL's per-step latencies), and the DGX A100 servers of Selene (Narayanan et al.): NVLink3 600 GB/s (300 each
# way), eight 200 Gb/s HDR InfiniBand NICs a server (NVIDIA DGX A100 user guide), the same software costs.
A100_NET = H100.with_(
    name="a100",
    description="DGX A100 servers (8 GPUs, NVLink 600 GB/s, 8x200G HDR NICs) on an HDR 200 Gb/s fat-tree",
    nic_bw=gbit(200),
    fabric_bw=gbit(200),
    nvlink_bw=300e9,
)
NETWORKS: dict[str, Preset] = {"h100": H100, "a100": A100_NET}


def get_gpu(name: str) -> GpuSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise HardwareError(f"unknown GPU {name!r}: choose from {', '.join(GPUS)}") from None


def network_for(gpu: str) -> Preset:
    try:
        return NETWORKS[gpu]
    except KeyError:
        raise HardwareError(f"no network preset for GPU {gpu!r}: choose from {', '.join(NETWORKS)}") from None
