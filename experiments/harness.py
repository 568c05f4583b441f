"""The harness every experiment on an emulated fabric shares: network, controller, agents, one timed step.

`emulated_fabric` starts the Mininet network, pushes the program and installs routes; a `Runner` installs
jobs, starts one agent per host (`python -m hosts agent`, hosts.agent) driven by a coordinator, and runs
numbered steps. At a step's release it reads every link's byte counters, every switch and agent process's
CPU time and the machine's CPU counters, and reads them again once every agent reported. So each
repetition knows what it put on the wire (T_wire, experiments.bounds) and what the CPUs were doing, and
the timing is the same for every method: from the release to the slowest worker holding its float32
result, on one clock. The experiments (allreduce, train, faults) build on it and never on each other.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
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
from typing import Any, Protocol

import numpy as np

from controller.api import DEFAULT_BMV2_JSON, DEFAULT_P4INFO, PROGRAM_MANIFEST, Controller, program_staleness
from controller.planner import JobPlan
from controller.state import State
from controller.topology import Topology
from emulation.network import EmulatedNetwork, NetworkConfig
from emulation.nodes import BMV2_BINARY, proc_cpu_seconds, reap
from experiments import bounds
from experiments.config import ConfigError, ExperimentConfig, Sample
from hosts import clock
from hosts.coordination import CoordinatorServer
from hosts.methods import METHODS, Method
from hosts.tickets import JobTicket, RingSettings, StepCommand
from wireformat import AGG

LOG = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent  # the checkout; site-packages when installed (no .git: no git info)
JOB_IDS = {name: i + 1 for i, name in enumerate(METHODS)}  # one job per in-network method, reinstalled per host count
MAX_HOPS = 6  # host-edge-agg-core-agg-edge-host


class Fabric(Protocol):
    """What a Runner asks of a network: an EmulatedNetwork it started, or a network `p4ina serve` keeps up
    (emulation.served.ServedNetwork, for `p4ina allreduce`)."""

    model: Topology

    def host_iface(self, name: str) -> str: ...

    def popen(self, host: str, cmd: list[str], log: Path | None = None) -> subprocess.Popen[Any]: ...

    def link_ports(self) -> dict[str, tuple[str, int, str]]: ...

    def link_bytes(self) -> dict[str, tuple[int, int]]: ...

    def link_frames(self) -> dict[str, tuple[int, int]]: ...

    def switch_cpu_seconds(self) -> dict[str, float]: ...


class ExperimentError(RuntimeError):
    """The experiment could not run (missing program, too few hosts...); the message says what to do."""


ProgressFn = Callable[[str, Sample | None], None]


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
    inc_window = config.slots * AGG.frame_bytes(AGG.elem_types["ELEM_INT32"]) * 8 / bw
    ring_window = config.ring_window * 1514 * 8 / bw
    # 0.5 s floor: with Python switches and agents sharing two cores, a round trip under load can take 0.2 s.
    # Host methods: as many full windows as can queue on one host link at once (a ring rank hears from one
    # peer; a hier leader from its members and its ring neighbour; a double-binary-tree rank from its two
    # children in one tree and its parent in the other): with the ring's floor the tree resent ~5000 frames
    # of a 128K all-reduce at 2 Mbit/s, all spurious (no loss configured).
    out = {"inc": max(0.5, 3 * inc_window + 2 * rtt)}
    for family, windows in WINDOWS_PER_LINK.items():
        out[family] = max(0.5, 3 * windows * ring_window + 2 * rtt)
    return out


# an all-to-all rank shares one window among its peers (hosts.alltoall.split_window); rounding up to one
# datagram per peer and hier's two phases at once can make that up to two on a link
WINDOWS_PER_LINK = {"ring": 1, "hier": 2, "tree": 3, "a2a-direct": 2, "a2a-hier": 2}


def job_ticket(
    plan: JobPlan,
    *,
    install: int,
    timeout_s: float,
    min_timeout_s: float | None = None,
    failure_timeout_s: float | None = None,
    early_window: float | None = None,
    first_epoch: int | None = None,
) -> JobTicket:
    """What the agents of a planned (and installed) job need to run it: the one place a plan becomes a ticket.

    install: the runner's count of this job's installs (a new one makes the agents start a fresh worker);
    min_timeout_s defaults to timeout_s; failure_timeout_s and early_window to the worker's own (None); first_epoch
    to 1 (a fresh install; agents started again on the same install start past the epochs its cells hold)."""
    spec = plan.spec
    return JobTicket(
        job_id=plan.job_id,
        slots=spec.slots,
        up_lanes=spec.up_lanes,
        down_lanes=spec.down_lanes,
        shift=spec.shift,
        install=install,
        timeout_s=timeout_s,
        min_timeout_s=timeout_s if min_timeout_s is None else min_timeout_s,
        error_lsb=plan.error_lsb,
        q_limit=plan.q_limit or None,  # 0: the plan left it to the formula
        failure_timeout_s=failure_timeout_s,
        early_window=early_window,
        first_epoch=first_epoch,
    )


def method_order(config: ExperimentConfig, hosts: int, size: int, rep: int) -> list[str]:
    """The methods of one repetition in a random order, the same for the same seed, host count, size and rep."""
    rng = np.random.default_rng([config.seed, hosts, size, rep])
    return [config.methods[i] for i in rng.permutation(len(config.methods))]


@dataclass
class Snapshot:
    """What the runner reads at a step's release and again once the step is over."""

    t: float
    links: dict[str, tuple[int, int]]
    switch_cpu: dict[str, float]
    agent_cpu: dict[int, float]
    machine: tuple[
        int, int, int, int
    ]  # busy, total, kernel (system, irq, softirq) and irq + softirq jiffies of all cores
    ours: float  # CPU seconds of our switch and agent processes and of this runner
    frames: dict[str, tuple[int, int]] = field(default_factory=dict)  # as links, in frames


