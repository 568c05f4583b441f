"""A network `p4ina serve` keeps up, as other processes find it: its record, and a handle on its hosts.

`p4ina serve` writes serve.json beside the controller's state (state/<topology>/): its own process, every
host's shell (PID, start time, interface) and switch process, and which switch interface faces which
neighbour. `ServedNetwork` reads it back in another process (`p4ina allreduce`) and offers what the
experiment harness asks of a network (experiments.harness.Fabric): the model, processes started inside a
host's network namespace (nsenter, the network only), the switch ports' byte and frame counters and the
switch processes' CPU time. Every PID is checked against its start time, so a PID reused after the network
stopped is never mistaken for one of its processes.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from controller.state import Served, process_start
from controller.topology import Topology
from controller.topospec import load_topology
from emulation.commands import interface_counters

SERVE_RECORD = "serve.json"


class ServedNetworkError(RuntimeError):
    """No served network, or it is down; the message says which and what to do (one line)."""


@dataclass(frozen=True)
class Process:
    pid: int
    start: int  # /proc/PID/stat field 22

    @property
    def alive(self) -> bool:
        return process_start(self.pid) == self.start


@dataclass(frozen=True)
class ServedHost:
    name: str
    shell: Process  # the Mininet host's shell: its namespaces are the host's
    iface: str  # its interface towards its switch


@dataclass
class ServeRecord:
    """What one `p4ina serve` started, for the commands that use its network."""

    topology: str  # as serve was given it
    topology_file: str  # the model with every switch's gRPC address
    state: str  # the controller's state file for this network
    backend: str
    bw_mbps: float | None  # link rate (None: unshaped)
    tag: str  # the run's tag (emulation.cleanup: its run record, its interfaces' names)
    runner: Process
    since: str
    hosts: dict[str, ServedHost] = field(default_factory=dict)
    switches: dict[str, Process] = field(default_factory=dict)
    link_ports: dict[str, tuple[str, int, str]] = field(default_factory=dict)  # interface -> (switch, port, peer)

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> ServeRecord:
        d = json.loads(path.read_text())
        return cls(
            topology=str(d["topology"]),
            topology_file=str(d["topology_file"]),
            state=str(d["state"]),
            backend=str(d["backend"]),
            bw_mbps=None if d.get("bw_mbps") is None else float(d["bw_mbps"]),
            tag=str(d["tag"]),
            runner=Process(**d["runner"]),
            since=str(d["since"]),
            hosts={n: ServedHost(n, Process(**h["shell"]), str(h["iface"])) for n, h in d.get("hosts", {}).items()},
            switches={n: Process(**p) for n, p in d.get("switches", {}).items()},
            link_ports={k: (str(v[0]), int(v[1]), str(v[2])) for k, v in d.get("link_ports", {}).items()},
        )


def record_of(served: Served | None, state_path: Path) -> ServeRecord:
    """The record of the network a state's `served` names, checked to be up (else ServedNetworkError)."""
    if served is None:
        raise ServedNetworkError(
            f"state {state_path} is not of a served network: start one with `sudo p4ina serve --topology ...` "
            "(its state becomes the default), or pass --state state/<topology>/p4ina-state.json"
        )
    if not served.alive:
        raise ServedNetworkError(served.down())
    path = Path(served.record) if served.record else state_path.parent / SERVE_RECORD
    try:
        rec = ServeRecord.load(path)
    except (OSError, ValueError, KeyError, TypeError) as ex:
        raise ServedNetworkError(f"cannot read the served network's record {path} ({ex}); {served.down()}") from ex
    if not rec.runner.alive:
        raise ServedNetworkError(served.down())
    return rec


class ServedNetwork:
    """The harness's view of a served network (experiments.harness.Fabric), from another process."""

    def __init__(self, record: ServeRecord) -> None:
        self.record = record
        self.model: Topology = load_topology(record.topology_file)
        self._procs: list[subprocess.Popen[Any]] = []

    def check(self, hosts: list[str] | tuple[str, ...] = ()) -> None:
        """The network, and these hosts' shells, still up (else ServedNetworkError naming what is gone)."""
        if not self.record.runner.alive:
            raise ServedNetworkError(f"the served network {self.record.topology} is down (p4ina serve has exited)")
        for name in hosts:
            host = self.record.hosts.get(name)
            if host is None:
                raise ServedNetworkError(f"host {name!r} is not in the served network ({self.record.topology})")
            if not host.shell.alive:
                raise ServedNetworkError(f"host {name}'s shell (pid {host.shell.pid}) is gone: the network is down")

    # -- what experiments.harness.Runner asks of a network -----------------------------------------
    def host_iface(self, name: str) -> str:
        return self.record.hosts[name].iface

    def popen(
        self, host: str, cmd: list[str] | tuple[str, ...], log: Path | None = None, **kwargs: Any
    ) -> subprocess.Popen[Any]:
        """Start a process in a host's network namespace (nsenter, the network only: the files stay this
        process's); the caller stops it (experiments.harness.Runner.agents does)."""
        self.check([host])
        pid = self.record.hosts[host].shell.pid
        out: Any = open(log, "wb") if log is not None else subprocess.DEVNULL
        try:
            proc = subprocess.Popen(
                ["nsenter", f"--target={pid}", "--net", "--", *cmd],
                stdout=subprocess.PIPE,
                stderr=out,
                stdin=subprocess.DEVNULL,
                **kwargs,
            )
        finally:
            if log is not None:
                out.close()
        self._procs.append(proc)
        return proc

    def link_ports(self) -> dict[str, tuple[str, int, str]]:
        return dict(self.record.link_ports)

    def link_bytes(self) -> dict[str, tuple[int, int]]:
        return self._counters("bytes")

    def link_frames(self) -> dict[str, tuple[int, int]]:
        return self._counters("packets")

    def _counters(self, unit: str) -> dict[str, tuple[int, int]]:
        """(tx, rx) of every switch interface (they are in the root namespace, this process's)."""
        return interface_counters(sorted(self.record.link_ports), unit)

    def switch_cpu_seconds(self) -> dict[str, float]:
        from emulation.nodes import proc_cpu_seconds

        out = {}
        for name, proc in self.record.switches.items():
            if proc.alive and (cpu := proc_cpu_seconds(proc.pid)) is not None:
                out[name] = cpu
        return out
