"""Arithmetic width rules of the embedded switch, checked against a Python model of BMv2/P4 semantics.

Program: tests/softswitch/programs/arith.p4 (compiled JSON beside it).
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from softswitch import SoftSwitch

PROGRAMS = Path(__file__).parent / "programs"
IN = struct.Struct(">BBbbHI")
OUT = struct.Struct(">BBBbbbBBBBBBBBBHHBHBBbBBIIH")
OUT_FIELDS = (
    "add sub mul sadd ssub sshr shl shr band bor bxor bnot lt slt mux sext zext nibbles concat "
    "usat_add usat_sub ssat_add branch dyn_shl reg_old reg_new neg"
).split()


def load(name: str) -> SoftSwitch:
    sw = SoftSwitch(name=name)
    sw.load_program((PROGRAMS / f"{name}.json").read_bytes())
    return sw


def wrap8(x: int) -> int:
    return ((x + 128) & 0xFF) - 128


def expected(a: int, b: int, sa: int, sb: int, c: int, d: int, reg_old: int) -> dict[str, int]:
    return {
        "add": (a + b) & 0xFF,
        "sub": (a - b) & 0xFF,
        "mul": (a * b) & 0xFF,
        "sadd": wrap8(sa + sb),
        "ssub": wrap8(sa - sb),
        "sshr": sa >> 2,
        "shl": (a << 3) & 0xFF,
        "shr": a >> 3,
        "band": a & b,
        "bor": a | b,
        "bxor": a ^ b,
        "bnot": ~a & 0xFF,
        "lt": int(a < b),
        "slt": int(sa < sb),
        "mux": a if c == 0 else b,
        "sext": sa & 0xFFFF,
        "zext": a,
        "nibbles": ((c >> 12) << 4) | (c & 0xF),
        "concat": (a << 8) | b,
        "usat_add": min(a + b, 255),
        "usat_sub": max(a - b, 0),
        "ssat_add": max(-128, min(127, sa + sb)),
        "branch": a - 100 if a > 100 else 100,
        "dyn_shl": (a << (b & 7)) & 0xFF,
        "reg_old": reg_old,
        "reg_new": (reg_old + d) & 0xFFFFFFFF,
        "neg": (-c) & 0xFFFF,
    }


def run(sw: SoftSwitch, a: int, b: int, sa: int, sb: int, c: int, d: int) -> dict[str, int]:
    pkt = IN.pack(a, b, sa, sb, c, d) + b"payload"
    out = sw.process_packet(5, pkt)
    assert len(out) == 1
    port, data = out[0]
    assert port == 1
    assert data[: IN.size] == pkt[: IN.size]
    assert data[IN.size + OUT.size :] == b"payload"
    return dict(zip(OUT_FIELDS, OUT.unpack_from(data, IN.size)))


@pytest.fixture(scope="module")
def arith() -> SoftSwitch:
    return load("arith")


CASES = [
    (255, 1, 127, 1, 0, 0xFFFFFFFF),  # unsigned and signed wrap-around
    (0, 1, -128, 1, 0xFFFF, 1),  # underflow, int8 min - 1
    (200, 200, -100, -100, 0x1234, 5),  # mul truncation, signed saturation at min
    (101, 100, -1, 0, 0x8001, 0),  # branch taken, sign extension of -1
    (100, 7, 100, 100, 1, 2),  # branch not taken, signed saturation at max
    (16, 255, -2, 3, 0xF00F, 7),
]


@pytest.mark.parametrize("a,b,sa,sb,c,d", CASES)
def test_width_rules(a: int, b: int, sa: int, sb: int, c: int, d: int) -> None:
    sw = load("arith")
    reg_old = sw.register_read("ArithIngress.acc", b & 3)
    got = run(sw, a, b, sa, sb, c, d)
    assert got == expected(a, b, sa, sb, c, d, reg_old)


@settings(max_examples=150, deadline=None)
@given(
    a=st.integers(0, 255),
    b=st.integers(0, 255),
    sa=st.integers(-128, 127),
    sb=st.integers(-128, 127),
    c=st.integers(0, 0xFFFF),
    d=st.integers(0, 0xFFFFFFFF),
)
def test_width_rules_random(arith: SoftSwitch, a: int, b: int, sa: int, sb: int, c: int, d: int) -> None:
    reg_old = arith.register_read("ArithIngress.acc", b & 3)
    assert run(arith, a, b, sa, sb, c, d) == expected(a, b, sa, sb, c, d, reg_old)
    assert arith.stats["errors"] == 0


def test_register_accumulates_and_counter_counts() -> None:
    sw = load("arith")
    for d in (5, 7, 0xFFFFFFFF):
        run(sw, 1, 2, 0, 0, 0, d)
    assert sw.register_read("ArithIngress.acc", 2) == (5 + 7 + 0xFFFFFFFF) & 0xFFFFFFFF
    assert sw.register_read("ArithIngress.acc", 1) == 0
    length = IN.size + len(b"payload")
    assert sw.counter_read("ArithIngress.seen", 2) == (3, 3 * length)
    assert sw.counter_read("ArithIngress.seen", 0) == (0, 0)


def test_truncated_packet_runs_ingress_which_drops_it() -> None:
    sw = load("arith")
    assert sw.process_packet(1, b"\x01\x02\x03") == []
    assert sw.stats == {"rx": 1, "tx": 0, "dropped": 1, "errors": 0, "assertions": 0, "packet_in": 0, "packet_out": 0}
