"""Ring all-reduce latency between 4 network namespaces on a Linux bridge (the baseline's own speed).

Each size runs `python -m hosts ring` in 4 namespaces, 5 all-reduces after one
warm-up; the latency of an all-reduce is the slowest rank's, the figure is the
median over the 5.  No link shaping: this measures the host code and the
kernel, i.e. the ceiling the baseline can reach on this machine.  Needs root.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.results import Figure, Figures

RANKS = 4
SIZES = (65_536, 1_048_576)
ITERATIONS = 6  # the first is a warm-up


def run() -> Figures:
    from emulation.netns import NetnsLab
    from hosts.coordination import CoordinatorServer, check_reports

    figures: Figures = {}
    with NetnsLab() as lab, tempfile.TemporaryDirectory(prefix="p4ina-bench-") as tmp:
        br = lab.ns("br")
        lab.run(br, "ip", "link", "add", "br0", "type", "bridge")
        lab.run(br, "ip", "link", "set", "br0", "up")
        hosts = []
        for r in range(RANKS):
            h = lab.ns(f"h{r}")
            lab.veth(h, "eth0", br, f"p{r}")
            lab.run(br, "ip", "link", "set", f"p{r}", "master", "br0")
            lab.address(h, "eth0", f"10.78.0.{r + 1}/24")
            hosts.append(h)
        peers = ",".join(f"10.78.0.{r + 1}" for r in range(RANKS))
        for size in SIZES:
            with CoordinatorServer(f"unix:{Path(tmp) / f'c{size}.sock'}", RANKS) as server:
                procs = [
                    lab.popen(
                        hosts[r],
                        [
                            sys.executable,
                            "-m",
                            "hosts",
                            "ring",
                            "--rank",
                            str(r),
                            "--workers",
                            str(RANKS),
                            "--coord",
                            server.address,
                            "--peers",
                            peers,
                            "--elements",
                            str(size),
                            "--iterations",
                            str(ITERATIONS),
                            "--json",
                        ],
                        stdout=subprocess.PIPE,
                    )
                    for r in range(RANKS)
                ]
                reports = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
            outcome = check_reports(reports, RANKS)
            if not outcome.ok:
                raise RuntimeError(f"ring results wrong at size {size}: {outcome.problems}")
            per_call = [max(r["latency_s"][i] for r in reports) for i in range(1, ITERATIONS)]
            latency = statistics.median(per_call)
            retrans = sum(r["retransmissions"] for r in reports)
            note = f"{RANKS} namespaces, Linux bridge, {size * 4 // 1024} KiB float32, median of {ITERATIONS - 1}"
            figures[f"ring4_latency_{size}"] = Figure(latency * 1e3, "ms", note)
            figures[f"ring4_goodput_{size}"] = Figure(
                size * 4 * 8 / latency / 1e9, "Gbit/s", f"tensor bytes / latency; {retrans} retransmissions"
            )
    return figures
