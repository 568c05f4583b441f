"""`python -m softswitch` as a subprocess: flags, readiness, P4Runtime, clean shutdown."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from p4proto import p4runtime_pb2, p4runtime_pb2_grpc
from softswitch.cli import UsageError, parse_options
from tests.softswitch import fake_switch

REPO = Path(__file__).resolve().parents[2]


def _start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "softswitch", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_ready(proc: subprocess.Popen[str], ready: Path, limit: float = 60.0) -> dict:
    """Poll for the ready file (the process's own signal), failing early if the process dies."""
    deadline = time.monotonic() + limit
    while not ready.exists():
        if proc.poll() is not None:
            raise AssertionError(f"switch exited with {proc.returncode}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError("switch never wrote its ready file")
        time.sleep(0.05)
    return json.loads(ready.read_text())


@pytest.fixture
def stop_later() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def test_options_mirror_simple_switch_grpc() -> None:
    opts = parse_options(
        [
            "--device-id",
            "4",
            "-i",
            "1@veth1",
            "-i",
            "2@veth2",
            "--no-p4",
            "--log-level",
            "warn",
            "--",
            "--grpc-server-addr",
            "127.0.0.1:50051",
        ]
    )
    assert (opts.device_id, opts.ports, opts.grpc_addr, opts.log_level) == (
        4,
        {1: "veth1", 2: "veth2"},
        "127.0.0.1:50051",
        "warn",
    )
    with pytest.raises(UsageError):
        parse_options(["--no-p4", "-i", "1@a", "-i", "1@b"])
    with pytest.raises(UsageError):
        parse_options([])  # neither a JSON nor --no-p4


def test_cli_serves_p4runtime_and_stops_cleanly_on_sigterm(tmp_path: Path, stop_later: list) -> None:
    ready = tmp_path / "ready.json"
    program = tmp_path / "tiny.json"
    program.write_text(fake_switch.TINY_JSON)
    log = tmp_path / "switch.log"
    proc = _start(
        [
            "--device-id",
            "7",
            "--log-level",
            "debug",
            "--log-file",
            str(log),
            "--ready-file",
            str(ready),
            str(program),
            "--",
            "--grpc-server-addr",
            "127.0.0.1:0",
        ]
    )
    stop_later.append(proc)
    info = _wait_ready(proc, ready)
    assert info["device_id"] == 7 and info["pid"] == proc.pid and info["grpc_port"] > 0

    with grpc.insecure_channel(info["grpc_addr"]) as channel:
        stub = p4runtime_pb2_grpc.P4RuntimeStub(channel)
        assert stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=10).p4runtime_api_version
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=7, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
        )
        req.config.p4info.CopyFrom(fake_switch.tiny_p4info())
        req.config.p4_device_config = fake_switch.TINY_JSON.encode()
        stub.SetForwardingPipelineConfig(req, timeout=30)

        # a controller still holds its stream open while the switch is told to stop
        arb = p4runtime_pb2.StreamMessageRequest()
        arb.arbitration.device_id = 7
        arb.arbitration.election_id.low = 1
        hold = threading.Event()

        def requests() -> Iterator[p4runtime_pb2.StreamMessageRequest]:
            yield arb
            hold.wait()  # keep the stream open

        stream = stub.StreamChannel(requests())
        try:
            assert next(stream).arbitration.status.code == 0
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            with pytest.raises(grpc.RpcError):
                next(stream)
        finally:
            hold.set()
    assert not ready.exists()
    # the program loaded at start and the one pushed over P4Runtime were each frozen out of the collector's walks
    # (softswitch.runtime.heap: without the freeze, collecting the compiled p4ina.json at exit takes seconds)
    frozen = re.findall(r"heap: \d+ unreachable objects collected, (\d+) frozen", log.read_text())
    assert len(frozen) == 2 and all(int(n) > 0 for n in frozen), log.read_text()[-2000:]


def test_cli_stops_cleanly_on_sigint(tmp_path: Path, stop_later: list) -> None:
    ready = tmp_path / "ready.json"
    proc = _start(["--no-p4", "--grpc-server-addr", "127.0.0.1:0", "--ready-file", str(ready)])
    stop_later.append(proc)
    _wait_ready(proc, ready)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize("address", ["10.0.0.1:9559", "192.168.1.7:9559", "[fe80::1]:9559"])
def test_cli_refuses_a_non_loopback_address(stop_later: list, address: str) -> None:
    proc = _start(["--no-p4", "--", "--grpc-server-addr", address])
    stop_later.append(proc)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "127.0.0.1" in err and address.rsplit(":", 1)[0] in err


def test_cli_refuses_a_json_the_interpreter_rejects(tmp_path: Path, stop_later: list) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    proc = _start(["--grpc-server-addr", "127.0.0.1:0", str(bad)])
    stop_later.append(proc)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2  # bad input, as every other refusal of the command line
    assert f"p4ina-switch: error: {bad}: " in err
