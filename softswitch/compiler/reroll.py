"""Runs of isomorphic statements: the lane loops that p4c unrolled, found again for an emitter to roll up.

P4 has no loops, so a program that treats 256 lanes alike (p4ina's accumulate, store, load, widen,
narrow) spells every lane out, and p4c's BMv2 JSON keeps it that way: thousands of statements that
differ only in which field, register and temporary they name. Emitted straight, that is tens of
kilobytes of machine code per action, more than a core's instruction cache, executed once per
packet. This pass finds such a run in a statement list: `count` consecutive groups of `period`
statements, group j being group 0 with every slot, register and temporary number advanced by j
times a stride of its own (0 for what all groups share, such as the cell index or a flag they all
update). An emitter can then emit group 0 once inside a loop over j, addressing the advancing slots
and registers as arrays, which does exactly what the straight code did, in the same order.

Only plain statements qualify (assignments, temporaries, ifs, register writes) over plain
expressions (no hash, stack field, lookahead or random draw). Temporaries defined in a run must not
be read outside it (a loop leaves only the last group's value in group 0's temporary). The pass
knows nothing of how an emitter lays slots out; the emitter checks that the advancing slots and
registers are evenly spaced in its layout and emits the run straight when they are not.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from softswitch.compiler import ir

MIN_COUNT = 8  # fewer groups than this stay straight (a loop's overhead is not worth it)
MAX_PERIOD = 32  # statements per group tried
MAX_TOKENS = 4096  # a statement larger than this (as a tree) is never part of a run

Leaf = tuple[str, int]  # ("S", slot) | ("R", register) | ("T", temporary)


@dataclass(frozen=True)
class Run:
    """stmts[start : start + period * count] is `count` groups; group j advances each leaf by j * stride."""

    start: int
    period: int
    count: int
    slots: dict[int, int]  # slot named by group 0 -> stride
    regs: dict[int, int]  # register named by group 0 -> stride
    temps: dict[int, int]  # temporary named by group 0 -> stride

    @property
    def end(self) -> int:
        return self.start + self.period * self.count


class _TooBig(Exception):
    pass


class _Shape:
    """A statement as a structure (hashable: what must be equal) and its leaves (what may advance)."""

    def __init__(self) -> None:
        self.struct: list[object] = []
        self.leaves: list[Leaf] = []
        self.lets: list[int] = []

    def tok(self, *t: object) -> None:
        self.struct.append(t)
        if len(self.struct) > MAX_TOKENS:
            raise _TooBig

    def leaf(self, kind: str, n: int) -> None:
        self.tok(kind)
        self.leaves.append((kind, n))

    def stmt(self, s: ir.Stmt) -> bool:
        if isinstance(s, ir.Assign):
            self.tok("A")
            self.leaf("S", s.slot)
            return self.expr(s.value)
        if isinstance(s, ir.Let):
            self.tok("L")
            self.leaf("T", s.temp)
            self.lets.append(s.temp)
            return self.expr(s.value)
        if isinstance(s, ir.If):
            self.tok("I", len(s.then), len(s.orelse))
            return self.expr(s.cond) and all(self.stmt(x) for x in s.then) and all(self.stmt(x) for x in s.orelse)
        if isinstance(s, ir.RegWrite):
            self.tok("W")
            self.leaf("R", s.reg)
            return self.expr(s.index) and self.expr(s.value)
        return False

    def expr(self, e: ir.Expr) -> bool:
        stack = [e]
        while stack:
            n = stack.pop()
            if isinstance(n, ir.Const):
                self.tok("C", n.value)
            elif isinstance(n, ir.Bool):
                self.tok("B", n.value)
            elif isinstance(n, ir.Field):
                self.tok("F", n.bits, n.swidth)
                self.leaf("S", n.slot)
            elif isinstance(n, ir.Param):
                self.tok("P", n.index, n.bits)
            elif isinstance(n, ir.Temp):
                self.tok("t", n.bits, n.swidth, n.is_bool)
                self.leaf("T", n.index)
            elif isinstance(n, ir.Binary):
                self.tok("b", n.op, n.bits, n.swidth)
            elif isinstance(n, ir.Unary):
                self.tok("u", n.op, n.bits)
            elif isinstance(n, ir.Mux):
                self.tok("m", n.bits, n.swidth, n.is_bool)
            elif isinstance(n, ir.Clamp):
                self.tok("c", n.lo, n.hi, n.bits, n.swidth)
            elif isinstance(n, ir.SignWrap):
                self.tok("w", n.width)
            elif isinstance(n, ir.InRange):
                self.tok("r", n.size, n.nonneg)
            elif isinstance(n, ir.RegRead):
                self.tok("g", n.bits)
                self.leaf("R", n.reg)
            else:  # hash, stack field, lookahead, random: they read more than their operands
                return False
            stack.extend(reversed(n.children()))
        return True


def _shape(s: ir.Stmt) -> _Shape | None:
    sh = _Shape()
    try:
        return sh if sh.stmt(s) else None
    except _TooBig:
        return None


def temp_refs(
    stmts: tuple[ir.Stmt, ...] | list[ir.Stmt], memo: dict[int, dict[int, int]] | None = None
) -> Counter[int]:
    """How often each temporary is named (defined or read, counted as in the expression trees) in these statements,
    nested ones included. Counted per shared node once (memo by node id): expressions are DAGs."""
    memo = {} if memo is None else memo
    out: Counter[int] = Counter()
    stack: list[ir.Stmt] = list(stmts)
    while stack:
        s = stack.pop()
        if isinstance(s, ir.Let):
            out[s.temp] += 1
        exprs, nested = ir.stmt_parts(s)
        stack.extend(nested)
        for e in exprs:
            out.update(_expr_temps(e, memo))
    return out


_NONE: dict[int, int] = {}


def _expr_temps(e: ir.Expr, memo: dict[int, dict[int, int]]) -> dict[int, int]:
    """Temporaries in e, each as often as it occurs in e's tree (memoised by node id; most nodes have none and
    share one empty dict)."""

    def combine(n: ir.Expr, kids: list[dict[int, int]]) -> dict[int, int]:
        full = [k for k in kids if k]
        if isinstance(n, ir.Temp):
            return {n.index: 1}
        if not full:
            return _NONE
        if len(full) == 1:
            return full[0]
        out: dict[int, int] = {}
        for k in full:
            for t, c in k.items():
                out[t] = out.get(t, 0) + c
        return out

    return ir.fold(e, memo, combine)


def _strides(shapes: list[_Shape | None], start: int, period: int) -> dict[Leaf, int] | None:
    """Each leaf of group 0 (at `start`) and its stride, from group 1; None when they are inconsistent."""
    out: dict[Leaf, int] = {}
    for k in range(period):
        a, b = shapes[start + k], shapes[start + period + k]
        assert a is not None and b is not None
        for (kind, x), (_, y) in zip(a.leaves, b.leaves):
            d = out.setdefault((kind, x), y - x)
            if d != y - x:
                return None
    return out


def _group_fits(shapes: list[_Shape | None], start: int, period: int, j: int, strides: dict[Leaf, int]) -> bool:
    base = start + j * period
    for k in range(period):
        a, b = shapes[start + k], shapes[base + k]
        if b is None or a is None or b.struct != a.struct:
            return False
        for (kind, x), (_, y) in zip(a.leaves, b.leaves):
            if y != x + j * strides[(kind, x)]:
                return False
    return True


def _temps_ok(
    stmts: tuple[ir.Stmt, ...],
    shapes: list[_Shape | None],
    run: tuple[int, int, int],
    strides: dict[Leaf, int],
    refs: Counter[int],
    memo: dict[int, dict[int, int]],
) -> bool:
    """Temporaries: those defined in the run are read only inside it; the others do not advance; and two of group
    0's temporaries never become one in a later group (the loop names each by group 0's, so they must stay apart)."""
    start, period, count = run
    defined0 = {t for k in range(period) for t in shapes[start + k].lets}  # type: ignore[union-attr]
    seen: dict[int, int] = {}
    for (kind, x), d in strides.items():
        if kind != "T":
            continue
        if d != 0 and x not in defined0:
            return False
        for j in range(count):
            if seen.setdefault(x + j * d, x) != x:
                return False
    inside = temp_refs(stmts[start : start + period * count], memo)
    defined = {t for i in range(start, start + period * count) for t in shapes[i].lets}  # type: ignore[union-attr]
    return all(refs[t] <= inside[t] for t in defined)


def find_runs(
    stmts: tuple[ir.Stmt, ...],
    refs: Counter[int],
    min_count: int = MIN_COUNT,
    max_period: int = MAX_PERIOD,
    memo: dict[int, dict[int, int]] | None = None,
) -> list[Run]:
    """The runs in stmts, left to right, none overlapping; `refs` counts temporaries over the whole function
    (temp_refs; `memo` is the one it used, if the caller kept it)."""
    memo = {} if memo is None else memo
    n = len(stmts)
    if n < 2 * min_count:
        return []
    shapes = [_shape(s) for s in stmts]
    keys = [None if sh is None else (tuple(sh.struct), len(sh.leaves)) for sh in shapes]
    runs: list[Run] = []
    i = 0
    while i < n:
        best: tuple[int, int, dict[Leaf, int]] | None = None  # (period, count, strides)
        for p in range(1, max_period + 1):
            if i + p * min_count > n:
                break
            if any(keys[i + k] is None or keys[i + k] != keys[i + p + k] for k in range(p)):
                continue
            strides = _strides(shapes, i, p)
            if strides is None or all(d == 0 for d in strides.values()):
                continue
            count = 2
            while i + (count + 1) * p <= n and _group_fits(shapes, i, p, count, strides):
                count += 1
            if count < min_count or (best is not None and count * p <= best[0] * best[1]):
                continue
            if not _temps_ok(stmts, shapes, (i, p, count), strides, refs, memo):
                continue
            best = (p, count, strides)
        if best is None:
            i += 1
            continue
        p, count, strides = best
        runs.append(
            Run(
                i,
                p,
                count,
                {x: d for (k, x), d in strides.items() if k == "S"},
                {x: d for (k, x), d in strides.items() if k == "R"},
                {x: d for (k, x), d in strides.items() if k == "T"},
            )
        )
        i += p * count
    return runs
