"""The Python emitter: an `ir.Module` as Python source, compiled once per program.

The emitter reads only the IR, which holds ints, enums and numbers (ir.check_module runs first):
every piece of text it writes is one of its own templates with integers formatted into it by
`_n`, which refuses anything but a plain int. Identifiers are made from numbers (`a_3`, `n_12`,
`f57`, `_t4`); the objects the code refers to (structs, slot lists, hash functions) are built by
the emitter from ints and handed over in `PyModule.constants`, and the runtime (switch.py) adds
the per-switch state (tables, registers, counters) under names made the same way.

Generated code, for speed:

* `parse(F, D) -> int`: the parser as one loop over states; extract unpacks a header with a
  precompiled struct (or one big-int split); returns the number of bytes parsed and sets
  parser_error / checksum_error like simple_switch.
* one function per action `a_<n>(F, P)`: straight-line Python (if/else where p4c emitted
  _jump/_jump_if_zero); the slots an action touches live in Python locals and are written back
  at the end, so a 64-lane action costs local-variable arithmetic, not list indexing. Common
  subexpressions are already temporaries (cse.py).
* one function per control node (table, conditional, action call) returning the next node, run
  by a trampoline per pipeline (`run_ingress`, `run_egress`).
* `deparse(F, payload) -> bytes`: checksum updates, then the valid headers in order.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from softswitch.compiler import hashing, ir

# What generated code may call besides the objects in its namespace: exec gets exactly these builtins.
BUILTINS: dict[str, Any] = {"len": len, "int": int, "min": min, "max": max}
PIPELINE_FUNCTIONS = ("run_ingress", "run_egress")

_BIN = {
    ir.BinOp.ADD: "+",
    ir.BinOp.SUB: "-",
    ir.BinOp.MUL: "*",
    ir.BinOp.AND: "&",
    ir.BinOp.OR: "|",
    ir.BinOp.XOR: "^",
    ir.BinOp.EQ: "==",
    ir.BinOp.NE: "!=",
    ir.BinOp.GT: ">",
    ir.BinOp.GE: ">=",
    ir.BinOp.LT: "<",
    ir.BinOp.LE: "<=",
    ir.BinOp.LAND: "and",
    ir.BinOp.LOR: "or",
}
_STRUCT_CODES = {8: "B", 16: "H", 32: "I", 64: "Q"}
_RETURN = "\x00return"  # placeholder for an early return of a function with cached slots


def _n(value: Any) -> str:
    """An integer as source text; the only way a number from the IR becomes text."""
    if type(value) is not int:
        raise ir.IRError(f"the emitter was given a {type(value).__name__} where an int belongs")
    return str(value)


def _mask(w: int) -> int:
    return (1 << w) - 1


@dataclass(frozen=True)
class PyModule:
    source: str
    constants: dict[str, Any]


@dataclass
class _Fn:
    """One generated function: whether slots are cached in locals, and which."""

    cached: bool
    used: set[int] = field(default_factory=set)
    written: set[int] = field(default_factory=set)

    def ref(self, slot: int) -> str:
        if not self.cached:
            return f"F[{_n(slot)}]"
        self.used.add(slot)
        return f"f{_n(slot)}"

    def store(self, slot: int) -> str:
        if self.cached:
            self.written.add(slot)
        return self.ref(slot)

    def epilogue(self) -> list[str]:
        return [f"F[{_n(s)}] = f{_n(s)}" for s in sorted(self.written)]


class Emitter:
    def __init__(self, module: ir.Module) -> None:
        self.m = module
        self.out = ir.Lines()
        self.constants: dict[str, Any] = {}
        self._stack_lists: dict[tuple[int, ...], str] = {}
        self._structs: dict[str, str] = {}

    # ------------------------------------------------------------------ expressions
    def ex(self, e: ir.Expr, fn: _Fn) -> str:
        if isinstance(e, ir.Const):
            return _n(e.value)
        if isinstance(e, ir.Bool):
            return "True" if e.value is True else "False"
        if isinstance(e, ir.Field):
            return fn.ref(e.slot)
        if isinstance(e, ir.Param):
            return f"P[{_n(e.index)}]"
        if isinstance(e, ir.Temp):
            return f"_t{_n(e.index)}"
        if isinstance(e, ir.Binary):
            a, b = self.ex(e.a, fn), self.ex(e.b, fn)
            op = e.op
            if op in _BIN:
                return f"({a} {_BIN[op]} {b})"
            if op is ir.BinOp.SHL:
                if isinstance(e.b, ir.Const) and 0 <= e.b.value <= ir.MAX_SHIFT:
                    return f"({a} << {b})"
                return f"_shl({a}, {b})"
            if op is ir.BinOp.SHR:
                if isinstance(e.b, ir.Const) and e.b.value >= 0:
                    return f"({a} >> {b})"
                return f"_shr({a}, {b})"
            if op is ir.BinOp.DIV:
                return f"_div({a}, {b})"
            if op is ir.BinOp.MOD:
                return f"_mod({a}, {b})"
            raise ir.IRError(f"unknown binary operator {op!r}")
        if isinstance(e, ir.Unary):
            a = self.ex(e.a, fn)
            if e.op is ir.UnOp.NOT:
                return f"(not {a})"
            if e.op is ir.UnOp.INV:
                return f"(~{a})"
            if e.op is ir.UnOp.D2B:
                return f"({a} != 0)"
            if e.op is ir.UnOp.B2D:
                return f"(1 if {a} else 0)"
            raise ir.IRError(f"unknown unary operator {e.op!r}")
        if isinstance(e, ir.Mux):
            return f"({self.ex(e.a, fn)} if {self.ex(e.cond, fn)} else {self.ex(e.b, fn)})"
        if isinstance(e, ir.Clamp):
            return f"min(max({self.ex(e.a, fn)}, {_n(e.lo)}), {_n(e.hi)})"
        if isinstance(e, ir.SignWrap):
            h = 1 << (e.width - 1)
            return f"((({self.ex(e.a, fn)} + {_n(h)}) & {_n(_mask(e.width))}) - {_n(h)})"
        if isinstance(e, ir.InRange):
            a = self.ex(e.a, fn)
            return f"({a} < {_n(e.size)})" if e.nonneg else f"(0 <= {a} < {_n(e.size)})"
        if isinstance(e, ir.StackField):
            if fn.cached:
                raise ir.IRError("stack field in a function with cached slots")
            return f"F[{self.stack_list(e.slots)}[F[{_n(e.next_slot)}]]]"
        if isinstance(e, ir.Lookahead):
            nb = _n(e.nbytes)
            data = f"D[o:o + {nb}].ljust({nb}, b'\\x00')" if e.padded else f"D[o:o + {nb}]"
            shift = e.nbytes * 8 - e.offset - e.width
            return f"((int.from_bytes({data}, 'big') >> {_n(shift)}) & {_n(_mask(e.width))})"
        if isinstance(e, ir.Hash):
            return f"calc_{_n(e.calc)}(F)"
        if isinstance(e, ir.RegRead):
            return f"R{_n(e.reg)}[{self.ex(e.index, fn)}]"
        if isinstance(e, ir.Random):
            return f"_rand({self.ex(e.lo, fn)}, {self.ex(e.hi, fn)})"
        raise ir.IRError(f"unknown expression {type(e).__name__}")

    def stack_list(self, slots: tuple[int, ...]) -> str:
        name = self._stack_lists.get(slots)
        if name is None:
            name = f"SF_{_n(len(self._stack_lists))}"
            self._stack_lists[slots] = name
            self.constants[name] = tuple(ir.check_int(s, "slot") for s in slots)
        return name

    def struct_for(self, shape: ir.HeaderShape) -> str | None:
        codes = []
        for w, signed in zip(shape.widths, shape.signed):
            c = _STRUCT_CODES.get(w)
            if c is None:
                return None
            codes.append(c.lower() if signed else c)
        if not codes:
            return None
        fmt = ">" + "".join(codes)
        name = self._structs.get(fmt)
        if name is None:
            name = f"S_{_n(len(self._structs))}"
            self._structs[fmt] = name
            self.constants[name] = struct.Struct(fmt)
        return name

    # ------------------------------------------------------------------ statements
    def block(self, stmts: tuple[ir.Stmt, ...], ind: int, fn: _Fn, em: ir.Lines) -> None:
        start = len(em.lines)
        for s in stmts:
            self.stmt(s, ind, fn, em)
        if len(em.lines) == start:
            em(ind, "pass")

    def stmt(self, s: ir.Stmt, ind: int, fn: _Fn, em: ir.Lines) -> None:
        if isinstance(s, ir.Assign):
            em(ind, f"{fn.store(s.slot)} = {self.ex(s.value, fn)}")
        elif isinstance(s, ir.Let):
            em(ind, f"_t{_n(s.temp)} = {self.ex(s.value, fn)}")
        elif isinstance(s, ir.If):
            em(ind, f"if {self.ex(s.cond, fn)}:")
            self.block(s.then, ind + 1, fn, em)
            if s.orelse:
                em(ind, "else:")
                self.block(s.orelse, ind + 1, fn, em)
        elif isinstance(s, ir.Return):
            # the write-back is known only once the whole function is emitted: see action()
            em(ind, _RETURN if fn.cached else "return")
        elif isinstance(s, ir.CopyFields):
            if fn.cached:
                for j in range(s.count):
                    em(ind, f"{fn.store(s.dst + j)} = {fn.ref(s.src + j)}")
            else:
                em(ind, f"F[{_n(s.dst)}:{_n(s.dst + s.count)}] = F[{_n(s.src)}:{_n(s.src + s.count)}]")
        elif isinstance(s, ir.SwapFields):
            if fn.cached:
                for j in range(s.count):
                    a, b = fn.store(s.a + j), fn.store(s.b + j)
                    em(ind, f"{a}, {b} = {b}, {a}")
            else:
                ra = f"F[{_n(s.a)}:{_n(s.a + s.count)}]"
                rb = f"F[{_n(s.b)}:{_n(s.b + s.count)}]"
                em(ind, f"{ra}, {rb} = {rb}, {ra}")
        elif isinstance(s, ir.ZeroFields):
            if fn.cached:
                for j in range(s.count):
                    em(ind, f"{fn.store(s.first + j)} = 0")
            else:
                em(ind, f"F[{_n(s.first)}:{_n(s.first + s.count)}] = {self.zeros(s.count)}")
        elif isinstance(s, ir.RegWrite):
            em(ind, f"R{_n(s.reg)}[{self.ex(s.index, fn)}] = {self.ex(s.value, fn)}")
        elif isinstance(s, ir.Count):
            i = self.ex(s.index, fn)
            em(ind, f"CP{_n(s.counter)}[{i}] += 1")
            em(ind, f"CB{_n(s.counter)}[{i}] += {fn.ref(s.bytes_slot)}")
        elif isinstance(s, ir.Fail):
            em(ind, f"raise ProgramAssertion({_n(s.message)})")
        elif isinstance(s, ir.Loop):
            self.loop(s, ind, fn, em)
        elif isinstance(s, ir.Goto):
            em(ind, f"pc = {_n(s.target)}")
            em(ind, "continue")
        elif isinstance(s, ir.GotoUnless):
            em(ind, f"if not {self.ex(s.cond, fn)}:")
            em(ind + 1, f"pc = {_n(s.target)}")
            em(ind + 1, "continue")
        elif isinstance(s, ir.Extract):
            self.extract(s.header, s.short_error, ind, em)
        elif isinstance(s, ir.ExtractStack):
            nxt = _n(s.next_slot)
            em(ind, f"if F[{nxt}] >= {_n(len(s.headers))}:")
            em(ind + 1, f"err = {_n(s.full_error)}")
            em(ind + 1, "break")
            for j, h in enumerate(s.headers):
                em(ind, f"{'if' if j == 0 else 'elif'} F[{nxt}] == {_n(j)}:")
                self.extract(h, s.short_error, ind + 1, em)
            em(ind, f"F[{nxt}] += 1")
        elif isinstance(s, ir.Require):
            em(ind, f"if L - o < {_n(s.nbytes)}:")
            em(ind + 1, f"err = {_n(s.error)}")
            em(ind + 1, "break")
        elif isinstance(s, ir.Verify):
            em(ind, f"if not {self.ex(s.cond, fn)}:")
            em(ind + 1, f"err = {self.ex(s.error, fn)}")
            em(ind + 1, "break")
        elif isinstance(s, ir.Advance):
            em(ind, f"_adv = {self.ex(s.nbytes, fn)}")
            # BMv2 takes the count as unsigned: a negative one runs past the end, as in the C engine
            em(ind, "if _adv < 0 or L - o < _adv:")
            em(ind + 1, f"err = {_n(s.short_error)}")
            em(ind + 1, "break")
            em(ind, "o += _adv")
        else:
            raise ir.IRError(f"unknown statement {type(s).__name__}")

    def zeros(self, n: int) -> str:
        name = f"Z_{_n(n)}"
        self.constants[name] = [0] * n
        return name

    def loop(self, s: ir.Loop, ind: int, fn: _Fn, em: ir.Lines) -> None:
        em(ind, "pc = 0")
        em(ind, "steps = 0")
        em(ind, "while True:")
        em(ind + 1, "steps += 1")
        em(ind + 1, f"if steps > {_n(s.limit)}:")
        em(ind + 2, f"raise ProgramAssertion({_n(s.message)})")
        for bi, b in enumerate(s.blocks):
            em(ind + 1, f"{'if' if bi == 0 else 'elif'} pc == {_n(b.start)}:")
            self.block(b.body, ind + 2, fn, em)
            if not (b.body and isinstance(b.body[-1], ir.Goto)):
                em(ind + 2, f"pc = {_n(b.fall)}")
                em(ind + 2, "continue")
        em(ind + 1, "else:" if s.blocks else "if True:")
        em(ind + 2, "return")

    def extract(self, h: ir.HeaderShape, short: int, ind: int, em: ir.Lines) -> None:
        nb = _n(h.nbytes)
        em(ind, f"if L - o < {nb}:")
        em(ind + 1, f"err = {_n(short)}")
        em(ind + 1, "break")
        f0 = h.first
        name = self.struct_for(h)
        if name is not None:
            em(ind, f"F[{_n(f0)}:{_n(f0 + len(h.widths))}] = {name}.unpack_from(D, o)")
        elif h.widths:
            em(ind, f"x = int.from_bytes(D[o:o + {nb}], 'big')")
            shift = sum(h.widths)
            for j, (w, signed) in enumerate(zip(h.widths, h.signed)):
                shift -= w
                val = f"(x >> {_n(shift)})" if shift else "x"
                if j:
                    val = f"({val} & {_n(_mask(w))})"
                if signed:
                    half = 1 << (w - 1)
                    val = f"(({val} ^ {_n(half)}) - {_n(half)})"
                em(ind, f"F[{_n(f0 + j)}] = {val}")
        em(ind, f"F[{_n(h.valid)}] = 1")
        for sib in h.siblings:
            em(ind, f"F[{_n(sib)}] = 0")
        em(ind, f"o += {nb}")

    # ------------------------------------------------------------------ functions
    def action(self, k: int, a: ir.Action) -> None:
        fn = _Fn(cached=_cacheable(a.body))
        body = ir.Lines()
        self.block(a.body, 1, fn, body)
        em = self.out
        em(0, f"def a_{_n(k)}(F, P):")
        for s in sorted(fn.used):
            em(1, f"f{_n(s)} = F[{_n(s)}]")
        epilogue = fn.epilogue()
        for line in body.lines:
            if line.endswith(_RETURN):
                pad = line[: -len(_RETURN)]
                em.lines.extend(pad + e for e in epilogue)
                line = pad + "return"
            em.lines.append(line)
        for line in epilogue:
            em(1, line)
        em(1, "return")
        em(0, "")

    def calc(self, k: int, c: ir.Calc) -> None:
        em = self.out
        self.constants[f"HASH_{_n(k)}"] = hashing.BY_ALGO[c.algo]
        em(0, f"def calc_{_n(k)}(F):")
        em(1, "x = 0")
        em(1, "n = 0")
        group = -2  # the guard of the open group of field parts (-2: none open)
        ind = 1
        for p in c.parts:
            if p.kind is ir.CalcKind.FIELD:
                if p.guard != group:
                    ind = 1
                    if p.guard >= 0:
                        em(1, f"if F[{_n(p.guard)}]:")
                        ind = 2
                    group = p.guard
                ref = f"F[{_n(p.slot)}]"
                val = f"({ref} & {_n(_mask(p.width))})" if p.mask else ref
                em(ind, f"x = (x << {_n(p.width)}) | {val}")
                em(ind, f"n += {_n(p.width)}")
            elif p.kind is ir.CalcKind.CONST:
                group, ind = -2, 1
                em(1, f"x = (x << {_n(p.width)}) | {_n(p.value)}")
                em(1, f"n += {_n(p.width)}")
            else:
                group, ind = -2, 1
                em(1, f"if F[{_n(p.guard)}]:")
                for j, (w, signed) in enumerate(zip(p.widths, p.signed)):
                    ref = f"F[{_n(p.slot + j)}]"
                    val = f"({ref} & {_n(_mask(w))})" if signed else ref
                    em(2, f"x = (x << {_n(w)}) | {val}")
                em(2, f"n += {_n(p.width)}")
        em(1, "p = -n % 8")
        em(1, f"return HASH_{_n(k)}((x << p).to_bytes((n + p) >> 3, 'big'))")
        em(0, "")

    @staticmethod
    def node_ref(n: int) -> str:
        return "None" if n == ir.ACCEPT else f"n_{_n(n)}"

    def exit_check(self, ind: int) -> None:
        if self.m.uses_exit:
            self.out(ind, f"if F[{_n(self.m.exit_slot)}]: return None")

    def node(self, k: int, node: ir.Node) -> None:
        em = self.out
        em(0, f"def n_{_n(k)}(F):")
        fn = _Fn(cached=False)
        if isinstance(node, ir.CondNode):
            for s in node.pre:
                self.stmt(s, 1, fn, em)
            cond = self.ex(node.cond, fn)
            em(1, f"return {self.node_ref(node.true_next)} if {cond} else {self.node_ref(node.false_next)}")
        elif isinstance(node, ir.CallNode):
            em(1, f"a_{_n(node.action)}(F, ())")
            self.exit_check(1)
            em(1, f"return {self.node_ref(node.next)}")
        else:
            self.table(node.table, self.m.tables[node.table], fn)
        em(0, "")

    def table(self, k: int, t: ir.Table, fn: _Fn) -> None:
        em = self.out
        tk = _n(k)
        keys = [self.ex(e, fn) for e in t.keys]
        if t.kind is ir.TableKind.DIRECT:
            if t.direct_action >= 0:
                params = "".join(f"{_n(p)}, " for p in t.direct_params)
                em(1, f"a_{_n(t.direct_action)}(F, ({params}))")
                self.exit_check(1)
            em(1, f"return {self.node_ref(t.direct_next)}")
            return
        if t.kind is ir.TableKind.KEYLESS:
            em(1, f"e = DEF_{tk}[0]")
        elif t.kind is ir.TableKind.EXACT:
            kc = keys[0] if len(keys) == 1 else "(" + ", ".join(keys) + ",)"
            em(1, f"e = EX_{tk}.get({kc})")
            em(1, "if e is None:")
            em(2, f"e = DEF_{tk}[0]")
        elif t.kind is ir.TableKind.LPM:
            li = t.lpm_index
            em(1, f"v = {keys[li]}")
            parts = [c if i != li else "v & m" for i, c in enumerate(keys)]
            kc = parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ",)"
            em(1, f"for m, d in LPM_{tk}:")
            em(2, f"e = d.get({kc})")
            em(2, "if e is not None:")
            em(3, "break")
            em(1, "else:")
            em(2, f"e = DEF_{tk}[0]")
        elif t.kind is ir.TableKind.SCAN:
            em(1, f"e = SCAN_{tk}((" + ", ".join(keys) + ",))")
            em(1, "if e is None:")
            em(2, f"e = DEF_{tk}[0]")
        else:
            raise ir.IRError(f"unknown table kind {t.kind!r}")
        em(1, "e[0](F, e[1])")
        self.exit_check(1)
        em(1, "return e[2]")

    def pipeline(self, name: str, init: int) -> None:
        em = self.out
        em(0, f"def {name}(F):")
        em(1, f"n = {self.node_ref(init)}")
        em(1, "while n is not None:")
        em(2, "n = n(F)")
        em(0, "")

    def parser(self, p: ir.Parser) -> None:
        em = self.out
        fn = _Fn(cached=False)
        em(0, "def parse(F, D):")
        em(1, "L = len(D)")
        em(1, "o = 0")
        em(1, "err = 0")
        em(1, f"st = {_n(p.init)}")
        if p.max_steps:
            em(1, "steps = 0")
        em(1, "while True:")
        if p.max_steps:
            em(2, "steps += 1")
            em(2, f"if steps > {_n(p.max_steps)}:")
            em(3, f"err = {_n(p.timeout_error)}")
            em(3, "break")
        for i, s in enumerate(p.states):
            em(2, f"{'if' if i == 0 else 'elif'} st == {_n(i)}:")
            for stmt in s.body:
                self.stmt(stmt, 3, fn, em)
            self.transition(s, fn)
        em(2, "else:" if p.states else "if True:")
        em(3, "break")
        if p.error_slot >= 0:
            em(1, f"F[{_n(p.error_slot)}] = err")
        for c in p.verify:
            for s in c.pre:
                self.stmt(s, 1, fn, em)
            conds = []
            if c.guard >= 0:
                conds.append(f"F[{_n(c.guard)}]")
            if c.cond is not None:
                conds.append(self.ex(c.cond, fn))
            conds.append(f"(calc_{_n(c.calc)}(F) & {_n(_mask(c.width))}) != F[{_n(c.target)}]")
            em(1, f"if {' and '.join(conds)}:")
            em(2, f"F[{_n(c.error_slot)}] = 1" if c.error_slot >= 0 else "pass")
        em(1, "return o")
        em(0, "")

    def transition(self, s: ir.ParserState, fn: _Fn) -> None:
        em = self.out

        def goto(target: int, ind: int) -> None:
            if target == ir.ACCEPT:
                em(ind, "break")
            else:
                em(ind, f"st = {_n(target)}")
                em(ind, "continue")

        if s.key is None:
            goto(s.default, 3)
            return
        em(3, f"k = {self.ex(s.key, fn)}")
        for c in s.cases:
            if c.mask < 0:
                em(3, f"if k == {_n(c.value)}:")
            else:
                em(3, f"if (k & {_n(c.mask)}) == {_n(c.value)}:")
            goto(c.next, 4)
        goto(s.default, 3)

    def deparser(self, d: ir.Deparser) -> None:
        em = self.out
        fn = _Fn(cached=False)
        em(0, "def deparse(F, payload):")
        for c in d.updates:
            for s in c.pre:
                self.stmt(s, 1, fn, em)
            assign = f"F[{_n(c.target)}] = calc_{_n(c.calc)}(F) & {_n(_mask(c.width))}"
            if c.cond is not None:
                em(1, f"if {self.ex(c.cond, fn)}:")
                em(2, assign)
            else:
                em(1, assign)
        em(1, "out = []")
        for h in d.emits:
            f0, n = h.first, len(h.widths)
            em(1, f"if F[{_n(h.valid)}]:")
            name = self.struct_for(h)
            if name is not None:
                em(2, f"out.append({name}.pack(*F[{_n(f0)}:{_n(f0 + n)}]))")
            else:
                acc = ""
                for j, (w, signed) in enumerate(zip(h.widths, h.signed)):
                    ref = f"F[{_n(f0 + j)}]"
                    if signed:
                        ref = f"({ref} & {_n(_mask(w))})"
                    acc = ref if j == 0 else f"(({acc}) << {_n(w)} | {ref})"
                em(2, f"out.append(({acc}).to_bytes({_n(h.nbytes)}, 'big'))")
        em(1, "out.append(payload)")
        em(1, "return b''.join(out)")
        em(0, "")

    def module(self) -> PyModule:
        m = self.m
        ir.check_module(m)
        self.out(0, "# generated by softswitch.compiler.pyemit from the program's IR")
        for k, c in enumerate(m.calcs):
            self.calc(k, c)
        for k, a in enumerate(m.actions):
            self.action(k, a)
        for k, node in enumerate(m.nodes):
            self.node(k, node)
        for name, init in zip(PIPELINE_FUNCTIONS, m.pipelines):
            self.pipeline(name, init)
        self.parser(m.parser)
        self.deparser(m.deparser)
        return PyModule("\n".join(self.out.lines) + "\n", self.constants)


def _cacheable(body: tuple[ir.Stmt, ...]) -> bool:
    """Whether an action's slots may live in locals: not when it reads the state in bulk or by index."""
    stack = list(body)
    while stack:
        s = stack.pop()
        if isinstance(s, ir.Loop):
            return False
        if isinstance(s, ir.If):
            stack.extend(s.then)
            stack.extend(s.orelse)
        for e in _stmt_exprs(s):
            for n in ir.walk(e):
                if isinstance(n, (ir.StackField, ir.Hash)):
                    return False
    return True


def _stmt_exprs(s: ir.Stmt) -> tuple[ir.Expr, ...]:
    if isinstance(s, (ir.Assign, ir.Let)):
        return (s.value,)
    if isinstance(s, ir.If):
        return (s.cond,)
    if isinstance(s, ir.RegWrite):
        return (s.index, s.value)
    if isinstance(s, ir.Count):
        return (s.index,)
    return ()


def emit(module: ir.Module) -> PyModule:
    """Python source for a module, with the constant objects it refers to."""
    return Emitter(module).module()
