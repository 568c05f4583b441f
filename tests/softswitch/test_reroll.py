"""Lane runs (softswitch/compiler/reroll.py) on hand-made IR, and the C engine rolling p4ina's lanes into loops.

Whether the loops compute what the straight code did is the differential tests' job (test_cengine_differential:
p4ina.p4 and tests/softswitch/programs/lanes.p4 on both engines and BMv2); here: which runs are found, with
which strides, and which are refused (a temporary read after the run, a statement that reads the whole state).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from native import cbuild
from softswitch.compiler import cemit, codegen, ir, program, reroll
from softswitch.runtime import cengine

ROOT = Path(__file__).resolve().parents[2]
B = ir.BinOp


def lanes(pool: ir.Pool, n: int, *, const_at: int | None = None) -> list[ir.Stmt]:
    """n groups of: lane[j] = lane[j] + in[j] + c; reg[j][cell] = lane[j]; flag = flag | (lane[j] == 0)."""
    out: list[ir.Stmt] = []
    cell, flag = pool.field(1, 3, None), pool.field(2, 1, None)
    for j in range(n):
        lane, inp = pool.field(10 + j, 32, None), pool.field(100 + j, 32, None)
        c = pool.const(7 if j != const_at else 8)
        s = pool.binary(B.AND, pool.binary(B.ADD, pool.binary(B.ADD, lane, inp), c), pool.const(0xFFFFFFFF), bits=32)
        out.append(ir.Assign(10 + j, s))
        out.append(ir.RegWrite(40 + j, cell, pool.field(10 + j, 32, None)))
        out.append(
            ir.Assign(
                2,
                pool.binary(
                    B.OR, flag, pool.unary(ir.UnOp.B2D, pool.binary(B.EQ, lane, pool.const(0)), bits=1), bits=1
                ),
            )
        )
    return out


def test_a_run_of_lanes_is_found_with_each_leaf_s_stride() -> None:
    pool = ir.Pool()
    head = [ir.Assign(3, pool.const(1))]
    stmts = tuple(head + lanes(pool, 16) + [ir.Assign(4, pool.field(25, 32, None))])
    runs = reroll.find_runs(stmts, reroll.temp_refs(stmts))
    assert len(runs) == 1
    r = runs[0]
    assert (r.start, r.period, r.count, r.end) == (1, 3, 16, 49)
    assert r.slots[10] == 1 and r.slots[100] == 1  # the lanes and the inputs advance
    assert r.slots[1] == 0 and r.slots[2] == 0  # the cell and the flag every lane updates do not
    assert r.regs == {40: 1}


def test_a_group_that_differs_ends_the_run() -> None:
    pool = ir.Pool()
    stmts = tuple(lanes(pool, 20, const_at=9))
    runs = reroll.find_runs(stmts, reroll.temp_refs(stmts))
    # group 9's first statement (27) is unlike the others; the next run starts right after it, in phase with
    # what follows (a group of [register write, flag, next lane's sum]: any rotation of a group is one)
    assert [(r.start, r.period, r.count) for r in runs] == [(0, 3, 9), (28, 3, 10)]


def test_short_runs_stay_straight() -> None:
    pool = ir.Pool()
    stmts = tuple(lanes(pool, reroll.MIN_COUNT - 1))
    assert reroll.find_runs(stmts, reroll.temp_refs(stmts)) == []


def _with_temps(pool: ir.Pool, n: int) -> list[ir.Stmt]:
    out: list[ir.Stmt] = []
    for j in range(n):
        t = pool.temp(50 + j, pool.field(10 + j, 32, None))
        out.append(ir.Let(50 + j, pool.binary(B.ADD, pool.field(10 + j, 32, None), pool.const(1))))
        out.append(ir.Assign(100 + j, pool.binary(B.AND, t, pool.const(0xFFFFFFFF), bits=32)))
    return out


def test_temporaries_of_a_run_may_advance_but_not_be_read_after_it() -> None:
    pool = ir.Pool()
    body = _with_temps(pool, 12)
    stmts = tuple(body)
    (r,) = reroll.find_runs(stmts, reroll.temp_refs(stmts))
    assert r.temps[50] == 1 and r.count == 12
    last = pool.temp(61, pool.field(21, 32, None))
    after = tuple(body + [ir.Assign(7, last)])  # the last lane's temporary, read after the run
    assert reroll.find_runs(after, reroll.temp_refs(after)) == []


def test_two_temporaries_that_meet_in_a_later_group_refuse_the_run() -> None:
    """Lane j: t2000 = s[1+j]; t(2001-j) = s[49+j]; s[9+j] = t2000. In lane 1 the second Let redefines t2000,
    which a loop naming both by lane 0's temporaries would not (the straight code stores s50 into s10)."""
    pool = ir.Pool()
    stmts: list[ir.Stmt] = []
    for j in range(12):
        stmts.append(ir.Let(2000, pool.field(1 + j, 8, None)))
        stmts.append(ir.Let(2001 - j, pool.field(49 + j, 8, None)))
        stmts.append(ir.Assign(9 + j, pool.temp(2000, pool.field(1 + j, 8, None))))
    body = tuple(stmts)
    assert reroll.find_runs(body, reroll.temp_refs(body)) == []


