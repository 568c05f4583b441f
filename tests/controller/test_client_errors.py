"""Per-update error decoding (grpc-status-details-bin) and the messages built from it, without a switch."""

from __future__ import annotations

from google.protobuf import any_pb2

from controller.client import UpdateStatus, WriteError, _statuses
from p4proto import code_pb2, p4runtime_pb2, status_pb2


class FakeRpcError:
    def __init__(self, metadata: tuple) -> None:
        self._md = metadata

    def trailing_metadata(self) -> tuple:
        return self._md


def details(*codes: int) -> bytes:
    st = status_pb2.Status(code=code_pb2.UNKNOWN, message="Write failure.")
    for i, c in enumerate(codes):
        a = any_pb2.Any()
        a.Pack(p4runtime_pb2.Error(canonical_code=c, message="" if c == code_pb2.OK else f"problem {i}"))
        st.details.append(a)
    return st.SerializeToString()


def test_statuses_are_decoded_per_update() -> None:
    got = _statuses(
        FakeRpcError(
            (("other", b"x"), ("grpc-status-details-bin", details(code_pb2.OK, code_pb2.ALREADY_EXISTS, code_pb2.OK)))
        )
    )
    assert [(s.index, s.ok, s.code_name) for s in got] == [
        (0, True, "OK"),
        (1, False, "ALREADY_EXISTS"),
        (2, True, "OK"),
    ]
    assert _statuses(FakeRpcError(())) == []


def test_write_error_names_switch_entry_and_reason() -> None:
    statuses = [UpdateStatus(0, code_pb2.OK, ""), UpdateStatus(1, code_pb2.ALREADY_EXISTS, "entry exists")]
    err = WriteError(
        "e3", "UNKNOWN", "Write failure.", statuses, ["job_ports[...] a", "job_config[job_id=7] -> set_job(...)"]
    )
    assert str(err) == (
        "switch e3: write of 2 update(s) failed: "
        "update 1 (job_config[job_id=7] -> set_job(...)): ALREADY_EXISTS entry exists"
    )
    assert err.succeeded() == [0] and err.failed_codes() == {"ALREADY_EXISTS"}
    blind = WriteError("c1", "UNAVAILABLE", "connection reset", [], ["a", "b"])
    assert blind.succeeded() is None and "UNAVAILABLE connection reset" in str(blind)
