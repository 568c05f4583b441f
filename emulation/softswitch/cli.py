"""`python -m emulation.softswitch`: the embedded switch as a drop-in for simple_switch_grpc.

    python -m emulation.softswitch --device-id 1 -i 1@s1-eth1 -i 2@s1-eth2 --no-p4 \\
        -- --grpc-server-addr 127.0.0.1:9559

The flags are simple_switch_grpc's (target options after `--` are accepted too, so a command line
built for BMv2 works); --thrift-port and --cpu-port are accepted and ignored with a warning.
--ready-file is ours: written (JSON: grpc_addr, grpc_port, device_id, pid) once the gRPC port
listens, removed on exit. `start_switch` runs the same thing in-process for tests.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from emulation.softswitch.errors import SoftSwitchError
from emulation.softswitch.p4runtime_server import NonLoopbackAddressError, P4RuntimeServer, parse_loopback_address
from emulation.softswitch.ports import InterfaceError, PortIO, PortSpecError, parse_port_spec
from emulation.softswitch.switch import SoftSwitch

LOG = logging.getLogger(__name__)

TRACE = 5  # BMv2's "trace" level, below DEBUG
LOG_LEVELS = {
    "trace": TRACE,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "off": logging.CRITICAL + 10,
}
DEFAULT_GRPC_ADDR = "127.0.0.1:9559"  # BMv2's port, on loopback only


class RunningSwitch:
    """A switch with its P4Runtime server (and ports, if any); a context manager that stops them."""

    def __init__(self, switch: SoftSwitch, server: P4RuntimeServer, ports: PortIO | None) -> None:
        self.switch = switch
        self.server = server
        self.ports = ports

    @property
    def grpc_port(self) -> int:
        return self.server.port

    @property
    def grpc_addr(self) -> str:
        return self.server.address

    def stop(self) -> None:
        if self.ports is not None:
            self.ports.stop()
            self.ports = None
        self.server.stop()

    def __enter__(self) -> "RunningSwitch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_switch(
    device_id: int,
    grpc_addr: str = "127.0.0.1:0",
    ports: dict[int, str] | None = None,
    program_json: str | bytes | None = None,
    name: str = "",
) -> RunningSwitch:
    """Start a switch, its P4Runtime server and its port I/O in this process.

    program_json, like BMv2's positional JSON, loads a program before any controller connects (the
    controller still pushes a pipeline with its P4Info before writing entries).
    """
    name = name or f"device{device_id}"
    switch = SoftSwitch(device_id=device_id, name=name)
    if program_json is not None:
        switch.load_program(program_json)
    server = P4RuntimeServer({device_id: switch}, grpc_addr)
    server.start()
    port_io = None
    if ports:
        port_io = PortIO(switch, ports, name=name)
        try:
            port_io.start()
        except BaseException:
            server.stop()
            raise
    return RunningSwitch(switch, server, port_io)


# ---------------------------------------------------------------------------------------------
# Command line


@dataclass(frozen=True)
class Options:
    device_id: int
    ports: dict[int, str]
    grpc_addr: str
    log_level: str
    json_path: Path | None
    ready_file: Path | None


class UsageError(ValueError):
    """A command line that cannot be run (message for the user)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m emulation.softswitch",
        description="p4ina's embedded switch: runs a BMv2 JSON, serves P4Runtime on 127.0.0.1 (like simple_switch_grpc).",
    )
    p.add_argument("json", nargs="?", type=Path, help="BMv2 JSON to load at start (as simple_switch_grpc)")
    p.add_argument("--no-p4", action="store_true", help="start without a program; wait for SetForwardingPipelineConfig")
    p.add_argument("--device-id", type=int, default=0, help="P4Runtime device id (default 0)")
    p.add_argument("-i", "--interface", action="append", default=[], metavar="PORT@IFACE",
                   help="attach switch port PORT to Linux interface IFACE (repeatable)")
    p.add_argument("--grpc-server-addr", default=DEFAULT_GRPC_ADDR, metavar="127.0.0.1:PORT",
                   help=f"P4Runtime address, loopback only; port 0 picks a free one (default {DEFAULT_GRPC_ADDR})")
    p.add_argument("-L", "--log-level", choices=sorted(LOG_LEVELS), default="info")
    p.add_argument("--log-console", action="store_true", help="accepted for BMv2 compatibility (we always log to stderr)")
    p.add_argument("--ready-file", type=Path, help="write this file (JSON) once the gRPC port listens")
    p.add_argument("--thrift-port", type=int, help="accepted for BMv2 compatibility and ignored (no Thrift)")
    p.add_argument("--cpu-port", type=int, help="accepted for BMv2 compatibility and ignored (no packet-in/out)")
    return p


