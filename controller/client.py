"""A small typed P4Runtime client: one connection to one switch, primary by arbitration.

Errors are exceptions that say which switch, which entry and why; a failed
batch reports every update's own status (from grpc-status-details-bin), so the
installer knows exactly which updates of the batch took effect.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import grpc

from p4proto import code_pb2, p4info_pb2, p4runtime_pb2, p4runtime_pb2_grpc, status_pb2

LOG = logging.getLogger(__name__)

_DETAILS_KEY = "grpc-status-details-bin"
DEFAULT_TIMEOUT = 10.0
# Loading a program takes a switch much longer than any other RPC (the embedded switch
# compiles the BMv2 JSON; many switches on few cores load at the same time).
PIPELINE_TIMEOUT = 300.0


class SwitchError(Exception):
    """Something went wrong talking to one switch."""

    def __init__(self, switch: str, message: str) -> None:
        super().__init__(f"switch {switch}: {message}")
        self.switch = switch


class SwitchUnreachableError(SwitchError):
    pass


class ArbitrationError(SwitchError):
    """This client did not become primary (another controller with a higher election id is)."""


class PipelineError(SwitchError):
    pass


class ReadError(SwitchError):
    def __init__(self, switch: str, message: str, code: str = "") -> None:
        super().__init__(switch, message)
        self.code = code  # grpc status code name, e.g. NOT_FOUND, UNIMPLEMENTED


@dataclass(frozen=True)
class UpdateStatus:
    index: int  # position in the batch
    code: int  # google.rpc.Code; 0 = OK
    message: str

    @property
    def ok(self) -> bool:
        return self.code == code_pb2.OK

    @property
    def code_name(self) -> str:
        return code_pb2.Code.Name(self.code) if self.code in code_pb2.Code.values() else str(self.code)


class WriteError(SwitchError):
    """A Write failed; `statuses` has one entry per update when the switch said which failed.

    `labels` are the caller's descriptions of the updates (e.g. str(entry)), used in the message.
    """

    def __init__(
        self, switch: str, code: str, message: str, statuses: Sequence[UpdateStatus], labels: Sequence[str]
    ) -> None:
        self.code = code
        self.statuses = tuple(statuses)
        self.labels = tuple(labels)
        failed = [s for s in self.statuses if not s.ok]
        if failed:
            lines = [
                f"update {s.index} ({labels[s.index] if s.index < len(labels) else '?'}): "
                f"{s.code_name} {s.message}".rstrip()
                for s in failed[:5]
            ]
            more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
            text = f"write of {len(labels)} update(s) failed: " + "; ".join(lines) + more
        else:
            text = f"write of {len(labels)} update(s) failed: {code} {message}"
        super().__init__(switch, text)

    def succeeded(self) -> list[int] | None:
        """Indexes of the updates that took effect, or None when the switch did not say."""
        if len(self.statuses) != len(self.labels):
            return None
        return [s.index for s in self.statuses if s.ok]

    def failed_codes(self) -> set[str]:
        return {s.code_name for s in self.statuses if not s.ok} or {self.code}


def _statuses(err: grpc.RpcError) -> list[UpdateStatus]:
    for key, value in err.trailing_metadata() or ():
        if key == _DETAILS_KEY:
            st = status_pb2.Status()
            st.ParseFromString(value)
            out = []
            for i, detail in enumerate(st.details):
                e = p4runtime_pb2.Error()
                if detail.Unpack(e):
                    out.append(UpdateStatus(i, e.canonical_code, e.message))
            return out
    return []


class SwitchClient:
    """One P4Runtime session (stream channel + arbitration) to one device: primary, or (backup_ok) a backup that
    the switch promotes when the controllers above it are gone (a standby controller: controller.standby)."""

    def __init__(
        self,
        name: str,
        address: str,
        device_id: int,
        election_id: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
        backup_ok: bool = False,
    ) -> None:
        if election_id < 1:
            raise ValueError("election id must be >= 1 (0 is not a valid primary election id)")
        self.name = name
        self.address = address
        self.device_id = device_id
        self.election_id = election_id
        self.timeout = timeout
        self._channel: grpc.Channel | None = None
        self._stub: p4runtime_pb2_grpc.P4RuntimeStub | None = None
        self._requests: queue.Queue[p4runtime_pb2.StreamMessageRequest | None] = queue.Queue()
        self._responses: queue.Queue[p4runtime_pb2.StreamMessageResponse | Exception] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._stream: grpc.Future | None = None
        # set once the switch says another controller is primary (an arbitration update, a write refused):
        # from then on this session is no longer the switch's only writer (controller.fabric's memo is dropped)
        self.primary_lost = False
        # backup_ok: arbitration's "Is backup" answer opens the session instead of raising ArbitrationError
        self.backup_ok = backup_ok
        # what the switch's last arbitration message said (the reader thread keeps it): this session is primary,
        # and the election id of whichever session is
        self._is_primary = False
        self.primary_election_id: int | None = None
        # called (switch name, primary now) from the stream's reader thread when the switch's arbitration update
        # changes this open session's role: a backup promoted because the primary's stream closed, or demoted
        self.on_role_change: Callable[[str, bool], None] | None = None
        self._session = False  # connect() returned: a stream that ends from now on is news (on_stream_lost)
        # called (switch name, why) from the stream's reader thread when the stream breaks while this session is
        # open: the switch process is gone (controller.monitor turns it into a failure notice)
        self.on_stream_lost: Callable[[str, str], None] | None = None
        self._closing = False

    # -- session ------------------------------------------------------------------------
    def connect(self) -> SwitchClient:
        self._channel = grpc.insecure_channel(
            self.address,
            options=[("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)],
        )
        try:
            grpc.channel_ready_future(self._channel).result(timeout=self.timeout)
        except grpc.FutureTimeoutError as ex:
            self.close()
            raise SwitchUnreachableError(
                self.name, f"no P4Runtime server at {self.address} after {self.timeout:.0f} s"
            ) from ex
        self._stub = p4runtime_pb2_grpc.P4RuntimeStub(self._channel)
        self._stream = self._stub.StreamChannel(iter(self._requests.get, None))
        self._reader = threading.Thread(target=self._read_stream, name=f"p4rt-{self.name}", daemon=True)
        self._reader.start()
        arb = p4runtime_pb2.MasterArbitrationUpdate(device_id=self.device_id)
        arb.election_id.high, arb.election_id.low = self.election_id >> 64, self.election_id & ((1 << 64) - 1)
        self._requests.put(p4runtime_pb2.StreamMessageRequest(arbitration=arb))
        deadline = self.timeout
        while True:
            try:
                msg = self._responses.get(timeout=deadline)
            except queue.Empty:
                self.close()
                raise ArbitrationError(
                    self.name,
                    f"no arbitration answer from {self.address} (device id {self.device_id}) "
                    f"within {self.timeout:.0f} s",
                ) from None
            if isinstance(msg, Exception):
                self.close()
                if isinstance(msg, grpc.RpcError) and msg.code() not in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                ):
                    raise ArbitrationError(
                        self.name,
                        f"arbitration for device {self.device_id} refused by {self.address}: {_rpc_text(msg)}",
                    ) from msg
                raise SwitchUnreachableError(
                    self.name, f"stream channel to {self.address} closed: {_rpc_text(msg)}"
                ) from msg
            if msg.HasField("arbitration"):
                code = msg.arbitration.status.code
                if code == code_pb2.ALREADY_EXISTS and self.backup_ok:  # PI's "Is backup"
                    LOG.debug(
                        "%s: backup on %s (device %d; primary's election id %s)",
                        self.name,
                        self.address,
                        self.device_id,
                        self.primary_election_id,
                    )
                elif code != code_pb2.OK:
                    self.close()
                    raise ArbitrationError(
                        self.name,
                        f"not primary for device {self.device_id} with election id {self.election_id}: "
                        f"{msg.arbitration.status.message or code_pb2.Code.Name(code)}",
                    )
                else:
                    LOG.debug("%s: primary on %s (device %d)", self.name, self.address, self.device_id)
                self._session = True
                return self

    @property
    def is_primary(self) -> bool:
        """The switch's last arbitration message made this session primary."""
        return self._is_primary

    def _arbitration(self, arb: p4runtime_pb2.MasterArbitrationUpdate) -> None:
        """Keep the role an arbitration message gives this session; a change of an open session is news."""
        was, now = self._is_primary, arb.status.code == code_pb2.OK
        self.primary_election_id = (arb.election_id.high << 64) | arb.election_id.low
        self._is_primary = now
        if was and not now:
            self.primary_lost = True
            LOG.warning("%s: no longer primary (%s)", self.name, arb.status.message)
        elif now and not was and self._session:
            LOG.info("%s: primary now (election id %d)", self.name, self.election_id)
        changed = self.on_role_change
        if changed is not None and was != now and self._session:
            changed(self.name, now)

    def _read_stream(self) -> None:
        why = "the switch closed the stream"
        try:
            assert self._stream is not None
            for msg in self._stream:
                if msg.HasField("arbitration"):
                    self._arbitration(msg.arbitration)
                self._responses.put(msg)
        except grpc.RpcError as ex:
            if self._closing:
                return
            if ex.code() != grpc.StatusCode.CANCELLED:
                self._responses.put(ex)
            why = _rpc_text(ex)
        lost = self.on_stream_lost
        if lost is not None and self._session and not self._closing:
            lost(self.name, why)

    def close(self) -> None:
        self._closing = True
        self._requests.put(None)
        if self._stream is not None:
            self._stream.cancel()
        if self._reader is not None:
            self._reader.join(timeout=2)
        if self._channel is not None:
            self._channel.close()
        self._channel = self._stub = self._stream = self._reader = None

    def __enter__(self) -> SwitchClient:
        return self.connect() if self._stub is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def stub(self) -> p4runtime_pb2_grpc.P4RuntimeStub:
        if self._stub is None:
            raise SwitchError(self.name, "not connected")
        return self._stub

    def _election(self) -> p4runtime_pb2.Uint128:
        return p4runtime_pb2.Uint128(high=self.election_id >> 64, low=self.election_id & ((1 << 64) - 1))

    # -- pipeline -----------------------------------------------------------------------
    def set_pipeline(self, p4info: p4info_pb2.P4Info, device_config: bytes, cookie: int) -> None:
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(
            device_id=self.device_id,
            election_id=self._election(),
            action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        )
        req.config.p4info.CopyFrom(p4info)
        req.config.p4_device_config = device_config
        req.config.cookie.cookie = cookie
        try:
            self.stub.SetForwardingPipelineConfig(req, timeout=max(self.timeout, PIPELINE_TIMEOUT))
        except grpc.RpcError as ex:
            raise PipelineError(self.name, f"SetForwardingPipelineConfig refused: {_rpc_text(ex)}") from ex

    def get_pipeline(self, with_p4info: bool = False) -> p4runtime_pb2.ForwardingPipelineConfig | None:
        """The switch's pipeline (cookie, and P4Info if asked), or None when it has none."""
        rt = p4runtime_pb2.GetForwardingPipelineConfigRequest
        req = rt(device_id=self.device_id, response_type=rt.P4INFO_AND_COOKIE if with_p4info else rt.COOKIE_ONLY)
        try:
            return self.stub.GetForwardingPipelineConfig(req, timeout=self.timeout).config
        except grpc.RpcError as ex:
            if ex.code() == grpc.StatusCode.FAILED_PRECONDITION:  # no pipeline set yet
                return None
            raise PipelineError(self.name, f"GetForwardingPipelineConfig failed: {_rpc_text(ex)}") from ex

    # -- entities -----------------------------------------------------------------------
    def write(self, updates: Sequence[p4runtime_pb2.Update], labels: Sequence[str] | None = None) -> None:
        """One Write RPC; raises WriteError listing the failed updates by index and label."""
        if not updates:
            return
        req = p4runtime_pb2.WriteRequest(device_id=self.device_id, election_id=self._election(), updates=updates)
        try:
            self.stub.Write(req, timeout=self.timeout)
        except grpc.RpcError as ex:
            if ex.code() == grpc.StatusCode.PERMISSION_DENIED:
                self.primary_lost = True
            labels = list(labels) if labels is not None else [str(u.type) for u in updates]
            raise WriteError(self.name, ex.code().name, ex.details() or "", _statuses(ex), labels) from ex

    def read(self, entities: Iterable[p4runtime_pb2.Entity]) -> Iterator[p4runtime_pb2.Entity]:
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id, entities=list(entities))
        try:
            for resp in self.stub.Read(req, timeout=self.timeout):
                yield from resp.entities
        except grpc.RpcError as ex:
            raise ReadError(self.name, f"Read failed: {_rpc_text(ex)}", ex.code().name) from ex


def _rpc_text(ex: Exception) -> str:
    if isinstance(ex, grpc.RpcError):
        return f"{ex.code().name} {ex.details() or ''}".strip()
    return str(ex)


def update(kind: str, entity: p4runtime_pb2.Entity) -> p4runtime_pb2.Update:
    """kind: 'insert', 'modify' or 'delete'."""
    types = {
        "insert": p4runtime_pb2.Update.INSERT,
        "modify": p4runtime_pb2.Update.MODIFY,
        "delete": p4runtime_pb2.Update.DELETE,
    }
    return p4runtime_pb2.Update(type=types[kind], entity=entity)
