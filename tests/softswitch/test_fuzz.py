"""Any byte string is processed or dropped: random and mutated packets never raise or count an internal error."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from softswitch import (
    ActionCall,
    Exact,
    Lpm,
    Range,
    SoftSwitch,
    TableEntry,
    Ternary,
)

PROGRAMS = Path(__file__).parent / "programs"
NAMES = ("arith", "tables", "mcast", "parse_csum", "hash")


def _configured(name: str) -> SoftSwitch:
    sw = SoftSwitch(name=name)
    sw.load_program((PROGRAMS / f"{name}.json").read_bytes())
    if name == "tables":
        sw.table_insert("TIngress.t_exact", TableEntry((Exact(1), Exact(2)), ActionCall("TIngress.set_exact", (1,))))
        sw.table_insert("TIngress.t_lpm", TableEntry((Lpm(0x0A000000, 8),), ActionCall("TIngress.set_lpm", (1,))))
        sw.table_insert(
            "TIngress.t_tern", TableEntry((Ternary(0x10, 0xF0), Exact(1)), ActionCall("TIngress.set_tern", (1,)), 5)
        )
        sw.table_insert("TIngress.t_range", TableEntry((Range(0, 100),), ActionCall("TIngress.set_range", (1,)), 1))
    if name == "mcast":
        sw.mc_group_set(1, [(1, 1), (2, 99)])
        sw.mc_group_set(0x0102, [(3, 3)])
    return sw


SWITCHES = {name: _configured(name) for name in NAMES}

_ETH_IPV4_UDP = (
    bytes(12)
    + b"\x08\x00"
    + struct.pack(">BBHHHBBH4s4s", 0x45, 0, 40, 0, 0, 64, 17, 0, b"\n\0\0\1", b"\n\0\0\2")
    + struct.pack(">HHHH", 1, 2, 20, 0)
    + b"\x7e"
    + bytes(11)
)
SEEDS = [_ETH_IPV4_UDP, bytes(64), b"\x01\x02" + bytes(60), b"\xff" * 80]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 2))
        if kind == 0 and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
        elif kind == 1:
            data = data[: draw(st.integers(0, len(data)))]
        else:
            data += draw(st.binary(max_size=16))
    return bytes(data)


packets = st.one_of(st.binary(max_size=300), mutated())


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(port=st.integers(0, 511), data=packets)
def test_any_bytes_are_processed_or_dropped(name: str, port: int, data: bytes) -> None:
    sw = SWITCHES[name]
    before = dict(sw.stats)
    out = sw.process_packet(port, data)
    assert sw.stats["errors"] == 0
    assert sw.stats["rx"] == before["rx"] + 1
    for eport, pkt in out:
        assert 0 <= eport < 511
        assert isinstance(pkt, bytes)
    assert sw.stats["tx"] == before["tx"] + len(out)


def test_internal_errors_are_caught_counted_and_dropped() -> None:
    sw = SoftSwitch(engine="python")  # patches the Python engine's generated code
    sw.load_program((PROGRAMS / "arith.json").read_bytes())
    sw.runtime().ingress = lambda slots: 1 / 0  # type: ignore[method-assign]  # simulate an interpreter bug
    assert sw.process_packet(1, bytes(40)) == []
    assert sw.stats == {"rx": 1, "tx": 0, "dropped": 1, "errors": 1, "assertions": 0, "packet_in": 0, "packet_out": 0}
