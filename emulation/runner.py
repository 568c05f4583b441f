"""Run an experiment: start the network, install routes and jobs, sweep methods x host counts x sizes, record.

    result = run_experiment(ExperimentConfig(topology="fat-tree:2", host_counts=(4,), sizes=(1024,)))
    print(report.table(result))

Each (method, host count, size) is one measurement: one worker process per
host (`python -m hosts inc|ring`) runs warm-up + repetitions all-reduces back
to back; the coordinator (in this process, on a Unix socket) holds the
barriers and collects their reports, which are checked for correctness
(every worker got the same sum, within the error bound of numpy's float64
sum). Each switch process's CPU time is read around each measurement and the
machine's CPU counters are sampled while the all-reduces run, so the report
can say whether the links or the CPUs were the limit.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from controller.api import DEFAULT_BMV2_JSON, DEFAULT_P4INFO, Controller
from controller.cli import load_topology
from controller.counters import totals
from controller.state import State
from controller.topology import Topology
from emulation.experiment import (
    INC_INT8,
    METHODS,
    MIN_ACTIVE_S,
    QUANTIZE,
    RESULT_TYPE,
    RING,
    ConfigError,
    ExperimentConfig,
    Measurement,
    frame_bytes,
    rep_from_reports,
)
from emulation.network import EmulatedNetwork, NetworkConfig
from emulation.nodes import BMV2_BINARY
from hosts.coordination import CoordinationError, CoordinatorServer, check_reports

LOG = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
JOB_IDS = {m: i + 1 for i, m in enumerate(METHODS)}  # one job per in-network method, reinstalled per host count
MAX_HOPS = 6  # host-edge-agg-core-agg-edge-host


class ExperimentError(RuntimeError):
    """The experiment could not run (missing program, too few hosts...); the message says what to do."""


@dataclass
class ExperimentResult:
    config: ExperimentConfig
    measurements: list[Measurement] = field(default_factory=list)
    out_dir: Path | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    startup_s: float | None = None
    duration_s: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.measurements) and all(m.ok for m in self.measurements)


ProgressFn = Callable[[str, Measurement | None], None]


def select_hosts(model: Topology, count: int) -> tuple[str, ...]:
    """The first `count` hosts in model order (pods filled one after the other, as a scheduler packs a job)."""
    if count > len(model.hosts):
        raise ConfigError(f"{count} hosts asked for, but {model.kind} {dict(model.params)} has {len(model.hosts)}")
    return tuple(h.name for h in model.hosts[:count])


def timeouts(config: ExperimentConfig) -> dict[str, float]:
    """Retransmission timeouts well above the queueing a full window builds on a shaped link (no spurious resends).

    Passed as both the initial and the minimum timeout: the workers adapt their timer to the round trips they
    measure, and the first round trips of a window see empty queues, so without a floor the timer would fire
    while the rest of the window is still queued on a slow link.
    """
    bw = (config.shape.bw_mbps or 1000.0) * 1e6
    rtt = 2 * MAX_HOPS * (config.shape.delay_ms or 0.0) / 1e3
    inc_window = config.slots * frame_bytes(INC_INT8)[0] * 8 / bw
    ring_window = config.ring_window * 1514 * 8 / bw
    # 0.5 s floor: with Python switches and workers sharing two cores, a round trip under load can take 0.2 s
    return {"inc": max(0.5, 3 * inc_window + 2 * rtt), "ring": max(0.5, 3 * ring_window + 2 * rtt)}


def worker_command(config: ExperimentConfig, method: str, rank: int, hosts: tuple[str, ...], model: Topology,
                   coord: str, size: int, iface: str, slots: int, shift: int, tmo: dict[str, float],
                   first_epoch: int = 1) -> list[str]:
    common = ["--rank", str(rank), "--workers", str(len(hosts)), "--coord", coord, "--size", str(size),
              "--iterations", str(config.iterations), "--input", config.input_kind, "--seed", str(config.seed), "--json"]
    if method == RING:
        peers = ",".join(model.host(h).ip for h in hosts)
        groups = ",".join(model.host(h).switch for h in hosts)
        return [sys.executable, "-m", "hosts", "ring", *common, "--peers", peers, "--groups", groups,
                "--window", str(config.ring_window), "--timeout", f"{tmo['ring']:.3f}", "--min-timeout", f"{tmo['ring']:.3f}"]
    return [sys.executable, "-m", "hosts", "inc", *common, "--iface", iface, "--job-id", str(JOB_IDS[method]),
            "--slot-count", str(slots), "--result-type", RESULT_TYPE[method], "--shift", str(shift),
            "--timeout", f"{tmo['inc']:.3f}", "--min-timeout", f"{tmo['inc']:.3f}", "--first-epoch", str(first_epoch)]


class CpuSampler:
    """Samples the machine's CPU counters (/proc/stat) every `period_s` on a thread, to tell later how busy
    all cores were during given intervals (the all-reduces), whoever used them: switches or workers."""

    def __init__(self, pids: Callable[[], list[int]] = list, period_s: float = 0.05) -> None:
        self.period_s = period_s
        self.pids = pids  # our processes (switches, workers): their share tells our load from other programs'
        self.samples: list[tuple[float, int, int, int]] = []  # (time, busy jiffies, total jiffies, ours)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    @staticmethod
    def read() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        total = sum(fields[:8])  # guest time is already counted in user
        return total - idle, total

    def _ours(self) -> int:
        ticks = 0
        for pid in self.pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            ticks += int(fields[11]) + int(fields[12])
        return ticks

    def _run(self) -> None:
        while not self._stop.is_set():
            busy, total = self.read()
            self.samples.append((time.monotonic(), busy, total, self._ours()))
            self._stop.wait(self.period_s)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)

    def busy_share(self, intervals: list[tuple[float, float]]) -> tuple[float, float] | None:
        """(share of all cores busy, share used by our processes) over the intervals; None if too few samples.

        A process that exits between two samples drops out of the second; such pairs are skipped for 'ours'."""
        busy = total = ours = ours_total = 0
        for (t0, b0, n0, o0), (t1, b1, n1, o1) in zip(self.samples, self.samples[1:]):
            mid = (t0 + t1) / 2
            if any(a <= mid <= b for a, b in intervals):
                busy += b1 - b0
                total += n1 - n0
                if o1 >= o0:
                    ours += o1 - o0
                    ours_total += n1 - n0
        if total < 5 * (os.cpu_count() or 1):
            return None
        return busy / total, (ours / ours_total if ours_total else 0.0)


def _iteration_starts(barriers: dict[str, float], count: int) -> list[float] | None:
    """When each all-reduce began: the workers' per-call barrier ('inc-<job>-<i>' / 'ring-<i>') completed."""
    by_call: dict[int, float] = {}
    for tag, t in barriers.items():
        m = re.fullmatch(r"(?:inc-\d+|ring)-(\d+)", tag)
        if m:
            by_call[int(m.group(1))] = t
    starts = [by_call.get(i) for i in range(count)]
    return None if any(t is None for t in starts) else starts  # type: ignore[return-value]


