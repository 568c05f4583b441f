"""The embedded switch's P4Runtime server, driven by a real gRPC client (the p4runtime stubs)."""

from __future__ import annotations

import contextlib
import queue
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest

from p4proto import code_pb2, p4runtime_pb2, p4runtime_pb2_grpc, status_pb2
from softswitch.p4runtime.p4info_index import P4RuntimeStatusError, decode_bytes, encode_int
from softswitch.p4runtime.server import (
    NonLoopbackAddressError,
    P4RuntimeServer,
    parse_loopback_address,
)
from softswitch.runtime.switch import SoftSwitch
from tests.softswitch import fake_switch

ACL, DMAC, FWD = fake_switch.ACL, fake_switch.DMAC, fake_switch.FWD
DROP, NO_ACTION, SET_MCAST, SET_PORT, SET_SRC = (
    fake_switch.DROP,
    fake_switch.NO_ACTION,
    fake_switch.SET_MCAST,
    fake_switch.SET_PORT,
    fake_switch.SET_SRC,
)
PKTS, REG = fake_switch.PKTS, fake_switch.REG

DEVICE = 3
U = p4runtime_pb2.Update
GetConfig = p4runtime_pb2.GetForwardingPipelineConfigRequest
SetConfig = p4runtime_pb2.SetForwardingPipelineConfigRequest


# ---------------------------------------------------------------------------------------------
# A small client


class Client:
    """One P4Runtime client: a channel, a stub, and (after arbitrate) an open StreamChannel."""

    def __init__(self, port: int, election_id: int | None = 1, device_id: int = DEVICE) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = p4runtime_pb2_grpc.P4RuntimeStub(self.channel)
        self.device_id = device_id
        self.election_id = election_id
        self._requests: queue.Queue[p4runtime_pb2.StreamMessageRequest | None] = queue.Queue()
        self.responses: queue.Queue[p4runtime_pb2.StreamMessageResponse | grpc.RpcError] = queue.Queue()
        self._stream = None

    def _iter(self) -> Iterator[p4runtime_pb2.StreamMessageRequest]:
        while True:
            item = self._requests.get()
            if item is None:
                return
            yield item

    def arbitrate(self, election_id: int | None = None) -> p4runtime_pb2.MasterArbitrationUpdate:
        self.send_arbitration(election_id)
        return self.next_arbitration()

    def send_arbitration(self, election_id: int | None = None) -> None:
        if election_id is not None:
            self.election_id = election_id
        if self._stream is None:
            self._stream = self.stub.StreamChannel(self._iter())

            def pump() -> None:
                try:
                    for msg in self._stream:
                        self.responses.put(msg)
                except grpc.RpcError as ex:
                    self.responses.put(ex)

            threading.Thread(target=pump, daemon=True).start()
        req = p4runtime_pb2.StreamMessageRequest()
        req.arbitration.device_id = self.device_id
        if self.election_id is not None:
            req.arbitration.election_id.low = self.election_id
        self._requests.put(req)

    def send(self, req: p4runtime_pb2.StreamMessageRequest) -> None:
        self._requests.put(req)

    def next_message(self) -> p4runtime_pb2.StreamMessageResponse | grpc.RpcError:
        return self.responses.get(timeout=10)

    def next_arbitration(self) -> p4runtime_pb2.MasterArbitrationUpdate:
        msg = self.next_message()
        assert not isinstance(msg, grpc.RpcError), msg
        assert msg.WhichOneof("update") == "arbitration", msg
        return msg.arbitration

    def close(self) -> None:
        self._requests.put(None)
        if self._stream is not None:
            self._stream.cancel()
        self.channel.close()

    # -- RPCs
    def set_pipeline(
        self,
        json_text: str | bytes,
        p4info=None,
        action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        cookie: int | None = None,
    ) -> None:
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(device_id=self.device_id, action=action)
        if self.election_id is not None:
            req.election_id.low = self.election_id
        req.config.p4info.CopyFrom(p4info if p4info is not None else fake_switch.tiny_p4info())
        req.config.p4_device_config = json_text.encode() if isinstance(json_text, str) else json_text
        if cookie is not None:
            req.config.cookie.cookie = cookie
        self.stub.SetForwardingPipelineConfig(req, timeout=30)

    def write(self, *updates: p4runtime_pb2.Update) -> None:
        req = p4runtime_pb2.WriteRequest(device_id=self.device_id, updates=list(updates))
        if self.election_id is not None:
            req.election_id.low = self.election_id
        self.stub.Write(req, timeout=10)

    def read(self, *entities: p4runtime_pb2.Entity) -> list[p4runtime_pb2.Entity]:
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id, entities=list(entities))
        return [e for resp in self.stub.Read(req, timeout=10) for e in resp.entities]


