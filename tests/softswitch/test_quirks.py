"""Programs BMv2 runs that the embedded switch once refused at load (issue 14, item 9).

Program: tests/softswitch/programs/quirks.p4. Const entries with bits outside their mask or
prefix are masked as BMv2 masks them; the P4Info/JSON check accepts every pair p4c produces
(an `error`-typed key, a @p4runtime_translation key, a table p4c dropped as unreachable, nested
switches); a `?:` of headers inside an action copies the chosen one.
"""

from __future__ import annotations

import struct
from pathlib import Path

import grpc
import pytest
from google.protobuf import text_format

from p4proto import p4info_pb2, p4runtime_pb2
from softswitch import SoftSwitch
from tests.softswitch.test_p4runtime import Backend, Client, _primary, embedded, server, update
from tests.softswitch.test_vs_bmv2 import compare

PROGRAMS = Path(__file__).parent / "programs"
JSON, P4INFO = PROGRAMS / "quirks.json", PROGRAMS / "quirks.p4info.txtpb"
PROBE = struct.Struct(">BIBBHBBBBB")  # tern addr sel pick tag, then the five outputs
PAIR = struct.Struct(">H")


def packet(tern: int, addr: int, sel: int = 0, pick: int = 0, first: int = 0x1111, second: int = 0x2222) -> bytes:
    return PROBE.pack(tern, addr, sel, pick, 7, 0, 0, 0, 0, 0) + PAIR.pack(first) + PAIR.pack(second)


def outputs(sw: SoftSwitch, pkt: bytes) -> tuple[dict[str, int], bytes]:
    out = sw.process_packet(1, pkt)
    assert sw.stats["errors"] == 0 and len(out) == 1
    data = out[0][1]
    *_, tern, lpm, err, path, tag = PROBE.unpack_from(data)
    return {"tern": tern, "lpm": lpm, "err": err, "path": path, "tag": tag}, data[PROBE.size :]


@pytest.fixture
def sw() -> SoftSwitch:
    s = SoftSwitch(name="quirks")
    s.load_program(JSON.read_bytes())
    return s


def test_const_entries_are_masked_as_bmv2_masks_them(sw: SoftSwitch) -> None:
    assert outputs(sw, packet(0x1F, 0))[0]["tern"] == 1  # 0x13 &&& 0xF0 matches 0x1_, listed first
    assert outputs(sw, packet(0x3F, 0))[0]["tern"] == 2  # 0x2F &&& 0x0F matches 0x_F
    assert outputs(sw, packet(0x00, 0))[0]["tern"] == 0xEE
    assert outputs(sw, packet(0, 0x0AFFFFFF))[0]["lpm"] == 3  # 0x0A0B0C0D/8 is 10.0.0.0/8
    assert outputs(sw, packet(0, 0x0B000000))[0]["lpm"] == 0xEE


def test_nested_switches_and_the_header_mux(sw: SoftSwitch) -> None:
    got, rest = outputs(sw, packet(0, 0, pick=0))
    assert got["path"] == 1 | 4  # t_outer: path_a, then t_inner's default path_c; no path_b: t_innermost not applied
    assert rest == PAIR.pack(0x1111)  # chosen = first
    assert outputs(sw, packet(0, 0, pick=1))[1] == PAIR.pack(0x2222)


def test_the_p4info_and_json_from_one_compile_are_accepted(server: Backend) -> None:
    with _primary(server) as c:
        c.set_pipeline(JSON.read_bytes(), p4info=text_format.Parse(P4INFO.read_text(), p4info_pb2.P4Info()))


def _table_id(info: p4info_pb2.P4Info, name: str) -> tuple[int, int]:
    t = next(t for t in info.tables if t.preamble.name == name)
    a = next(
        a
        for a in info.actions
        if a.preamble.name == "QIngress.set_err"
        and name.endswith("err")
        or a.preamble.name == "QIngress.set_tag"
        and name.endswith("tag")
    )
    return t.preamble.id, a.preamble.id


def test_error_and_translated_keys_take_data_plane_values(embedded: Backend) -> None:
    """(BMv2's PI cannot encode these keys; the embedded switch uses the device config's widths.)"""
    assert embedded.switch is not None
    info = text_format.Parse(P4INFO.read_text(), p4info_pb2.P4Info())
    with _primary(embedded) as c:
        c.set_pipeline(JSON.read_bytes(), p4info=info)
        for table, key, value in (("QIngress.t_err", b"\x00", 5), ("QIngress.t_tag", b"\x07", 6)):
            tid, aid = _table_id(info, table)
            e = p4runtime_pb2.TableEntry(table_id=tid)
            e.match.add(field_id=1).exact.value = key
            e.action.action.action_id = aid
            e.action.action.params.add(param_id=1, value=bytes([value]))
            c.write(update(p4runtime_pb2.Update.INSERT, table_entry=e))
        got, _ = outputs(embedded.switch, packet(0, 0))
        assert (got["err"], got["tag"]) == (5, 6)  # parser_error NoError, tag 7
        unreachable = next(t for t in info.tables if t.preamble.name == "QIngress.t_unreachable")
        e = p4runtime_pb2.TableEntry(table_id=unreachable.preamble.id)
        e.match.add(field_id=1).exact.value = b"\x01"
        e.action.action.action_id = next(a.preamble.id for a in info.actions if a.preamble.name == "QIngress.path_c")
        with pytest.raises(grpc.RpcError):
            c.write(update(p4runtime_pb2.Update.INSERT, table_entry=e))


@pytest.mark.bmv2
def test_quirks_match_bmv2(sw: SoftSwitch) -> None:
    seeds = [
        (1, packet(t, a, s, p))
        for t in (0x1F, 0x3F, 0x00, 0x12)
        for a in (0x0AFFFFFF, 0x0B000000)
        for s in (0, 1)
        for p in (0, 1)
    ]
    compare(JSON, P4INFO, sw, seeds + [(1, b"\x01\x02")], set())
