"""Run packets through BMv2's simple_switch_grpc over pcap files, to check and time the embedded switch against it.

simple_switch_grpc's `--use-files N` reads port X's packets from `X_in.pcap` after N
seconds and writes what it sends to `X_out.pcap` (flushed per packet); the reader merges
the ports by timestamp, so sequence numbers as timestamps keep the global order. The
pipeline, table entries and multicast groups are pushed over P4Runtime on 127.0.0.1.
Only tests and benchmarks use this module.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from softswitch.runtime.switch import SoftSwitch, TableEntry
from softswitch.runtime.tables import Lpm, Range, Ternary

LOG = logging.getLogger(__name__)

BINARY = "simple_switch_grpc"


def available() -> bool:
    return shutil.which(BINARY) is not None


def version() -> str:
    """simple_switch_grpc --version (e.g. '1.15.5-unknown')."""
    binary = shutil.which(BINARY)
    if binary is None:
        raise FileNotFoundError(f"{BINARY} is not on PATH")
    return subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()


def write_pcap(path: Path, packets: list[tuple[int, bytes]]) -> None:
    """(sequence number, packet) pairs; the sequence number becomes the timestamp in microseconds."""
    with path.open("wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for seq, p in packets:
            f.write(struct.pack("<IIII", seq // 1000000, seq % 1000000, len(p), len(p)))
            f.write(p)


def read_pcap(path: Path) -> list[bytes]:
    if not path.exists():
        return []
    data = path.read_bytes()
    out, off = [], 24
    while off + 16 <= len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        if off + 16 + incl > len(data):
            break
        out.append(data[off + 16 : off + 16 + incl])
        off += 16 + incl
    return out


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (all its threads), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


_PORTS_LOCK = threading.Lock()
_PORTS_GIVEN: set[int] = set()


def _free_port() -> int:
    """A free loopback port, never one this process handed out before (runs may start side by side)."""
    with _PORTS_LOCK:
        while True:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port not in _PORTS_GIVEN:
                _PORTS_GIVEN.add(port)
                return port


class P4RuntimeWriter:
    """Just enough of a P4Runtime client to push a pipeline, table entries and multicast groups."""

    def __init__(self, addr: str, p4info_path: Path, ready_timeout: float = 15.0) -> None:
        import grpc
        from google.protobuf import text_format

        from p4proto import p4info_pb2, p4runtime_pb2, p4runtime_pb2_grpc

        self.pb = p4runtime_pb2
        self.channel = grpc.insecure_channel(addr)
        grpc.channel_ready_future(self.channel).result(timeout=ready_timeout)
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self.p4info = text_format.Parse(p4info_path.read_text(), p4info_pb2.P4Info())
        self.requests: queue.Queue[Any] = queue.Queue()
        self.stream = self.stub.StreamChannel(iter(self.requests.get, None))
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = 0
        req.arbitration.election_id.low = 1
        self.requests.put(req)
        next(self.stream)  # the arbitration response: we are primary

    def close(self) -> None:
        self.requests.put(None)
        self.channel.close()

    def set_pipeline(self, program_json: bytes) -> None:
        pb = self.pb
        req = pb.SetForwardingPipelineConfigRequest(
            device_id=0, action=pb.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        )
        req.election_id.low = 1
        req.config.p4info.CopyFrom(self.p4info)
        req.config.p4_device_config = program_json
        self.stub.SetForwardingPipelineConfig(req, timeout=60)

    def _insert(self, entity: Any) -> None:
        pb = self.pb
        req = pb.WriteRequest(device_id=0)
        req.election_id.low = 1
        update = req.updates.add()
        update.type = pb.Update.INSERT
        update.entity.CopyFrom(entity)
        self.stub.Write(req, timeout=20)

    def table_entry(self, table: str, entry: TableEntry) -> None:
        t = next(t for t in self.p4info.tables if t.preamble.name == table)
        a = next(a for a in self.p4info.actions if a.preamble.name == entry.action.name)
        e = self.pb.Entity()
        te = e.table_entry
        te.table_id = t.preamble.id
        te.priority = entry.priority
        for mf, k in zip(t.match_fields, entry.key):
            nbytes = (mf.bitwidth + 7) // 8
            full = (1 << mf.bitwidth) - 1
            if (
                isinstance(k, Ternary)
                and k.mask == 0
                or isinstance(k, Lpm)
                and k.prefix_len == 0
                or isinstance(k, Range)
                and (k.low, k.high) == (0, full)
            ):
                continue  # P4Runtime omits don't-care fields
            fm = te.match.add(field_id=mf.id)
            if isinstance(k, Lpm):
                fm.lpm.value = k.value.to_bytes(nbytes, "big")
                fm.lpm.prefix_len = k.prefix_len
            elif isinstance(k, Ternary):
                fm.ternary.value = k.value.to_bytes(nbytes, "big")
                fm.ternary.mask = k.mask.to_bytes(nbytes, "big")
            elif isinstance(k, Range):
                fm.range.low = k.low.to_bytes(nbytes, "big")
                fm.range.high = k.high.to_bytes(nbytes, "big")
            else:
                fm.exact.value = k.value.to_bytes(nbytes, "big")
        te.action.action.action_id = a.preamble.id
        for p, v in zip(a.params, entry.action.params):
            te.action.action.params.add(param_id=p.id, value=v.to_bytes((p.bitwidth + 7) // 8, "big"))
        self._insert(e)

    def counters(self) -> dict[str, list[tuple[int, int]]]:
        """Every counter's (packets, bytes) per index, by P4Info name."""
        pb = self.pb
        req = pb.ReadRequest(device_id=0)
        req.entities.add().counter_entry.counter_id = 0
        names = {c.preamble.id: c.preamble.name for c in self.p4info.counters}
        sizes = {c.preamble.id: c.size for c in self.p4info.counters}
        out = {name: [(0, 0)] * sizes[cid] for cid, name in names.items()}
        for resp in self.stub.Read(req, timeout=20):
            for e in resp.entities:
                c = e.counter_entry
                out[names[c.counter_id]][c.index.index] = (c.data.packet_count, c.data.byte_count)
        return out

    def mc_group(self, group: int, replicas: list[tuple[int, int]]) -> None:
        e = self.pb.Entity()
        g = e.packet_replication_engine_entry.multicast_group_entry
        g.multicast_group_id = group
        for port, rid in replicas:
            g.replicas.add(egress_port=port, instance=rid)
        self._insert(e)

    def copy_from(self, sw: SoftSwitch) -> None:
        """Install the embedded switch's table entries (not defaults) and multicast groups."""
        for name in sw.tables():
            if not any(t.preamble.name == name for t in self.p4info.tables):
                continue  # p4c's hidden tables
            if sw.runtime().tables[name].immutable:
                continue  # const entries come with the program
            for entry in sw.table_entries(name):
                self.table_entry(name, entry)
        for grp, reps in sw.mc_groups().items():
            self.mc_group(grp, reps)