def update(kind: int, **entity) -> p4runtime_pb2.Update:
    return p4runtime_pb2.Update(type=kind, entity=p4runtime_pb2.Entity(**entity))


def fwd_entry(ingress: int | bytes, port: int | bytes) -> p4runtime_pb2.TableEntry:
    e = p4runtime_pb2.TableEntry(table_id=FWD)
    e.match.add(field_id=1).exact.value = ingress if isinstance(ingress, bytes) else encode_int(ingress)
    e.action.action.action_id = SET_PORT
    e.action.action.params.add(param_id=1, value=port if isinstance(port, bytes) else encode_int(port))
    return e


def write_errors(ex: grpc.RpcError) -> list[p4runtime_pb2.Error]:
    """The per-update errors of a failed Write, from the trailing metadata as PI sends them."""
    assert ex.code() == grpc.StatusCode.UNKNOWN, ex
    raw = dict(ex.trailing_metadata())["grpc-status-details-bin"]
    status = status_pb2.Status.FromString(raw)
    out = []
    for detail in status.details:
        err = p4runtime_pb2.Error()
        assert detail.Unpack(err)
        out.append(err)
    return out


# ---------------------------------------------------------------------------------------------
# Fixtures


@dataclass
class Backend:
    """A P4Runtime server under test: the embedded switch, or BMv2 (same test body, for parity)."""

    kind: str
    port: int
    switch: SoftSwitch | None  # the interpreter behind the embedded server, for white-box checks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _bmv2() -> Iterator[Backend]:
    port = _free_port()
    proc = subprocess.Popen(  # (this BMv2 build has no Thrift, hence no --thrift-port)
        [
            "simple_switch_grpc",
            "--device-id",
            str(DEVICE),
            "--log-level",
            "off",
            "--no-p4",
            "--",
            "--grpc-server-addr",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # ready once the gRPC port accepts connections
            assert proc.poll() is None, f"simple_switch_grpc exited: {proc.stderr.read()}"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "simple_switch_grpc did not open its gRPC port"
            time.sleep(0.05)
        yield Backend("bmv2", port, None)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def _embedded() -> Iterator[Backend]:
    switch = SoftSwitch(device_id=DEVICE, name="s1")
    with P4RuntimeServer({DEVICE: switch}, "127.0.0.1:0") as srv:
        yield Backend("embedded", srv.port, switch)


@pytest.fixture(params=["embedded", pytest.param("bmv2", marks=pytest.mark.bmv2)])
def server(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Tests taking this fixture run against both back ends: what they assert is BMv2's behaviour too."""
    with _embedded() if request.param == "embedded" else _bmv2() as backend:
        yield backend


@pytest.fixture
def embedded() -> Iterator[Backend]:
    """For behaviour that is ours alone (extensions, white-box checks, clearer errors than BMv2's)."""
    with _embedded() as backend:
        yield backend


@contextlib.contextmanager
def _primary(backend: Backend) -> Iterator[Client]:
    """A client that won arbitration (election id 10), closed afterwards."""
    c = Client(backend.port, election_id=10)
    try:
        assert c.arbitrate().status.code == code_pb2.OK
        yield c
    finally:
        c.close()


@pytest.fixture
def client(server: Backend) -> Iterator[Client]:
    with _primary(server) as c:
        yield c


@pytest.fixture
def loaded(client: Client) -> Client:
    client.set_pipeline(fake_switch.TINY_JSON)
    return client


@pytest.fixture
def embedded_client(embedded: Backend) -> Iterator[Client]:
    with _primary(embedded) as c:
        yield c


@pytest.fixture
def embedded_loaded(embedded_client: Client) -> Client:
    embedded_client.set_pipeline(fake_switch.TINY_JSON)
    return embedded_client


# ---------------------------------------------------------------------------------------------
# Pure helpers


def test_byte_strings_accept_canonical_and_full_width_and_refuse_too_wide() -> None:
    assert decode_bytes(b"\x01", 9, "x") == 1
    assert decode_bytes(b"\x00\x01", 9, "x") == 1
    assert decode_bytes(b"\x01\xff", 9, "x") == 511
    with pytest.raises(P4RuntimeStatusError) as info:
        decode_bytes(b"\x02\x00", 9, "port")
    assert info.value.code == code_pb2.INVALID_ARGUMENT
    assert encode_int(0) == b"\x00" and encode_int(511) == b"\x01\xff"


def test_only_loopback_addresses_are_accepted() -> None:
    assert parse_loopback_address("127.0.0.1:9559") == ("127.0.0.1", 9559)
    assert parse_loopback_address("localhost:0") == ("127.0.0.1", 0)
    for bad in ("0.0.0.0:9559", "10.0.0.1:1", "[::]:9559", "9559", "127.0.0.1:x"):
        with pytest.raises(NonLoopbackAddressError):
            parse_loopback_address(bad)


# ---------------------------------------------------------------------------------------------
# Pipeline


def test_capabilities_reports_the_api_version(server: Backend) -> None:
    c = Client(server.port)
    try:
        version = c.stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=10).p4runtime_api_version
        assert version.startswith("1.")
    finally:
        c.close()


def test_pipeline_push_and_get(server: Backend, client: Client) -> None:
    with pytest.raises(grpc.RpcError) as info:  # as PI: no config yet is an error, not an empty config
        client.stub.GetForwardingPipelineConfig(GetConfig(device_id=DEVICE, response_type=GetConfig.COOKIE_ONLY))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION

    client.set_pipeline(fake_switch.TINY_JSON, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY)
    if server.switch is not None:
        assert not server.switch.program_loaded  # VERIFY does not commit

    client.set_pipeline(fake_switch.TINY_JSON, cookie=77)
    if server.switch is not None:
        assert server.switch.program_json == fake_switch.TINY_JSON.encode()
    everything = client.stub.GetForwardingPipelineConfig(
        GetConfig(device_id=DEVICE, response_type=GetConfig.ALL)
    ).config
    assert everything.p4info == fake_switch.tiny_p4info()
    assert everything.p4_device_config == fake_switch.TINY_JSON.encode()
    assert everything.cookie.cookie == 77
    cookie = client.stub.GetForwardingPipelineConfig(
        GetConfig(device_id=DEVICE, response_type=GetConfig.COOKIE_ONLY)
    ).config
    assert cookie.cookie.cookie == 77 and not cookie.HasField("p4info") and not cookie.p4_device_config
    p4info = client.stub.GetForwardingPipelineConfig(
        GetConfig(device_id=DEVICE, response_type=GetConfig.P4INFO_AND_COOKIE)
    ).config
    assert p4info.HasField("p4info") and not p4info.p4_device_config


def test_save_then_commit(server: Backend, client: Client) -> None:
    client.set_pipeline(fake_switch.TINY_JSON, action=SetConfig.VERIFY_AND_SAVE)
    if server.switch is not None:
        assert not server.switch.program_loaded
    req = SetConfig(device_id=DEVICE, action=SetConfig.COMMIT)
    req.election_id.low = client.election_id
    client.stub.SetForwardingPipelineConfig(req)
    if server.switch is not None:
        assert server.switch.program_loaded


def test_a_config_the_interpreter_rejects_is_refused_with_its_message(embedded_client: Client) -> None:
    """Ours alone: BMv2 1.15.5 answers UNKNOWN 'Unexpected error in RPC handling' here."""
    client = embedded_client
    with pytest.raises(grpc.RpcError) as info:
        client.set_pipeline(b"{ this is not json")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "device config" in info.value.details()


def test_a_p4info_that_disagrees_with_the_json_is_refused(embedded_client: Client) -> None:
    """Ours alone: BMv2 does not compare the P4Info with the JSON."""
    client = embedded_client
    p4info = fake_switch.tiny_p4info()
    p4info.tables[0].preamble.name = "MyIngress.nonexistent"
    with pytest.raises(grpc.RpcError) as info:
        client.set_pipeline(fake_switch.TINY_JSON, p4info=p4info)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "MyIngress.nonexistent" in info.value.details()


def test_write_and_read_before_a_pipeline_fail_with_failed_precondition(client: Client) -> None:
    with pytest.raises(grpc.RpcError) as info:
        client.write(update(U.INSERT, table_entry=fwd_entry(1, 2)))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as info:
        client.read(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry()))
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_unknown_device_is_not_found(embedded_loaded: Client) -> None:
    """Ours alone: PI creates any device on demand and then reports it has no pipeline."""
    loaded = embedded_loaded
    req = p4runtime_pb2.ReadRequest(
        device_id=DEVICE + 1, entities=[p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry())]
    )
    with pytest.raises(grpc.RpcError) as info:
        list(loaded.stub.Read(req))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


