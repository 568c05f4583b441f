"""`python -m softswitch` (or `p4ina-switch`): the embedded switch as a drop-in for simple_switch_grpc.

    python -m softswitch --device-id 1 -i 1@s1-eth1 -i 2@s1-eth2 --no-p4 \\
        -- --grpc-server-addr 127.0.0.1:9559 --cpu-port 255

The command line is simple_switch_grpc's, so scripts written for BMv2 (the p4lang tutorials,
p4-utils) run it unchanged: BMv2's own options before `--`, the target's after it. Implemented:
-i, --device-id, the JSON or --no-p4, -L/--log-level, --log-console, --log-file, --grpc-server-addr,
--cpu-port (packet-in/out over P4Runtime), --priority-queues, --drop-port 511. Accepted and ignored
with a warning (they configure BMv2 facilities this switch does not have, and ignoring them changes
no packet): --pcap, --nanolog, --thrift-port, --notifications-addr, --debugger(-addr),
--dump-packet-data, --log-flush, --log-file-max-*, --max-port-count, --disable-swap, --max-mc-groups,
--max-l1-entries, --max-l2-entries. Refused by name (ignoring them would change behaviour):
--use-files, --packet-in, --restore-state, another --drop-port, the TLS options, --dp-grpc-server-addr,
--load-modules. P4Runtime is served on loopback only: BMv2's "all interfaces" (0.0.0.0, [::]) is
served on 127.0.0.1, which the scripts connect to, with a warning; other addresses are refused.
--ready-file and --engine are ours: the ready file is written (JSON: grpc_addr, grpc_port,
device_id, pid) once the gRPC port listens, removed on exit; --engine picks the C or the Python
engine (default C where a compiler is present). `start_switch` runs the same thing in-process for tests.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from softswitch.errors import SoftSwitchError
from softswitch.p4runtime.gnmi import GnmiService
from softswitch.p4runtime.portstatus import JsonPortStatusService, NetlinkPortStatus
from softswitch.p4runtime.server import NonLoopbackAddressError, P4RuntimeServer, parse_loopback_address
from softswitch.runtime import heap
from softswitch.runtime.delayline import DelaySpecError, PortDelays, parse_delay
from softswitch.runtime.ports import InterfaceError, PortIO, PortSpecError, parse_port_spec
from softswitch.runtime.switch import SoftSwitch

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

    def __init__(
        self,
        switch: SoftSwitch,
        server: P4RuntimeServer,
        ports: PortIO | None,
        port_status: NetlinkPortStatus | None = None,
    ) -> None:
        self.switch = switch
        self.server = server
        self.ports = ports
        self.port_status = port_status

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
        if self.port_status is not None:
            self.port_status.stop()
            self.port_status = None
        self.server.stop()

    def __enter__(self) -> RunningSwitch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_switch(
    device_id: int,
    grpc_addr: str = "127.0.0.1:0",
    ports: dict[int, str] | None = None,
    program_json: str | bytes | None = None,
    name: str = "",
    cpu_port: int | None = None,
    priority_queues: int = 1,
    engine: str = "auto",
    delays: PortDelays | None = None,
) -> RunningSwitch:
    """Start a switch, its P4Runtime server and its port I/O in this process.

    program_json, like BMv2's positional JSON, loads a program before any controller connects (the
    controller still pushes a pipeline with its P4Info before writing entries). `engine`: "c",
    "python" or "auto" (C where a compiler is present), see SoftSwitch.
    """
    name = name or f"device{device_id}"
    switch = SoftSwitch(
        device_id=device_id, name=name, cpu_port=cpu_port, priority_queues=priority_queues, engine=engine
    )
    if program_json is not None:
        switch.load_program(program_json)
    # the ports' oper-status, published ON_CHANGE on the P4Runtime server's port (a switch with ports only):
    # one netlink feed, served over gNMI and over the older JSON stream
    status = NetlinkPortStatus(device_id, ports).start() if ports else None
    handlers = [GnmiService(status).handler(), JsonPortStatusService(status).handler()] if status else []
    server = P4RuntimeServer({device_id: switch}, grpc_addr, extra_handlers=handlers)
    try:
        server.start()
    except BaseException:
        if status is not None:
            status.stop()
        raise
    port_io = None
    if ports:
        port_io = PortIO(switch, ports, name=name, delays=delays)
        try:
            port_io.start()
        except BaseException:
            server.stop()
            if status is not None:
                status.stop()
            raise
    return RunningSwitch(switch, server, port_io, status)


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
    cpu_port: int | None = None
    priority_queues: int = 1
    log_file: Path | None = None
    engine: str = "c"
    delays: PortDelays = PortDelays()


class UsageError(ValueError):
    """A command line that cannot be run (message for the user)."""


# BMv2 options that configure facilities this switch does not have; ignoring them changes no packet.
_IGNORED_WITH_VALUE = (
    "--nanolog",
    "--thrift-port",
    "--notifications-addr",
    "--debugger-addr",
    "--dump-packet-data",
    "--log-file-max-size",
    "--log-file-max-files",
    "--max-port-count",
    "--max-mc-groups",
    "--max-l1-entries",
    "--max-l2-entries",
)
_IGNORED_FLAGS = ("--debugger", "--log-flush", "--disable-swap")
# BMv2 options whose absence would change what the switch does: refused by name.
_REFUSED_WITH_VALUE = (
    "--use-files",
    "--packet-in",
    "--restore-state",
    "--grpc-server-cacert",
    "--grpc-server-cert",
    "--grpc-server-key",
    "--dp-grpc-server-addr",
    "--load-modules",
)
_REFUSED_FLAGS = ("--grpc-server-ssl", "--grpc-server-with-client-auth")
_ALL_INTERFACES = ("0.0.0.0", "[::]", "::", "")


def build_parser(prog: str = "p4ina switch") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="p4ina's embedded switch: runs a BMv2 JSON, serves P4Runtime on 127.0.0.1 (a drop-in "
        "for simple_switch_grpc: its command line, target options after `--`).",
    )
    p.add_argument("json", nargs="?", type=Path, help="BMv2 JSON to load at start (as simple_switch_grpc)")
    p.add_argument("--no-p4", action="store_true", help="start without a program; wait for SetForwardingPipelineConfig")
    p.add_argument("--device-id", type=int, default=0, help="P4Runtime device id (default 0)")
    p.add_argument(
        "-i",
        "--interface",
        action="append",
        default=[],
        metavar="PORT@IFACE",
        help="attach switch port PORT to Linux interface IFACE (repeatable)",
    )
    p.add_argument(
        "--grpc-server-addr",
        default=DEFAULT_GRPC_ADDR,
        metavar="127.0.0.1:PORT",
        help=f"P4Runtime address, loopback only (0.0.0.0 means 127.0.0.1); port 0 picks a free one "
        f"(default {DEFAULT_GRPC_ADDR})",
    )
    p.add_argument(
        "--cpu-port",
        type=int,
        help="the CPU port: packets sent to it become P4Runtime packet-ins, "
        "packet-outs enter ingress on it (0: none, as BMv2)",
    )
    p.add_argument(
        "--egress-delay",
        action="append",
        default=[],
        metavar="PORT=MS",
        help="hold every frame sent on PORT for MS milliseconds (a link's propagation delay; repeatable)",
    )
    p.add_argument(
        "--ingress-delay",
        action="append",
        default=[],
        metavar="PORT=MS",
        help="hold every frame received on PORT for MS ms before processing it (for links to hosts)",
    )
    p.add_argument("--priority-queues", type=int, default=1, help="priority queues per port (default 1, as BMv2)")
    p.add_argument("--drop-port", type=int, help="accepted when 511, v1model's drop port (the only one supported)")
    p.add_argument("-L", "--log-level", choices=sorted(LOG_LEVELS), default="info")
    p.add_argument("--log-console", action="store_true", help="log to stderr (the default)")
    p.add_argument("--log-file", type=Path, help="log to this file instead of stderr")
    p.add_argument("--pcap", nargs="?", const=".", metavar="DIR", help="accepted for BMv2 compatibility and ignored")
    p.add_argument("--ready-file", type=Path, help="write this file (JSON) once the gRPC port listens")
    p.add_argument(
        "--engine",
        choices=("c", "python"),
        default=None,
        help="how packets are executed: the program compiled to C (default where a C compiler is "
        "present; packets on ports never enter Python) or to Python. A program the C engine "
        "cannot run runs on the Python engine, with a log line saying why",
    )
    for opt in _IGNORED_WITH_VALUE:
        p.add_argument(opt, help=argparse.SUPPRESS)
    for opt in _IGNORED_FLAGS:
        p.add_argument(opt, action="store_true", help=argparse.SUPPRESS)
    for opt in _REFUSED_WITH_VALUE:
        p.add_argument(opt, help=argparse.SUPPRESS)
    for opt in _REFUSED_FLAGS:
        p.add_argument(opt, action="store_true", help=argparse.SUPPRESS)
    return p


def _dest(opt: str) -> str:
    return opt.lstrip("-").replace("-", "_")


def parse_options(argv: list[str], prog: str = "p4ina-switch") -> Options:
    """Parse simple_switch_grpc-style arguments; BMv2's target options may follow a `--`."""
    if "--" in argv:
        cut = argv.index("--")
        argv = argv[:cut] + argv[cut + 1 :]
    args = build_parser(prog).parse_args(argv)
    if args.json is not None and args.no_p4:
        raise UsageError("give either a JSON file or --no-p4, not both")
    if args.json is None and not args.no_p4:
        raise UsageError("give a BMv2 JSON file to load, or --no-p4 to start without a program")
    for opt in (*_REFUSED_WITH_VALUE, *_REFUSED_FLAGS):
        if getattr(args, _dest(opt)) not in (None, False):
            raise UsageError(f"{opt} is not supported by the embedded switch (use BMv2's simple_switch_grpc)")
    if args.drop_port is not None and args.drop_port != 511:
        raise UsageError(f"--drop-port {args.drop_port}: only v1model's 511 is supported by the embedded switch")
    for opt in (*_IGNORED_WITH_VALUE, *_IGNORED_FLAGS, "--pcap"):
        if getattr(args, _dest(opt)) not in (None, False):
            LOG.warning("%s is accepted for BMv2 compatibility and ignored", opt)
    if args.log_console and args.log_file is not None:
        raise UsageError("give either --log-console or --log-file, not both (as BMv2)")
    ports: dict[int, str] = {}
    for text in args.interface:
        spec = parse_port_spec(text)
        if spec.port in ports:
            raise UsageError(f"port {spec.port} given twice (-i {text})")
        if spec.iface in ports.values():
            raise UsageError(f"interface {spec.iface!r} given twice (-i {text})")
        ports[spec.port] = spec.iface
    cpu_port = args.cpu_port or None  # 0: no CPU port, as BMv2
    if cpu_port is not None:
        if not 0 < cpu_port < 511:
            raise UsageError(f"--cpu-port {cpu_port}: the CPU port must be 1..510 (9 bits, not the drop port)")
        if cpu_port in ports:
            raise UsageError(
                f"CPU port {cpu_port} is also a data port (-i {cpu_port}@{ports[cpu_port]}), as BMv2 refuses"
            )
    if not 1 <= args.priority_queues <= 8:
        raise UsageError(f"--priority-queues {args.priority_queues}: 1..8 (v1model's priority is 3 bits)")
    delays = {}
    for opt, texts in (("--egress-delay", args.egress_delay), ("--ingress-delay", args.ingress_delay)):
        table: dict[int, float] = {}
        for text in texts:
            port, seconds = parse_delay(text)
            if port not in ports:
                raise UsageError(f"{opt} {text}: port {port} has no interface (-i {port}@IFACE)")
            if port in table:
                raise UsageError(f"{opt}: port {port} given twice")
            table[port] = seconds
        delays[opt] = table
    grpc_addr = _loopback(args.grpc_server_addr)
    return Options(
        args.device_id,
        ports,
        grpc_addr,
        args.log_level,
        args.json,
        args.ready_file,
        cpu_port,
        args.priority_queues,
        args.log_file,
        _engine(args.engine),
        PortDelays(egress=delays["--egress-delay"], ingress=delays["--ingress-delay"]),
    )


