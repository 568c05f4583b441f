"""The embedded switch takes simple_switch_grpc's command line unchanged, as BMv2 scripts build it.

Two real command lines: the p4lang tutorials' P4RuntimeSwitch (utils/p4runtime_switch.py, joined
into one shell string: `... --pcap DIR --nanolog ipc://... --device-id 0 X.json --log-console
--thrift-port 9090 -- --grpc-server-addr 0.0.0.0:50051`) and p4-utils' (`--pcap=DIR`,
`--log-file=...`, `-- --grpc-server-addr 0.0.0.0:PORT --cpu-port 255`). BMv2's "all interfaces"
is served on 127.0.0.1 only.
"""

from __future__ import annotations

import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from p4proto import p4runtime_pb2, p4runtime_pb2_grpc
from softswitch.cli import UsageError, parse_options
from softswitch.runtime.ports import ETH_P_ALL
from tests.softswitch import fake_switch
from tests.softswitch.test_ports import HOST_END, SWITCH_END, _frame, _receive, _run, in_netns

REPO = Path(__file__).resolve().parents[2]
SWITCH = f"{shlex.quote(sys.executable)} -m softswitch"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp writes them) with a TCP socket listening on `port`."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.rsplit(":", 1)
            if state == "0A" and int(hexport, 16) == port:
                out.add(addr)
    return out


def _wait_port(proc: subprocess.Popen[str], port: int, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"switch exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert time.monotonic() < deadline, "the switch never opened its gRPC port"
        time.sleep(0.05)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for p in started:
            if p.poll() is None:
                p.kill()
            p.wait()


def test_the_tutorials_command_line_runs_unchanged(tmp_path: Path, procs: list) -> None:
    program = tmp_path / "basic.json"
    program.write_text(fake_switch.TINY_JSON)
    grpc_port = _free_port()
    # utils/p4runtime_switch.py: ' '.join(args) run by a shell
    cmd = (
        f"{SWITCH} --pcap {tmp_path}/pcaps --nanolog ipc:///tmp/bm-0-log.ipc --device-id 0 {program} "
        f"--log-console --thrift-port 9090 -- --grpc-server-addr 0.0.0.0:{grpc_port}"
    )
    # (split as the shell would: the process is then the switch itself, which SIGTERM reaches)
    proc = subprocess.Popen(shlex.split(cmd), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(proc)
    _wait_port(proc, grpc_port)
    # 127.0.0.1 only (gRPC may bind it as ::ffff:127.0.0.1), not 0.0.0.0 or ::
    assert _listening(grpc_port) and _listening(grpc_port) <= {"0100007F", "0000000000000000FFFF00000100007F"}
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=0, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        )
        req.config.p4info.CopyFrom(fake_switch.tiny_p4info())
        req.config.p4_device_config = fake_switch.TINY_JSON.encode()
        stub.SetForwardingPipelineConfig(req, timeout=30)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "--pcap is accepted for BMv2 compatibility and ignored" in err
    assert "serving P4Runtime on 127.0.0.1" in err


@pytest.mark.netns
def test_the_p4_utils_command_line_runs_unchanged_with_ports(tmp_path: Path, procs: list) -> None:
    ns = f"p4ina-dropin-{uuid.uuid4().hex[:8]}"
    _run("ip", "netns", "add", ns)
    try:
        _run("ip", "-n", ns, "link", "add", SWITCH_END, "type", "veth", "peer", "name", HOST_END)
        for dev in (SWITCH_END, HOST_END):
            _run("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
            _run("ip", "-n", ns, "link", "set", dev, "up")
        program = tmp_path / "p.json"
        program.write_text(fake_switch.TINY_JSON)  # every frame leaves on port 1
        # p4utils/mininetlib/node.py (P4RuntimeSwitch.start): a list, not a shell string
        cmd = [
            sys.executable,
            "-m",
            "softswitch",
            "-i",
            f"1@{SWITCH_END}",
            f"--pcap={tmp_path}",
            f"--log-file={tmp_path}/s1.log",
            "--log-flush",
            "--device-id",
            "1",
            str(program),
            "--thrift-port",
            "9091",
            "--",
            "--grpc-server-addr",
            f"0.0.0.0:{_free_port()}",
            "--cpu-port",
            "255",
        ]
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, *cmd], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        procs.append(proc)
        with in_netns(ns):
            host = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            host.bind((HOST_END, ETH_P_ALL))
        try:
            sent = _frame(b"dropin", 100)
            deadline = time.monotonic() + 60
            while True:  # until the switch process is up and attached
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                host.send(sent)
                try:
                    assert _receive(host, b"dropin", timeout=0.5) == sent
                    break
                except AssertionError:
                    assert time.monotonic() < deadline, "no frame came back through the switch"
        finally:
            host.close()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert "ready: P4Runtime on 127.0.0.1" in (tmp_path / "s1.log").read_text()
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_options_that_would_change_behaviour_are_refused_by_name() -> None:
    for argv, name in (
        (["--no-p4", "--use-files", "3"], "--use-files"),
        (["--no-p4", "--", "--grpc-server-ssl"], "--grpc-server-ssl"),
        (["--no-p4", "--", "--drop-port", "500"], "--drop-port"),
        (["--no-p4", "--restore-state", "x"], "--restore-state"),
    ):
        with pytest.raises(UsageError, match=name):
            parse_options(argv)
    opts = parse_options(["--no-p4", "--", "--drop-port", "511", "--priority-queues", "4", "--cpu-port", "0"])
    assert (opts.priority_queues, opts.cpu_port) == (4, None)