def parse_options(argv: list[str]) -> Options:
    """Parse simple_switch_grpc-style arguments; BMv2's target options may follow a `--`."""
    if "--" in argv:
        cut = argv.index("--")
        argv = argv[:cut] + argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    if args.json is not None and args.no_p4:
        raise UsageError("give either a JSON file or --no-p4, not both")
    if args.json is None and not args.no_p4:
        raise UsageError("give a BMv2 JSON file to load, or --no-p4 to start without a program")
    ports: dict[int, str] = {}
    for text in args.interface:
        spec = parse_port_spec(text)
        if spec.port in ports:
            raise UsageError(f"port {spec.port} given twice (-i {text})")
        if spec.iface in ports.values():
            raise UsageError(f"interface {spec.iface!r} given twice (-i {text})")
        ports[spec.port] = spec.iface
    parse_loopback_address(args.grpc_server_addr)
    for flag, value in (("--thrift-port", args.thrift_port), ("--cpu-port", args.cpu_port)):
        if value is not None:
            LOG.warning("%s is accepted for BMv2 compatibility and ignored", flag)
    return Options(args.device_id, ports, args.grpc_server_addr, args.log_level, args.json, args.ready_file)


def _write_ready_file(path: Path, running: RunningSwitch, device_id: int) -> None:
    info = {"grpc_addr": running.grpc_addr, "grpc_port": running.grpc_port, "device_id": device_id, "pid": os.getpid()}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(info) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a file


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    level = "info"
    for i, a in enumerate(argv):  # configure logging before parsing so parse warnings show
        if a in ("--log-level", "-L") and i + 1 < len(argv) and argv[i + 1] in LOG_LEVELS:
            level = argv[i + 1]
        elif a.startswith("--log-level=") and a.split("=", 1)[1] in LOG_LEVELS:
            level = a.split("=", 1)[1]
    logging.addLevelName(TRACE, "TRACE")
    logging.basicConfig(level=LOG_LEVELS[level], format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        opts = parse_options(argv)
    except (UsageError, PortSpecError, NonLoopbackAddressError) as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 2

    program = None
    if opts.json_path is not None:
        try:
            program = opts.json_path.read_bytes()
        except OSError as ex:
            print(f"error: cannot read {opts.json_path}: {ex.strerror}", file=sys.stderr)
            return 2

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        LOG.info("signal %s: shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        running = start_switch(opts.device_id, opts.grpc_addr, opts.ports, program)
    except InterfaceError as ex:
        print(f"error: {ex.strerror}", file=sys.stderr)
        return 1
    except OSError as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 1
    except (SoftSwitchError, ValueError) as ex:  # the interpreter refused the JSON
        print(f"error: {opts.json_path}: {ex}", file=sys.stderr)
        return 1
    try:
        if opts.ready_file is not None:
            try:
                _write_ready_file(opts.ready_file, running, opts.device_id)
            except OSError as ex:
                print(f"error: cannot write the ready file {opts.ready_file}: {ex.strerror}", file=sys.stderr)
                return 1
        LOG.info("device %d ready: P4Runtime on %s", opts.device_id, running.grpc_addr)
        while not stop.wait(1.0):
            pass
    finally:
        running.stop()
        if opts.ready_file is not None:
            opts.ready_file.unlink(missing_ok=True)
    return 0