def _engine(asked: str | None) -> str:
    """The engine to run: as asked, else C where a compiler is present (a log line when there is none)."""
    from native import cbuild

    if asked == "python":
        return "python"
    if cbuild.toolchain() is None:
        LOG.warning("no C compiler (cc) on PATH: running the Python engine (install gcc for the C engine)")
        return "python"
    return "c"


def _loopback(address: str) -> str:
    """The address to serve P4Runtime on: BMv2's 'all interfaces' becomes 127.0.0.1; others must be loopback."""
    host, sep, port = address.rpartition(":")
    if sep and host in _ALL_INTERFACES:
        LOG.warning(
            "--grpc-server-addr %s: serving P4Runtime on 127.0.0.1:%s only (p4ina never listens beyond this machine)",
            address,
            port,
        )
        address = f"127.0.0.1:{port}"
    parse_loopback_address(address)
    return address


def _write_ready_file(path: Path, running: RunningSwitch, device_id: int) -> None:
    info = {"grpc_addr": running.grpc_addr, "grpc_port": running.grpc_port, "device_id": device_id, "pid": os.getpid()}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(info) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a file


def _missing_interfaces(ports: dict[int, str]) -> list[str]:
    """-i PORT@IFACE whose interface is not in this network namespace: refused before the gRPC port is taken."""
    missing = []
    for port, iface in sorted(ports.items()):
        try:
            socket.if_nametoindex(iface)
        except OSError:
            missing.append(f"-i {port}@{iface}")
    return missing


