"""Mininet switch nodes that run a P4 switch process: BMv2's simple_switch_grpc or p4ina's embedded switch.

Both run in the root namespace, like Mininet's own switches: their ports are
the root-side ends of the veth links, and P4Runtime listens on 127.0.0.1 only.
`start()` only launches the process, so twenty switches boot in parallel;
`wait_ready()` then polls the gRPC port (and the embedded switch's ready
file) instead of sleeping a fixed time. Processes are stopped by their PID.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from emulation.mininet_compat import Switch

LOG = logging.getLogger(__name__)

BACKENDS = ("embedded", "bmv2")
BMV2_BINARY = "simple_switch_grpc"
IFACE_PREFIX = "p4ina"  # root-side interfaces: p4ina<tag>-<switch>-<port>
MAX_IFNAME = 15


class SwitchStartError(RuntimeError):
    """A switch process exited or did not open its gRPC port in time; the message quotes its log."""


def default_backend() -> str:
    """BMv2 when simple_switch_grpc is installed, else the embedded switch."""
    return "bmv2" if shutil.which(BMV2_BINARY) else "embedded"


def backend_missing(backend: str) -> str | None:
    """Why switches of this back end cannot start on this machine (one line with the fix), or None if they can:
    asked before a network is built, so a missing BMv2 is said at once."""
    if backend == "bmv2" and shutil.which(BMV2_BINARY) is None:
        return f"{BMV2_BINARY} is not on PATH: build BMv2 (docs/toolchain.md) or use --switch embedded"
    return None


def port_iface(tag: str, switch: str, device_id: int, port: int) -> str:
    """The root-side interface name of a switch port, recognisable by cleanup (p4ina<tag>-...)."""
    name = f"{IFACE_PREFIX}{tag}-{switch}-{port}"
    if len(name) > MAX_IFNAME:
        name = f"{IFACE_PREFIX}{tag}-{device_id}-{port}"
    if len(name) > MAX_IFNAME:
        raise ValueError(f"interface name {name!r} for {switch} port {port} exceeds {MAX_IFNAME} characters")
    return name


_HANDED_OUT: set[int] = set()  # ports given to switches of this process, so two switches never get the same one


def free_tcp_port() -> int:
    """A port free on 127.0.0.1 right now and not yet handed out (for BMv2, which cannot report the one it picked)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise SwitchStartError("no free TCP port on 127.0.0.1")


def port_listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def reap(procs: list[subprocess.Popen[Any]], grace_s: float = 10.0) -> None:
    """Wait for processes we started and told to quit (all together within grace_s), kill the ones still running."""
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        if proc.stdout:
            proc.stdout.close()


