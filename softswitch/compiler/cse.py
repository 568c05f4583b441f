"""Temporaries on the IR: common-subexpression elimination, and spilling of deep expressions.

CSE: p4c's copy propagation hands BMv2 expression trees that repeat whole subtrees (the 64-lane
saturating add computes each lane's sum several times). Expressions are hash-consed (ir.Pool), so
a repeat is the same node; this pass computes a repeated pure subexpression once into a
temporary (`Let`, placed before the statement that first needs it) and reuses it while no slot it
reads has been written. Only straight-line code defines temporaries: not the arms of `?:`, not
the right side of `and`/`or`, not the body of an `if` (a body may only reuse what was computed
before it). Two passes: the first counts reuses, the second rewrites only what is reused.

Spilling: an expression nested deeper than SPILL_DEPTH has its deep subtrees computed into
temporaries first, so that no emitted expression exceeds what a compiler's parser accepts (Python
refuses about 200 nested parentheses). Every IR expression is pure and total (random draws
excepted, which are never moved), so computing a subtree early does not change what it yields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from softswitch.compiler import ir

SPILL_DEPTH = 40

Fresh = Callable[[ir.Expr], ir.Temp]


def _reads(e: ir.Expr, memo: dict[int, frozenset[int] | None]) -> frozenset[int] | None:
    """Slots e reads, or None when e is impure (its value depends on more than its operands)."""
    if e.nid in memo:
        return memo[e.nid]
    if isinstance(e, ir.IMPURE):
        out: frozenset[int] | None = None
    elif isinstance(e, ir.Field):
        out = frozenset((e.slot,))
    else:
        acc: set[int] = set()
        out = frozenset()
        for k in e.children():
            r = _reads(k, memo)
            if r is None:
                out = None
                break
            acc |= r
        else:
            out = frozenset(acc)
    memo[e.nid] = out
    return out


_ATOMS = (ir.Const, ir.Bool, ir.Field, ir.Param, ir.Temp)


def _writes(stmts: tuple[ir.Stmt, ...] | list[ir.Stmt]) -> set[int] | None:
    """Slots the statements may write; None for 'anything' (a loop)."""
    out: set[int] = set()
    for s in stmts:
        if isinstance(s, ir.Assign):
            out.add(s.slot)
        elif isinstance(s, ir.CopyFields):
            out.update(range(s.dst, s.dst + s.count))
        elif isinstance(s, ir.ZeroFields):
            out.update(range(s.first, s.first + s.count))
        elif isinstance(s, ir.SwapFields):
            out.update(range(s.a, s.a + s.count))
            out.update(range(s.b, s.b + s.count))
        elif isinstance(s, ir.If):
            for part in (s.then, s.orelse):
                w = _writes(part)
                if w is None:
                    return None
                out |= w
        elif isinstance(s, (ir.Loop, ir.Block)):
            return None
    return out


@dataclass
class _State:
    avail: dict[int, int] = field(default_factory=dict)  # node id -> generation
    by_slot: dict[int, set[int]] = field(default_factory=dict)  # slot read -> node ids

    def add(self, nid: int, gen: int, reads: frozenset[int]) -> None:
        self.avail[nid] = gen
        for slot in reads:
            self.by_slot.setdefault(slot, set()).add(nid)

    def invalidate(self, slots: set[int] | None) -> None:
        if slots is None:
            self.avail.clear()
            self.by_slot.clear()
            return
        for slot in slots:
            for nid in self.by_slot.pop(slot, ()):
                self.avail.pop(nid, None)


class _Pass:
    """Pass 1 (rewrite=False) counts the uses of each generation; pass 2 rewrites the ones used twice."""

    def __init__(self, rewrite: bool, uses: dict[int, int], temps: dict[int, ir.Temp], fresh: Fresh) -> None:
        self.rewrite = rewrite
        self.uses = uses
        self.temps = temps  # generation -> its temporary (pass 2)
        self.fresh = fresh
        self.reads: dict[int, frozenset[int] | None] = {}
        self.pool_rebuild: dict[int, ir.Expr] = {}
        self.next_gen = 0
        self.lets: list[ir.Stmt] = []

    def expr(self, e: ir.Expr, st: _State, certain: bool, pool: ir.Pool) -> ir.Expr:
        candidate = not isinstance(e, _ATOMS) and _reads(e, self.reads) is not None
        if candidate:
            gen = st.avail.get(e.nid)
            if gen is not None:  # reused whole: its children are not looked at again
                if not self.rewrite:
                    self.uses[gen] = self.uses.get(gen, 1) + 1
                    return e
                return self.temps[gen]
        # a first occurrence: children first, so their own repeats are found
        out = self._children(e, st, certain, pool)
        if not candidate or not certain:
            return out
        gen = self.next_gen
        self.next_gen += 1
        st.add(e.nid, gen, _reads(e, self.reads) or frozenset())
        if self.rewrite and self.uses.get(gen, 1) >= 2:
            t = self.fresh(out)
            self.temps[gen] = t
            self.lets.append(ir.Let(t.index, out))
            return t
        return out

    def _children(self, e: ir.Expr, st: _State, certain: bool, pool: ir.Pool) -> ir.Expr:
        if isinstance(e, ir.Mux):
            c = self.expr(e.cond, st, certain, pool)
            a = self.expr(e.a, st, False, pool)
            b = self.expr(e.b, st, False, pool)
            return e if not self.rewrite else rebuild(pool, e, (c, a, b))
        if isinstance(e, ir.Binary) and e.op in ir.LOGICAL:
            a = self.expr(e.a, st, certain, pool)
            b = self.expr(e.b, st, False, pool)
            return e if not self.rewrite else rebuild(pool, e, (a, b))
        kids = e.children()
        if not kids:
            return e
        new = tuple(self.expr(k, st, certain, pool) for k in kids)
        return e if not self.rewrite else rebuild(pool, e, new)

    def block(self, stmts: tuple[ir.Stmt, ...], st: _State, straight: bool, pool: ir.Pool) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in stmts:
            self.lets = []
            s2 = self.stmt(s, st, straight, pool)
            out.extend(self.lets)
            out.append(s2)
            st.invalidate(_writes([s]))
        return tuple(out)

    def stmt(self, s: ir.Stmt, st: _State, straight: bool, pool: ir.Pool) -> ir.Stmt:
        def ex(e: ir.Expr) -> ir.Expr:
            return self.expr(e, st, straight, pool)

        if isinstance(s, ir.Assign):
            return ir.Assign(s.slot, ex(s.value))
        if isinstance(s, ir.Let):
            return ir.Let(s.temp, ex(s.value))
        if isinstance(s, ir.If):
            cond = ex(s.cond)
            lets = self.lets
            then = self.block(s.then, st, False, pool)
            orelse = self.block(s.orelse, st, False, pool)
            self.lets = lets
            return ir.If(cond, then, orelse)
        if isinstance(s, ir.RegWrite):
            return ir.RegWrite(s.reg, ex(s.index), ex(s.value))
        if isinstance(s, ir.Count):
            return ir.Count(s.counter, ex(s.index), s.bytes_slot)
        return s  # Return, Fail, CopyFields, ZeroFields, Loop (opaque: its writes clear everything)


def rebuild(pool: ir.Pool, e: ir.Expr, kids: tuple[ir.Expr, ...]) -> ir.Expr:
    """e with new children (the same node when they did not change)."""
    if all(a is b for a, b in zip(kids, e.children())):
        return e
    if isinstance(e, ir.Binary):
        return pool.binary(e.op, kids[0], kids[1], bits=e.bits, swidth=e.swidth)
    if isinstance(e, ir.Unary):
        return pool.unary(e.op, kids[0], bits=e.bits)
    if isinstance(e, ir.Mux):
        return pool.mux(kids[0], kids[1], kids[2])
    if isinstance(e, ir.Clamp):
        return pool.clamp(kids[0], e.lo, e.hi, e.bits, e.swidth)
    if isinstance(e, ir.SignWrap):
        return pool.sign_wrap(kids[0], e.width)
    if isinstance(e, ir.InRange):
        return pool.in_range(kids[0], e.size, e.nonneg)
    if isinstance(e, ir.RegRead):
        return pool.reg_read(e.reg, kids[0], e.bits or 0)
    if isinstance(e, ir.Random):
        return e  # never rebuilt: a draw keeps its identity
    raise ir.IRError(f"cannot rebuild {type(e).__name__}")


def eliminate(body: tuple[ir.Stmt, ...], pool: ir.Pool, fresh: Fresh) -> tuple[ir.Stmt, ...]:
    """body with repeated pure subexpressions computed once into temporaries."""
    uses: dict[int, int] = {}
    _Pass(False, uses, {}, fresh).block(body, _State(), True, pool)
    if not any(n >= 2 for n in uses.values()):
        return body
    return _Pass(True, uses, {}, fresh).block(body, _State(), True, pool)


# ---------------------------------------------------------------------------------------------
# Spilling


class Spiller:
    """Moves subtrees of over-deep expressions into temporaries placed before their statement."""

    def __init__(self, pool: ir.Pool, fresh: Fresh, max_depth: int = SPILL_DEPTH) -> None:
        self.pool = pool
        self.fresh = fresh
        self.max_depth = max_depth
        self.depths: dict[int, int] = {}

    def expr(self, e: ir.Expr, lets: list[ir.Stmt]) -> ir.Expr:
        if ir.depth(e, self.depths) <= self.max_depth:
            return e
        return self._spill(e, lets)

    def _spill(self, e: ir.Expr, lets: list[ir.Stmt]) -> ir.Expr:
        # bottom-up: every subtree that reaches max_depth becomes a temporary
        def combine(n: ir.Expr, kids: list[ir.Expr]) -> ir.Expr:
            new = rebuild(self.pool, n, tuple(kids)) if kids else n
            if ir.depth(new, self.depths) >= self.max_depth and not isinstance(new, ir.Random):
                t = self.fresh(new)
                lets.append(ir.Let(t.index, new))
                new = t
            return new

        return ir.fold(e, {}, combine)

    def block(self, stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in stmts:
            lets: list[ir.Stmt] = []
            s2 = self.stmt(s, lets)
            out.extend(lets)
            out.append(s2)
        return tuple(out)

    def stmt(self, s: ir.Stmt, lets: list[ir.Stmt]) -> ir.Stmt:
        def ex(e: ir.Expr) -> ir.Expr:
            return self.expr(e, lets)

        if isinstance(s, ir.Assign):
            return ir.Assign(s.slot, ex(s.value))
        if isinstance(s, ir.Let):
            return ir.Let(s.temp, ex(s.value))
        if isinstance(s, ir.If):
            return ir.If(ex(s.cond), self.block(s.then), self.block(s.orelse))
        if isinstance(s, ir.RegWrite):
            return ir.RegWrite(s.reg, ex(s.index), ex(s.value))
        if isinstance(s, ir.Count):
            return ir.Count(s.counter, ex(s.index), s.bytes_slot)
        if isinstance(s, ir.Verify):
            return ir.Verify(ex(s.cond), ex(s.error))
        if isinstance(s, ir.Advance):
            return ir.Advance(ex(s.nbytes), s.short_error)
        if isinstance(s, ir.GotoUnless):
            return ir.GotoUnless(ex(s.cond), s.target)
        if isinstance(s, ir.Loop):
            return ir.Loop(
                tuple(ir.Block(b.start, self.block(b.body), b.fall) for b in s.blocks), s.end, s.limit, s.message
            )
        return s
