"""A results folder with made-up but plausible numbers, for tests that need no network."""

from __future__ import annotations

from pathlib import Path

from emulation import report
from emulation.experiment import INC_INT8, INC_INT32, RING, ExperimentConfig, Measurement, Rep
from emulation.runner import ExperimentResult
from emulation.topo import LinkShape


def fake_result(out_dir: Path) -> ExperimentResult:
    cfg = ExperimentConfig(topology="fat-tree:4", host_counts=(4, 8), sizes=(1024, 16384), reps=3, warmup=1,
                           shape=LinkShape(bw_mbps=10), results_root=out_dir.parent)
    ms = []
    for n in cfg.host_counts:
        for size in cfg.sizes:
            for method, per_elem in ((INC_INT32, 4.9), (INC_INT8, 4.9), (RING, 2 * (n - 1) / n * 4.2)):
                base = size * per_elem * 8 / 10e6 + (0.002 if method != RING else 0.0005 * 2 * (n - 1))
                reps = [Rep(i, i == 0, base * (1 + 0.02 * i), tuple(base * (1 + 0.02 * i) - 1e-4 * r for r in range(n)),
                            100 * n, 0, int(size * per_elem * n), int(size * per_elem)) for i in range(cfg.iterations)]
                ms.append(Measurement(method, n, size, reps, ok=True, max_error_ratio=0.1,
                                      switch_cpu_s={"e1": 0.05 * size / 1024, "c1": 0.02}, link_bw_mbps=10))
    result = ExperimentResult(cfg, ms, out_dir, {"backend": {"name": "embedded"}}, 5.0, 60.0)
    result.notes = report.notes(result)
    return result


def fake_results_folder(out_dir: Path) -> Path:
    return report.write_all(fake_result(out_dir))