@contextmanager
def _short_tmpdir() -> Iterator[Path]:
    """Unix socket paths must stay under 108 bytes, so coordinator sockets live here, not in the results folder."""
    path = Path(tempfile.mkdtemp(prefix="p4ina-coord-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class Runner:
    """One experiment on one running network and controller."""

    def __init__(self, config: ExperimentConfig, net: EmulatedNetwork, ctl: Controller, log_dir: Path, sock_dir: Path) -> None:
        self.config = config
        self.net = net
        self.ctl = ctl
        self.model = net.model
        self.log_dir = log_dir
        self.sock_dir = sock_dir
        self.tmo = timeouts(config)
        self._count = 0
        self.idle_cpu_per_s: dict[str, float] = {}
        # The switches drop contributions older than their cell's epoch, so every all-reduce of a job, across
        # measurements too, must use a newer one: each measurement continues where the previous one stopped.
        self.next_epoch: dict[str, int] = {}

    def measure_idle(self, seconds: float = 1.0) -> dict[str, float]:
        """Each switch's CPU use with no traffic (its housekeeping), subtracted from the measurements."""
        c0, t0 = self.net.switch_cpu_seconds(), time.monotonic()
        time.sleep(seconds)
        c1, dt = self.net.switch_cpu_seconds(), time.monotonic() - t0
        self.idle_cpu_per_s = {k: max(0.0, (c1[k] - c0.get(k, 0.0)) / dt) for k in c1}
        return self.idle_cpu_per_s

    def install_jobs(self, hosts: tuple[str, ...]) -> dict[str, tuple[int, int]]:
        """Install one job per in-network method; method -> (slots, shift)."""
        out = {}
        for method in self.config.methods:
            if method == RING:
                continue
            plan = self.ctl.install_job(JOB_IDS[method], hosts, QUANTIZE[method], slots=self.config.slots)
            out[method] = (plan.spec.slots, plan.spec.shift)
            self.next_epoch[method] = 1  # a fresh install (new token) starts at epoch 1
            LOG.info("job %d (%s) on %d hosts: root %s, %d switches", plan.job_id, method, len(hosts), plan.root, len(plan.switches))
        return out

    def remove_jobs(self) -> None:
        for plan in list(self.ctl.jobs()):
            self.ctl.remove_job(plan.job_id)

    def _counters(self, method: str) -> dict[str, int]:
        if method == RING:
            return {}
        try:
            return totals(self.ctl.counters(JOB_IDS[method]))
        except Exception as ex:  # counters are an extra: never lose a measurement over them
            LOG.warning("could not read the counters of job %d: %s", JOB_IDS[method], ex)
            return {}

    def measure(self, method: str, hosts: tuple[str, ...], size: int, job: tuple[int, int] | None) -> Measurement:
        cfg = self.config
        n = len(hosts)
        m = Measurement(method, n, size, link_bw_mbps=cfg.shape.bw_mbps)
        self._count += 1
        sock = self.sock_dir / f"c{self._count}.sock"
        slots, shift = job if job else (0, 0)
        before = self._counters(method)
        cpu0 = self.net.switch_cpu_seconds()
        t0 = time.monotonic()
        procs: list[tuple[str, subprocess.Popen[Any]]] = []
        server = CoordinatorServer(f"unix:{sock}", n, timeout_s=cfg.run_timeout_s)
        # a worker that dies mid-exchange resets its connection; that is reported as its failure, not as a traceback
        server._server.handle_error = lambda _request, _address: LOG.debug("coordinator connection error", exc_info=True)  # noqa: SLF001
        barriers: dict[str, float] = {}
        handle = server._handle  # noqa: SLF001 - timestamp barriers: they mark when each all-reduce starts

        def timed(msg: dict[str, Any]) -> dict[str, Any]:
            reply = handle(msg)
            if msg.get("op") == "exchange":
                barriers[str(msg.get("tag"))] = time.monotonic()
            return reply

        server._handle = timed  # type: ignore[method-assign]  # noqa: SLF001
        server.start()
        sampler = CpuSampler(lambda: [p.pid for _h, p in procs] + list(self.net.switch_pids().values())).__enter__()
        reports: dict[int, dict[str, Any]] = {}
        try:
            for rank, h in enumerate(hosts):
                cmd = worker_command(cfg, method, rank, hosts, self.model, f"unix:{sock}", size,
                                     self.net.host_iface(h), slots, shift, self.tmo, self.next_epoch.get(method, 1))
                log = self.log_dir / f"{method}-n{n}-s{size}-{h}.log"
                procs.append((h, self.net.popen(h, cmd, log=log)))
            reports = self._wait(server, procs, m)
        finally:
            for _h, proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(5)
                if proc.stdout:
                    proc.stdout.close()
            server.close()
            sampler.__exit__()
        m.wall_s = time.monotonic() - t0
        if method != RING:  # even after a failure: the cells may hold any epoch the workers reached
            self.next_epoch[method] = (self.next_epoch.get(method, 1) + cfg.iterations + 1) % 256 or 1
        cpu1 = self.net.switch_cpu_seconds()
        idle = {k: self.idle_cpu_per_s.get(k, 0.0) * m.wall_s for k in cpu1}
        used = {k: cpu1[k] - cpu0.get(k, 0.0) - idle[k] for k in cpu1}
        m.switch_cpu_s = {k: round(v, 3) for k, v in used.items() if v > 0.005}
        after = self._counters(method)
        m.switch_counters = {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0)}
        good = [reports[r] for r in sorted(reports) if "error" not in reports[r]]
        if reports:
            outcome = check_reports([reports[r] for r in sorted(reports)], n)
            m.problems += list(outcome.problems)
            m.ok = outcome.ok and not m.problems
        if good and len(good) == n:
            m.reps = rep_from_reports(good, cfg.warmup)
            m.max_error_ratio = max(float(r.get("max_error_ratio", 0.0)) for r in good)
        starts = _iteration_starts(barriers, len(m.reps))
        if starts and sum(r.latency_s for r in m.reps) >= MIN_ACTIVE_S:
            shares = sampler.busy_share([(t, t + r.latency_s) for t, r in zip(starts, m.reps)])
            if shares:
                m.machine_busy, m.emulation_busy = shares
        if m.ok and len(m.measured) < cfg.reps:
            m.ok = False
            m.problems.append(f"only {len(m.measured)} of {cfg.reps} repetitions reported")
        return m

    def _wait(self, server: CoordinatorServer, procs: list[tuple[str, subprocess.Popen[Any]]], m: Measurement) -> dict[int, dict[str, Any]]:
        """The reports of every rank; a worker that dies before reporting ends the wait early."""
        deadline = time.monotonic() + self.config.run_timeout_s
        n = len(procs)
        while time.monotonic() < deadline:
            try:
                return server.wait_reports(0.2)
            except CoordinationError:
                pass
            dead = [(h, p.returncode) for h, p in procs if p.poll() is not None and p.returncode != 0]
            if dead:
                time.sleep(0.5)  # its report (if it managed to send one) is on its way
                with server._reports_cond:  # noqa: SLF001 - the server has no "reports so far" accessor
                    got = dict(server.reports)
                missing = [h for rank, (h, _p) in enumerate(procs) if rank not in got]
                m.problems.append(f"workers {', '.join(f'{h} (exit {c})' for h, c in dead)} failed; "
                                  f"no report from {', '.join(missing) or 'none'}; logs in {self.log_dir}")
                return got
        with server._reports_cond:  # noqa: SLF001
            got = dict(server.reports)
        m.problems.append(f"timed out after {self.config.run_timeout_s:.0f} s with {len(got)} of {n} reports; logs in {self.log_dir}")
        return got

    def sweep(self, out: list[Measurement], progress: ProgressFn | None = None) -> list[Measurement]:
        """Appends to `out` as it goes, so an interrupted sweep still leaves what it measured."""
        cfg = self.config
        for n in cfg.host_counts:
            hosts = select_hosts(self.model, n)
            jobs = self.install_jobs(hosts)
            try:
                for size in cfg.sizes:
                    for method in cfg.methods:
                        if progress:
                            progress(f"{n} hosts, {method}, {size} elements", None)
                        m = self.measure(method, hosts, size, jobs.get(method))
                        if not m.ok:
                            LOG.error("%s, %d hosts, %d elements failed: %s", method, n, size, "; ".join(m.problems))
                        out.append(m)
                        if progress:
                            progress(f"{n} hosts, {method}, {size} elements", m)
            finally:
                self.remove_jobs()
        return out


def _push_pipeline(ctl: Controller, attempts: int = 2) -> None:
    """Push the program; once more on failure (BMv2 once refused one of 20 fresh switches, then took it)."""
    from controller.client import SwitchError
    from controller.fabric import FabricError
    from controller.installer import InstallError

    for attempt in range(1, attempts + 1):
        try:
            ctl.push_pipeline()
            return
        except (FabricError, InstallError, SwitchError) as ex:
            if attempt == attempts:
                raise
            LOG.warning("pipeline push failed (%s); trying again", ex)
            time.sleep(1.0)


def check_program() -> None:
    missing = [p for p in (DEFAULT_BMV2_JSON, DEFAULT_P4INFO) if not p.exists()]
    if missing:
        raise ExperimentError(f"{', '.join(map(str, missing))} missing: the compiled P4 program is committed in p4/build; "
                              "restore it (git checkout p4/build) or rebuild it with `make p4` (needs p4c)")


def results_dir(config: ExperimentConfig, when: datetime | None = None) -> Path:
    stamp = (when or datetime.now()).strftime("%Y-%m-%d_%H%M%S")
    return config.results_root / f"{stamp}_{config.label()}"


def environment(config: ExperimentConfig) -> dict[str, Any]:
    """Everything needed to tell two runs apart: software versions, back end, program hash, machine."""
    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    def sha(path: Path) -> str | None:
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None

    try:
        import mininet.net

        mn_version = getattr(mininet.net, "VERSION", None)
    except ImportError:
        mn_version = None
    backend: dict[str, Any] = {"name": config.backend}
    if config.backend == "bmv2":
        binary = shutil.which(BMV2_BINARY)
        backend["binary"] = binary
        if binary:
            done = subprocess.run([binary, "--version"], capture_output=True, text=True)
            backend["version"] = (done.stdout or done.stderr).strip()
    else:
        backend["implementation"] = "emulation.softswitch (p4ina's embedded switch, Python)"
    manifest = REPO / "p4" / "build" / "manifest.json"
    cpu_model = None
    try:
        cpu_model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                          if ln.startswith("model name")), None)
    except OSError:
        pass
    status = git("status", "--porcelain")
    return {
        "started": datetime.now().isoformat(timespec="seconds"),
        "command": sys.argv,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "packages": {p: version(p) for p in ("p4ina", "numpy", "grpcio", "p4runtime", "protobuf", "scapy", "matplotlib")},
        "mininet": mn_version,
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
        "backend": backend,
        "program": {"bmv2_json_sha256": sha(DEFAULT_BMV2_JSON), "p4info_sha256": sha(DEFAULT_P4INFO),
                    "manifest": json.loads(manifest.read_text()) if manifest.exists() else None},
    }


