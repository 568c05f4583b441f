"""The P4Runtime bindings run on protobuf's C back end (upb), and p4proto would say if they did not."""

from __future__ import annotations

import subprocess
import sys

import google.protobuf

import p4proto
from p4proto import code_pb2, p4info_pb2, p4runtime_pb2, p4runtime_pb2_grpc, status_pb2
from tests.common import REPO


def test_the_bindings_run_on_upb() -> None:
    assert p4proto.backend() == "upb"
    assert int(google.protobuf.__version__.split(".")[0]) >= 5


def test_the_backend_check_can_fail() -> None:
    """protobuf's pure-Python implementation, forced in a child: the same check reports it."""
    done = subprocess.run(
        [sys.executable, "-c", "import p4proto; print(p4proto.backend())"],
        cwd=REPO,
        env={"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "python"


def test_one_write_request_round_trips_byte_for_byte() -> None:
    """A WriteRequest of LPM entries through the bindings: every entry back, and the bytes stable."""
    req = p4runtime_pb2.WriteRequest(device_id=3, election_id=p4runtime_pb2.Uint128(high=1, low=2))
    for i in range(50):
        u = req.updates.add(type=p4runtime_pb2.Update.INSERT)
        e = u.entity.table_entry
        e.table_id = 0x02000001
        e.match.add(field_id=1).lpm.CopyFrom(p4runtime_pb2.FieldMatch.LPM(value=bytes([10, 0, i, 0]), prefix_len=24))
        e.action.action.action_id = 0x01000002
        e.action.action.params.add(param_id=1, value=bytes([i % 8]))
    wire = req.SerializeToString()
    back = p4runtime_pb2.WriteRequest.FromString(wire)
    assert back == req and back.SerializeToString() == wire
    assert [u.entity.table_entry.match[0].lpm.value[2] for u in back.updates] == list(range(50))
    back.updates[7].entity.table_entry.match[0].lpm.prefix_len = 16
    assert back != req  # a changed field is seen


def test_every_concept_has_its_binding() -> None:
    assert code_pb2.ALREADY_EXISTS == 6
    assert status_pb2.Status(code=code_pb2.INTERNAL).code == 13
    assert p4info_pb2.MatchField.LPM == 3 and p4info_pb2.MatchField.EXACT == 2
    assert hasattr(p4runtime_pb2_grpc, "P4RuntimeStub") and hasattr(p4runtime_pb2_grpc, "P4RuntimeServicer")