def _settled_counters(
    client: P4RuntimeWriter, quiet: float = 0.6, limit: float = 20.0
) -> dict[str, list[tuple[int, int]]]:
    """The counters once they stop changing: packets after the last output (drops) may still be in BMv2's queues
    when the expected outputs have all been written."""
    last = client.counters()
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        time.sleep(quiet)
        now = client.counters()
        if now == last:
            return now
        last = now
    raise RuntimeError(f"{BINARY}'s counters were still changing after {limit} s")


@dataclass
class PcapRun:
    outputs: dict[int, list[bytes]] = field(default_factory=dict)
    counters: dict[str, list[tuple[int, int]]] | None = None  # read over P4Runtime after the run (if configured)
    first_output: float | None = None  # perf_counter() when the first output packet was seen
    last_output: float | None = None  # ... and the last
    counted_first: int = 0  # packets already written at first_output
    counted_last: int = 0  # ... and at last_output
    cpu_first: float | None = None  # CPU seconds BMv2 (all threads) had used at first_output
    cpu_last: float | None = None  # ... and at last_output

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.outputs.values())


def run(
    program: Path,
    p4info: Path | None,
    traffic: list[tuple[int, bytes]],
    configure: Callable[[P4RuntimeWriter], None] | None = None,
    ports: set[int] | None = None,
    expect: int | None = None,
    quiet_for: float = 1.5,
    record_size: int | None = None,
    read_counters: bool = True,
) -> PcapRun:
    """Feed traffic to simple_switch_grpc and collect what it sends, per port, in order.

    Stops when `expect` packets came out or nothing came out for `quiet_for` seconds.
    `record_size` (16 + packet length, when all outputs have one size) makes polling cheap.
    `read_counters`: read every counter over P4Runtime once they settle (a benchmark needs none).
    """
    binary = shutil.which(BINARY)
    if binary is None:
        raise FileNotFoundError(f"{BINARY} is not on PATH")
    # BMv2 starts reading its pcap files `wait` s after it parsed the JSON on its command line (we time it
    # from its gRPC server's first answer): pushing the pipeline and configuring must be done by then (p4ina's
    # 17 MB compact JSON: 14 s was too short on a busy machine, 46 s made every p4ina run take a minute)
    wait = 3 + program.stat().st_size // 800_000 if configure else 1
    with tempfile.TemporaryDirectory(prefix="p4ina-bmv2-") as tmp:
        d = Path(tmp)
        all_ports = sorted({p for p, _ in traffic} | (ports or set()))
        for p in all_ports:
            write_pcap(d / f"p{p}_in.pcap", [(i, pkt) for i, (port, pkt) in enumerate(traffic) if port == p])
        addr = f"127.0.0.1:{_free_port()}"
        args = [binary, "--use-files", str(wait), "--log-level", "off", "--device-id", "0"]
        for p in all_ports:
            args += ["-i", f"{p}@{d / f'p{p}'}"]
        args += [str(program), "--", "--grpc-server-addr", addr]
        proc = subprocess.Popen(args, cwd=d, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        started = time.monotonic()
        client = None
        try:
            if configure is not None:
                if p4info is None:
                    raise ValueError("configuring BMv2 needs the program's P4Info")
                # BMv2 parses the JSON given on its command line before its gRPC server listens (p4ina.json
                # took over 15 s on a busy machine): allow it a minute, or twice the pcap wait
                client = P4RuntimeWriter(addr, p4info, ready_timeout=max(60.0, 2.0 * wait))
                started = time.monotonic()  # its pcap wait runs from about now, after that parse
                client.set_pipeline(program.read_bytes())
                configure(client)
                if time.monotonic() - started > wait - 0.3:
                    raise RuntimeError(f"configuring {BINARY} took longer than its --use-files wait of {wait} s")
            outs = {p: d / f"p{p}_out.pcap" for p in all_ports}

            def count() -> int:
                if record_size:
                    return sum(max(0, (o.stat().st_size - 24) // record_size) for o in outs.values() if o.exists())
                return sum(len(read_pcap(o)) for o in outs.values())

            result = PcapRun()
            seen = 0
            last_change = time.monotonic()
            deadline = time.monotonic() + 900
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise RuntimeError(f"{BINARY} exited: {proc.stderr.read().decode(errors='replace')[-800:]}")
                n = count()
                now = time.perf_counter()
                if n > seen:
                    cpu = _cpu_seconds(proc.pid)
                    if result.first_output is None:
                        result.first_output, result.counted_first, result.cpu_first = now, n, cpu
                    result.last_output, result.counted_last, result.cpu_last = now, n, cpu
                    seen = n
                    last_change = time.monotonic()
                if expect is not None and n >= expect:
                    break
                if time.monotonic() - max(last_change, started + wait) > quiet_for:
                    break
                time.sleep(0.002)
            result.outputs = {p: read_pcap(o) for p, o in outs.items()}
            if read_counters and client is not None and client.p4info.counters:
                result.counters = _settled_counters(client)
            return result
        finally:
            if client is not None:
                client.close()
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
