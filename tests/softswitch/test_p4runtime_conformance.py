"""P4Runtime's canonical forms and scopes, as PI enforces them (issue 14, item 11).

Don't-care match fields must be omitted, not sent as a zero mask, a /0 prefix or a full range;
a @defaultonly action cannot be a table entry's and a @tableonly one cannot be the default
(PERMISSION_DENIED); idle_timeout_ns on a table without idle timeout is refused; an update with no
entity is INVALID_ARGUMENT. The tests taking `loaded_scoped` run against BMv2 too.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest

from p4proto import code_pb2, p4info_pb2, p4runtime_pb2
from tests.softswitch import fake_switch
from tests.softswitch.test_p4runtime import Backend, Client, _primary, embedded, server, update, write_errors

ACL, DMAC, FWD = fake_switch.ACL, fake_switch.DMAC, fake_switch.FWD
U = p4runtime_pb2.Update


def scoped_p4info() -> p4info_pb2.P4Info:
    """tiny's P4Info with acl's NoAction @defaultonly and its drop @tableonly."""
    info = fake_switch.tiny_p4info()
    acl = next(t for t in info.tables if t.preamble.id == ACL)
    for ref in acl.action_refs:
        ref.scope = (
            p4info_pb2.ActionRef.DEFAULT_ONLY if ref.id == fake_switch.NO_ACTION else p4info_pb2.ActionRef.TABLE_ONLY
        )
    return info


@pytest.fixture
def loaded_scoped(server: Backend) -> Iterator[Client]:
    with _primary(server) as c:
        c.set_pipeline(fake_switch.TINY_JSON, p4info=scoped_p4info())
        yield c


def acl_entry(
    ternary: tuple[bytes, bytes] | None, rng: tuple[bytes, bytes] | None, action: int = fake_switch.DROP
) -> p4runtime_pb2.TableEntry:
    e = p4runtime_pb2.TableEntry(table_id=ACL, priority=10)
    if ternary is not None:
        e.match.add(field_id=1).ternary.CopyFrom(p4runtime_pb2.FieldMatch.Ternary(value=ternary[0], mask=ternary[1]))
    if rng is not None:
        e.match.add(field_id=2).range.CopyFrom(p4runtime_pb2.FieldMatch.Range(low=rng[0], high=rng[1]))
    e.action.action.action_id = action
    return e


def codes(client: Client, *updates: p4runtime_pb2.Update) -> list[int]:
    try:
        client.write(*updates)
    except grpc.RpcError as ex:
        return [e.canonical_code for e in write_errors(ex)]
    return [code_pb2.OK] * len(updates)


def test_dont_care_forms_must_be_omitted(loaded_scoped: Client) -> None:
    lpm0 = p4runtime_pb2.TableEntry(table_id=DMAC)
    lpm0.match.add(field_id=1).lpm.CopyFrom(p4runtime_pb2.FieldMatch.LPM(value=b"\x00", prefix_len=0))
    lpm0.action.action.action_id = fake_switch.NO_ACTION
    # full width: PI recognises a don't-care range only when low and high have the field's width
    # (the embedded switch compares values, so the canonical b"\x00" is refused too)
    full48 = (b"\x00" * 6, b"\xff" * 6)
    assert (
        codes(
            loaded_scoped,
            update(U.INSERT, table_entry=acl_entry((b"\x00", b"\x00"), None)),  # ternary mask 0
            update(U.INSERT, table_entry=acl_entry(None, full48)),  # the whole range
            update(U.INSERT, table_entry=lpm0),  # a /0 prefix
            update(U.INSERT, table_entry=acl_entry((b"\x08\x00", b"\xff\xff"), (b"\x00", b"\x05"))),  # fine
            update(U.INSERT, table_entry=acl_entry(None, None)),  # everything omitted: fine
        )
        == [code_pb2.INVALID_ARGUMENT] * 3 + [code_pb2.OK] * 2
    )


def test_action_scopes_are_permission_denied(loaded_scoped: Client) -> None:
    default = p4runtime_pb2.TableEntry(table_id=ACL, is_default_action=True)
    default.action.action.action_id = fake_switch.DROP  # @tableonly
    assert codes(
        loaded_scoped,
        update(
            U.INSERT, table_entry=acl_entry((b"\x08\x00", b"\xff\xff"), None, fake_switch.NO_ACTION)
        ),  # @defaultonly
        update(U.MODIFY, table_entry=default),
    ) == [code_pb2.PERMISSION_DENIED, code_pb2.PERMISSION_DENIED]


def test_idle_timeout_on_a_table_without_it_is_refused(loaded_scoped: Client) -> None:
    e = acl_entry((b"\x08\x00", b"\xff\xff"), None)
    e.idle_timeout_ns = 10**9
    assert codes(loaded_scoped, update(U.INSERT, table_entry=e)) == [code_pb2.INVALID_ARGUMENT]
    assert loaded_scoped.read(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=ACL))) == []


def test_an_update_without_an_entity_is_invalid(embedded: Backend) -> None:
    """(PI answers UNKNOWN 'Incorrect entity type'; the malformed request is INVALID_ARGUMENT here.)"""
    with _primary(embedded) as c:
        c.set_pipeline(fake_switch.TINY_JSON)
        assert codes(c, p4runtime_pb2.Update(type=U.INSERT)) == [code_pb2.INVALID_ARGUMENT]


def test_a_failed_commit_keeps_the_old_pipeline_and_its_index(
    embedded: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 12: the old program keeps forwarding, and P4Runtime keeps serving it."""
    assert embedded.switch is not None
    with _primary(embedded) as c:
        c.set_pipeline(fake_switch.TINY_JSON)
        entry = p4runtime_pb2.TableEntry(table_id=FWD)
        entry.match.add(field_id=1).exact.value = b"\x03"
        entry.action.action.action_id = fake_switch.SET_PORT
        entry.action.action.params.add(param_id=1, value=b"\x02")
        c.write(update(U.INSERT, table_entry=entry))

        def broken(_json: bytes) -> None:
            raise RuntimeError("the interpreter failed (simulated)")

        monkeypatch.setattr(embedded.switch, "load_program", broken)
        with pytest.raises(grpc.RpcError) as info:
            c.set_pipeline(fake_switch.TINY_JSON, cookie=7)
        assert info.value.code() == grpc.StatusCode.INTERNAL
        monkeypatch.undo()
        # the old pipeline is still the device's: reads, writes and Get work, packets follow the entry
        assert len(c.read(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=FWD)))) == 1
        entry.match[0].exact.value = b"\x04"
        c.write(update(U.INSERT, table_entry=entry))
        got = c.stub.GetForwardingPipelineConfig(
            p4runtime_pb2.GetForwardingPipelineConfigRequest(device_id=c.device_id), timeout=10
        )
        assert got.config.p4info.tables and not got.config.HasField("cookie")
        frame = bytes.fromhex("0200000000020200000000010800") + bytes(50)
        assert embedded.switch.process_packet(3, frame) == [(2, frame)]


