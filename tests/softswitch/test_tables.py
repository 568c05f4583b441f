"""Match tables of the embedded switch: match kinds, priorities, defaults, const entries, control-plane checks.

Program: tests/softswitch/programs/tables.p4.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from softswitch import (
    ActionCall,
    ConstDefaultActionError,
    EntryExistsError,
    EntryNotFoundError,
    Exact,
    InvalidEntryError,
    Lpm,
    NoProgramError,
    Range,
    SoftSwitch,
    TableEntry,
    TableFullError,
    Ternary,
    UnknownObjectError,
)

PROGRAMS = Path(__file__).parent / "programs"
PROBE = struct.Struct(">HIBHBBBBBBB")
EXACT, LPM, TERN, RANGE, CONST, SWITCH = (
    "TIngress.t_exact",
    "TIngress.t_lpm",
    "TIngress.t_tern",
    "TIngress.t_range",
    "TIngress.t_const",
    "TIngress.t_switch",
)


def load(name: str) -> SoftSwitch:
    sw = SoftSwitch(name=name)
    sw.load_program((PROGRAMS / f"{name}.json").read_bytes())
    return sw


def ip(text: str) -> int:
    a, b, c, d = (int(x) for x in text.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


def probe(sw: SoftSwitch, key16: int = 0, addr: int = 0, tern: int = 0, port: int = 0) -> dict[str, int]:
    out = sw.process_packet(1, PROBE.pack(key16, addr, tern, port, 0, 0, 0, 0, 0, 0, 0))
    assert len(out) == 1 and out[0][0] == 2
    names = "key16 addr tern port hits exact lpm tern_out range const path".split()
    return dict(zip(names, PROBE.unpack(out[0][1])))


@pytest.fixture
def sw() -> SoftSwitch:
    return load("tables")


def test_table_info(sw: SoftSwitch) -> None:
    info = sw.tables()
    assert [(k.name, k.match_type, k.bitwidth) for k in info[EXACT].keys] == [
        ("key16", "exact", 16),
        ("tern", "exact", 8),
    ]
    assert [(k.name, k.match_type, k.bitwidth) for k in info[TERN].keys] == [
        ("tern", "ternary", 8),
        ("key16", "exact", 16),
    ]
    assert info[LPM].keys[0].match_type == "lpm" and info[RANGE].keys[0].match_type == "range"
    assert info[EXACT].size == 4
    assert set(info[EXACT].actions) == {"TIngress.set_exact", "TIngress.miss_exact"}
    assert info[TERN].const_default and not info[EXACT].const_default
    acts = sw.actions()
    assert acts["TIngress.set_exact"].param_widths == (8,)
    assert acts["TIngress.set_exact"].param_names == ("v",)


def test_exact_hit_and_default(sw: SoftSwitch) -> None:
    sw.table_insert(EXACT, TableEntry((Exact(0x1234), Exact(0x12)), ActionCall("TIngress.set_exact", (7,))))
    hit = probe(sw, key16=0x1234, tern=0x12)
    assert hit["exact"] == 7 and hit["hits"] & 1
    miss = probe(sw, key16=0x1234, tern=0x13)
    assert miss["exact"] == 0xEE and not miss["hits"] & 1
    assert sw.table_get_default(EXACT) == ActionCall("TIngress.miss_exact", ())
    sw.table_set_default(EXACT, ActionCall("TIngress.set_exact", (9,)))
    assert probe(sw, key16=1)["exact"] == 9
    sw.table_reset_default(EXACT)
    assert probe(sw, key16=1)["exact"] == 0xEE
    sw.table_modify(EXACT, TableEntry((Exact(0x1234), Exact(0x12)), ActionCall("TIngress.set_exact", (8,))))
    assert probe(sw, key16=0x1234, tern=0x12)["exact"] == 8
    sw.table_delete(EXACT, (Exact(0x1234), Exact(0x12)))
    assert probe(sw, key16=0x1234, tern=0x12)["exact"] == 0xEE


def test_lpm_longest_prefix_wins(sw: SoftSwitch) -> None:
    for prefix, plen, v in (("10.0.0.0", 8, 1), ("10.1.0.0", 16, 2), ("10.1.2.0", 24, 3), ("0.0.0.0", 0, 9)):
        sw.table_insert(LPM, TableEntry((Lpm(ip(prefix), plen),), ActionCall("TIngress.set_lpm", (v,))))
    assert probe(sw, addr=ip("10.1.2.3"))["lpm"] == 3
    assert probe(sw, addr=ip("10.1.9.9"))["lpm"] == 2
    assert probe(sw, addr=ip("10.9.9.9"))["lpm"] == 1
    got = probe(sw, addr=ip("11.0.0.0"))
    assert got["lpm"] == 9 and got["hits"] & 2
    sw.table_delete(LPM, (Lpm(0, 0),))
    got = probe(sw, addr=ip("11.0.0.0"))
    assert got["lpm"] == 0xDD and not got["hits"] & 2  # the program's default: set_lpm(0xDD), a miss
    with pytest.raises(InvalidEntryError):
        sw.table_insert(LPM, TableEntry((Lpm(ip("10.1.2.3"), 24),), ActionCall("TIngress.set_lpm", (1,))))


def test_ternary_highest_priority_wins(sw: SoftSwitch) -> None:
    sw.table_insert(TERN, TableEntry((Ternary(0x10, 0xF0), Exact(0x1234)), ActionCall("TIngress.set_tern", (1,)), 10))
    sw.table_insert(TERN, TableEntry((Ternary(0x12, 0xFF), Exact(0x1234)), ActionCall("TIngress.set_tern", (2,)), 20))
    assert probe(sw, key16=0x1234, tern=0x12)["tern_out"] == 2
    assert probe(sw, key16=0x1234, tern=0x15)["tern_out"] == 1
    got = probe(sw, key16=0x1235, tern=0x12)
    assert got["tern_out"] == 0 and not got["hits"] & 4
    # the same key with another priority is another entry
    sw.table_insert(TERN, TableEntry((Ternary(0x12, 0xFF), Exact(0x1234)), ActionCall("TIngress.set_tern", (3,)), 30))
    assert probe(sw, key16=0x1234, tern=0x12)["tern_out"] == 3
    sw.table_delete(TERN, (Ternary(0x12, 0xFF), Exact(0x1234)), 30)
    assert probe(sw, key16=0x1234, tern=0x12)["tern_out"] == 2
    with pytest.raises(ConstDefaultActionError):
        sw.table_set_default(TERN, ActionCall("TIngress.set_tern", (5,)))
    with pytest.raises(InvalidEntryError):  # ternary tables need a priority
        sw.table_insert(TERN, TableEntry((Ternary(0, 0), Exact(1)), ActionCall("NoAction", ())))


def test_range_priority(sw: SoftSwitch) -> None:
    sw.table_insert(RANGE, TableEntry((Range(100, 200),), ActionCall("TIngress.set_range", (1,)), 1))
    sw.table_insert(RANGE, TableEntry((Range(150, 160),), ActionCall("TIngress.set_range", (2,)), 5))
    assert probe(sw, port=155)["range"] == 2
    assert probe(sw, port=120)["range"] == 1
    assert probe(sw, port=100)["range"] == 1 and probe(sw, port=200)["range"] == 1
    got = probe(sw, port=300)
    assert got["range"] == 0 and not got["hits"] & 8
    with pytest.raises(InvalidEntryError):
        sw.table_insert(RANGE, TableEntry((Range(5, 4),), ActionCall("TIngress.set_range", (1,)), 1))


def test_const_entries_in_program_order(sw: SoftSwitch) -> None:
    assert probe(sw, tern=0x12)["const"] == 1  # 0x10/0xF0 is listed first, so it outranks 0x12/0xFF
    assert probe(sw, tern=0x05)["const"] == 3
    entries = sw.table_entries(CONST)
    assert [e.action.params for e in entries] == [(1,), (2,), (3,)]
    assert entries[0].priority > entries[1].priority > entries[2].priority > 0
    with pytest.raises(InvalidEntryError):
        sw.table_insert(CONST, TableEntry((Ternary(1, 1),), ActionCall("TIngress.set_const", (1,)), 1))
    with pytest.raises(ConstDefaultActionError):
        sw.table_set_default(CONST, ActionCall("TIngress.set_const", (1,)))


def test_action_run_switch(sw: SoftSwitch) -> None:
    sw.table_insert(SWITCH, TableEntry((Exact(0x1234),), ActionCall("TIngress.path_a")))
    assert probe(sw, key16=0x1234)["path"] == 11
    assert probe(sw, key16=0x1)["path"] == 22


def test_control_plane_checks(sw: SoftSwitch) -> None:
    call = ActionCall("TIngress.set_exact", (1,))
    with pytest.raises(InvalidEntryError, match="2"):
        sw.table_insert(EXACT, TableEntry((Exact(1),), call))
    with pytest.raises(InvalidEntryError, match="does not fit"):
        sw.table_insert(EXACT, TableEntry((Exact(1 << 16), Exact(0)), call))
    with pytest.raises(InvalidEntryError, match="exact"):
        sw.table_insert(EXACT, TableEntry((Lpm(1, 16), Exact(0)), call))
    with pytest.raises(InvalidEntryError, match="not an action"):
        sw.table_insert(EXACT, TableEntry((Exact(1), Exact(0)), ActionCall("TIngress.set_lpm", (1,))))
    with pytest.raises(InvalidEntryError, match="parameter"):
        sw.table_insert(EXACT, TableEntry((Exact(1), Exact(0)), ActionCall("TIngress.set_exact", (256,))))
    with pytest.raises(InvalidEntryError, match="takes 1"):
        sw.table_insert(EXACT, TableEntry((Exact(1), Exact(0)), ActionCall("TIngress.set_exact", ())))
    with pytest.raises(InvalidEntryError, match="priority"):
        sw.table_insert(EXACT, TableEntry((Exact(1), Exact(0)), call, 3))
    sw.table_insert(EXACT, TableEntry((Exact(1), Exact(0)), call))
    with pytest.raises(EntryExistsError):
        sw.table_insert(EXACT, TableEntry((Exact(1), Exact(0)), call))
    with pytest.raises(EntryNotFoundError):
        sw.table_delete(EXACT, (Exact(2), Exact(0)))
    with pytest.raises(EntryNotFoundError):
        sw.table_modify(EXACT, TableEntry((Exact(2), Exact(0)), call))
    for i in range(2, 5):
        sw.table_insert(EXACT, TableEntry((Exact(i), Exact(0)), call))
    with pytest.raises(TableFullError):
        sw.table_insert(EXACT, TableEntry((Exact(9), Exact(0)), call))
    assert len(sw.table_entries(EXACT)) == 4
    sw.table_clear(EXACT)
    assert sw.table_entries(EXACT) == []
    with pytest.raises(UnknownObjectError):
        sw.table_insert("TIngress.nope", TableEntry((), call))
    with pytest.raises(UnknownObjectError):
        sw.counter_read("nope", 0)
    with pytest.raises(UnknownObjectError):
        sw.register_read("nope", 0)


def test_calls_before_a_program_is_loaded() -> None:
    sw = SoftSwitch()
    assert not sw.program_loaded and sw.program_json is None
    with pytest.raises(NoProgramError):
        sw.tables()
    with pytest.raises(NoProgramError):
        sw.mc_group_set(1, [(1, 1)])
    assert sw.process_packet(1, b"\x00" * 20) == []
    assert sw.stats["errors"] == 0


def test_load_replaces_program_and_clears_state(sw: SoftSwitch) -> None:
    raw = (PROGRAMS / "tables.json").read_bytes()
    assert sw.program_json == raw
    sw.table_insert(EXACT, TableEntry((Exact(1), Exact(0)), ActionCall("TIngress.set_exact", (1,))))
    sw.table_set_default(LPM, ActionCall("NoAction", ()))
    sw.mc_group_set(3, [(1, 1)])
    sw.load_program(json.dumps(json.loads(raw)))  # str input works too
    assert sw.table_entries(EXACT) == []
    assert sw.table_get_default(LPM) == ActionCall("TIngress.set_lpm", (0xDD,))
    assert sw.mc_groups() == {}


def test_reset_default_without_a_json_default_restores_the_initial_miss() -> None:
    """A table whose JSON gives no default entry goes back to 'no action' on reset, not the runtime default."""
    import copy

    from tests.softswitch import fake_switch

    doc = copy.deepcopy(fake_switch.TINY_JSON_DOC)
    dmac = next(t for t in doc["pipelines"][0]["tables"] if t["name"] == "MyIngress.dmac")
    del dmac["default_entry"]
    sw = SoftSwitch()
    sw.load_program(json.dumps(doc))
    frame = bytes.fromhex("0200000000020200000000010800") + bytes(50)
    assert sw.process_packet(1, frame) == [(1, frame)]
    initial = sw.table_get_default("MyIngress.dmac")
    sw.table_set_default("MyIngress.dmac", ActionCall("MyIngress.set_src", (0x112233445566,)))
    assert sw.process_packet(1, frame)[0][1][6:12] == bytes.fromhex("112233445566")
    sw.table_reset_default("MyIngress.dmac")
    assert sw.table_get_default("MyIngress.dmac") == initial
    assert sw.process_packet(1, frame) == [(1, frame)]
