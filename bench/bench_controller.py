"""Controller install times against embedded switches (P4Runtime over loopback, no Mininet).

The switches run in a child process (`python -m emulation.localnet`), so the
controller and the switches use separate cores as they would in an emulation.
Measured per fat-tree (k=4 and k=8): pipeline push, routes on every switch,
and one job over all hosts (target: routes + job < 10 s at k=8);
the same at k=4 against simple_switch_grpc processes when BMv2 is installed.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.results import Figure, Figures
from controller.api import Controller
from controller.fattree import fat_tree
from controller.state import State
from controller.topology import Topology
from emulation.localnet import bmv2_switches

LOG = logging.getLogger(__name__)

KS = (4, 8)
BMV2_K = 4  # 20 simple_switch_grpc processes; k=8 would be 80
START_TIMEOUT = 300.0


def _serve(k: int, workdir: Path) -> tuple[subprocess.Popen, Topology]:
    out = workdir / f"fat-tree-{k}.json"
    proc = subprocess.Popen([sys.executable, "-m", "emulation.localnet", f"fat-tree:{k}", str(out)])
    deadline = time.monotonic() + START_TIMEOUT
    while not out.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"emulation.localnet for k={k} exited with {proc.returncode}")
        if time.monotonic() > deadline:
            proc.terminate()
            raise RuntimeError(f"switches for k={k} not up within {START_TIMEOUT:.0f} s")
        time.sleep(0.05)
    return proc, Topology.load(out)


def _timed(topo: Topology, tmp: Path) -> dict[str, float]:
    # all embedded switches share the child process's one interpreter: loading 80 programs keeps it busy
    with Controller(topo, state=State(tmp / "state.json"), timeout=120.0) as ctl:
        t0 = time.perf_counter()
        ctl.push_pipeline()
        t1 = time.perf_counter()
        routes = ctl.install_routes()
        t2 = time.perf_counter()
        plan = ctl.install_job(1, [h.name for h in topo.hosts])
        t3 = time.perf_counter()
        drift = ctl.verify()
        t4 = time.perf_counter()
        ctl.remove_job(1)
        t5 = time.perf_counter()
    if not all(d.clean for d in drift.values()):
        raise RuntimeError("verify found drift right after install")
    n_routes = sum(r.inserted for r in routes.values())
    LOG.info("%d switches, %d route entries, job on %d switches", len(topo.switches), n_routes, len(plan.switches))
    return {
        "push": t1 - t0,
        "routes": t2 - t1,
        "job": t3 - t2,
        "verify": t4 - t3,
        "remove": t5 - t4,
        "route_entries": n_routes,
        "job_switches": len(plan.switches),
        "switches": len(topo.switches),
    }


def measure(k: int) -> dict[str, float]:
    """Embedded switches for a k-ary fat-tree in a child process."""
    with tempfile.TemporaryDirectory(prefix="p4ina-bench-") as tmp:
        proc, topo = _serve(k, Path(tmp))
        try:
            return _timed(topo, Path(tmp))
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def measure_bmv2(k: int) -> dict[str, float]:
    """One simple_switch_grpc process per switch (no interfaces)."""
    with (
        tempfile.TemporaryDirectory(prefix="p4ina-bench-") as tmp,
        bmv2_switches(fat_tree(k), Path(tmp) / "bmv2") as (topo, _),
    ):
        return _timed(topo, Path(tmp))


def _figures(prefix: str, k: int, m: dict[str, float], backend: str) -> Figures:
    note = f"fat-tree k={k}: {m['switches']:.0f} switches, {backend}"
    return {
        f"{prefix}.pipeline_push": Figure(m["push"], "s", note),
        f"{prefix}.routes_install": Figure(m["routes"], "s", f"{note}, {m['route_entries']:.0f} route entries"),
        f"{prefix}.job_install": Figure(
            m["job"], "s", f"{note}, all {k**3 // 4} hosts, {m['job_switches']:.0f} tree switches"
        ),
        f"{prefix}.routes_plus_job": Figure(m["routes"] + m["job"], "s", f"{note}; target < 10 s at k=8"),
        f"{prefix}.verify": Figure(m["verify"], "s", note),
        f"{prefix}.job_remove": Figure(m["remove"], "s", note),
    }


def run() -> Figures:
    figs: Figures = {}
    for k in KS:
        figs.update(_figures(f"controller.k{k}", k, measure(k), "embedded switch"))
    if shutil.which("simple_switch_grpc"):
        figs.update(_figures(f"controller.bmv2.k{BMV2_K}", BMV2_K, measure_bmv2(BMV2_K), "simple_switch_grpc"))
    else:
        LOG.warning("simple_switch_grpc not on PATH: no BMv2 figures")
    return figs
