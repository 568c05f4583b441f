"""p4runtime-shell drives either back end through `p4ina shell SWITCH SCRIPT`, non-interactively.

A switch process is started as the emulation starts it (the embedded switch, or BMv2's
simple_switch_grpc), the tiny test program pushed, and a topology JSON with the switch's gRPC
address written, as `p4ina serve` writes it. The script inserts, reads and deletes
a table entry, reads a counter, and sends a batch that fails only in part (which p4runtime-shell
0.0.6 alone loops on forever; `p4ina shell` fixes its error iterator).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from controller.leafspine import leaf_spine
from p4proto import p4runtime_pb2, p4runtime_pb2_grpc
from tests.common import BACKENDS, REPO
from tests.softswitch import fake_switch

SCRIPT = textwrap.dedent("""
    from p4.v1 import p4runtime_pb2
    from p4runtime_sh.p4runtime import P4RuntimeWriteException

    te = TableEntry("MyIngress.fwd")(action="MyIngress.set_port")
    te.match["standard_metadata.ingress_port"] = "3"
    te.action["port"] = "2"
    te.insert()
    read = list(TableEntry("MyIngress.fwd").read())
    assert len(read) == 1, read
    assert read[0].match["standard_metadata.ingress_port"].exact.value == b"\\x03"
    print("read", len(read))

    ce = CounterEntry("MyIngress.pkts")
    ce.index = 2
    [c] = list(ce.read())
    print("counter", c.packet_count, c.byte_count)

    # a batch whose first update is fine and whose second is a duplicate
    req = p4runtime_pb2.WriteRequest()  # client.write fills in the device and election ids
    for port in (4, 3):
        u = req.updates.add(type=p4runtime_pb2.Update.INSERT)
        e = TableEntry("MyIngress.fwd")(action="MyIngress.set_port")
        e.match["standard_metadata.ingress_port"] = str(port)
        e.action["port"] = "1"
        e._update_msg()  # (the shell fills its message lazily, as its own _write does)
        u.entity.table_entry.CopyFrom(e._entry)
    try:
        client.write(req)
        raise AssertionError("the batch should fail")
    except P4RuntimeWriteException as ex:
        print("batch errors", [(i, err.canonical_code) for i, err in ex.errors])

    # the interactive shell's own names, which a script once lacked (NameError)
    te2 = table_entry["MyIngress.fwd"](action="MyIngress.set_port")
    te2.match["standard_metadata.ingress_port"] = "5"
    te2.action["port"] = "1"
    te2.insert()
    print("builder", len(list(table_entry["MyIngress.fwd"].read())))
    te2.delete()
    c2 = counter_entry["MyIngress.pkts"]
    c2.index = 2
    print("counter builder", [c.packet_count for c in c2.read()])
    print("names", all(callable(x) for x in (multicast_group_entry, packet_out)))

    te.delete()
    for port in ("4",):
        e = TableEntry("MyIngress.fwd")
        e.match["standard_metadata.ingress_port"] = port
        e.delete()
    assert list(TableEntry("MyIngress.fwd").read()) == []
    print("done")
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(backend: str, device_id: int, port: int) -> subprocess.Popen[str]:
    addr = f"127.0.0.1:{port}"
    if backend == "bmv2":
        cmd = [
            shutil.which("simple_switch_grpc") or "simple_switch_grpc",
            "--device-id",
            str(device_id),
            "--log-level",
            "off",
            "--no-p4",
            "--",
            "--grpc-server-addr",
            addr,
        ]
    else:
        cmd = [
            sys.executable,
            "-m",
            "softswitch",
            "--device-id",
            str(device_id),
            "--log-level",
            "warn",
            "--no-p4",
            "--",
            "--grpc-server-addr",
            addr,
        ]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.fixture(params=BACKENDS)
def switch(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A running switch with the tiny program pushed; yields the topology JSON naming it."""
    topo = leaf_spine(1, 1, 1)
    sw = topo.switches[0]
    port = _free_port()
    proc = _start(request.param, sw.device_id, port)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"the switch exited: {proc.stderr.read() if proc.stderr else ''}"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the switch never opened its gRPC port"
            time.sleep(0.05)
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
                device_id=sw.device_id, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT
            )
            req.config.p4info.CopyFrom(fake_switch.tiny_p4info())
            req.config.p4_device_config = fake_switch.TINY_JSON.encode()
            p4runtime_pb2_grpc.P4RuntimeStub(channel).SetForwardingPipelineConfig(req, timeout=60)
        path = tmp_path / "topology.json"
        topo.with_grpc({sw.name: f"127.0.0.1:{port}"}).save(path)
        yield path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_p4runtime_shell_inserts_reads_deletes_and_reads_counters(switch: Path, tmp_path: Path) -> None:
    script = tmp_path / "session.py"
    script.write_text(SCRIPT)
    name = leaf_spine(1, 1, 1).switches[0].name
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "p4ina",
            "shell",
            name,
            str(script),
            "--topology",
            str(switch),
            "--state",
            str(tmp_path / "state.json"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,  # a hang (the unfixed iterator) fails here
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = proc.stdout
    assert "read 1" in out and "counter 0 0" in out and "done" in out
    assert "batch errors [(1, 6)]" in out  # index 1: ALREADY_EXISTS; the OK update at index 0 is skipped
    assert "builder 3" in out and "counter builder [0]" in out and "names True" in out


def test_p4ina_shell_names_a_missing_switch(switch: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "p4ina",
            "shell",
            "nosuch",
            "--topology",
            str(switch),
            "--state",
            str(tmp_path / "s.json"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "p4ina shell: error: no switch 'nosuch'" in proc.stderr


def test_p4ina_shell_without_its_environment_says_how_to_make_it(tmp_path: Path) -> None:
    """p4runtime-shell lives in its own venv (`make setup`); without it, one line says so, before any connection."""
    topo = leaf_spine(1, 1, 1)
    name = topo.switches[0].name
    path = tmp_path / "topology.json"
    topo.with_grpc({name: "127.0.0.1:9"}).save(path)
    missing = tmp_path / "no-such-python"
    proc = subprocess.run(
        [sys.executable, "-m", "p4ina", "shell", name, "--topology", str(path), "--state", str(tmp_path / "s.json")],
        cwd=REPO,
        env={**os.environ, "P4INA_SHELL_PYTHON": str(missing)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert str(missing) in lines[0] and "make setup" in lines[0]