# ---------------------------------------------------------------------------------------------
# Tables


def test_table_entries_round_trip_in_canonical_form(server: Backend, loaded: Client) -> None:
    with_metadata = fwd_entry(2, 1)
    with_metadata.metadata = b"installed-by-test"
    loaded.write(
        update(U.INSERT, table_entry=fwd_entry(b"\x00\x01", b"\x00\x02")),  # full width in
        update(U.INSERT, table_entry=with_metadata),
    )
    lpm = p4runtime_pb2.TableEntry(table_id=DMAC)
    lpm.match.add(field_id=1).lpm.CopyFrom(
        p4runtime_pb2.FieldMatch.LPM(value=bytes.fromhex("0a0000000000"), prefix_len=8)
    )
    lpm.action.action.action_id = SET_SRC
    lpm.action.action.params.add(param_id=1, value=bytes.fromhex("020000000001"))
    acl = p4runtime_pb2.TableEntry(table_id=ACL, priority=10)
    acl.match.add(field_id=1).ternary.CopyFrom(p4runtime_pb2.FieldMatch.Ternary(value=b"\x08\x00", mask=b"\xff\xff"))
    acl.action.action.action_id = DROP
    loaded.write(update(U.INSERT, table_entry=lpm), update(U.INSERT, table_entry=acl))

    fwd = loaded.read(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=FWD)))
    got = sorted((e.table_entry.match[0].exact.value, e.table_entry.action.action.params[0].value) for e in fwd)
    assert got == [(b"\x01", b"\x02"), (b"\x02", b"\x01")]  # canonical (shortest) on read
    everything = loaded.read(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry()))
    assert sorted(e.table_entry.table_id for e in everything) == sorted([FWD, FWD, DMAC, ACL])
    [acl_read] = [e.table_entry for e in everything if e.table_entry.table_id == ACL]
    assert acl_read.priority == 10
    assert [m.field_id for m in acl_read.match] == [1]  # the don't-care range is omitted
    assert acl_read.match[0].ternary.value == b"\x08\x00"

    if server.switch is not None:  # the interpreter got the entries, in its own terms
        [dmac_entry] = server.switch.table_entries("MyIngress.dmac")
        assert dmac_entry.key[0].prefix_len == 8 and dmac_entry.key[0].value == 0x0A0000000000
        assert dmac_entry.action.name == "MyIngress.set_src" and dmac_entry.action.params == (0x020000000001,)

    # read one entry by its key; modify; delete
    one = loaded.read(p4runtime_pb2.Entity(table_entry=fwd_entry(2, 0)))
    assert len(one) == 1 and one[0].table_entry.action.action.params[0].value == b"\x01"
    assert one[0].table_entry.metadata == b"installed-by-test"
    loaded.write(update(U.MODIFY, table_entry=fwd_entry(2, 5)))
    assert (
        loaded.read(p4runtime_pb2.Entity(table_entry=fwd_entry(2, 0)))[0].table_entry.action.action.params[0].value
        == b"\x05"
    )
    loaded.write(update(U.DELETE, table_entry=fwd_entry(2, 0)))
    assert len(loaded.read(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=FWD)))) == 1


