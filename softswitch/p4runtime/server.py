"""P4Runtime over gRPC for embedded switches, answering as BMv2's simple_switch_grpc (PI) does.

One server serves one or more switches, dispatching by device_id (the CLI runs one switch per
server, like simple_switch_grpc; an emulation may put several devices behind one port). Errors follow
PI: RPC-level problems (unknown device, not primary, no pipeline) are plain gRPC statuses; a Write
batch with failed updates returns UNKNOWN with a google.rpc.Status in 'grpc-status-details-bin' whose
details are one p4.v1.Error per update, OK for those that succeeded.
"""

from __future__ import annotations

import ipaddress
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from importlib import metadata
from typing import NamedTuple

import grpc
from google.protobuf import any_pb2

from p4proto import code_pb2, p4info_pb2, p4runtime_pb2, p4runtime_pb2_grpc, status_pb2
from softswitch import errors
from softswitch.p4runtime.p4info_index import (
    P4InfoIndex,
    P4InfoMismatchError,
    P4RuntimeStatusError,
    TableSpec,
    decode_bytes,
    encode_int,
    invalid,
    uint128,
)
from softswitch.runtime.switch import SoftSwitch, TableEntry

LOG = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # BMv2 JSONs travel in one message (p4ina.json: 5 MB); beyond: RESOURCE_EXHAUSTED
PORT_BITS = 9  # v1model egress_spec
_GRPC_CODE = {sc.value[0]: sc for sc in grpc.StatusCode}
_UPDATE = p4runtime_pb2.Update
_PIPELINE = p4runtime_pb2.SetForwardingPipelineConfigRequest
_GET = p4runtime_pb2.GetForwardingPipelineConfigRequest


def api_version() -> str:
    """The P4Runtime version of the protos we serve (the installed p4runtime package's)."""
    try:
        return metadata.version("p4runtime")
    except metadata.PackageNotFoundError:  # pragma: no cover - the package is a dependency
        return "1.4.1"


class NonLoopbackAddressError(ValueError):
    """The gRPC address is not on 127.0.0.0/8: p4ina never listens beyond this machine."""