def machine_jiffies() -> tuple[int, int, int, int]:
    """(busy, total, kernel, interrupts) jiffies over all cores since boot, from /proc/stat's first line.

    interrupts (irq + softirq) is kernel work done mostly for our own frames crossing veth pairs and qdiscs, so
    it is ours, not another program's. Without CONFIG_IRQ_TIME_ACCOUNTING a tick in an interrupt is also charged
    to the process it interrupted, often one of ours: adding it to our processes' time can count it twice, so
    what is left for other programs is a lower bound."""
    fields_ = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields_[3] + (fields_[4] if len(fields_) > 4 else 0)  # idle + iowait
    total = sum(fields_[:8])  # guest time is already counted in user
    interrupts = sum(fields_[5:7])
    kernel = fields_[2] + interrupts  # system + irq + softirq: syscalls, veth, qdiscs, the stacks
    return total - idle, total, kernel, interrupts


@contextmanager
def short_tmpdir() -> Iterator[Path]:
    """Unix socket paths must stay under 108 bytes, so coordinator sockets live here, not in the results folder."""
    path = Path(tempfile.mkdtemp(prefix="p4ina-coord-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class Step:
    """One all-reduce as the runner saw it: every rank's report of one step."""

    step: int
    phase: str
    reports: dict[int, dict[str, Any]]
    n: int
    t_release: float | None = None

    @property
    def errors(self) -> list[str]:
        out = [f"rank {r}: {rep['error']}" for r, rep in sorted(self.reports.items()) if "error" in rep]
        if len(self.reports) < self.n:
            out.append(f"{self.n - len(self.reports)} of {self.n} agents did not report")
        return out

    @property
    def exact(self) -> bool:
        ok = [r for r in self.reports.values() if "error" not in r]
        checker = self.reports.get(0, {})
        return len(ok) == self.n and len({r["digest"] for r in ok}) == 1 and checker.get("max_abs_error") == 0.0

    @property
    def latency_s(self) -> float:
        return max((float(r["latency_s"]) for r in self.reports.values() if "latency_s" in r), default=float("nan"))

    def total(self, key: str) -> int:
        return sum(int(r.get(key, 0)) for r in self.reports.values())

    def t_done(self) -> float:
        return max((float(r["t_done"]) for r in self.reports.values() if "t_done" in r), default=float("nan"))


class StepFailed(RuntimeError):
    """A step ended without every agent's report; the agents may be stuck, so this host count stops."""


class Runner:
    """One experiment on one running network and controller."""

    def __init__(
        self, config: ExperimentConfig, net: Fabric, ctl: Controller | None, log_dir: Path, sock_dir: Path
    ) -> None:
        """ctl: the controller that installs the jobs (None: the jobs are installed already, `p4ina allreduce`)."""
        self.config = config
        self.net = net
        self.ctl = ctl
        self.model = net.model
        self.log_dir = log_dir
        self.sock_dir = sock_dir
        self.tmo = timeouts(config)
        self.rate_bps = (config.shape.bw_mbps or 0.0) * 1e6
        shaping = config.shape.shaping()
        self.credit_bytes = shaping.credit_bytes if shaping else 0
        self.delay_s = (config.shape.delay_ms or 0.0) / 1e3
        self.ports = net.link_ports()  # switch interface -> (switch, port, neighbour)
        self.step = 0
        self.problems: list[str] = []
        self._snaps: dict[str, Snapshot] = {}
        self._agents: list[tuple[str, subprocess.Popen[Any]]] = []
        self._killed: set[int] = set()  # PIDs of agents killed on purpose (kill_agent): not a failed run
        self._lock = threading.Lock()
        # answers the agents' barriers that need a verdict (a switch-failure report: hosts.coordination)
        self.decide: Callable[[str, list[Any]], Any] | None = None
        self.ask: Callable[[str, int, Any], Any] | None = None  # answers one agent's question (no barrier)

    # -- what the machine did -----------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        switch_cpu = self.net.switch_cpu_seconds()
        agent_cpu = {p.pid: c for _h, p in self._agents if (c := proc_cpu_seconds(p.pid)) is not None}
        runner = proc_cpu_seconds(os.getpid()) or 0.0  # the coordinator's barriers and these snapshots
        return Snapshot(
            clock.now(),
            self.net.link_bytes(),
            switch_cpu,
            agent_cpu,
            machine_jiffies(),
            sum(switch_cpu.values()) + sum(agent_cpu.values()) + runner,
            self.net.link_frames(),
        )

    def _on_release(self, tag: str) -> None:
        snap = self.snapshot()
        with self._lock:
            self._snaps[tag] = snap

    def _figures(self, before: Snapshot, after: Snapshot, members: set[str]) -> dict[str, Any]:
        """Per-repetition columns of raw.csv from two snapshots."""
        out: dict[str, Any] = {}
        best, where = 0, ""
        up = down = 0
        for iface, (tx1, rx1) in after.links.items():
            tx0, rx0 = before.links.get(iface, (tx1, rx1))
            sw, port, peer = self.ports.get(iface, ("?", -1, "?"))
            for nbytes, name in ((tx1 - tx0, f"{sw}:{port}>{peer}"), (rx1 - rx0, f"{peer}>{sw}:{port}")):
                if nbytes > best:
                    best, where = nbytes, name
            if peer in members:
                up, down = max(up, rx1 - rx0), max(down, tx1 - tx0)
        out.update(
            wire_bytes=best,
            wire_link=where,
            host_up_bytes=up,
            host_down_bytes=down,
            t_wire_s=bounds.wire_time(best, self.rate_bps, self.credit_bytes),
        )
        dt = max(after.t - before.t, 1e-9)
        busy = {k: (after.switch_cpu[k] - before.switch_cpu.get(k, after.switch_cpu[k])) / dt for k in after.switch_cpu}
        if busy:
            name = max(busy, key=lambda k: busy[k])
            out.update(switch_busy=busy[name], busiest_switch=name)
        agents = [(after.agent_cpu[p] - before.agent_cpu.get(p, after.agent_cpu[p])) / dt for p in after.agent_cpu]
        if agents:
            out["agents_busy"] = max(agents)
            out["agents_cores"] = sum(agents)
        if busy:
            out["switches_cores"] = sum(busy.values())
        b = after.machine[0] - before.machine[0]
        t = after.machine[1] - before.machine[1]
        if t > 0:
            cores = os.cpu_count() or 1
            out["cores_busy"] = b / t
            # ours: our processes, and the interrupts our frames cost (what is left: other programs, kernel
            # threads, the hypervisor's steal)
            irq = after.machine[3] - before.machine[3]
            out["ours_busy"] = min(out["cores_busy"], (after.ours - before.ours) / (dt * cores) + irq / t)
            out["kernel_cores"] = (after.machine[2] - before.machine[2]) / t * cores
            # The cores this repetition's work would take at line rate (its CPU time over T_wire): above the
            # machine's count, that link rate cannot be emulated here, however fast agents and switches get.
            if out["t_wire_s"] > 0:
                out["line_rate_cores"] = out["cores_busy"] * cores * dt / out["t_wire_s"]
                out["line_rate_kernel_cores"] = out["kernel_cores"] * dt / out["t_wire_s"]
        # Every transmission on a link once: what switches sent, and what hosts sent (a host port's receive).
        switches = {sw for sw, _port, _peer in self.ports.values()}
        frames = 0
        for iface, (tx1, rx1) in after.frames.items():
            tx0, rx0 = before.frames.get(iface, (tx1, rx1))
            frames += tx1 - tx0
            if self.ports.get(iface, ("?", -1, "?"))[2] not in switches:
                frames += rx1 - rx0
        if frames > 0:
            out["wire_frames"] = frames
            if "kernel_cores" in out:
                out["kernel_us_per_frame"] = out["kernel_cores"] * dt / frames * 1e6
        return out

    # -- jobs and agents ------------------------------------------------------------------------
    def install_jobs(self, hosts: tuple[str, ...]) -> dict[str, tuple[JobPlan, JobTicket]]:
        """One job per in-network method: method -> (plan, its agents' ticket)."""
        out = {}
        assert self.ctl is not None, "a runner without a controller installs no jobs"
        for name in self.config.methods:
            m = METHODS[name]
            if not m.in_network:
                continue
            plan = self.ctl.install_job(JOB_IDS[name], hosts, m.lanes, slots=self.config.slots)  # lanes both ways
            spec = plan.spec
            out[name] = (plan, job_ticket(plan, install=self.step, timeout_s=self.tmo["inc"]))
            LOG.info(
                "job %d (%s) on %d hosts: root %s, %d switches, shift %d",
                plan.job_id,
                name,
                len(hosts),
                plan.root,
                len(plan.switches),
                spec.shift,
            )
        return out

    def remove_jobs(self) -> None:
        assert self.ctl is not None, "a runner without a controller removes no jobs"
        for plan in list(self.ctl.jobs()):
            self.ctl.remove_job(plan.job_id)

    @contextmanager
    def agents(self, hosts: tuple[str, ...], tag: str, standby: tuple[str, ...] = ()) -> Iterator[CoordinatorServer]:
        """One agent per host, driven by a coordinator on a Unix socket; all stopped (by PID) on the way out.

        standby: hosts whose agents start idle (ranks after the workers'), a pool of hot spares for a dead host."""
        sock = self.sock_dir / f"{tag}.sock"
        server = CoordinatorServer(
            f"unix:{sock}",
            len(hosts),
            timeout_s=600,
            on_release=self._on_release,
            decide=self.decide,
            ask=self.ask,
            standby=len(standby),
        )
        # a dropped agent connection is logged at debug, not printed by socketserver; hosts.coordination has no
        # public hook for it yet
        server._server.handle_error = lambda _r, _a: LOG.debug(  # noqa: SLF001 - no public hook (see above)
            "coordinator connection error", exc_info=True
        )
        server.start()
        peers = ",".join(self.model.host(h).ip for h in hosts)
        groups = ",".join(self.model.host(h).switch for h in hosts)
        self._agents = []
        try:
            for rank, h in enumerate(hosts + standby):
                cmd = [
                    sys.executable,
                    "-m",
                    "hosts",
                    "agent",
                    "--rank",
                    str(rank),
                    "--workers",
                    str(len(hosts)),
                    "--coord",
                    f"unix:{sock}",
                    "--iface",
                    self.net.host_iface(h),
                    "--peers",
                    peers,
                    "--groups",
                    groups,
                    *(["--standby"] if rank >= len(hosts) else []),
                ]
                self._agents.append((h, self.net.popen(h, cmd, log=self.log_dir / f"agent-{tag}-{h}.log")))
            yield server
        finally:
            self.step += 1
            server.post(self.step, {"op": "quit"})
            reap([proc for _h, proc in self._agents])
            self._agents = []
            server.close()

    def alive(self) -> bool:
        """Every agent of the current group still running (but those the runner killed on purpose)."""
        return all(p.poll() is None for _h, p in self._agents if p.pid not in self._killed)

    def kill_agent(self, rank: int) -> str:
        """SIGKILL rank's agent (a host that dies mid all-reduce), by its PID; returns its host."""
        host, proc = self._agents[rank]
        self._killed.add(proc.pid)
        proc.kill()
        return host

    def take_snapshot(self, step: int) -> Snapshot | None:
        """The snapshot taken at `step`'s release, removed (None if the release was never seen)."""
        with self._lock:
            return self._snaps.pop(f"step-{step}", None)

    def peek_snapshot(self, step: int) -> Snapshot | None:
        """The snapshot taken at `step`'s release, kept for a later take_snapshot."""
        with self._lock:
            return self._snaps.get(f"step-{step}")

    # -- steps ----------------------------------------------------------------------------------
    def step_timeout(self, size: int) -> float:
        wire = size * 4 * 2 * 8 / self.rate_bps if self.rate_bps else 0.0
        return self.config.step_timeout_s + 20 * wire

    def run_step(
        self,
        server: CoordinatorServer,
        m: Method,
        hosts: tuple[str, ...],
        size: int,
        rep: int,
        order: int,
        job: JobTicket | None,
        t_path: tuple[float, float],
    ) -> list[Sample]:
        """One repetition on every host. t_path: the path bound with the exponent rounds and without them
        (an in-network worker that speculated its exponents, hosts.inc_worker)."""
        cfg = self.config
        self.step += 1
        step = self.step
        cmd = StepCommand(
            step=step,
            method=m.name,
            size=size,
            iteration=rep,
            input=cfg.input_kind,
            seed=cfg.seed,
            checker=0,
            ring=RingSettings(window=cfg.ring_window, timeout_s=self.tmo.get(m.family, self.tmo["ring"])),
            job=job,
        )
        server.post(step, cmd.to_dict())
        reports = server.step_reports(step, self.step_timeout(size), alive=self.alive)
        after = self.snapshot()
        before = self.take_snapshot(step)
        n = len(hosts)
        rep_cols = self._figures(before, after, set(hosts)) if before is not None else {}
        rows = []
        for rank in range(n):
            s = Sample(
                method=m.name,
                hosts=n,
                elements=size,
                rep=rep,
                warmup=rep < cfg.warmup,
                order=order,
                step=step,
                rank=rank,
                t_path_s=t_path[0],
                **rep_cols,
            )
            r = reports.get(rank)
            if r is None:
                s.error = "no report (agent died or the step timed out)"
            elif "error" in r:
                s.error = str(r["error"])
            else:
                _fill(s, r)
                if s.speculated:
                    s.t_path_s = t_path[1]
            rows.append(s)
        if len(reports) < n:
            dead = [h for h, p in self._agents if p.poll() is not None]
            raise StepFailed(
                f"{m.name}, {n} hosts, {size} elements, rep {rep}: {len(reports)} of {n} agents reported"
                + (f"; agents on {', '.join(dead)} exited" if dead else "")
                + f"; logs in {self.log_dir}",
                rows,
            )
        return rows


def _fill(s: Sample, r: dict[str, Any]) -> None:
    """A sample's worker columns from an agent's step report."""
    parts = r.get("parts") or {}
    s.t_release, s.t_start, s.t_done = float(r["t_release"]), float(r["t_start"]), float(r["t_done"])
    s.latency_s = float(r["latency_s"])
    s.agree_s = float(parts.get("agree", 0.0))
    s.quantize_s = float(parts.get("quantize", 0.0))
    s.dequantize_s = float(parts.get("dequantize", 0.0))
    s.network_s = s.latency_s - (s.t_start - s.t_release) - s.agree_s - s.quantize_s - s.dequantize_s
    for key in ("packets_sent", "retransmissions", "bytes_sent", "packets_received", "duplicates", "missed_exponents"):
        setattr(s, key, int(r.get(key, 0)))
    s.speculated = METHODS[s.method].in_network and int(r.get("exponent_rounds", 1)) == 0
    s.digest = str(r.get("digest", ""))
    if "rel_l2_error" in r:
        s.checker = True
        for key in ("rel_l2_error", "max_abs_error", "snr_db", "max_error_ratio", "rel_l2_target"):
            setattr(s, key, float(r[key]))


def push_pipeline(ctl: Controller, attempts: int = 2) -> None:
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
    """The compiled program is there (else ExperimentError); a stale one is named in one warning line."""
    stale = program_staleness()
    if stale:
        LOG.warning("%s", stale)
    missing = [p for p in (DEFAULT_BMV2_JSON, DEFAULT_P4INFO) if not p.exists()]
    if missing:
        raise ExperimentError(
            f"{', '.join(map(str, missing))} missing: the compiled P4 program is committed in p4/build and ships "
            "inside the package (controller/program); in a checkout restore it (git checkout p4/build) or rebuild it "
            "with `make p4` (needs p4c), else reinstall p4ina"
        )


def results_dir(config: ExperimentConfig, when: datetime | None = None) -> Path:
    stamp = (when or datetime.now()).strftime("%Y-%m-%d_%H%M%S")
    return config.results_root / f"{stamp}_{config.label()}"


def open_results(config: ExperimentConfig, out_dir: Path | None = None) -> tuple[Path, Path]:
    """The run's folder (a new dated one unless `out_dir` is given) and its logs/ folder, both made: every
    experiment's results folder has the same shape."""
    out = out_dir or results_dir(config)
    out.mkdir(parents=True, exist_ok=True)
    log_dir = out / "logs"
    log_dir.mkdir(exist_ok=True)
    return out, log_dir


def environment(config: ExperimentConfig) -> dict[str, Any]:
    """Everything needed to tell two runs apart: software versions, back end, program hash, machine."""

    def version(pkg: str) -> str | None:
        try:
            return metadata.version(pkg)
        except metadata.PackageNotFoundError:
            return None

    def git(*args: str) -> str | None:
        if not (REPO / ".git").exists():  # an installed package (None, not the commit of a repository around it)
            return None
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
        from softswitch.runtime.cengine import default_engine

        backend["implementation"] = "softswitch (p4ina's embedded switch)"
        backend["engine"] = default_engine()  # a program the C engine refuses still runs on Python (switch logs say)
    manifest = PROGRAM_MANIFEST
    cpu_model = None
    try:
        cpu_model = next(
            (
                ln.split(":", 1)[1].strip()
                for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")
            ),
            None,
        )
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
        "packages": {
            p: version(p) for p in ("p4ina", "numpy", "grpcio", "p4runtime", "protobuf", "scapy", "matplotlib")
        },
        "mininet": mn_version,
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(status) if status is not None else None,
        "backend": backend,
        "program": {
            "bmv2_json_sha256": sha(DEFAULT_BMV2_JSON),
            "p4info_sha256": sha(DEFAULT_P4INFO),
            "manifest": json.loads(manifest.read_text()) if manifest.exists() else None,
            "stale": program_staleness(),
        },
    }


@contextmanager
def emulated_fabric(
    config: ExperimentConfig, model: Topology, out: Path, log_dir: Path, result: Any, t0: float
) -> Iterator[tuple[EmulatedNetwork, Controller, Path]]:
    """The network up, the program pushed, routes installed; yields (net, controller, socket dir); all torn down after.

    Shared by every experiment on the fabric (this sweep, experiments.train.run's training). `result` gets
    startup_s (from t0, network and pipeline) and environment["shaping"] as soon as they are known.
    """
    net_cfg = NetworkConfig(run_dir=log_dir, backend=config.backend, shape=config.shape)
    with short_tmpdir() as sock_dir, EmulatedNetwork(model, net_cfg) as net:
        result.startup_s = net.startup_s
        topo = net.topology
        topo.save(out / "topology.json")
        with Controller(topo, state=State(out / "controller-state.json")) as ctl:
            t1 = clock.now()
            push_pipeline(ctl)
            ctl.install_routes()
            LOG.info("pipeline and routes installed in %.1f s", clock.now() - t1)
            result.startup_s = clock.now() - t0
            result.environment["shaping"] = net.shaping_report()
            yield net, ctl, sock_dir