def test_default_action_modify_and_read(server: Backend, loaded: Client) -> None:
    entry = p4runtime_pb2.TableEntry(table_id=FWD, is_default_action=True)
    entry.action.action.action_id = DROP
    loaded.write(update(U.MODIFY, table_entry=entry))
    if server.switch is not None:
        assert server.switch.table_get_default("MyIngress.fwd").name == "MyIngress.drop"
    [read] = loaded.read(
        p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=FWD, is_default_action=True))
    )
    assert read.table_entry.is_default_action and read.table_entry.action.action.action_id == DROP
    # no default entries in a wildcard read
    assert loaded.read(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=FWD))) == []
    # a MODIFY without an action restores the program's default
    loaded.write(update(U.MODIFY, table_entry=p4runtime_pb2.TableEntry(table_id=FWD, is_default_action=True)))
    [read] = loaded.read(
        p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=FWD, is_default_action=True))
    )
    assert read.table_entry.action.action.action_id == SET_PORT
    assert read.table_entry.action.action.params[0].value == b"\x01"
    # INSERT of a default entry is invalid
    with pytest.raises(grpc.RpcError) as info:
        loaded.write(update(U.INSERT, table_entry=entry))
    assert [e.canonical_code for e in write_errors(info.value)] == [code_pb2.INVALID_ARGUMENT]