def parse_loopback_address(address: str) -> tuple[str, int]:
    """'127.0.0.1:9559' -> ('127.0.0.1', 9559), refusing any host that is not IPv4 loopback."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise NonLoopbackAddressError(f"gRPC address {address!r} is not HOST:PORT (e.g. 127.0.0.1:9559)")
    if host == "localhost":
        host = "127.0.0.1"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError as ex:
        raise NonLoopbackAddressError(
            f"gRPC address {address!r}: host must be a loopback IPv4 address such as 127.0.0.1"
        ) from ex
    if ip.version != 4 or not ip.is_loopback:
        raise NonLoopbackAddressError(
            f"gRPC address {address!r}: refusing to listen on {host}; p4ina serves P4Runtime on 127.0.0.1 only"
        )
    return host, int(port_text)


# -------------------------------------------------------------------------------------------------
# Per-device state


@dataclass
class _Device:
    switch: SoftSwitch
    lock: threading.RLock = field(default_factory=threading.RLock)
    index: P4InfoIndex | None = None
    config: p4runtime_pb2.ForwardingPipelineConfig | None = None  # the committed one
    saved: tuple[p4runtime_pb2.ForwardingPipelineConfig, P4InfoIndex] | None = None  # VERIFY_AND_SAVE
    groups_with_port_bytes: set[int] = field(default_factory=set)  # answer reads in the form written
    # the controller's opaque per-entry data, returned on read:
    # (table, key, priority) -> (controller_metadata, metadata)
    entry_metadata: dict[tuple[str, tuple, int], tuple[int, bytes]] = field(default_factory=dict)

    def require_pipeline(self) -> P4InfoIndex:
        if self.index is None or not self.switch.program_loaded:
            raise P4RuntimeStatusError(
                code_pb2.FAILED_PRECONDITION, "No forwarding pipeline config set for this device"
            )
        return self.index


# -------------------------------------------------------------------------------------------------
# Arbitration


class _Stream:
    """One StreamChannel: what it claimed and the queue of messages to send it."""

    def __init__(self) -> None:
        self.out: queue.Queue[p4runtime_pb2.StreamMessageResponse | P4RuntimeStatusError | None] = queue.Queue()
        self.device_id: int | None = None
        self.role_key: str = ""
        self.role: p4runtime_pb2.Role | None = None
        self.election_id: int = 0

    def send(self, item: p4runtime_pb2.StreamMessageResponse | P4RuntimeStatusError | None) -> None:
        self.out.put(item)


def _role_key(name: str, role_id: int = 0) -> str:
    return name if name else (f"#{role_id}" if role_id else "")


class Arbiter:
    """Primary election per (device, role): the highest live election id is primary.

    As in PI, an arbitration message without an election id claims id 0, and at most
    MAX_CONNECTIONS streams may be open per device and role. A stream without a role is the default
    role's. Role configs (the spec's out-of-band schemes) are refused by name: every role has full
    pipeline access, and each request must come from the primary of the role it names.
    """

    MAX_CONNECTIONS = 16

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[tuple[int, str], list[_Stream]] = {}

    @staticmethod
    def _primary(group: list[_Stream]) -> _Stream | None:
        return max(group, key=lambda s: s.election_id) if group else None

    def arbitrate(self, stream: _Stream, update: p4runtime_pb2.MasterArbitrationUpdate) -> None:
        key = (update.device_id, _role_key(update.role.name, update.role.id))
        if update.HasField("role") and update.role.HasField("config"):
            # the spec leaves role definition schemes to an out-of-band agreement; this server agrees
            # on none, so a role is always "full pipeline access" and a config asking for less is refused
            raise invalid(
                f"role {update.role.name!r}: role config {update.role.config.type_url!r} is not supported "
                "(this server implements roles with an unset config only, i.e. full pipeline access)"
            )
        eid = uint128(update.election_id)
        with self._lock:
            if stream.device_id is not None and (stream.device_id, stream.role_key) != key:
                raise P4RuntimeStatusError(
                    code_pb2.FAILED_PRECONDITION, "Invalid device id: a stream serves one device and role"
                )
            group = self._groups.setdefault(key, [])
            if any(s is not stream and s.election_id == eid for s in group):
                raise invalid(f"Election id already exists ({eid} is used by another client of this device)")
            if stream not in group and len(group) >= self.MAX_CONNECTIONS:
                raise P4RuntimeStatusError(code_pb2.RESOURCE_EXHAUSTED, "Too many connections")
            before = self._primary(group)
            before_id = before.election_id if before else None
            stream.device_id, stream.role_key = key
            stream.role = p4runtime_pb2.Role()
            stream.role.CopyFrom(update.role)
            stream.election_id = eid
            if stream not in group:
                group.append(stream)
            after = self._primary(group)
            changed = after is not before or (after is not None and after.election_id != before_id)
            self._notify(key, group, group if changed else [stream])
            LOG.debug("arbitration %s: election id %s, primary now %s", key, eid, after and after.election_id)

    def remove(self, stream: _Stream) -> None:
        with self._lock:
            if stream.device_id is None:
                return
            key = (stream.device_id, stream.role_key)
            group = self._groups.get(key, [])
            if stream not in group:
                return
            was_primary = self._primary(group) is stream
            group.remove(stream)
            if was_primary and group:
                self._notify(key, group, group)
            LOG.debug("stream of %s with election id %s closed", key, stream.election_id)

    def _notify(self, key: tuple[int, str], group: list[_Stream], to: list[_Stream]) -> None:
        primary = self._primary(group)
        assert primary is not None  # called only for a non-empty group
        for s in to:
            msg = p4runtime_pb2.StreamMessageResponse()
            arb = msg.arbitration
            arb.device_id = key[0]
            if s.role is not None and (s.role.name or s.role.id):
                arb.role.CopyFrom(s.role)
            eid = primary.election_id
            arb.election_id.high, arb.election_id.low = eid >> 64, eid & ((1 << 64) - 1)
            if primary is s:
                arb.status.code, arb.status.message = code_pb2.OK, "Is primary"
            else:
                arb.status.code, arb.status.message = code_pb2.ALREADY_EXISTS, "Is backup"
            s.send(msg)

    def primaries(self, device_id: int) -> list[_Stream]:
        """The primary stream of every role of a device (each role has full pipeline access)."""
        with self._lock:
            out = []
            for (dev, _), group in self._groups.items():
                primary = self._primary(group) if dev == device_id else None
                if primary is not None:
                    out.append(primary)
            return out

    def is_primary(self, device_id: int, role_key: str, election_id: int | None) -> bool:
        """Whether a request with this election id may change the device (PI's rule).

        With no stream open for the (device, role), PI accepts only requests that carry no election id
        (convenient for grpc_cli-style debugging); once streams are open, a missing election id counts
        as 0 and must equal the primary's.
        """
        with self._lock:
            group = self._groups.get((device_id, role_key), [])
            primary = self._primary(group)
            if primary is None:
                return election_id is None
            return (election_id or 0) == primary.election_id


# -------------------------------------------------------------------------------------------------
# Errors


class _RpcStatus(NamedTuple):
    """grpc.Status for abort_with_status (what the grpcio-status package would build)."""

    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, bytes], ...]


def _code_of(ex: Exception) -> int:
    """google.rpc code for an interpreter error; the interpreter's message goes with it unchanged."""
    table: list[tuple[type[Exception], int]] = [
        (errors.EntryExistsError, code_pb2.ALREADY_EXISTS),
        (errors.EntryNotFoundError, code_pb2.NOT_FOUND),
        (errors.InvalidEntryError, code_pb2.INVALID_ARGUMENT),
        (errors.UnknownObjectError, code_pb2.NOT_FOUND),
        (errors.TableFullError, code_pb2.RESOURCE_EXHAUSTED),
        (errors.ProgramLimitError, code_pb2.RESOURCE_EXHAUSTED),
        (errors.ConstDefaultActionError, code_pb2.PERMISSION_DENIED),
        (errors.NoProgramError, code_pb2.FAILED_PRECONDITION),
        (errors.UnsupportedProgramError, code_pb2.UNIMPLEMENTED),
    ]
    for cls, code in table:
        if isinstance(ex, cls):
            return code
    return code_pb2.UNKNOWN


def _status_error(ex: errors.SoftSwitchError) -> P4RuntimeStatusError:
    return P4RuntimeStatusError(_code_of(ex), str(ex) or type(ex).__name__)


def _abort(context: grpc.ServicerContext, ex: P4RuntimeStatusError) -> None:
    context.abort(_GRPC_CODE.get(ex.code, grpc.StatusCode.UNKNOWN), ex.message)


class _ResponseSink:
    """ReadResponses filled in place, CHUNK entities each (well under gRPC's message limit)."""

    CHUNK = 1000

    def __init__(self) -> None:
        self.responses = [p4runtime_pb2.ReadResponse()]

    def add(self) -> p4runtime_pb2.Entity:
        if len(self.responses[-1].entities) >= self.CHUNK:
            self.responses.append(p4runtime_pb2.ReadResponse())
        return self.responses[-1].entities.add()


# -------------------------------------------------------------------------------------------------
# The servicer


class P4RuntimeServicer(p4runtime_pb2_grpc.P4RuntimeServicer):
    """The P4Runtime service for a fixed set of devices."""

    def __init__(self, switches: Mapping[int, SoftSwitch]) -> None:
        self._devices = {device_id: _Device(sw) for device_id, sw in switches.items()}
        self.arbiter = Arbiter()
        for device_id, sw in switches.items():
            sw.on_packet_in = self._packet_in_sender(device_id)

    def _packet_in_sender(self, device_id: int) -> Callable[[bytes], None]:
        """What a switch calls for a packet to its CPU port (from the port loop, under the switch's lock).

        Takes no device lock (a Write holds it while calling the switch): it reads the committed
        index and queues the PacketIn for every role's primary, as PI sends it to the primary.
        """
        dev = self._devices[device_id]

        def send(data: bytes) -> None:
            index = dev.index
            if index is None:
                return
            msg = index.packet_in_message(data)
            if msg is None:
                LOG.debug("packet-in of %d bytes is shorter than the packet_in header; dropped", len(data))
                return
            for stream in self.arbiter.primaries(device_id):
                stream.send(msg)

        return send

    @property
    def device_ids(self) -> list[int]:
        """The devices served, in order."""
        return sorted(self._devices)

    def _device(self, device_id: int) -> _Device:
        try:
            return self._devices[device_id]
        except KeyError:
            raise P4RuntimeStatusError(code_pb2.NOT_FOUND, f"Invalid device id {device_id}") from None

    def _check_primary(self, device_id: int, role_key: str, election: p4runtime_pb2.Uint128 | None) -> None:
        eid = uint128(election) if election is not None else None
        if not self.arbiter.is_primary(device_id, role_key, eid):
            raise P4RuntimeStatusError(code_pb2.PERMISSION_DENIED, "Not primary")

    # -- Capabilities ----------------------------------------------------------------------------
    def Capabilities(  # noqa: N802 - gRPC method name
        self, request: p4runtime_pb2.CapabilitiesRequest, context: grpc.ServicerContext
    ) -> p4runtime_pb2.CapabilitiesResponse:
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=api_version())

    # -- Pipeline --------------------------------------------------------------------------------
    def SetForwardingPipelineConfig(  # noqa: N802 - gRPC method name
        self, request: p4runtime_pb2.SetForwardingPipelineConfigRequest, context: grpc.ServicerContext
    ) -> p4runtime_pb2.SetForwardingPipelineConfigResponse:
        try:
            self._set_pipeline(request)
        except P4RuntimeStatusError as ex:
            LOG.info("SetForwardingPipelineConfig refused: %s", ex.message)
            _abort(context, ex)
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def _set_pipeline(self, request: p4runtime_pb2.SetForwardingPipelineConfigRequest) -> None:
        dev = self._device(request.device_id)
        election = request.election_id if request.HasField("election_id") else None
        self._check_primary(request.device_id, _role_key(request.role, request.role_id), election)
        action = request.action
        with dev.lock:
            if action in (_PIPELINE.VERIFY, _PIPELINE.VERIFY_AND_SAVE, _PIPELINE.VERIFY_AND_COMMIT):
                # read once: every read of a bytes field copies it out of the message (protobuf's C back end)
                device_config = request.config.p4_device_config
                index = self._verify(dev, request.config, device_config)
                if action == _PIPELINE.VERIFY:
                    return
                # the request's own config, not a copy: a request is this call's alone, and a copy of the
                # device config is megabytes of fresh memory per push (protobuf's C back end copies in full)
                config = request.config
                if action == _PIPELINE.VERIFY_AND_SAVE:
                    dev.saved = (config, index)
                    return
                self._commit(dev, config, index, device_config)
            elif action == _PIPELINE.COMMIT:
                if dev.saved is None:
                    raise P4RuntimeStatusError(
                        code_pb2.FAILED_PRECONDITION, "COMMIT without a config saved by VERIFY_AND_SAVE"
                    )
                config, index = dev.saved
                if request.config.HasField("cookie"):
                    config.cookie.CopyFrom(request.config.cookie)
                self._commit(dev, config, index, config.p4_device_config)
            elif action == _PIPELINE.RECONCILE_AND_COMMIT:
                raise P4RuntimeStatusError(
                    code_pb2.UNIMPLEMENTED, "RECONCILE_AND_COMMIT is not supported; use VERIFY_AND_COMMIT"
                )
            else:
                raise invalid(f"SetForwardingPipelineConfig: unsupported action {action}")

    def _verify(
        self, dev: _Device, config: p4runtime_pb2.ForwardingPipelineConfig, device_config: bytes
    ) -> P4InfoIndex:
        if not config.HasField("p4info"):
            raise invalid("The config has no P4Info")
        if not device_config:
            raise invalid("The config has no p4_device_config (the BMv2 JSON)")
        try:
            index = P4InfoIndex(config.p4info)
        except P4InfoMismatchError as ex:
            raise invalid(str(ex)) from ex
        # the device's own engine: a program the C engine compiles here is in the cache for the commit
        scratch = SoftSwitch(device_id=0, name="verify", engine=dev.switch.requested_engine)
        try:
            scratch.load_program(device_config)
        except errors.ProgramLimitError as ex:
            raise P4RuntimeStatusError(
                code_pb2.RESOURCE_EXHAUSTED, f"Error when loading the device config: {ex}"
            ) from ex
        except (errors.SoftSwitchError, ValueError) as ex:
            raise invalid(f"Error when loading the device config: {ex}") from ex
        except Exception as ex:  # an interpreter bug must not take the server down
            LOG.exception("the interpreter failed on a pushed device config")
            raise P4RuntimeStatusError(code_pb2.INTERNAL, f"Internal error loading the device config: {ex!r}") from ex
        try:
            index.check_against(scratch)
        except P4InfoMismatchError as ex:
            raise invalid(str(ex)) from ex
        return index

    def _commit(
        self, dev: _Device, config: p4runtime_pb2.ForwardingPipelineConfig, index: P4InfoIndex, device_config: bytes
    ) -> None:
        try:
            dev.switch.load_program(device_config)
        except Exception as ex:  # verified on a scratch switch just before: this is an interpreter bug
            # load_program replaces the program only on success: the old one still forwards, so the
            # old config and its index stay the device's (reads and writes keep working)
            LOG.exception("the interpreter failed to load a verified device config; the old pipeline stays")
            raise P4RuntimeStatusError(
                code_pb2.INTERNAL, f"Internal error committing the config (the previous pipeline is kept): {ex!r}"
            ) from ex
        dev.index, dev.config, dev.saved = index, config, None
        dev.groups_with_port_bytes.clear()
        dev.entry_metadata.clear()
        LOG.info(
            "pipeline committed: %d tables, %d actions, %d counters",
            len(index.tables),
            len(index.actions),
            len(index.counters),
        )

    def GetForwardingPipelineConfig(  # noqa: N802 - gRPC method name
        self, request: p4runtime_pb2.GetForwardingPipelineConfigRequest, context: grpc.ServicerContext
    ) -> p4runtime_pb2.GetForwardingPipelineConfigResponse:
        try:
            dev = self._device(request.device_id)
        except P4RuntimeStatusError as ex:
            _abort(context, ex)
        out = p4runtime_pb2.ForwardingPipelineConfig()
        with dev.lock:
            config = dev.config
            if config is None:
                _abort(
                    context,
                    P4RuntimeStatusError(
                        code_pb2.FAILED_PRECONDITION, "No forwarding pipeline config set for this device"
                    ),
                )
            kind = request.response_type
            if config.HasField("cookie"):
                out.cookie.CopyFrom(config.cookie)
            if kind in (_GET.ALL, _GET.P4INFO_AND_COOKIE):
                out.p4info.CopyFrom(config.p4info)
            if kind in (_GET.ALL, _GET.DEVICE_CONFIG_AND_COOKIE):
                out.p4_device_config = config.p4_device_config
        return p4runtime_pb2.GetForwardingPipelineConfigResponse(config=out)

    # -- Write -------------------------------------------------------------------------------------
    def Write(  # noqa: N802 - gRPC method name
        self, request: p4runtime_pb2.WriteRequest, context: grpc.ServicerContext
    ) -> p4runtime_pb2.WriteResponse:
        try:
            dev = self._device(request.device_id)
            election = request.election_id if request.HasField("election_id") else None
            self._check_primary(request.device_id, _role_key(request.role, request.role_id), election)
            if request.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
                raise P4RuntimeStatusError(
                    code_pb2.UNIMPLEMENTED, "Only CONTINUE_ON_ERROR atomicity is supported (as in BMv2)"
                )
            with dev.lock:
                index = dev.require_pipeline()
                results = [self._apply(dev, index, u) for u in request.updates]
        except P4RuntimeStatusError as ex:
            _abort(context, ex)
        if any(r.canonical_code != code_pb2.OK for r in results):
            status = status_pb2.Status(code=code_pb2.UNKNOWN, message="Write failure.")
            for r in results:
                detail = any_pb2.Any()
                detail.Pack(r)
                status.details.append(detail)
            failed = [(i, r.message) for i, r in enumerate(results) if r.canonical_code != code_pb2.OK]
            LOG.info("Write: %d of %d updates failed: %s", len(failed), len(results), failed[:5])
            context.abort_with_status(
                _RpcStatus(
                    grpc.StatusCode.UNKNOWN,
                    "Write failure.",
                    (("grpc-status-details-bin", status.SerializeToString()),),
                )
            )
        return p4runtime_pb2.WriteResponse()

    def _apply(self, dev: _Device, index: P4InfoIndex, update: p4runtime_pb2.Update) -> p4runtime_pb2.Error:
        try:
            if update.type not in (_UPDATE.INSERT, _UPDATE.MODIFY, _UPDATE.DELETE):
                raise invalid("Update type is UNSPECIFIED")
            kind = update.entity.WhichOneof("entity")
            if kind is None:
                raise invalid("The update has no entity")
            if kind == "table_entry":
                self._write_table(dev, index, update.type, update.entity.table_entry)
            elif kind == "packet_replication_engine_entry":
                self._write_pre(dev, update.type, update.entity.packet_replication_engine_entry)
            elif kind == "counter_entry":
                self._write_counter(dev, index, update.type, update.entity.counter_entry)
            elif kind == "register_entry":
                self._write_register(dev, index, update.type, update.entity.register_entry)
            else:
                raise P4RuntimeStatusError(code_pb2.UNIMPLEMENTED, f"Writing {kind} entities is not supported")
        except P4RuntimeStatusError as ex:
            return p4runtime_pb2.Error(canonical_code=ex.code, message=ex.message)
        except errors.SoftSwitchError as ex:
            err = _status_error(ex)
            return p4runtime_pb2.Error(canonical_code=err.code, message=err.message)
        except Exception as ex:  # one bad update must not fail the batch's others
            LOG.exception("internal error applying an update")
            return p4runtime_pb2.Error(canonical_code=code_pb2.INTERNAL, message=f"Internal error: {ex!r}")
        return p4runtime_pb2.Error(canonical_code=code_pb2.OK)

    def _write_table(self, dev: _Device, index: P4InfoIndex, kind: int, e: p4runtime_pb2.TableEntry) -> None:
        if e.table_id == 0:
            raise invalid("table_id 0 (all tables) is only valid in Read")
        table = index.table(e.table_id)
        sw = dev.switch
        for unsupported in ("meter_config", "counter_data", "meter_counter_data", "time_since_last_hit"):
            if e.HasField(unsupported):
                raise P4RuntimeStatusError(
                    code_pb2.UNIMPLEMENTED, f"table {table.name!r}: {unsupported} (direct resources) is not supported"
                )
        if e.is_default_action:
            if kind != _UPDATE.MODIFY:
                raise invalid(f"table {table.name!r}: the default entry can only be modified")
            if len(e.match) or e.priority:
                raise invalid(f"table {table.name!r}: a default entry has no match fields and no priority")
            if table.const_default_action_id:
                raise P4RuntimeStatusError(
                    code_pb2.PERMISSION_DENIED, f"table {table.name!r}: the default action is const"
                )
            if e.HasField("action"):
                sw.table_set_default(table.name, index.decode_action(table, e.action, default=True))
            else:
                sw.table_reset_default(table.name)
            return
        if table.is_const:
            raise P4RuntimeStatusError(
                code_pb2.PERMISSION_DENIED, f"table {table.name!r} is const (entries from the program)"
            )
        if e.idle_timeout_ns < 0:
            raise invalid(f"table {table.name!r}: idle_timeout_ns must not be negative")
        if e.idle_timeout_ns > 0 and not table.idle_timeout:
            raise invalid(f"table {table.name!r}: idle_timeout_ns must be 0, the table does not support idle timeout")
        key = index.decode_match(table, e.match)
        if table.needs_priority and e.priority <= 0:
            raise invalid(f"table {table.name!r}: entries need a priority > 0 (ternary/range/optional keys)")
        if not table.needs_priority and e.priority != 0:
            raise invalid(f"table {table.name!r}: priority must be 0 (the table has no ternary/range/optional keys)")
        slot = (table.name, key, e.priority)
        if kind == _UPDATE.DELETE:
            sw.table_delete(table.name, key, e.priority)
            dev.entry_metadata.pop(slot, None)
            return
        entry = TableEntry(key, index.decode_action(table, e.action, default=False), e.priority)
        if kind == _UPDATE.INSERT:
            sw.table_insert(table.name, entry)
        else:
            sw.table_modify(table.name, entry)
        if e.controller_metadata or e.metadata:
            dev.entry_metadata[slot] = (e.controller_metadata, e.metadata)
        else:
            dev.entry_metadata.pop(slot, None)

    def _write_pre(self, dev: _Device, kind: int, pre: p4runtime_pb2.PacketReplicationEngineEntry) -> None:
        which = pre.WhichOneof("type")
        if which != "multicast_group_entry":
            raise P4RuntimeStatusError(code_pb2.UNIMPLEMENTED, f"{which} is not supported (multicast groups only)")
        mg = pre.multicast_group_entry
        gid = mg.multicast_group_id
        if gid == 0:
            raise invalid("multicast_group_id 0 is not a valid group")
        sw = dev.switch
        exists = gid in sw.mc_groups()
        if kind == _UPDATE.DELETE:
            if not exists:
                raise P4RuntimeStatusError(code_pb2.NOT_FOUND, f"multicast group {gid} does not exist")
            sw.mc_group_delete(gid)
            dev.groups_with_port_bytes.discard(gid)
            return
        if kind == _UPDATE.INSERT and exists:
            raise P4RuntimeStatusError(code_pb2.ALREADY_EXISTS, f"multicast group {gid} already exists")
        if kind == _UPDATE.MODIFY and not exists:
            raise P4RuntimeStatusError(code_pb2.NOT_FOUND, f"multicast group {gid} does not exist")
        replicas: list[tuple[int, int]] = []
        uses_bytes = False
        for r in mg.replicas:
            if r.WhichOneof("port_kind") == "port":
                port = decode_bytes(r.port, PORT_BITS, f"multicast group {gid} replica port")
                uses_bytes = True
            else:
                port = r.egress_port
                if port >> PORT_BITS:
                    raise invalid(f"multicast group {gid}: replica port {port} does not fit in {PORT_BITS} bits")
            if (port, r.instance) in replicas:
                raise invalid(f"multicast group {gid}: replica (port {port}, instance {r.instance}) given twice")
            replicas.append((port, r.instance))
        sw.mc_group_set(gid, replicas)
        if uses_bytes:
            dev.groups_with_port_bytes.add(gid)
        else:
            dev.groups_with_port_bytes.discard(gid)

    @staticmethod
    def _indices(size: int, has_index: bool, index: int, what: str) -> range:
        if not has_index:
            return range(size)
        if not 0 <= index < size:
            raise P4RuntimeStatusError(code_pb2.OUT_OF_RANGE, f"{what}: index {index} is outside 0..{size - 1}")
        return range(index, index + 1)

    def _write_counter(self, dev: _Device, index: P4InfoIndex, kind: int, c: p4runtime_pb2.CounterEntry) -> None:
        if kind != _UPDATE.MODIFY:
            raise invalid("counter entries can only be modified")
        if c.counter_id == 0:
            raise invalid("counter_id 0 (all counters) is only valid in Read")
        spec = index.counter(c.counter_id)
        for i in self._indices(spec.size, c.HasField("index"), c.index.index, f"counter {spec.name!r}"):
            dev.switch.counter_write(spec.name, i, c.data.packet_count, c.data.byte_count)

    def _write_register(self, dev: _Device, index: P4InfoIndex, kind: int, r: p4runtime_pb2.RegisterEntry) -> None:
        if kind != _UPDATE.MODIFY:
            raise invalid("register entries can only be modified")
        if r.register_id == 0:
            raise invalid("register_id 0 (all registers) is only valid in Read")
        spec = index.register(r.register_id)
        if r.data.WhichOneof("data") != "bitstring":
            raise invalid(f"register {spec.name!r}: data must be a bitstring")
        value = decode_bytes(r.data.bitstring, spec.bitwidth, f"register {spec.name!r}")
        for i in self._indices(spec.size, r.HasField("index"), r.index.index, f"register {spec.name!r}"):
            dev.switch.register_write(spec.name, i, value)

    # -- Read --------------------------------------------------------------------------------------
    def Read(  # noqa: N802 - gRPC method name
        self, request: p4runtime_pb2.ReadRequest, context: grpc.ServicerContext
    ) -> Iterator[p4runtime_pb2.ReadResponse]:
        sink = _ResponseSink()
        try:
            dev = self._device(request.device_id)
            with dev.lock:
                index = dev.require_pipeline()
                for wanted in request.entities:
                    self._read(dev, index, wanted, sink)
        except P4RuntimeStatusError as ex:
            _abort(context, ex)
        except errors.SoftSwitchError as ex:
            _abort(context, _status_error(ex))
        yield from sink.responses

    def _read(self, dev: _Device, index: P4InfoIndex, wanted: p4runtime_pb2.Entity, sink: _ResponseSink) -> None:
        kind = wanted.WhichOneof("entity")
        if kind == "table_entry":
            self._read_tables(dev, index, wanted.table_entry, sink)
        elif kind == "counter_entry":
            self._read_counters(dev, index, wanted.counter_entry, sink)
        elif kind == "packet_replication_engine_entry":
            self._read_pre(dev, wanted.packet_replication_engine_entry, sink)
        elif kind == "register_entry":
            self._read_registers(dev, index, wanted.register_entry, sink)
        else:
            raise P4RuntimeStatusError(code_pb2.UNIMPLEMENTED, f"Reading {kind} entities is not supported")

    def _read_tables(self, dev: _Device, index: P4InfoIndex, q: p4runtime_pb2.TableEntry, sink: _ResponseSink) -> None:
        sw = dev.switch
        if q.table_id == 0:
            if len(q.match) or q.is_default_action:
                raise invalid("a read of all tables (table_id 0) takes no match fields and no is_default_action")
            tables: list[TableSpec] = list(index.tables.values())
        else:
            tables = [index.table(q.table_id)]
        if q.is_default_action:
            table = tables[0]
            out = sink.add().table_entry
            out.table_id, out.is_default_action = table.id, True
            index.encode_action(sw.table_get_default(table.name), out.action)
            return
        key = index.decode_match(tables[0], q.match) if len(q.match) else None
        for table in tables:
            for entry in sw.table_entries(table.name):
                if key is not None and entry.key != key:
                    continue
                if q.priority and entry.priority != q.priority:
                    continue
                out = sink.add().table_entry
                index.encode_entry(table, entry, out)
                meta = dev.entry_metadata.get((table.name, entry.key, entry.priority))
                if meta is not None:
                    out.controller_metadata, out.metadata = meta

    def _read_counters(
        self, dev: _Device, index: P4InfoIndex, q: p4runtime_pb2.CounterEntry, sink: _ResponseSink
    ) -> None:
        specs = list(index.counters.values()) if q.counter_id == 0 else [index.counter(q.counter_id)]
        for spec in specs:
            packets_too = spec.unit in (p4info_pb2.CounterSpec.PACKETS, p4info_pb2.CounterSpec.BOTH)
            bytes_too = spec.unit in (p4info_pb2.CounterSpec.BYTES, p4info_pb2.CounterSpec.BOTH)
            indices = self._indices(spec.size, q.HasField("index"), q.index.index, f"counter {spec.name!r}")
            # one read of the whole array when it is all wanted: every cell from the same instant
            cells = dev.switch.counter_read_all(spec.name) if len(indices) > 1 else None
            for i in indices:
                packets, bytes_ = cells[i] if cells is not None else dev.switch.counter_read(spec.name, i)
                c = sink.add().counter_entry
                c.counter_id = spec.id
                c.index.index = i
                if packets_too:
                    c.data.packet_count = packets
                if bytes_too:
                    c.data.byte_count = bytes_

    def _read_registers(
        self, dev: _Device, index: P4InfoIndex, q: p4runtime_pb2.RegisterEntry, sink: _ResponseSink
    ) -> None:
        specs = list(index.registers.values()) if q.register_id == 0 else [index.register(q.register_id)]
        for spec in specs:
            indices = self._indices(spec.size, q.HasField("index"), q.index.index, f"register {spec.name!r}")
            cells = dev.switch.register_read_all(spec.name) if len(indices) > 1 else None
            for i in indices:
                r = sink.add().register_entry
                r.register_id = spec.id
                r.index.index = i
                r.data.bitstring = encode_int(cells[i] if cells is not None else dev.switch.register_read(spec.name, i))

    def _read_pre(self, dev: _Device, q: p4runtime_pb2.PacketReplicationEngineEntry, sink: _ResponseSink) -> None:
        which = q.WhichOneof("type")
        if which != "multicast_group_entry":
            raise P4RuntimeStatusError(
                code_pb2.UNIMPLEMENTED, f"Reading {which} is not supported (multicast groups only)"
            )
        wanted = q.multicast_group_entry.multicast_group_id
        groups = dev.switch.mc_groups()
        if wanted and wanted not in groups:
            raise P4RuntimeStatusError(code_pb2.NOT_FOUND, f"multicast group {wanted} does not exist")
        for gid in sorted(groups):
            if wanted and gid != wanted:
                continue
            mg = sink.add().packet_replication_engine_entry.multicast_group_entry
            mg.multicast_group_id = gid
            for port, rid in groups[gid]:
                if gid in dev.groups_with_port_bytes:
                    mg.replicas.add(port=encode_int(port), instance=rid)
                else:
                    mg.replicas.add(egress_port=port, instance=rid)

    # -- StreamChannel -----------------------------------------------------------------------------
    def StreamChannel(  # noqa: N802 - gRPC method name
        self, request_iterator: Iterator[p4runtime_pb2.StreamMessageRequest], context: grpc.ServicerContext
    ) -> Iterator[p4runtime_pb2.StreamMessageResponse]:
        stream = _Stream()
        done = threading.Event()

        def finish() -> None:
            if not done.is_set():
                done.set()
                self.arbiter.remove(stream)
                stream.send(None)

        context.add_callback(finish)

        def read_requests() -> None:
            try:
                for req in request_iterator:
                    if not self._stream_request(stream, req):
                        return
            except grpc.RpcError:
                pass  # the client went away
            except Exception:  # pragma: no cover - keep the stream's other half alive to end cleanly
                LOG.exception("StreamChannel reader failed")
            finally:
                finish()

        threading.Thread(target=read_requests, name="p4rt-stream", daemon=True).start()
        while True:
            item = stream.out.get()
            if item is None:
                return
            if isinstance(item, P4RuntimeStatusError):
                finish()
                _abort(context, item)
            yield item

    def _stream_request(self, stream: _Stream, req: p4runtime_pb2.StreamMessageRequest) -> bool:
        """Handle one message of a stream; False ends the stream (the error is queued)."""
        kind = req.WhichOneof("update")
        if kind == "arbitration":
            try:
                self._device(req.arbitration.device_id)
                self.arbiter.arbitrate(stream, req.arbitration)
            except P4RuntimeStatusError as ex:
                LOG.info("StreamChannel closed: %s", ex.message)
                stream.send(ex)
                return False
            return True
        if stream.device_id is None:
            LOG.debug("stream message %s before arbitration ignored (as PI does)", kind)
            return True
        if kind == "packet":
            if not self.arbiter.is_primary(stream.device_id, stream.role_key, stream.election_id):
                LOG.debug("packet-out from a backup ignored (as PI does)")
                return True
            dev = self._devices[stream.device_id]
            if dev.switch.cpu_port is None:
                stream.send(_stream_error(req, code_pb2.UNIMPLEMENTED, "packet-out needs a CPU port (--cpu-port)"))
                return True
            index = dev.index
            if index is None:
                stream.send(_stream_error(req, code_pb2.FAILED_PRECONDITION, "No forwarding pipeline config set"))
                return True
            try:
                data = index.packet_out_bytes(req.packet)
            except P4RuntimeStatusError as ex:
                stream.send(_stream_error(req, ex.code, ex.message))
                return True
            dev.switch.packet_out(data)
            return True
        if kind == "digest_ack":
            return True
        stream.send(_stream_error(req, code_pb2.UNIMPLEMENTED, f"stream message {kind} is not supported"))
        return True


