"""A results folder with made-up but plausible rows, for tests that need no network."""

from __future__ import annotations

import math
from pathlib import Path

from emulation.shaping import LinkShape
from experiments.allreduce import report
from experiments.config import ExperimentConfig, ExperimentResult, Sample
from hosts.methods import METHODS

METHODS_USED = ("inc-int32", "inc-int8", "ring", "ring-bf16")


def fake_result(out_dir: Path, *, cpu_bound: tuple[str, int, int] | None = None) -> ExperimentResult:
    """Link-bound points everywhere (latency 1.02-1.08 x T_wire), except `cpu_bound` (3 x T_wire, busy switch)."""
    cfg = ExperimentConfig(
        topology="fat-tree:4",
        host_counts=(4, 8),
        sizes=(1024, 16384),
        methods=METHODS_USED,
        reps=3,
        warmup=1,
        shape=LinkShape(bw_mbps=10),
        results_root=out_dir.parent,
    )
    rate = 10e6
    samples = []
    step = 0
    for n in cfg.host_counts:
        for size in cfg.sizes:
            for rep in range(cfg.iterations):
                for order, method in enumerate(METHODS_USED):
                    step += 1
                    m = METHODS[method]
                    per_elem = {
                        "inc-int32": 4.23,
                        "inc-int8": 1.23,
                        "ring": 2 * (n - 1) / n * 4.16,
                        "ring-bf16": 2 * (n - 1) / n * 2.08,
                    }[method]
                    wire = int(size * per_elem)
                    t_wire = wire * 8 / rate
                    slow = cpu_bound == (method, n, size)
                    latency = t_wire * (3.0 if slow else 1.02 + 0.02 * rep)
                    for rank in range(n):
                        checker = rank == 0
                        samples.append(
                            Sample(
                                method=method,
                                hosts=n,
                                elements=size,
                                rep=rep,
                                warmup=rep == 0,
                                order=order,
                                step=step,
                                rank=rank,
                                t_release=100.0 * step,
                                t_start=100.0 * step + 1e-4,
                                t_done=100.0 * step + latency - 1e-5 * rank,
                                latency_s=latency - 1e-5 * rank,
                                quantize_s=1e-4,
                                network_s=latency - 2e-4,
                                packets_sent=10,
                                bytes_sent=wire,
                                digest=f"d{step}",
                                checker=checker,
                                rel_l2_error=m.rel_l2_target / 10 if checker else math.nan,
                                max_abs_error=1e-3 if checker else math.nan,
                                snr_db=60.0 if checker else math.nan,
                                max_error_ratio=0.2 if checker else math.nan,
                                rel_l2_target=m.rel_l2_target if checker else math.nan,
                                wire_bytes=wire,
                                wire_link="e1:3>h1",
                                t_wire_s=t_wire,
                                t_path_s=t_wire / 4,
                                host_up_bytes=wire,
                                host_down_bytes=wire,
                                switch_busy=0.9 if slow else 0.2,
                                busiest_switch="e1",
                                agents_busy=0.3,
                                cores_busy=0.5,
                                ours_busy=0.45,
                                agents_cores=0.6,
                                switches_cores=0.3,
                                kernel_cores=0.25,
                                line_rate_cores=3.5,
                                line_rate_kernel_cores=1.25,
                                wire_frames=4000,
                                kernel_us_per_frame=12.5,
                            )
                        )
    return ExperimentResult(cfg, samples, out_dir, {"backend": {"name": "embedded"}}, 5.0, 60.0)


def fake_results_folder(out_dir: Path, **kw: object) -> Path:
    return report.write_all(fake_result(out_dir, **kw))  # type: ignore[arg-type]