def test_batch_errors_are_reported_per_update(loaded: Client) -> None:
    loaded.write(update(U.INSERT, table_entry=fwd_entry(1, 2)))
    wrong_action = fwd_entry(4, 1)
    wrong_action.action.action.action_id = SET_SRC  # not an action of fwd
    wrong_action.action.action.params[0].value = b"\x01"
    no_priority = p4runtime_pb2.TableEntry(table_id=ACL)
    no_priority.action.action.action_id = DROP
    bad_lpm = p4runtime_pb2.TableEntry(table_id=DMAC)
    bad_lpm.match.add(field_id=1).lpm.CopyFrom(
        p4runtime_pb2.FieldMatch.LPM(value=b"\x01", prefix_len=8)
    )  # bits beyond /8
    bad_lpm.action.action.action_id = NO_ACTION
    missing_param = fwd_entry(6, 1)
    del missing_param.action.action.params[:]
    with pytest.raises(grpc.RpcError) as info:
        loaded.write(
            update(U.INSERT, table_entry=fwd_entry(3, 1)),  # fine
            update(U.INSERT, table_entry=fwd_entry(1, 2)),  # duplicate
            update(U.MODIFY, table_entry=fwd_entry(9, 2)),  # missing
            update(U.DELETE, table_entry=fwd_entry(8, 0)),  # missing
            update(U.INSERT, table_entry=fwd_entry(b"\x02\x00", 1)),  # 512 does not fit 9 bits
            update(U.INSERT, table_entry=fwd_entry(5, b"\x7f\xff")),  # param too wide
            update(U.INSERT, table_entry=wrong_action),
            update(U.INSERT, table_entry=no_priority),
            update(U.INSERT, table_entry=bad_lpm),
            update(U.INSERT, table_entry=missing_param),
            update(U.INSERT, table_entry=p4runtime_pb2.TableEntry(table_id=0x02FFFFFF)),
        )
    codes = [e.canonical_code for e in write_errors(info.value)]
    assert codes == [
        code_pb2.OK,
        code_pb2.ALREADY_EXISTS,
        code_pb2.NOT_FOUND,
        code_pb2.NOT_FOUND,
        code_pb2.INVALID_ARGUMENT,
        code_pb2.INVALID_ARGUMENT,
        code_pb2.INVALID_ARGUMENT,
        code_pb2.INVALID_ARGUMENT,
        code_pb2.INVALID_ARGUMENT,
        code_pb2.INVALID_ARGUMENT,
        code_pb2.INVALID_ARGUMENT,  # unknown table id (PI's code)
    ]
    # the good update of the failed batch was applied (CONTINUE_ON_ERROR)
    assert len(loaded.read(p4runtime_pb2.Entity(table_entry=fwd_entry(3, 0)))) == 1


# ---------------------------------------------------------------------------------------------
# Multicast, counters, registers