def main(argv: list[str] | None = None, prog: str = "p4ina-switch") -> int:
    """simple_switch_grpc's command line; every refusal is one line `PROG: error: ...`, exit status 2."""
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
        opts = parse_options(argv, prog)
        missing = _missing_interfaces(opts.ports)
        if missing:
            raise UsageError(
                f"{', '.join(missing)}: no such interface in this network namespace (`ip link` lists them)"
            )
    except (UsageError, PortSpecError, DelaySpecError, NonLoopbackAddressError) as ex:
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 2

    program = None
    if opts.json_path is not None:
        try:
            program = opts.json_path.read_bytes()
        except OSError as ex:
            print(f"{prog}: error: cannot read {opts.json_path}: {ex.strerror}", file=sys.stderr)
            return 2

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        LOG.info("signal %s: shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if opts.log_file is not None:
        try:
            handler = logging.FileHandler(opts.log_file)
        except OSError as ex:
            print(f"{prog}: error: cannot open the log file {opts.log_file}: {ex.strerror}", file=sys.stderr)
            return 2
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        for h in list(root.handlers):
            root.removeHandler(h)
        root.addHandler(handler)
    try:
        running = start_switch(
            opts.device_id,
            opts.grpc_addr,
            opts.ports,
            program,
            cpu_port=opts.cpu_port,
            priority_queues=opts.priority_queues,
            engine=opts.engine,
            delays=opts.delays,
        )
    except InterfaceError as ex:
        print(f"{prog}: error: {ex.strerror}", file=sys.stderr)
        return 1
    except OSError as ex:
        print(f"{prog}: error: {ex}", file=sys.stderr)
        return 1
    except (SoftSwitchError, ValueError) as ex:  # the interpreter refused the JSON
        print(f"{prog}: error: {opts.json_path}: {ex}", file=sys.stderr)
        return 2
    # this process lives for its program: once one is loaded, the collector stops walking it (heap.py)
    running.switch.on_program_change.append(heap.settle)
    if running.switch.program_loaded:
        heap.settle()
    try:
        if opts.ready_file is not None:
            try:
                _write_ready_file(opts.ready_file, running, opts.device_id)
            except OSError as ex:
                print(f"{prog}: error: cannot write the ready file {opts.ready_file}: {ex.strerror}", file=sys.stderr)
                return 1
        LOG.info(
            "device %d ready: P4Runtime on %s (%s engine%s)",
            opts.device_id,
            running.grpc_addr,
            opts.engine,
            f", program on the {running.switch.engine} engine" if running.switch.engine else "",
        )
        while not stop.wait(1.0):
            pass
    finally:
        running.stop()
        if opts.ready_file is not None:
            opts.ready_file.unlink(missing_ok=True)
    return 0