def run_experiment(config: ExperimentConfig, *, out_dir: Path | None = None, progress: ProgressFn | None = None,
                   write: bool = True) -> ExperimentResult:
    """Start the network, run the sweep, tear everything down; write the results folder if `write`."""
    from emulation import report  # the report needs matplotlib; keep it out of the network's import path

    check_program()
    model = load_topology(config.topology)
    for n in config.host_counts:
        select_hosts(model, n)
    out = out_dir or results_dir(config)
    out.mkdir(parents=True, exist_ok=True)
    log_dir = out / "logs"
    log_dir.mkdir(exist_ok=True)
    result = ExperimentResult(config, out_dir=out, environment=environment(config))
    result.environment["worker_timeouts_s"] = timeouts(config)
    t0 = time.monotonic()
    net_cfg = NetworkConfig(run_dir=log_dir, backend=config.backend, shape=config.shape)
    try:
        with _short_tmpdir() as sock_dir, EmulatedNetwork(model, net_cfg) as net:
            result.startup_s = net.startup_s
            topo = net.topology
            topo.save(out / "topology.json")
            with Controller(topo, state=State(out / "controller-state.json")) as ctl:
                t1 = time.monotonic()
                _push_pipeline(ctl)
                ctl.install_routes()
                LOG.info("pipeline and routes installed in %.1f s", time.monotonic() - t1)
                result.startup_s = time.monotonic() - t0
                runner = Runner(config, net, ctl, log_dir, sock_dir)
                result.environment["switch_idle_cpu_per_s"] = runner.measure_idle()
                runner.sweep(result.measurements, progress)
    finally:
        result.duration_s = time.monotonic() - t0
        result.notes = report.notes(result)
        if write:
            report.write_all(result)
    return result
