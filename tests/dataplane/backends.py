"""The switch under test, behind one interface, so every behaviour case runs on each back end.

- `embedded`: p4ina's embedded switch in this process, programmed over
  P4Runtime (loopback gRPC), packets handed straight to its pipeline.
- `bmv2`: BMv2's simple_switch_grpc, programmed over the same P4Runtime,
  real packets over veth pairs whose host ends live in a namespace we create.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from controller.client import SwitchClient
from controller.entities import MulticastGroup, TableEntry
from controller.p4info import P4Schema
from emulation.netns import NetnsLab
from p4proto import p4runtime_pb2

LOG = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]
P4INFO = ROOT / "p4" / "build" / "p4ina.p4info.txtpb"
BMV2_JSON = ROOT / "p4" / "build" / "p4ina.json"
PORTS = (1, 2, 3, 4, 5)
DEVICE_ID = 1


class Dut:
    """A switch running p4ina.p4, programmed over P4Runtime."""

    name = "abstract"

    def __init__(self) -> None:
        self.schema = P4Schema.load(P4INFO)
        self.client: SwitchClient

    # -- control plane (identical for every back end) --------------------------
    def push_pipeline(self) -> None:
        self.client.set_pipeline(self.schema.p4info, BMV2_JSON.read_bytes(), cookie=1)

    def insert(self, table: str, match: dict, action: str, params: dict | None = None) -> None:
        self._write(p4runtime_pb2.Update.INSERT, TableEntry.make(table, match, action, params or {}))

    def modify(self, table: str, match: dict, action: str, params: dict | None = None) -> None:
        self._write(p4runtime_pb2.Update.MODIFY, TableEntry.make(table, match, action, params or {}))

    def _write(self, kind: int, entry: TableEntry) -> None:
        self.client.write([p4runtime_pb2.Update(type=kind, entity=entry.encode(self.schema))])

    def multicast(self, group: int, replicas: list[tuple[int, int]]) -> None:
        ent = MulticastGroup.make(group, replicas).encode(self.schema)
        self.client.write([p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT, entity=ent)])

    def counter(self, name: str, index: int) -> tuple[int, int]:
        ent = p4runtime_pb2.Entity()
        ent.counter_entry.counter_id = self.schema.counter(name).id
        ent.counter_entry.index.index = index
        for got in self.client.read([ent]):
            return got.counter_entry.data.packet_count, got.counter_entry.data.byte_count
        raise LookupError(f"counter {name}[{index}] not returned by the switch")

    def flip_register_bit(self, name: str, index: int, bit: int) -> tuple[int, int]:
        """A bit flip in a register cell, over P4Runtime (the embedded switch's extension; BMv2 has none)."""
        from controller.registers import flip_bit

        return flip_bit(self.client, self.schema, name, index, bit)

    # -- data plane ------------------------------------------------------------
    def send(self, port: int, frame: bytes) -> None:
        raise NotImplementedError

    def receive(self, count: int, timeout: float = 3.0, grace: float = 0.3) -> list[tuple[int, bytes]]:
        """At least `count` frames; an asynchronous back end then waits `grace` seconds more for extras."""
        raise NotImplementedError


class EmbeddedDut(Dut):
    name = "embedded"

    def __init__(self, engine: str = "auto") -> None:
        super().__init__()
        from softswitch.cli import start_switch

        self.engine = engine
        self._running = start_switch(DEVICE_ID, grpc_addr="127.0.0.1:0", engine=engine)
        self.switch = self._running.switch
        self.client = SwitchClient("dut", f"127.0.0.1:{self._running.grpc_port}", DEVICE_ID).connect()
        self._out: list[tuple[int, bytes]] = []

    def send(self, port: int, frame: bytes) -> None:
        self._out.extend(self.switch.process_packet(port, frame))

    def receive(self, count: int, timeout: float = 3.0, grace: float = 0.3) -> list[tuple[int, bytes]]:
        out, self._out = self._out, []
        return out

    def close(self) -> None:
        self.client.close()
        self._running.stop()


class Bmv2Dut(Dut):
    name = "bmv2"

    def __init__(self) -> None:
        super().__init__()
        self.lab = NetnsLab()
        self._proc: subprocess.Popen | None = None
        self.socks: dict[int, socket.socket] = {}
        try:
            ns = self.lab.ns("dut")
            self.sw_ifaces = {p: f"p4ina{self.lab.tag}s{p}" for p in PORTS}  # root side, BMv2's ports
            for p in PORTS:
                self.lab.veth_to_root(self.sw_ifaces[p], ns, f"h{p}")
            self.socks = {p: self.lab.packet_socket(ns, f"h{p}") for p in PORTS}
            for s in self.socks.values():
                s.setblocking(False)
            port = _free_port()
            log = os.environ.get("P4INA_BMV2_LOG")  # a file for BMv2's per-packet debug log, to chase a divergence
            cmd = [
                "simple_switch_grpc",
                "--device-id",
                str(DEVICE_ID),
                "--no-p4",
                *(["--log-level", "debug", "--log-file", log, "--log-flush"] if log else ["--log-level", "off"]),
            ]
            for p in PORTS:
                cmd += ["-i", f"{p}@{self.sw_ifaces[p]}"]
            cmd += ["--", "--grpc-server-addr", f"127.0.0.1:{port}"]
            self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _wait_for_port(port, self._proc)
            self.client = SwitchClient("dut", f"127.0.0.1:{port}", DEVICE_ID).connect()
        except BaseException:
            self.close()
            raise

    def send(self, port: int, frame: bytes) -> None:
        self.socks[port].send(frame)

    def receive(self, count: int, timeout: float = 3.0, grace: float = 0.3) -> list[tuple[int, bytes]]:
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + timeout
        by_fd = {s.fileno(): (p, s) for p, s in self.socks.items()}
        while True:
            # Once `count` frames came, wait a short while more for any that should not come.
            wait = deadline - time.monotonic() if len(got) < count else grace
            if wait <= 0:
                break
            ready, _, _ = select.select(list(by_fd), [], [], wait)
            if not ready:
                if len(got) >= count:
                    break
                continue
            for fd in ready:
                port, sock = by_fd[fd]
                with contextlib.suppress(BlockingIOError):
                    while True:
                        frame, addr = sock.recvfrom(65535)
                        if addr[2] != socket.PACKET_OUTGOING:
                            got.append((port, frame))
        return got

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for s in self.socks.values():
            s.close()
        self.lab.close()  # deleting the namespace deletes both ends of every veth


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"simple_switch_grpc exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}"
            )
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"simple_switch_grpc did not listen on 127.0.0.1:{port} within {timeout}s")


@contextlib.contextmanager
def open_dut(kind: str) -> Iterator[Dut]:
    """ "embedded" (its default engine: C where a compiler is present), "embedded-c", "embedded-python" or "bmv2"."""
    if kind.startswith("embedded"):
        engine = kind.partition("-")[2] or "auto"
        dut: Dut = EmbeddedDut(engine)
    elif kind == "bmv2":
        dut = Bmv2Dut()
    else:
        raise ValueError(f"no switch back end {kind!r}")
    try:
        dut.push_pipeline()
        if isinstance(dut, EmbeddedDut) and engine != "auto" and dut.switch.engine != engine:
            raise AssertionError(f"p4ina.json ran on the {dut.switch.engine} engine, not the {engine} one")
        yield dut
    finally:
        dut.close()
