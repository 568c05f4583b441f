"""The C engine's 64-bit value model against the Python engine's unbounded integers, on random expressions.

cemit.py types every expression by its interval and computes wrap-around sums only where the low
bits are all that matter; this test generates programs whose outputs are random expression trees
over fields of many widths and signednesses (+ - * / % & | ^ << >> ~, comparisons, and/or/not, ?:,
two_comp_mod, sat_cast, usat_cast, bool conversions, constants up to 70 bits and negative ones) and
checks that both engines write the same bytes for random packets. Expressions the C engine refuses
(a value whose whole is needed beyond 64 bits) are left out, after checking that the refusal is one.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from native import cbuild
from softswitch import SoftSwitch
from softswitch.compiler import cemit, codegen, program

IN_FIELDS = [
    ("a8", 8, False),
    ("b16", 16, False),
    ("c32", 32, False),
    ("d48", 48, False),
    ("e64", 64, False),
    ("f8s", 8, True),
    ("g32s", 32, True),
    ("h64s", 64, True),
    ("i1", 1, False),
    ("j5", 5, False),
]
OUT_WIDTHS = [
    (1, False),
    (7, False),
    (8, False),
    (8, True),
    (16, False),
    (31, False),
    (32, False),
    (32, True),
    (33, False),
    (48, False),
    (63, True),
    (64, False),
    (64, True),
]
PROGRAMS = 6
EXPRS = 24
PACKETS = 300


def _f(name: str) -> dict[str, Any]:
    return {"type": "field", "value": ["in_h", name]}


def _hex(v: int) -> dict[str, Any]:
    return {"type": "hexstr", "value": hex(v)}


def _e(op: str, left: Any, right: Any, **kw: Any) -> dict[str, Any]:
    return {"type": "expression", "value": {"op": op, "left": left, "right": right, **kw}}


class Gen:
    """Random expression trees as BMv2 JSON; ints and bools kept apart as p4c keeps them."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng

    def const(self) -> int:
        r = self.r
        kind = r.randrange(6)
        if kind == 0:
            return r.choice([0, 1, 2, 3, 7, 8, 31, 32, 63, 64, 65])
        if kind == 1:
            k = r.choice([7, 8, 15, 16, 31, 32, 47, 48, 62, 63, 64, 65, 70])
            return (1 << k) - r.choice([0, 1])
        if kind == 2:
            return -r.randrange(1, 1 << r.choice([3, 8, 31, 63, 64]))
        return r.randrange(1 << r.choice([4, 16, 32, 48, 64]))

    def integer(self, depth: int) -> dict[str, Any]:
        r = self.r
        if depth <= 0 or r.random() < 0.25:
            return _f(r.choice(IN_FIELDS)[0]) if r.random() < 0.75 else _hex(self.const())
        kind = r.randrange(10)
        if kind < 4:
            op = r.choice(["+", "-", "*", "&", "|", "^", "+", "-", "&"])
            return _e(op, self.integer(depth - 1), self.integer(depth - 1))
        if kind == 4:
            op = r.choice(["/", "%"])
            return _e(op, self.integer(depth - 1), self.integer(depth - 1))
        if kind == 5:
            op = r.choice(["<<", ">>"])
            count = (
                _hex(r.choice([0, 1, 3, 8, 31, 32, 63, 64, 65, 100]))
                if r.random() < 0.6
                else _f(r.choice(["a8", "j5", "i1"]))
            )
            return _e(op, self.integer(depth - 1), count)
        if kind == 6:
            return {"type": "expression", "value": {"op": "~", "left": None, "right": self.integer(depth - 1)}}
        if kind == 7:
            op = r.choice(["two_comp_mod", "sat_cast", "usat_cast"])
            return _e(op, self.integer(depth - 1), _hex(r.choice([1, 5, 8, 16, 31, 32, 48, 63, 64])))
        if kind == 8:
            return {
                "type": "expression",
                "value": {
                    "op": "?",
                    "left": self.integer(depth - 1),
                    "right": self.integer(depth - 1),
                    "cond": self.boolean(depth - 1),
                },
            }
        return {"type": "expression", "value": {"op": "b2d", "left": None, "right": self.boolean(depth - 1)}}

    def boolean(self, depth: int) -> dict[str, Any]:
        r = self.r
        kind = r.randrange(5)
        if depth <= 0 or kind == 0:
            return {
                "type": "expression",
                "value": {"op": "d2b", "left": None, "right": _f(r.choice(["i1", "a8", "j5"]))},
            }
        if kind <= 2:
            op = r.choice(["==", "!=", "<", ">", "<=", ">="])
            return _e(op, self.integer(depth - 1), self.integer(depth - 1))
        if kind == 3:
            return _e(r.choice(["and", "or"]), self.boolean(depth - 1), self.boolean(depth - 1))
        return {"type": "expression", "value": {"op": "not", "left": None, "right": self.boolean(depth - 1)}}