def _stream_error(
    req: p4runtime_pb2.StreamMessageRequest, code: int, message: str
) -> p4runtime_pb2.StreamMessageResponse:
    msg = p4runtime_pb2.StreamMessageResponse()
    msg.error.canonical_code = code
    msg.error.message = message
    if req.WhichOneof("update") == "packet":
        msg.error.packet_out.packet_out.CopyFrom(req.packet)
    return msg


# -------------------------------------------------------------------------------------------------
# The server


class P4RuntimeServer:
    """A gRPC server on 127.0.0.1 serving the given switches (device_id -> switch)."""

    def __init__(
        self,
        switches: Mapping[int, SoftSwitch],
        address: str = "127.0.0.1:0",
        max_workers: int | None = None,
        extra_handlers: Sequence[grpc.GenericRpcHandler] = (),
    ) -> None:
        """extra_handlers: more services on the same port (the port status: softswitch.p4runtime.gnmi, .portstatus)."""
        self.host, self._requested_port = parse_loopback_address(address)
        self._extra_handlers = tuple(extra_handlers)
        self.servicer = P4RuntimeServicer(switches)
        # every open StreamChannel holds a worker for its lifetime: leave room for the unary RPCs
        self._max_workers = max_workers or 16 + 4 * len(switches)
        self._server: grpc.Server | None = None
        self.port: int = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> int:
        """Listen and serve; returns the bound port."""
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="p4rt"),
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ],
        )
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(self.servicer, server)
        if self._extra_handlers:
            server.add_generic_rpc_handlers(self._extra_handlers)
        wanted = f"{self.host}:{self._requested_port}"
        try:
            port = server.add_insecure_port(wanted)
        except RuntimeError as ex:
            raise OSError(f"cannot listen on {wanted}: {ex}") from ex
        if port == 0:
            raise OSError(f"cannot listen on {wanted} (address in use?)")
        server.start()
        self._server, self.port = server, port
        LOG.info("P4Runtime server on %s for device(s) %s", self.address, self.servicer.device_ids)
        return port

    def stop(self, grace: float | None = 0.5) -> None:
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None

    def __enter__(self) -> P4RuntimeServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