def mcast(
    gid: int, replicas: list[tuple[int, int]], as_bytes: bool = False
) -> p4runtime_pb2.PacketReplicationEngineEntry:
    pre = p4runtime_pb2.PacketReplicationEngineEntry()
    pre.multicast_group_entry.multicast_group_id = gid
    for port, rid in replicas:
        if as_bytes:
            pre.multicast_group_entry.replicas.add(port=encode_int(port), instance=rid)
        else:
            pre.multicast_group_entry.replicas.add(egress_port=port, instance=rid)
    return pre


def test_multicast_groups_round_trip(server: Backend, loaded: Client) -> None:
    loaded.write(update(U.INSERT, packet_replication_engine_entry=mcast(1, [(1, 0), (2, 1)])))
    loaded.write(update(U.INSERT, packet_replication_engine_entry=mcast(7, [(3, 0)], as_bytes=True)))
    if server.switch is not None:
        assert server.switch.mc_groups() == {1: [(1, 0), (2, 1)], 7: [(3, 0)]}
    wildcard = p4runtime_pb2.Entity(packet_replication_engine_entry=mcast(0, []))
    read = {
        e.packet_replication_engine_entry.multicast_group_entry.multicast_group_id: e.packet_replication_engine_entry
        for e in loaded.read(wildcard)
    }
    # replica order on read is the server's (BMv2 returns them in another order than written)
    for pre in read.values():
        pre.multicast_group_entry.replicas.sort(key=lambda r: (r.egress_port, r.port, r.instance))
    assert read[1] == mcast(1, [(1, 0), (2, 1)])
    assert read[7] == mcast(7, [(3, 0)], as_bytes=True)

    loaded.write(update(U.MODIFY, packet_replication_engine_entry=mcast(1, [(4, 2)])))
    if server.switch is not None:
        assert server.switch.mc_groups()[1] == [(4, 2)]
    loaded.write(update(U.DELETE, packet_replication_engine_entry=mcast(7, [])))
    with pytest.raises(grpc.RpcError) as info:
        loaded.write(
            update(U.INSERT, packet_replication_engine_entry=mcast(1, [(1, 0)])),
            update(U.MODIFY, packet_replication_engine_entry=mcast(7, [(1, 0)])),
            update(U.DELETE, packet_replication_engine_entry=mcast(7, [])),
            update(U.INSERT, packet_replication_engine_entry=mcast(9, [(1, 0), (1, 0)])),
        )
    assert [e.canonical_code for e in write_errors(info.value)] == [
        code_pb2.ALREADY_EXISTS,
        code_pb2.NOT_FOUND,
        code_pb2.NOT_FOUND,
        code_pb2.INVALID_ARGUMENT,
    ]


def test_counters_read_all_indices_one_index_and_modify(server: Backend, loaded: Client) -> None:
    preset = p4runtime_pb2.CounterEntry(counter_id=PKTS)
    preset.index.index = 3
    preset.data.packet_count, preset.data.byte_count = 5, 500
    loaded.write(update(U.MODIFY, counter_entry=preset))
    every = loaded.read(p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry(counter_id=PKTS)))
    assert [e.counter_entry.index.index for e in every] == list(range(8))
    assert (every[3].counter_entry.data.packet_count, every[3].counter_entry.data.byte_count) == (5, 500)
    all_counters = loaded.read(p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry()))
    assert len(all_counters) == 8

    one = p4runtime_pb2.CounterEntry(counter_id=PKTS)
    one.index.index = 3
    assert loaded.read(p4runtime_pb2.Entity(counter_entry=one))[0].counter_entry.data.packet_count == 5
    one.data.packet_count, one.data.byte_count = 0, 0
    loaded.write(update(U.MODIFY, counter_entry=one))
    if server.switch is not None:
        assert server.switch.counter_read("MyIngress.pkts", 3) == (0, 0)

    out_of_range = p4runtime_pb2.CounterEntry(counter_id=PKTS)
    out_of_range.index.index = 8
    with pytest.raises(grpc.RpcError) as info:
        loaded.read(p4runtime_pb2.Entity(counter_entry=out_of_range))
    # BMv2 1.15.5 answers UNKNOWN "Error when reading counter from target"; we name the problem
    wanted = grpc.StatusCode.OUT_OF_RANGE if server.kind == "embedded" else grpc.StatusCode.UNKNOWN
    assert info.value.code() == wanted
    with pytest.raises(grpc.RpcError) as info:
        loaded.write(update(U.MODIFY, counter_entry=out_of_range))
    # BMv2: UNKNOWN "Error when writing to counter"
    wanted_code = code_pb2.OUT_OF_RANGE if server.kind == "embedded" else code_pb2.UNKNOWN
    assert [e.canonical_code for e in write_errors(info.value)] == [wanted_code]