def program_doc(outputs: list[tuple[int, bool, dict[str, Any]]]) -> dict[str, Any]:
    """ingress: out_h.o<i> = expression i (p4c's masks added by the lowering), egress_spec = 1."""
    std = [
        ["ingress_port", 9, False],
        ["egress_spec", 9, False],
        ["egress_port", 9, False],
        ["instance_type", 32, False],
        ["packet_length", 32, False],
        ["mcast_grp", 16, False],
        ["egress_rid", 16, False],
        ["parser_error", 32, False],
        ["checksum_error", 1, False],
        ["_pad", 2, False],
    ]
    in_fields = [[n, w, s] for n, w, s in IN_FIELDS]
    in_bits = sum(w for _, w, _ in IN_FIELDS)
    in_fields.append(["pad", (-in_bits) % 8, False])
    out_fields = [[f"o{i}", w, s] for i, (w, s, _) in enumerate(outputs)]
    out_bits = sum(w for w, _, _ in outputs)
    if out_bits % 8:
        out_fields.append(["pad", (-out_bits) % 8, False])
    prims: list[dict[str, Any]] = [
        {"op": "assign", "parameters": [{"type": "field", "value": ["standard_metadata", "egress_spec"]}, _hex(1)]}
    ]
    for i, (_, _, expr) in enumerate(outputs):
        prims.append({"op": "assign", "parameters": [{"type": "field", "value": ["out_h", f"o{i}"]}, expr]})
    return {
        "header_types": [
            {"name": "scalars_0", "id": 0, "fields": []},
            {"name": "standard_metadata", "id": 1, "fields": std},
            {"name": "in_t", "id": 2, "fields": in_fields},
            {"name": "out_t", "id": 3, "fields": out_fields},
        ],
        "headers": [
            {"name": "scalars", "id": 0, "header_type": "scalars_0", "metadata": True},
            {"name": "standard_metadata", "id": 1, "header_type": "standard_metadata", "metadata": True},
            {"name": "in_h", "id": 2, "header_type": "in_t", "metadata": False},
            {"name": "out_h", "id": 3, "header_type": "out_t", "metadata": False},
        ],
        "parsers": [
            {
                "name": "parser",
                "id": 0,
                "init_state": "start",
                "parse_states": [
                    {
                        "name": "start",
                        "id": 0,
                        "parser_ops": [
                            {"op": "extract", "parameters": [{"type": "regular", "value": "in_h"}]},
                            {"op": "extract", "parameters": [{"type": "regular", "value": "out_h"}]},
                        ],
                        "transitions": [{"type": "default", "value": None, "mask": None, "next_state": None}],
                        "transition_key": [],
                    }
                ],
            }
        ],
        "deparsers": [{"name": "deparser", "id": 0, "order": ["in_h", "out_h"]}],
        "actions": [{"name": "compute", "id": 0, "runtime_data": [], "primitives": prims}],
        "pipelines": [
            {
                "name": "ingress",
                "id": 0,
                "init_table": "call",
                "tables": [],
                "conditionals": [],
                "action_calls": [{"name": "call", "id": 0, "action_id": 0, "next_node": None}],
            },
            {"name": "egress", "id": 1, "init_table": None, "tables": [], "conditionals": []},
        ],
        "errors": [["NoError", 0], ["PacketTooShort", 1]],
    }


def supported(out: tuple[int, bool, dict[str, Any]]) -> bool:
    """Whether the C emitter takes a program computing just this output (a refusal must be a CUnsupported)."""
    comp = codegen.compile_program(program.load(json.dumps(program_doc([out]))))
    try:
        cemit.emit(comp.module, cemit.Options())
    except cemit.CUnsupported:
        return False
    return True


def random_programs(seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    gen = Gen(rng)
    progs, refused = [], 0
    for _ in range(PROGRAMS):
        outs: list[tuple[int, bool, dict[str, Any]]] = []
        while len(outs) < EXPRS:
            w, s = rng.choice(OUT_WIDTHS)
            out = (w, s, gen.integer(rng.randint(1, 5)))
            if supported(out):
                outs.append(out)
            else:
                refused += 1
        progs.append((json.dumps(program_doc(outs)), len(outs)))
    assert refused < PROGRAMS * EXPRS, "the C engine refused nearly every expression"
    return progs


@pytest.mark.parametrize("seed", [1, 2])
def test_random_expressions_compute_the_same_on_both_engines(seed: int) -> None:
    if cbuild.toolchain() is None:
        pytest.skip("[cc] no C compiler (cc) on PATH: the C engine cannot be built")
    in_bytes = (sum(w for _, w, _ in IN_FIELDS) + 7) // 8
    rng = random.Random(seed * 7919)
    for raw, _exprs in random_programs(seed):
        c, py = SoftSwitch(engine="c"), SoftSwitch(engine="python")
        c.load_program(raw)
        py.load_program(raw)
        assert c.engine == "c" and py.engine == "python"
        out_bytes = len(py.process_packet(0, bytes(in_bytes + 64))[0][1]) - in_bytes
        c.process_packet(0, bytes(in_bytes + 64))
        for _ in range(PACKETS):
            head = bytes(
                rng.choice([0, 0xFF, rng.randrange(256)]) if rng.random() < 0.3 else rng.randrange(256)
                for _ in range(in_bytes)
            )
            pkt = head + bytes(out_bytes)
            want = py.process_packet(0, pkt)
            got = c.process_packet(0, pkt)
            assert got == want, (
                f"seed {seed}: packet {pkt.hex()}: C {got[0][1].hex() if got else got} != Python "
                f"{want[0][1].hex() if want else want}\nprogram: {raw[:2000]}"
            )
        assert c.stats == py.stats
