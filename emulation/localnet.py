"""Switches for a topology on 127.0.0.1 without Mininet: P4Runtime only, no data-plane links.

For tests, benchmarks and trying the controller: each switch of the topology is
started (embedded switch in this process, or simple_switch_grpc processes by
PID) and the topology comes back with every switch's grpc_addr filled in.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from controller.topology import Topology

LOG = logging.getLogger(__name__)


class LocalNetError(RuntimeError):
    pass


@contextlib.contextmanager
def embedded_switches(topo: Topology) -> Iterator[tuple[Topology, dict[str, Any]]]:
    """Start an embedded switch (softswitch) per topology switch; yields (topology, switch name -> RunningSwitch)."""
    from softswitch.cli import start_switch

    running: dict[str, Any] = {}
    try:
        for s in topo.switches:
            running[s.name] = start_switch(s.device_id, "127.0.0.1:0", name=s.name)
        yield topo.with_grpc({name: rs.grpc_addr for name, rs in running.items()}), running
    finally:
        for rs in running.values():
            rs.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(addr: str, proc: subprocess.Popen, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LocalNetError(
                f"simple_switch_grpc for {addr} exited with {proc.returncode}: {log.read_text()[-400:]}"
            )
        with grpc.insecure_channel(addr) as ch:
            try:
                grpc.channel_ready_future(ch).result(timeout=0.5)
                return
            except grpc.FutureTimeoutError:
                continue
    raise LocalNetError(f"simple_switch_grpc did not listen on {addr} within {timeout:.0f} s (log {log})")


@contextlib.contextmanager
def bmv2_switches(
    topo: Topology, workdir: Path, timeout: float = 30.0
) -> Iterator[tuple[Topology, dict[str, subprocess.Popen]]]:
    """Start simple_switch_grpc --no-p4 (no interfaces) per switch on 127.0.0.1; stopped by PID."""
    exe = shutil.which("simple_switch_grpc")
    if exe is None:
        raise LocalNetError("simple_switch_grpc is not on PATH")
    workdir.mkdir(parents=True, exist_ok=True)
    # a BMv2 built without Thrift refuses --thrift-port; one built with it needs a distinct port per switch
    has_thrift = "--thrift-port" in subprocess.run([exe, "--help"], capture_output=True, text=True).stdout
    procs: dict[str, subprocess.Popen] = {}
    addrs: dict[str, str] = {}
    try:
        for s in topo.switches:
            addr = f"127.0.0.1:{_free_port()}"
            log = workdir / f"{s.name}.log"
            thrift = ["--thrift-port", str(_free_port())] if has_thrift else []
            cmd = [exe, "--device-id", str(s.device_id), "--no-p4", *thrift, "--", "--grpc-server-addr", addr]
            with open(log, "wb") as fh:
                procs[s.name] = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=workdir)
            addrs[s.name] = addr
        for name, proc in procs.items():
            _wait_ready(addrs[name], proc, timeout, workdir / f"{name}.log")
        yield topo.with_grpc(addrs), procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main(argv: list[str] | None = None, prog: str = "python -m emulation.localnet") -> int:
    """`python -m emulation.localnet TOPO OUT.json`: serve embedded switches until SIGTERM/Ctrl-C."""
    import argparse
    import signal
    import threading

    from controller.topology import TopologyError
    from controller.topospec import load_topology
    from softswitch.runtime import heap

    ap = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Start an embedded switch (P4Runtime on 127.0.0.1, no ports) for every switch of a topology "
            "and write the topology JSON with their addresses."
        ),
    )
    ap.add_argument("topology", help="fat-tree:K, leaf-spine:LxSxH or a topology JSON")
    ap.add_argument(
        "out", type=Path, help="where to write the topology JSON with grpc_addr filled in (written once all listen)"
    )
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        model = load_topology(args.topology, option="topology")  # checked completely before a switch starts
    except TopologyError as ex:
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with embedded_switches(model) as (topo, running):
        for rs in running.values():  # a process that lives for its switches' program, as a switch process does
            rs.switch.on_program_change.append(heap.settle_soon)  # once after a push to all of them
        tmp = args.out.with_name(args.out.name + ".tmp")
        topo.save(tmp)
        tmp.replace(args.out)  # appears complete or not at all: readers poll for it
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
        finally:
            args.out.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