def proc_start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: tells a process from a later one that reuses its PID."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text.rsplit(")", 1)[1].split()[19])


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (all its threads; not its children) so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def stop_process(proc: subprocess.Popen[Any], grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after grace_s; only this one process (by PID)."""
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        LOG.warning("pid %d ignored SIGTERM for %.0f s; killing it", proc.pid, grace_s)
        proc.kill()
        proc.wait(5)
    except ProcessLookupError:
        pass


class P4Switch(Switch):
    """A P4 switch process behind a Mininet switch node (subclasses say which program to run)."""

    backend = ""

    def __init__(
        self,
        name: str,
        device_id: int = 1,
        run_dir: str = "/tmp",
        tag: str = "00",
        log_level: str = "warn",
        delay_ms: float = 0.0,
        **params: Any,
    ) -> None:
        self.device_id = device_id
        self.delay_ms = delay_ms  # links' propagation delay, held in the switch (softswitch.runtime.delayline)
        self.run_dir = Path(run_dir)
        self.tag = tag
        self.log_level = log_level
        self.proc: subprocess.Popen[bytes] | None = None
        self.grpc_port: int | None = None
        self.log_path = self.run_dir / f"switch-{name}.log"
        params["inNamespace"] = False  # like Mininet's own switches: ports in the root namespace
        params.pop("dpid", None)
        super().__init__(name, dpid=f"{device_id:x}", **params)

    @property
    def grpc_addr(self) -> str:
        if self.grpc_port is None:
            raise SwitchStartError(f"{self.name}: not started")
        return f"127.0.0.1:{self.grpc_port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self, controllers: list[Any]) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        LOG.debug("%s: %s", self.name, " ".join(cmd))
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )  # Ctrl-C reaches the runner, which stops us in order

    def is_ready(self) -> bool:
        return self.grpc_port is not None and port_listening(self.grpc_port)

    def check_alive(self) -> None:
        if self.proc is None:
            raise SwitchStartError(f"{self.name}: never started")
        code = self.proc.poll()
        if code is not None:
            raise SwitchStartError(f"{self.name} ({self.backend}) exited with code {code}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def cpu_seconds(self) -> float | None:
        return proc_cpu_seconds(self.proc.pid) if self.proc else None

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 - Mininet's keyword name
        if self.proc is not None:
            stop_process(self.proc)
        super().stop(deleteIntfs)


def _port_args(switch: P4Switch) -> list[str]:
    args: list[str] = []
    for port, intf in sorted((p, i.name) for i, p in switch.ports.items() if p > 0):
        args += ["-i", f"{port}@{intf}"]
    return args


def _delay_args(switch: P4Switch) -> list[str]:
    """A link's delay once per direction: the switch holds what it sends on every port, and what it receives
    on a port whose other end is a host (hosts have no delay stage)."""
    if not switch.delay_ms:
        return []
    args: list[str] = []
    for intf, port in sorted(switch.ports.items(), key=lambda kv: kv[1]):
        if port <= 0:
            continue
        args += ["--egress-delay", f"{port}={switch.delay_ms:g}"]
        link = getattr(intf, "link", None)
        peer = None if link is None else (link.intf2 if link.intf1 is intf else link.intf1).node
        if not isinstance(peer, Switch):
            args += ["--ingress-delay", f"{port}={switch.delay_ms:g}"]
    return args


class EmbeddedSwitch(P4Switch):
    """`python -m softswitch`; it picks a free gRPC port and writes it to a ready file.

    `engine` ("c" or "python") is passed as --engine; by default the switch runs the C engine where a
    C compiler is present (its program is compiled once for all switches: the compile cache).
    """

    backend = "embedded"

    def __init__(self, name: str, engine: str | None = None, **params: Any) -> None:
        super().__init__(name, **params)
        self.engine = engine
        self.ready_file = self.run_dir / f"switch-{name}.ready"

    def command(self) -> list[str]:
        self.ready_file.unlink(missing_ok=True)
        engine = ["--engine", self.engine] if self.engine else []
        return [
            sys.executable,
            "-m",
            "softswitch",
            "--device-id",
            str(self.device_id),
            *_port_args(self),
            *_delay_args(self),
            "--grpc-server-addr",
            f"127.0.0.1:{self.grpc_port or 0}",  # a restart keeps the address the controller knows
            "--ready-file",
            str(self.ready_file),
            "--log-level",
            self.log_level,
            *engine,
            "--no-p4",
        ]

    def is_ready(self) -> bool:
        if self.grpc_port is None:
            try:
                info = json.loads(self.ready_file.read_text())
            except (OSError, ValueError):
                return False
            self.grpc_port = int(info["grpc_port"])
        return port_listening(self.grpc_port)


class Bmv2Switch(P4Switch):
    """BMv2's simple_switch_grpc, started without a program (the controller pushes it)."""

    backend = "bmv2"

    def command(self) -> list[str]:
        binary = shutil.which(BMV2_BINARY)
        if binary is None:
            raise SwitchStartError(str(backend_missing(self.backend)))
        self.grpc_port = free_tcp_port()
        # a BMv2 built with Thrift listens on 9090 unless told otherwise, which twenty switches cannot share
        thrift = ["--thrift-port", str(free_tcp_port())] if _bmv2_has_thrift(binary) else []
        return [
            binary,
            "--device-id",
            str(self.device_id),
            *_port_args(self),
            *thrift,
            "--log-level",
            self.log_level,
            "--no-p4",
            "--",
            "--grpc-server-addr",
            self.grpc_addr,
        ]


@functools.cache
def _bmv2_has_thrift(binary: str) -> bool:
    done = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    return "--thrift-port" in done.stdout + done.stderr


SWITCH_CLASSES: dict[str, type[P4Switch]] = {"embedded": EmbeddedSwitch, "bmv2": Bmv2Switch}


def wait_ready(switches: list[P4Switch], timeout_s: float = 120.0, poll_s: float = 0.1) -> float:
    """Block until every switch listens on its gRPC port; returns the seconds it took."""
    t0 = time.monotonic()
    pending = list(switches)
    while pending:
        for sw in list(pending):
            sw.check_alive()
            if sw.is_ready():
                pending.remove(sw)
        if not pending:
            break
        if time.monotonic() - t0 > timeout_s:
            names = ", ".join(s.name for s in pending)
            raise SwitchStartError(
                f"switches {names} did not open their gRPC port within {timeout_s:.0f} s; "
                f"last log of {pending[0].name}:\n{pending[0].log_tail()}"
            )
        time.sleep(poll_s)
    return time.monotonic() - t0