def test_temporaries_are_counted_in_dags_without_walking_every_path() -> None:
    """A chain of 200 doublings shares each node: 2**200 paths, counted by node."""
    pool = ir.Pool()
    e: ir.Expr = pool.temp(5, pool.const(1))
    for _ in range(200):
        e = pool.binary(B.ADD, e, e)
    refs = reroll.temp_refs((ir.Assign(3, e),))
    assert refs[5] == 2**200


def test_a_statement_reading_the_whole_state_is_never_in_a_run() -> None:
    pool = ir.Pool()
    stmts = tuple(ir.Assign(10 + j, pool.binary(B.ADD, pool.hash(0), pool.field(100 + j, 32, None))) for j in range(16))
    assert reroll.find_runs(stmts, reroll.temp_refs(stmts)) == []


def _emitter(path: Path) -> cemit.CEmitter:
    comp = codegen.compile_program(program.load(path.read_bytes()))
    e = cemit.CEmitter(comp.module, cengine.options_for(comp))
    e.module()
    return e


def test_p4ina_s_lanes_become_loops() -> None:
    """accumulate, store, load, the widen and narrow actions and the lanes' parser and deparser, for each width."""
    e = _emitter(ROOT / "p4" / "build" / "p4ina.json")
    lanes_of = json.loads((ROOT / "p4" / "build" / "p4ina.json").read_text())
    widths = {h["name"] for h in lanes_of["header_types"] if h["name"].startswith("lanes")}
    assert len(widths) == 3
    assert e.lane_loops >= 3 * 2 + 8, e.lane_loops  # extract and emit per width, and the lane actions


def test_a_layout_the_loop_cannot_address_is_emitted_straight() -> None:
    """Advancing slots of different C types cannot be one array: no loop, and the straight code still emits."""
    e = _emitter(ROOT / "tests" / "softswitch" / "programs" / "lanes.json")
    assert e.lane_loops == 8
    pool = ir.Pool()
    r = reroll.Run(0, 1, 8, {0: 1}, {}, {})
    e.slot_types = [(32, False)] * 7 + [(16, False)] + e.slot_types[8:]  # slot 7 is not like slots 0-6
    stmts = tuple(ir.Assign(j, pool.const(1)) for j in range(8))
    assert not e.lane_loop(stmts, r, 1, ir.Lines())


def test_lane_loops_can_be_turned_off_for_a_target_with_another_struct_layout() -> None:
    comp = codegen.compile_program(
        program.load((ROOT / "tests" / "softswitch" / "programs" / "lanes.json").read_bytes())
    )
    e = cemit.CEmitter(comp.module, cemit.Options(lane_loops=False))
    src = e.module()
    assert e.lane_loops == 0 and "j_" not in src


def test_native_code_is_keyed_by_the_cpu_and_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    tc = cbuild.toolchain()
    if tc is None:
        pytest.skip("[cc] no C compiler (cc) on PATH")
    flags, cpu = cbuild._native(tc.cc)
    if flags:
        assert flags == ("-march=native",) and cpu.startswith(" native:") and cpu in tc.version
    monkeypatch.setenv("P4INA_SOFTSWITCH_NATIVE", "0")
    assert cbuild._native(tc.cc) == ((), "")
    monkeypatch.delenv("P4INA_SOFTSWITCH_NATIVE")
    assert cbuild._native("/bin/false") == ((), "")