def test_registers_read_and_write_as_an_extension(embedded: Backend, embedded_loaded: Client) -> None:
    server, loaded = embedded, embedded_loaded
    entry = p4runtime_pb2.RegisterEntry(register_id=REG)
    entry.index.index = 2
    entry.data.bitstring = encode_int(0xDEADBEEF)
    loaded.write(update(U.MODIFY, register_entry=entry))
    if server.switch is not None:
        assert server.switch.register_read("MyIngress.reg", 2) == 0xDEADBEEF
    every = loaded.read(p4runtime_pb2.Entity(register_entry=p4runtime_pb2.RegisterEntry(register_id=REG)))
    assert [e.register_entry.data.bitstring for e in every] == [b"\x00", b"\x00", bytes.fromhex("deadbeef"), b"\x00"]


# ---------------------------------------------------------------------------------------------
# Arbitration


def test_arbitration_primary_backup_and_failover(server: Backend) -> None:
    low, high = Client(server.port, election_id=5), Client(server.port, election_id=9)
    try:
        first = low.arbitrate()
        assert first.status.code == code_pb2.OK and first.election_id.low == 5
        # a higher election id takes over; both are told
        assert high.arbitrate().status.code == code_pb2.OK
        demoted = low.next_arbitration()
        assert demoted.status.code == code_pb2.ALREADY_EXISTS and demoted.election_id.low == 9

        high.set_pipeline(fake_switch.TINY_JSON)
        with pytest.raises(grpc.RpcError) as info:
            low.write(update(U.INSERT, table_entry=fwd_entry(1, 2)))
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.RpcError) as info:
            low.set_pipeline(fake_switch.TINY_JSON)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        high.write(update(U.INSERT, table_entry=fwd_entry(1, 2)))
        # reads need no election
        assert len(low.read(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry()))) == 1

        # a duplicate election id is refused and that stream ends
        dup = Client(server.port, election_id=9)
        try:
            dup.send_arbitration()
            err = dup.next_message()
            assert isinstance(err, grpc.RpcError) and err.code() == grpc.StatusCode.INVALID_ARGUMENT
        finally:
            dup.close()

        # the primary leaves: the backup becomes primary and may write
        high.close()
        promoted = low.next_arbitration()
        assert promoted.status.code == code_pb2.OK and promoted.election_id.low == 5
        low.write(update(U.INSERT, table_entry=fwd_entry(2, 2)))
    finally:
        low.close()
        high.close()


def test_arbitration_for_an_unknown_device_ends_the_stream(embedded: Backend) -> None:
    c = Client(embedded.port, election_id=1, device_id=99)
    try:
        c.send_arbitration()
        err = c.next_message()
        assert isinstance(err, grpc.RpcError) and err.code() == grpc.StatusCode.NOT_FOUND
    finally:
        c.close()


def test_packet_out_is_refused_on_the_stream(embedded_loaded: Client) -> None:
    loaded = embedded_loaded
    req = p4runtime_pb2.StreamMessageRequest()
    req.packet.payload = b"\x00" * 60
    loaded.send(req)
    msg = loaded.next_message()
    assert msg.WhichOneof("update") == "error"
    assert msg.error.canonical_code == code_pb2.UNIMPLEMENTED


def test_election_ids_without_streams_follow_pi(server: Backend) -> None:
    """No stream open: requests without an election id are accepted, requests with one refused."""
    c = Client(server.port, election_id=None)
    try:
        c.set_pipeline(fake_switch.TINY_JSON)
        c.write(update(U.INSERT, table_entry=fwd_entry(1, 2)))
        c.election_id = 1
        with pytest.raises(grpc.RpcError) as info:
            c.write(update(U.INSERT, table_entry=fwd_entry(2, 2)))
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        c.close()