# ---- roles (item 13) ---------------------------------------------------------------------------


def _role_stream(
    port: int, role: str, election_id: int, config_type: str | None = None
) -> tuple[Client, p4runtime_pb2.StreamMessageResponse | grpc.RpcError]:
    """A stream that arbitrates for `role` (with a role config of `config_type`), and the first answer."""
    c = Client(port, election_id=election_id)
    c._stream = c.stub.StreamChannel(c._iter())

    def pump() -> None:
        try:
            for msg in c._stream:  # type: ignore[union-attr]
                c.responses.put(msg)
        except grpc.RpcError as ex:
            c.responses.put(ex)

    threading.Thread(target=pump, daemon=True).start()
    req = p4runtime_pb2.StreamMessageRequest()
    req.arbitration.device_id = c.device_id
    req.arbitration.election_id.low = election_id
    req.arbitration.role.name = role
    if config_type is not None:
        req.arbitration.role.config.type_url = f"type.googleapis.com/{config_type}"
        req.arbitration.role.config.value = b""
    c.send(req)
    return c, c.next_message()


def _write_as(c: Client, role: str, *updates: p4runtime_pb2.Update) -> list[int]:
    req = p4runtime_pb2.WriteRequest(device_id=c.device_id, updates=list(updates), role=role)
    req.election_id.low = c.election_id or 0
    try:
        c.stub.Write(req, timeout=10)
    except grpc.RpcError as ex:
        if ex.code() == grpc.StatusCode.UNKNOWN:
            return [e.canonical_code for e in write_errors(ex)]
        return [ex.code().value[0]]
    return [code_pb2.OK] * len(updates)


def _fwd(port: int) -> p4runtime_pb2.Update:
    e = p4runtime_pb2.TableEntry(table_id=FWD)
    e.match.add(field_id=1).exact.value = bytes([port])
    e.action.action.action_id = fake_switch.SET_PORT
    e.action.action.params.add(param_id=1, value=b"\x01")
    return update(U.INSERT, table_entry=e)


def test_each_role_has_its_own_primary_and_writes_under_it(embedded: Backend) -> None:
    with _primary(embedded) as default:
        default.set_pipeline(fake_switch.TINY_JSON)
        r1, answer = _role_stream(embedded.port, "r1", 1)  # election id 1 is free in role r1
        try:
            assert not isinstance(answer, grpc.RpcError), answer
            assert answer.arbitration.status.code == code_pb2.OK and answer.arbitration.role.name == "r1"
            assert _write_as(r1, "r1", _fwd(1)) == [code_pb2.OK]  # r1's primary, no role config: full access
            assert _write_as(r1, "", _fwd(2)) == [
                grpc.StatusCode.PERMISSION_DENIED.value[0]
            ]  # not the default's primary
            assert _write_as(default, "r1", _fwd(3)) == [grpc.StatusCode.PERMISSION_DENIED.value[0]]
            assert _write_as(default, "", _fwd(4)) == [code_pb2.OK]
        finally:
            r1.close()


def test_a_role_config_the_server_does_not_implement_is_refused_by_name(embedded: Backend) -> None:
    c, answer = _role_stream(embedded.port, "r2", 3, config_type="example.com.AclRoleConfig")
    try:
        assert isinstance(answer, grpc.RpcError)
        assert answer.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "example.com.AclRoleConfig" in (answer.details() or "")
    finally:
        c.close()