def test_an_arbitration_without_election_id_counts_as_zero(server: Backend) -> None:
    c = Client(server.port, election_id=None)
    try:
        assert c.arbitrate().status.code == code_pb2.OK
        c.set_pipeline(fake_switch.TINY_JSON)  # no election id in the request either: 0 == primary's
        c.write(update(U.INSERT, table_entry=fwd_entry(1, 2)))
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------
# What the controller writes reaches the data plane


def test_entries_written_over_p4runtime_steer_packets(embedded: Backend, embedded_loaded: Client) -> None:
    loaded = embedded_loaded
    mc = fwd_entry(2, 0)
    mc.action.action.action_id = SET_MCAST
    mc.action.action.params[0].value = encode_int(5)
    loaded.write(
        update(U.INSERT, table_entry=fwd_entry(1, 4)),
        update(U.INSERT, table_entry=mc),
        update(U.INSERT, packet_replication_engine_entry=mcast(5, [(3, 0), (6, 1)])),
    )
    sw = embedded.switch
    assert sw is not None
    frame = bytes.fromhex("02000000000202000000000188b5") + b"p4ina" * 10
    assert sw.process_packet(1, frame) == [(4, frame)]
    assert sorted(port for port, _ in sw.process_packet(2, frame)) == [3, 6]
    assert sw.process_packet(7, frame) == [(1, frame)]  # the program's default: set_port(1)

    # set_port counts pkts[port]: seen over P4Runtime
    entry = p4runtime_pb2.CounterEntry(counter_id=PKTS)
    entry.index.index = 4
    [read] = loaded.read(p4runtime_pb2.Entity(counter_entry=entry))
    assert (read.counter_entry.data.packet_count, read.counter_entry.data.byte_count) == (1, len(frame))

    # an acl entry (ternary + range) drops what it matches
    acl = p4runtime_pb2.TableEntry(table_id=ACL, priority=1)
    acl.match.add(field_id=1).ternary.CopyFrom(p4runtime_pb2.FieldMatch.Ternary(value=b"\x88\xb5", mask=b"\xff\xff"))
    acl.match.add(field_id=2).range.CopyFrom(
        p4runtime_pb2.FieldMatch.Range(low=bytes.fromhex("020000000000"), high=bytes.fromhex("0200000000ff"))
    )
    acl.action.action.action_id = DROP
    loaded.write(update(U.INSERT, table_entry=acl))
    assert sw.process_packet(1, frame) == []


def test_one_server_serves_several_devices_by_device_id() -> None:
    switches = {1: SoftSwitch(device_id=1), 2: SoftSwitch(device_id=2)}
    with P4RuntimeServer(switches, "127.0.0.1:0") as srv:
        a, b = Client(srv.port, election_id=1, device_id=1), Client(srv.port, election_id=1, device_id=2)
        try:
            # the same election id is fine on another device: arbitration is per device
            assert a.arbitrate().status.code == code_pb2.OK
            assert b.arbitrate().status.code == code_pb2.OK
            a.set_pipeline(fake_switch.TINY_JSON)
            a.write(update(U.INSERT, table_entry=fwd_entry(1, 2)))
            assert switches[1].table_entries("MyIngress.fwd") and not switches[2].program_loaded
            with pytest.raises(grpc.RpcError) as info:
                b.write(update(U.INSERT, table_entry=fwd_entry(1, 2)))
            assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        finally:
            a.close()
            b.close()


def test_a_client_may_raise_its_election_id_to_become_primary(server: Backend) -> None:
    a, b = Client(server.port, election_id=2), Client(server.port, election_id=3)
    try:
        assert a.arbitrate().status.code == code_pb2.OK
        assert b.arbitrate().status.code == code_pb2.OK
        assert a.next_arbitration().status.code == code_pb2.ALREADY_EXISTS
        promoted = a.arbitrate(election_id=4)  # same stream, new election id
        assert promoted.status.code == code_pb2.OK and promoted.election_id.low == 4
        demoted = b.next_arbitration()
        assert demoted.status.code == code_pb2.ALREADY_EXISTS and demoted.election_id.low == 4
    finally:
        a.close()
        b.close()
