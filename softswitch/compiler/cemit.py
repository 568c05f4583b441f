"""The C emitter: an `ir.Module` as C source, the second visitor beside pyemit.Emitter.

Like the Python emitter it reads only the IR, which holds ints, enums and numbers (ir.check_module
runs first): every piece of text it writes is one of its own templates with integers formatted into
it by `_n`, which refuses anything but a plain int. Identifiers are made from numbers (`a_3`, `N12`,
`s57`, `t4`, `calc_1`); names stay in ir.Names, which this module never sees. The source it returns
is compiled together with the hand-written runtime (c/rt_head.h before it, c/rt_body.c after it).

Values. The IR computes with unbounded integers, as BMv2 does; C has 64-bit ones. Every expression
gets an interval (what it can evaluate to, from its operands' slot widths up) and one of three
representations:

* I64: its value always fits int64_t, and the C expression is that value;
* U64: its value always fits uint64_t (a bit<64> field, a product of two bit<32>);
* MOD: only its value modulo 2**64 is computed, as a uint64_t. Allowed where only the low bits can
  matter: sums, differences, products, bitwise operations and left shifts whose result is later
  masked (`& m` with m < 2**64) or wrapped (two's complement to <= 64 bits), which is how p4c writes
  every fixed-width operation. A MOD value reaching anything that needs the whole value (a
  comparison, a right shift, a division, a table key) makes the program unsupported.

Ring operations are computed in uint64_t (wrapping, so never undefined behaviour) and converted to
the node's representation, which is exact whenever the interval says the true value fits. What
cannot be represented (fields, parameters, registers or keys wider than 64 bits, a MOD value where
the whole value is needed) raises CUnsupported with a place given by kind and number: the switch
then names it from ir.Names and runs the program on the Python engine.

BMv2's arithmetic corner cases are kept as the Python emitter keeps them: a shift count above
ir.MAX_SHIFT gives 0 (left) and a negative count leaves the value; `>>` is arithmetic; division and
modulo by zero give 0, and they round towards minus infinity (Python's // and %); `and`/`or` of
non-boolean operands yield an operand, as in Python.

Lane loops. An action's runs of isomorphic statements (reroll.py: p4c's unrolled lanes) and a
header's runs of alike fields are emitted as loops over arrays of slots, which does what the straight
code did in the same order; slots are laid out as state_struct declares them (_slot_offsets, checked
by _Static_assert). A run's loop has a fast version, taken when the register cells it uses are in
range (checked once) and split on its first loop-invariant `if`: no branch left per lane, so that the
compiler can vectorise it (with -march=native, cbuild.py); else the plain loop, checks per lane.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from softswitch.compiler import ir, reroll

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
U64_MAX = (1 << 64) - 1
MAX_BITS = 64  # the widest field, parameter, register or key the C engine stores
ABI = 1  # bumped with every change of the structures shared with c/rt_head.h


class Where(enum.IntEnum):
    """What kind of object a CUnsupported refers to (its `index` numbers it in ir.Names or the layout)."""

    MODULE = 0
    SLOT = 1
    ACTION = 2
    NODE = 3
    STATE = 4
    CALC = 5
    DEPARSER = 6
    REGISTER = 7
    TABLE = 8
    PARSER = 9


class CUnsupported(Exception):
    """The C engine cannot run this module; `what` is the emitter's own text, (where, index) the place."""

    def __init__(self, what: str, where: Where, index: int) -> None:
        super().__init__(what)
        self.what = what
        self.where = where
        self.index = index


class Kind(enum.IntEnum):
    I64 = 1
    U64 = 2
    MOD = 3


@dataclass(frozen=True, slots=True)
class Val:
    """An expression's representation and interval (lo, hi are meaningless for MOD)."""

    kind: Kind
    lo: int
    hi: int
    boolean: bool = False

    @property
    def exact(self) -> bool:
        return self.kind is not Kind.MOD

    @property
    def nonneg(self) -> bool:
        return self.kind is not Kind.MOD and self.lo >= 0


@dataclass(frozen=True)
class Options:
    """What the switch must set per packet besides the program's own slots (clocks cost a system call)."""

    ingress_clock: bool = False
    egress_clock: bool = False
    enq_clock: bool = False
    deq_clock: bool = False
    # lane loops address slots by _slot_offsets' layout (each member aligned to its size: x86-64, AArch64); off
    # for a target whose ABI lays struct st out otherwise (i386 aligns int64_t to 4)
    lane_loops: bool = True


def _n(value: Any) -> str:
    """An integer as source text; the only way a number from the IR becomes text."""
    if type(value) is not int:
        raise ir.IRError(f"the emitter was given a {type(value).__name__} where an int belongs")
    return str(value)


def classify(lo: int, hi: int) -> Kind:
    if I64_MIN <= lo and hi <= I64_MAX:
        return Kind.I64
    if 0 <= lo and hi <= U64_MAX:
        return Kind.U64
    return Kind.MOD


def val(lo: int, hi: int, boolean: bool = False) -> Val:
    k = classify(lo, hi)
    if k is Kind.MOD:
        return Val(Kind.MOD, 0, U64_MAX)
    return Val(k, lo, hi, boolean)


MOD = Val(Kind.MOD, 0, U64_MAX)
BOOL = Val(Kind.I64, 0, 1, True)


def lit(v: int, kind: Kind) -> str:
    """A literal of the given representation (MOD: v modulo 2**64)."""
    if kind is Kind.I64:
        if v == I64_MIN:
            return "(-INT64_C(9223372036854775807) - 1)"
        return f"INT64_C({_n(v)})" if v >= 0 else f"(-INT64_C({_n(-v)}))"
    return f"UINT64_C({_n(v & U64_MAX)})"


def ctype(kind: Kind) -> str:
    return "i64" if kind is Kind.I64 else "u64"


def conv(text: str, have: Val, want: Kind) -> str:
    """text (of representation have.kind) converted to representation `want`."""
    if (
        have.kind is want
        or (want is Kind.MOD and have.kind is Kind.U64)
        or (want is Kind.U64 and have.kind is Kind.MOD)
    ):
        return text
    return f"(({ctype(want)})({text}))"


def u(text: str, v: Val) -> str:
    return text if v.kind is not Kind.I64 else f"((u64)({text}))"


def slot_bytes(width: int) -> int:
    """The size of a slot's C type (slot_ctype): hidden slots (width 0) are int64_t."""
    return 8 if width == 0 or width > 32 else 4 if width > 16 else 2 if width > 8 else 1


def slot_ctype(width: int, signed: bool) -> str:
    if width == 0:
        return "int64_t"
    return f"{'int' if signed else 'uint'}{_n(8 * slot_bytes(width))}_t"


def slot_val(width: int, signed: bool) -> Val:
    if width == 0:
        return Val(Kind.I64, I64_MIN, I64_MAX)
    if signed:
        return val(-(1 << (width - 1)), (1 << (width - 1)) - 1)
    return val(0, (1 << width) - 1)


def _bits_span(*bounds: int) -> int:
    return max((b.bit_length() for b in bounds), default=0)


_HASH_BITS = {
    ir.HashAlgo.CRC16: 16,
    ir.HashAlgo.CRC32: 32,
    ir.HashAlgo.CRC_CCITT: 16,
    ir.HashAlgo.CSUM16: 16,
    ir.HashAlgo.XOR16: 16,
    ir.HashAlgo.IDENTITY: 64,
}
_HASH_FN = {
    ir.HashAlgo.CRC16: "rt_crc16",
    ir.HashAlgo.CRC32: "rt_crc32",
    ir.HashAlgo.CRC_CCITT: "rt_crc_ccitt",
    ir.HashAlgo.CSUM16: "rt_csum16",
    ir.HashAlgo.XOR16: "rt_xor16",
    ir.HashAlgo.IDENTITY: "rt_identity",
}
_CMP = {ir.BinOp.EQ: "==", ir.BinOp.NE: "!=", ir.BinOp.GT: ">", ir.BinOp.GE: ">=", ir.BinOp.LT: "<", ir.BinOp.LE: "<="}
_RING = {
    ir.BinOp.ADD: "+",
    ir.BinOp.SUB: "-",
    ir.BinOp.MUL: "*",
    ir.BinOp.AND: "&",
    ir.BinOp.OR: "|",
    ir.BinOp.XOR: "^",
}
_STD = (
    "ingress_port",
    "egress_spec",
    "egress_port",
    "instance_type",
    "packet_length",
    "parser_error",
    "checksum_error",
    "mcast_grp",
    "egress_rid",
    "ingress_global_timestamp",
    "egress_global_timestamp",
    "enq_timestamp",
    "deq_timedelta",
    "priority",
)  # lower.STANDARD_FIELDS, the order of ir.Module.std
DROP_PORT = 511
INSTANCE_NORMAL = 0
INSTANCE_REPLICATION = 5


@dataclass
class _Fn:
    """One generated function: where it is (for refusals), its return statement and its temporaries."""

    where: Where
    index: int
    ret: str  # "return;" or "return 0;"
    params: tuple[int, ...] = ()  # parameter widths (actions)
    temps: dict[int, Kind] = field(default_factory=dict)
    refs: Counter[int] | None = None  # actions: how often each temporary is named (reroll.temp_refs), for lane loops


@dataclass(frozen=True)
class _Lanes:
    """Inside a lane loop over `var`: the advancing slots as arrays (byte offset in struct st, element step) and
    the advancing registers by their first offset and the step between lanes."""

    var: str
    slots: dict[int, tuple[str, int, int]]  # slot of group 0 -> (C type, byte offset, elements per lane)
    regs: dict[int, tuple[int, int]]  # register of group 0 -> (offset, bytes per lane)
    # (register of group 0, its index's node) -> (pointer to lane 0's cell, C type, elements per lane): accesses
    # whose cell was range-checked once before the loop
    direct: dict[tuple[int, int], tuple[str, str, int]] = field(default_factory=dict)
    scalars: dict[int, str] = field(default_factory=dict)  # slot every lane writes -> the local holding it meanwhile


class _Invariance:
    """What does not change from one group of a lane run to the next: expressions over slots no group writes,
    temporaries defined before the run, parameters and constants (no register read: another lane writes them)."""

    def __init__(self, run: reroll.Run, group: tuple[ir.Stmt, ...]) -> None:
        self.group = group
        self.written: set[int] = set()
        self.assigned: set[int] = set()  # by group 0
        self.defined: set[int] = set()
        self.accesses: list[tuple[int, ir.Expr]] = []
        self.run = run
        self._scan(group)

    def _scan(self, stmts: tuple[ir.Stmt, ...]) -> None:
        for s in stmts:
            if isinstance(s, ir.Assign):  # the slot this group writes, and those the other groups write in its place
                self.assigned.add(s.slot)
                d = self.run.slots.get(s.slot, 0)
                self.written.update(s.slot + j * d for j in range(self.run.count))
            elif isinstance(s, ir.Let):
                self.defined.add(s.temp)
            elif isinstance(s, ir.RegWrite):
                self.accesses.append((s.reg, s.index))
            exprs, nested = ir.stmt_parts(s)
            self._exprs(*exprs)
            self._scan(tuple(nested))

    def _exprs(self, *es: ir.Expr) -> None:
        for e in es:
            for n in ir.walk(e):
                if isinstance(n, ir.RegRead):
                    self.accesses.append((n.reg, n.index))

    def invariant(self, e: ir.Expr) -> bool:
        for n in ir.walk(e):
            if isinstance(n, ir.Field) and (self.run.slots.get(n.slot, 0) != 0 or n.slot in self.written):
                return False
            if isinstance(n, ir.Temp) and (self.run.temps.get(n.index, 0) != 0 or n.index in self.defined):
                return False
            if isinstance(n, ir.IMPURE):
                return False
        return True

    def register_cells(self) -> list[tuple[int, ir.Expr]]:
        """(register, index) of the accesses whose cell is the same in every lane."""
        return [(reg, idx) for reg, idx in self.accesses if self.invariant(idx)]

    def switch_cond(self) -> ir.Expr | None:
        """The condition of the group's first invariant top-level `if`, if any."""
        for s in self.group:
            if isinstance(s, ir.If) and self.invariant(s.cond):
                return s.cond
        return None

    def taking(self, cond: ir.Expr, value: bool) -> tuple[ir.Stmt, ...]:
        """The group with every top-level `if cond` replaced by the branch `value` selects."""
        out: list[ir.Stmt] = []
        for s in self.group:
            if isinstance(s, ir.If) and s.cond is cond:
                out.extend(s.then if value else s.orelse)
            else:
                out.append(s)
        return tuple(out)


class CEmitter:
    def __init__(self, module: ir.Module, options: Options) -> None:
        self.m = module
        self.opt = options
        self.out = ir.Lines()
        self.temps: dict[int, Val] = {}
        self.memo: dict[int, tuple[str, Val]] = {}
        self.slot_types = self._slot_types()
        self._stack_fns: dict[tuple[int, tuple[int, ...]], str] = {}
        self._stack_out = ir.Lines()
        self._reg_off: list[int] = []
        self._reg_stride: list[int] = []
        self._reg_bytes = 0
        self._cnt_off: list[int] = []
        self.fn = _Fn(Where.MODULE, 0, "return;")
        self.lanes: _Lanes | None = None
        self._temp_memo: dict[int, dict[int, int]] = {}  # reroll's temporary counts per expression node
        self._slot_off = self._slot_offsets()
        self.lane_loops = 0  # runs emitted as loops (for tests and the log)

    # ------------------------------------------------------------------ module layout
    def _slot_types(self) -> list[tuple[int, bool]]:
        m = self.m
        if len(m.slot_widths) != len(m.template) or len(m.slot_signed) != len(m.template):
            raise ir.IRError("the module lacks slot widths (lowered by an older lowering?)")
        out = []
        for slot, (w, s) in enumerate(zip(m.slot_widths, m.slot_signed)):
            if w > MAX_BITS:
                raise CUnsupported(
                    f"a field of {_n(w)} bits (the C engine stores at most {_n(MAX_BITS)})", Where.SLOT, slot
                )
            out.append((w, bool(s)))
        return out

    def _slot_offsets(self) -> list[int]:
        """Each slot's byte offset in struct st as state_struct declares it (members in order, each aligned to
        its size: the x86-64 and AArch64 ABIs). Lane loops address slots by it; _Static_asserts check it."""
        out, off = [], 0
        for w, _signed in self.slot_types:
            size = slot_bytes(w)
            off = (off + size - 1) // size * size
            out.append(off)
            off += size
        return out

    def layout_registers(self) -> None:
        """Offsets and strides: registers of one size and cell type interleaved, cell by cell (rt_head.h says why)."""
        groups: dict[tuple[int, int], list[int]] = {}
        for k, (size, width) in enumerate(self.m.registers):
            if width > MAX_BITS:
                raise CUnsupported(f"a register of {_n(width)} bits", Where.REGISTER, k)
            groups.setdefault((size, _cells(width)), []).append(k)
        self._reg_off = [0] * len(self.m.registers)
        self._reg_stride = [0] * len(self.m.registers)
        off = 0
        for (size, bits), members in groups.items():
            cell = bits // 8
            stride = cell * len(members)
            for j, k in enumerate(members):
                self._reg_off[k] = off + j * cell
                self._reg_stride[k] = stride
            off += stride * size
            off = (off + 63) & ~63
        self._reg_bytes = off

    def refuse(self, what: str) -> CUnsupported:
        return CUnsupported(what, self.fn.where, self.fn.index)

    # ------------------------------------------------------------------ expressions
    def ex(self, e: ir.Expr) -> tuple[str, Val]:
        hit = self.memo.get(e.nid)
        if hit is not None and not isinstance(e, (ir.Temp, ir.Param, ir.Random)):
            return hit
        out = self._ex(e)
        if not isinstance(e, (ir.Temp, ir.Param, ir.Random)):
            self.memo[e.nid] = out
        return out

    def exact(self, e: ir.Expr) -> tuple[str, Val]:
        text, v = self.ex(e)
        if not v.exact:
            raise self.refuse("an expression whose whole value needs more than 64 bits")
        return text, v

    def _ex(self, e: ir.Expr) -> tuple[str, Val]:
        if isinstance(e, ir.Const):
            v = e.value
            k = classify(v, v)
            return lit(v, k), (Val(k, v, v) if k is not Kind.MOD else MOD)
        if isinstance(e, ir.Bool):
            return ("1" if e.value is True else "0"), Val(Kind.I64, int(e.value), int(e.value), True)
        if isinstance(e, ir.Field):
            w, s = self.slot_types[e.slot]
            if e.slot == self.m.zero_slot:
                return "INT64_C(0)", Val(Kind.I64, 0, 0)
            v = slot_val(w, s)
            return f"(({ctype(v.kind)}){self.slot_ref(e.slot)})", v
        if isinstance(e, ir.Param):
            if not 0 <= e.index < len(self.fn.params):
                raise ir.IRError(f"parameter {e.index} outside the action's {len(self.fn.params)}")
            w = self.fn.params[e.index]
            v = val(0, (1 << w) - 1)
            return (f"((i64)P[{_n(e.index)}])" if v.kind is Kind.I64 else f"P[{_n(e.index)}]"), v
        if isinstance(e, ir.Temp):
            v = self.temps.get(e.index)
            if v is None:
                raise ir.IRError(f"temporary {e.index} used before its Let")
            return f"t{_n(e.index)}", v
        if isinstance(e, ir.Binary):
            op = e.op
            if op in _CMP:
                return self.compare(op, e.a, e.b)
            if op in ir.LOGICAL:
                return self.logical(op, e.a, e.b)
            if op in _RING:
                return self.ring(op, e.a, e.b)
            if op is ir.BinOp.SHL:
                return self.shl(e.a, e.b)
            if op is ir.BinOp.SHR:
                return self.shr(e.a, e.b)
            if op in (ir.BinOp.DIV, ir.BinOp.MOD):
                return self.divmod(op, e.a, e.b)
            raise ir.IRError(f"unknown binary operator {op!r}")
        if isinstance(e, ir.Unary):
            if e.op is ir.UnOp.INV:
                a, va = self.ex(e.a)
                r = MOD if not va.exact else val(-va.hi - 1, -va.lo - 1)
                return self.from_u(f"(~{u(a, va)})", r), r
            a, va = self.exact(e.a)
            if e.op is ir.UnOp.NOT:
                return f"(!({a}))", BOOL
            if e.op is ir.UnOp.D2B:
                return f"(({a}) != 0)", BOOL
            if e.op is ir.UnOp.B2D:
                return (a if va.boolean else f"(({a}) ? INT64_C(1) : INT64_C(0))"), Val(Kind.I64, 0, 1)
            raise ir.IRError(f"unknown unary operator {e.op!r}")
        if isinstance(e, ir.Mux):
            c, _ = self.exact(e.cond)
            a, va = self.ex(e.a)
            b, vb = self.ex(e.b)
            if va.exact and vb.exact:
                r = val(min(va.lo, vb.lo), max(va.hi, vb.hi), va.boolean and vb.boolean)
            else:
                r = MOD
            flag = self.flag_mux(e, c, (a, va), (b, vb))
            if flag is not None:
                return flag, r
            return f"(({c}) ? {conv(a, va, r.kind)} : {conv(b, vb, r.kind)})", r
        if isinstance(e, ir.Clamp):
            return self.clamp(e)
        if isinstance(e, ir.SignWrap):
            a, va = self.ex(e.a)
            w = e.width
            half = 1 << (w - 1) if w > 0 else 0
            if va.exact and -half <= va.lo and va.hi <= half - 1:
                return a, va
            if w > MAX_BITS or w <= 0:
                raise self.refuse(f"a two's complement wrap to {_n(w)} bits")
            r = val(-half, half - 1)
            if w == 64:
                return f"((i64){u(a, va)})", r
            sh = _n(64 - w)
            return f"((i64)({u(a, va)} << {sh}) >> {sh})", r
        if isinstance(e, ir.InRange):
            a, va = self.exact(e.a)
            if va.lo >= e.size or va.hi < 0:
                return "0", BOOL
            return f"({u(a, va)} < UINT64_C({_n(e.size)}))", BOOL
        if isinstance(e, ir.StackField):
            return self.stack_field(e)
        if isinstance(e, ir.Lookahead):
            if e.width > MAX_BITS:
                raise self.refuse(f"a lookahead of {_n(e.width)} bits")
            v = val(0, (1 << e.width) - 1)
            text = f"rt_lookahead(D, L, o + {_n(e.offset // 8)}, {_n(e.offset % 8)}, {_n(e.width)})"
            return conv(text, Val(Kind.U64, 0, U64_MAX), v.kind), v
        if isinstance(e, ir.Hash):
            algo = self.m.calcs[e.calc].algo
            v = val(0, (1 << _HASH_BITS[algo]) - 1)
            return conv(f"calc_{_n(e.calc)}(S)", Val(Kind.U64, 0, U64_MAX), v.kind), v
        if isinstance(e, ir.RegRead):
            size, width = self.m.registers[e.reg]
            if width > MAX_BITS:
                raise CUnsupported(f"a register of {_n(width)} bits", Where.REGISTER, e.reg)
            idx, vi = self.exact(e.index)
            v = val(0, (1 << width) - 1)
            hit = self.direct_cell(e.reg, e.index)
            if hit is not None:
                return conv(f"((u64){hit})", Val(Kind.U64, 0, U64_MAX), v.kind), v
            off, stride = self.reg_off(e.reg), self._reg_stride[e.reg]
            text = f"rt_regget{_n(_cells(width))}(X, {off}, {_n(stride)}, {_n(size)}, {u(idx, vi)})"
            return conv(text, Val(Kind.U64, 0, U64_MAX), v.kind), v
        if isinstance(e, ir.Random):
            lo, vl = self.exact(e.lo)
            hi, vh = self.exact(e.hi)
            r = val(min(vl.lo, vh.lo), max(vl.hi, vh.hi))
            if not r.exact:
                raise self.refuse("a random number beyond 64 bits")
            text = f"rt_rand(X, (i128)({lo}), (i128)({hi}))"
            return f"(({ctype(r.kind)})({text}))", r
        raise ir.IRError(f"unknown expression {type(e).__name__}")

    @staticmethod
    def from_u(text: str, r: Val) -> str:
        """A uint64_t computation as representation r."""
        return f"((i64)({text}))" if r.kind is Kind.I64 else text

    def ring(self, op: ir.BinOp, ea: ir.Expr, eb: ir.Expr) -> tuple[str, Val]:
        a, va = self.ex(ea)
        b, vb = self.ex(eb)
        r: Val
        if op is ir.BinOp.AND and (not va.exact or not vb.exact):
            other = vb if not va.exact else va
            r = val(0, other.hi) if other.nonneg else MOD
        elif not va.exact or not vb.exact:
            r = MOD
        elif op is ir.BinOp.ADD:
            r = val(va.lo + vb.lo, va.hi + vb.hi)
        elif op is ir.BinOp.SUB:
            r = val(va.lo - vb.hi, va.hi - vb.lo)
        elif op is ir.BinOp.MUL:
            corners = (va.lo * vb.lo, va.lo * vb.hi, va.hi * vb.lo, va.hi * vb.hi)
            r = val(min(corners), max(corners))
        elif op is ir.BinOp.AND:
            if va.lo >= 0 and vb.lo >= 0:
                r = val(0, min(va.hi, vb.hi))
            elif va.lo >= 0 or vb.lo >= 0:
                r = val(0, va.hi if va.lo >= 0 else vb.hi)
            else:
                k = _bits_span(va.lo, va.hi, vb.lo, vb.hi)
                r = val(-(1 << k), (1 << k) - 1)
        else:  # OR, XOR
            if va.lo >= 0 and vb.lo >= 0:
                r = val(0, (1 << _bits_span(va.hi, vb.hi)) - 1)
            else:
                k = _bits_span(va.lo, va.hi, vb.lo, vb.hi)
                r = val(-(1 << k), (1 << k) - 1)
        if (
            r.exact
            and va.kind is Kind.I64
            and vb.kind is Kind.I64
            and r.kind is Kind.I64
            and op in (ir.BinOp.AND, ir.BinOp.OR, ir.BinOp.XOR)
        ):
            return f"({a} {_RING[op]} {b})", r  # bitwise operations on int64 never overflow
        return self.from_u(f"({u(a, va)} {_RING[op]} {u(b, vb)})", r), r

    def compare(self, op: ir.BinOp, ea: ir.Expr, eb: ir.Expr) -> tuple[str, Val]:
        a, va = self.exact(ea)
        b, vb = self.exact(eb)
        sym = _CMP[op]
        if va.kind is Kind.I64 and vb.kind is Kind.I64:
            return f"({a} {sym} {b})", BOOL
        if va.lo >= 0 and vb.lo >= 0:
            return f"({u(a, va)} {sym} {u(b, vb)})", BOOL
        return f"((i128)({a}) {sym} (i128)({b}))", BOOL

    def logical(self, op: ir.BinOp, ea: ir.Expr, eb: ir.Expr) -> tuple[str, Val]:
        a, va = self.exact(ea)
        b, vb = self.exact(eb)
        if va.boolean and vb.boolean:
            return f"({a} {'&&' if op is ir.BinOp.LAND else '||'} {b})", BOOL
        # Python's `a and b` / `a or b` of integers: an operand, not a bool
        r = val(min(va.lo, vb.lo, 0), max(va.hi, vb.hi))
        if r.kind is not Kind.I64:
            raise self.refuse("'and'/'or' of integers beyond int64")
        fn = "rt_land" if op is ir.BinOp.LAND else "rt_lor"
        return f"{fn}((i64)({a}), (i64)({b}))", r

    def shl(self, ea: ir.Expr, eb: ir.Expr) -> tuple[str, Val]:
        a, va = self.ex(ea)
        b, vb = self.exact(eb)
        if isinstance(eb, ir.Const):
            c = eb.value
            if c < 0:
                return a, va
            if c > ir.MAX_SHIFT:
                return "INT64_C(0)", Val(Kind.I64, 0, 0)
            r = val(va.lo << c, va.hi << c) if va.exact else MOD
            if c >= 64:
                return lit(0, r.kind if r.exact else Kind.U64), (r if r.exact else MOD)
            return self.from_u(f"({u(a, va)} << {_n(c)})", r), r
        # a variable count: the interval of every count it may take
        cands: list[int] = []
        r = MOD
        if va.exact:
            smin, smax = max(0, vb.lo), min(ir.MAX_SHIFT, vb.hi)
            if smax <= 128 and smin <= smax:
                cands += [va.lo << smin, va.lo << smax, va.hi << smin, va.hi << smax]
                if vb.lo < 0:
                    cands += [va.lo, va.hi]
                if vb.hi > ir.MAX_SHIFT:
                    cands.append(0)
                r = val(min(cands), max(cands))
            elif smin > smax:  # only negative counts (value kept) or counts beyond MAX_SHIFT (0)
                lo = min(va.lo if vb.lo < 0 else 0, 0)
                hi = max(va.hi if vb.lo < 0 else 0, 0)
                r = val(lo, hi)
        fn = "rt_shl_u" if vb.lo >= 0 else "rt_shl_i"
        return self.from_u(f"{fn}({u(a, va)}, ({'u64' if vb.lo >= 0 else 'i64'})({b}))", r), r

    def shr(self, ea: ir.Expr, eb: ir.Expr) -> tuple[str, Val]:
        a, va = self.exact(ea)
        b, vb = self.exact(eb)
        signed = va.kind is Kind.I64
        if isinstance(eb, ir.Const):
            c = eb.value
            if c < 0:
                return a, va
            cc = min(c, 64)
            r = val(va.lo >> cc, va.hi >> cc)
            if signed:
                text = f"(({a}) >> {_n(min(c, 63))})"
            else:
                text = "UINT64_C(0)" if c >= 64 else f"(({a}) >> {_n(c)})"
            return conv(text, Val(va.kind, 0, 0), r.kind), r
        smin, smax = max(0, vb.lo), min(64, vb.hi)
        cands = [va.lo >> smin, va.lo >> smax, va.hi >> smin, va.hi >> smax] if smin <= smax else []
        if vb.lo < 0:
            cands += [va.lo, va.hi]
        r = val(min(cands), max(cands))
        fn = f"rt_shr_{'i' if signed else 'u'}{'u' if vb.lo >= 0 else 'i'}"
        text = f"{fn}({a}, ({'u64' if vb.lo >= 0 else 'i64'})({b}))"
        return conv(text, Val(va.kind, 0, 0), r.kind), r

    def divmod(self, op: ir.BinOp, ea: ir.Expr, eb: ir.Expr) -> tuple[str, Val]:
        a, va = self.exact(ea)
        b, vb = self.exact(eb)
        div = op is ir.BinOp.DIV
        if va.lo >= 0 and vb.lo >= 0:
            if div:
                r = val(va.lo // vb.hi if vb.lo > 0 else 0, va.hi // vb.lo if vb.lo > 0 else va.hi)
            else:
                r = val(0, max(0, min(va.hi, vb.hi - 1)))
            fn = "rt_udiv" if div else "rt_umod"
            return conv(f"{fn}({u(a, va)}, {u(b, vb)})", Val(Kind.U64, 0, 0), r.kind), r
        if div:
            m = max(abs(va.lo), abs(va.hi))
            r = val(-m, m)
        else:
            m = max(abs(vb.lo), abs(vb.hi))
            r = val(-m, m)
        if not r.exact:
            raise self.refuse("a division beyond 64 bits")
        fn = "rt_fdiv" if div else "rt_fmod"
        return f"(({ctype(r.kind)}){fn}((i128)({a}), (i128)({b})))", r

    @staticmethod
    def flag_mux(e: ir.Mux, c: str, a: tuple[str, Val], b: tuple[str, Val]) -> str | None:
        """`c ? 1 : f` and its kin over a 0/1 flag f, as `f | c` (or `f & !c`): the same value, and no branch, so a
        lane loop setting an overflow flag per lane stays a loop a compiler can vectorise. Only when the other arm
        is a plain read (evaluating it unconditionally has no effect)."""
        plain = (ir.Field, ir.Temp, ir.Const, ir.Param)
        for const, (text, v), other, then_const in ((e.a, b, e.b, True), (e.b, a, e.a, False)):
            if not (
                isinstance(const, ir.Const)
                and const.value in (0, 1)
                and isinstance(other, plain)
                and v.exact
                and 0 <= v.lo
                and v.hi <= 1
            ):
                continue
            on = f"((i64)(({c}) != 0))" if then_const else f"((i64)(({c}) == 0))"
            x = conv(text, v, Kind.I64)
            # c ? 1 : f == f | c;  c ? 0 : f == f & !c;  c ? f : 1 == f | !c;  c ? f : 0 == f & c
            if const.value == 1:
                return f"({x} | {on})"
            return f"({x} & ((i64)1 ^ {on}))"
        return None

    def clamp(self, e: ir.Clamp) -> tuple[str, Val]:
        a, va = self.exact(e.a)
        lo, hi = e.lo, e.hi
        r_lo = min(max(va.lo, lo), hi)
        r_hi = min(max(va.hi, lo), hi)
        r = val(r_lo, r_hi)
        if r_lo == r_hi:
            return lit(r_lo, r.kind), r
        lo_eff, hi_eff = max(lo, va.lo), min(hi, va.hi)
        k = va.kind
        text = f"rt_clamp_{'i' if k is Kind.I64 else 'u'}({a}, {lit(lo_eff, k)}, {lit(hi_eff, k)})"
        return conv(text, va, r.kind), r

    def stack_field(self, e: ir.StackField) -> tuple[str, Val]:
        vals = [Val(Kind.I64, 0, 0)]
        for s in e.slots[1:]:
            vals.append(slot_val(*self.slot_types[s]))
        if any(not v.exact for v in vals):
            raise self.refuse("a header stack field beyond 64 bits")
        r = val(min(v.lo for v in vals), max(v.hi for v in vals))
        key = (e.next_slot, e.slots)
        name = self._stack_fns.get(key)
        if name is None:
            name = f"sf_{_n(len(self._stack_fns))}"
            self._stack_fns[key] = name
            o = self._stack_out
            o(0, f"static inline {ctype(r.kind)} {name}(const struct st *restrict S, struct rt_x *restrict X)")
            o(0, "{")
            o(1, f"switch (S->s{_n(e.next_slot)}) {{")
            o(1, "case 0: return 0;")
            for j, s in enumerate(e.slots[1:], start=1):
                o(1, f"case {_n(j)}: return ({ctype(r.kind)})S->s{_n(s)};")
            o(1, "default: X->fail = RT_FAIL_INTERNAL; return 0;")
            o(1, "}")
            o(0, "}")
            o(0, "")
        return f"{name}(S, X)", r

    # ------------------------------------------------------------------ statements
    def assign_text(self, slot: int, e: ir.Expr) -> str:
        text, _ = self.ex(e)
        w, s = self.slot_types[slot]
        return f"{self.slot_ref(slot)} = ({slot_ctype(w, s)})({text});"

    def slot_ref(self, slot: int) -> str:
        """The lvalue of a slot: a member of the state, or inside a lane loop an advancing slot's array element."""
        lanes = self.lanes
        if lanes is not None and slot in lanes.scalars:
            return lanes.scalars[slot]
        if lanes is not None and slot in lanes.slots:
            ct, off, step = lanes.slots[slot]
            return f"(({ct} *)(void *)((uint8_t *)S + {_n(off)}))[{lanes.var} * {_n(step)}]"
        return f"S->s{_n(slot)}"

    def direct_cell(self, reg: int, index: ir.Expr) -> str | None:
        """Inside a lane loop's fast path, the lvalue of an advancing register's cell checked before the loop."""
        lanes = self.lanes
        hit = None if lanes is None else lanes.direct.get((reg, index.nid))
        if hit is None:
            return None
        name, ct, step = hit
        return f"(({ct} *)(void *){name})[{lanes.var} * {_n(step)}]"  # type: ignore[union-attr]

    def reg_off(self, reg: int) -> str:
        """A register's offset in X->regs (inside a lane loop an advancing register's, by lane)."""
        lanes = self.lanes
        if lanes is not None and reg in lanes.regs:
            off, step = lanes.regs[reg]
            return f"((size_t){_n(off)} + (size_t){lanes.var} * {_n(step)})"
        return _n(self._reg_off[reg])

    def block(self, stmts: tuple[ir.Stmt, ...], ind: int, em: ir.Lines) -> None:
        runs = (
            reroll.find_runs(stmts, self.fn.refs, memo=self._temp_memo)
            if self.fn.refs is not None and self.lanes is None
            else []
        )
        i = 0
        for r in runs:
            for s in stmts[i : r.start]:
                self.stmt(s, ind, em)
            if not self.lane_loop(stmts, r, ind, em):
                for s in stmts[r.start : r.end]:
                    self.stmt(s, ind, em)
            i = r.end
        for s in stmts[i:]:
            self.stmt(s, ind, em)

    def lane_loop(self, stmts: tuple[ir.Stmt, ...], r: reroll.Run, ind: int, em: ir.Lines) -> bool:
        """Emit a run as a loop over its groups (reroll.py says why), or return False when its advancing slots or
        registers are not evenly spaced here. Slot offsets are checked by the compiler (_Static_assert)."""
        n_slots, n_regs = len(self.slot_types), len(self.m.registers)
        slots: dict[int, tuple[str, int, int]] = {}
        checks: list[tuple[int, int]] = []
        for s0, d in r.slots.items():
            if d == 0:
                continue
            members = [s0 + j * d for j in range(r.count)]
            if any(not 0 <= s < n_slots or s == self.m.zero_slot for s in members):
                return False
            ct = slot_ctype(*self.slot_types[s0])
            size, base = slot_bytes(self.slot_types[s0][0]), self._slot_off[s0]
            step = self._slot_off[members[1]] - base
            # the same width and signedness, not only the same C type: the loop types every lane's value as group 0's
            if step % size or any(
                self.slot_types[s] != self.slot_types[s0] or self._slot_off[s] != base + j * step
                for j, s in enumerate(members)
            ):
                return False
            slots[s0] = (ct, base, step // size)
            checks += [(s0, base), (members[-1], base + (r.count - 1) * step)]
        regs: dict[int, tuple[int, int]] = {}
        for r0, d in r.regs.items():
            if d == 0:
                continue
            members = [r0 + j * d for j in range(r.count)]
            if any(not 0 <= x < n_regs for x in members):
                return False
            base = self._reg_off[r0]
            step = self._reg_off[members[1]] - base
            if any(
                self.m.registers[x] != self.m.registers[r0]
                or self._reg_stride[x] != self._reg_stride[r0]
                or self._reg_off[x] != base + j * step
                for j, x in enumerate(members)
            ):
                return False
            regs[r0] = (base, step)
        var = "j_"
        group = stmts[r.start : r.start + r.period]
        inv = _Invariance(r, group)
        carried = sorted(s for s in inv.assigned if r.slots.get(s, 0) == 0 and s != self.m.zero_slot)
        if set(carried) & {s0 + j * d for s0, d in r.slots.items() if d for j in range(r.count)}:
            return False  # a slot kept in a local that some lane also reaches through an array: keep it straight
        em(ind, "{")
        for s, off in checks:
            em(ind + 1, f'_Static_assert(offsetof(struct st, s{_n(s)}) == {_n(off)}, "slot layout");')
        # the fast loop: advancing registers at an invariant cell read and written directly (one range check for
        # the loop, not one per lane), an invariant `if` taken outside the loop: no branch left inside
        direct: dict[tuple[int, int], tuple[str, str, int]] = {}
        guards: list[str] = []
        for reg, index in inv.register_cells():
            if reg not in regs or (reg, index.nid) in direct:
                continue
            size, width = self.m.registers[reg]
            cell, (off, step) = _cells(width) // 8, regs[reg]
            if step % cell:
                continue
            idx, vi = self.exact(index)
            name = f"rb{_n(len(direct))}_"
            em(
                ind + 1,
                f"uint8_t *const {name} = X->regs + (size_t){_n(off)} + "
                f"(size_t)({u(idx, vi)} < {_n(size)} ? {u(idx, vi)} : 0) * {_n(self._reg_stride[reg])};",
            )
            direct[(reg, index.nid)] = (name, f"uint{_n(_cells(width))}_t", step // cell)
            guards.append(f"{u(idx, vi)} < {_n(size)}")
        cond = inv.switch_cond()
        fast = bool(direct) or cond is not None
        if fast:
            em(ind + 1, f"if ({' && '.join(guards) or '1'}) {{")
            if cond is None:
                self._lane_body(group, _Lanes(var, slots, regs, direct), r.count, ind + 2, em, carried)
            else:
                c, _ = self.exact(cond)
                em(ind + 2, f"if ({c}) {{")
                self._lane_body(inv.taking(cond, True), _Lanes(var, slots, regs, direct), r.count, ind + 3, em, carried)
                em(ind + 2, "} else {")
                self._lane_body(
                    inv.taking(cond, False), _Lanes(var, slots, regs, direct), r.count, ind + 3, em, carried
                )
                em(ind + 2, "}")
            em(ind + 1, "} else {")
        self._lane_body(group, _Lanes(var, slots, regs, {}), r.count, ind + 1 + fast, em, carried)
        if fast:
            em(ind + 1, "}")
        em(ind, "}")
        self.lane_loops += 1
        return True

    def _lane_body(
        self, group: tuple[ir.Stmt, ...], lanes: _Lanes, count: int, ind: int, em: ir.Lines, carried: list[int]
    ) -> None:
        """One version of a lane loop. The slots every lane writes (`carried`: a flag, a scratch value) live in locals
        during the loop and go back to the state after it, so that no store in the loop has a fixed address."""
        em(ind, "{")
        scalars = {}
        for s in carried:
            ct = slot_ctype(*self.slot_types[s])
            scalars[s] = f"c{_n(s)}_"
            em(ind + 1, f"{ct} c{_n(s)}_ = S->s{_n(s)};")
        em(ind + 1, f"for (i64 {lanes.var} = 0; {lanes.var} < {_n(count)}; {lanes.var}++) {{")
        saved, self.memo = self.memo, {}  # texts made inside name the loop's lane, outside they would be wrong
        self.lanes = replace(lanes, scalars=scalars)
        try:
            for s in group:
                self.stmt(s, ind + 2, em)
        finally:
            self.lanes, self.memo = None, saved
        em(ind + 1, "}")
        for s in carried:
            em(ind + 1, f"S->s{_n(s)} = c{_n(s)}_;")
        em(ind, "}")

    def fail(self, ind: int, em: ir.Lines, kind: str, message: str) -> None:
        em(ind, f"{{ X->fail = {kind}; X->fail_msg = {message}; {self.fn.ret} }}")

    def stmt(self, s: ir.Stmt, ind: int, em: ir.Lines) -> None:
        if isinstance(s, ir.Assign):
            em(ind, self.assign_text(s.slot, s.value))
        elif isinstance(s, ir.Let):
            text, v = self.ex(s.value)
            self.temps[s.temp] = v
            self.fn.temps[s.temp] = v.kind
            em(ind, f"t{_n(s.temp)} = {text};")
        elif isinstance(s, ir.If):
            c, _ = self.exact(s.cond)
            em(ind, f"if ({c}) {{")
            self.block(s.then, ind + 1, em)
            if s.orelse:
                em(ind, "} else {")
                self.block(s.orelse, ind + 1, em)
            em(ind, "}")
        elif isinstance(s, ir.Return):
            em(ind, self.fn.ret)
        elif isinstance(s, ir.CopyFields):
            for j in range(s.count):
                w, sg = self.slot_types[s.dst + j]
                em(ind, f"S->s{_n(s.dst + j)} = ({slot_ctype(w, sg)})S->s{_n(s.src + j)};")
        elif isinstance(s, ir.SwapFields):
            for j in range(s.count):
                a, b = s.a + j, s.b + j
                wa, sa = self.slot_types[a]
                wb, sb = self.slot_types[b]
                em(
                    ind,
                    f"{{ i64 x_ = (i64)S->s{_n(a)}; S->s{_n(a)} = ({slot_ctype(wa, sa)})S->s{_n(b)}; "
                    f"S->s{_n(b)} = ({slot_ctype(wb, sb)})x_; }}",
                )
        elif isinstance(s, ir.ZeroFields):
            for j in range(s.count):
                em(ind, f"S->s{_n(s.first + j)} = 0;")
        elif isinstance(s, ir.RegWrite):
            size, width = self.m.registers[s.reg]
            if width > MAX_BITS:
                raise CUnsupported(f"a register of {_n(width)} bits", Where.REGISTER, s.reg)
            idx, vi = self.exact(s.index)
            value, vv = self.ex(s.value)
            hit = self.direct_cell(s.reg, s.index)
            if hit is not None:
                em(ind, f"{hit} = (uint{_n(_cells(width))}_t)({u(value, vv)});")
                return
            off, stride = self.reg_off(s.reg), self._reg_stride[s.reg]
            em(ind, f"rt_regset{_n(_cells(width))}(X, {off}, {_n(stride)}, {_n(size)}, {u(idx, vi)}, {u(value, vv)});")
        elif isinstance(s, ir.Count):
            idx, vi = self.exact(s.index)
            size = self.m.counters[s.counter]
            em(
                ind,
                f"rt_count(X, {_n(self._cnt_off[s.counter])}, {_n(size)}, {u(idx, vi)}, (u64)S->s{_n(s.bytes_slot)});",
            )
        elif isinstance(s, ir.Fail):
            self.fail(ind, em, "RT_FAIL_ASSERT", _n(s.message))
        elif isinstance(s, ir.Loop):
            self.loop(s, ind, em)
        elif isinstance(s, ir.Goto):
            em(ind, f"pc = {_n(s.target)}; continue;")
        elif isinstance(s, ir.GotoUnless):
            c, _ = self.exact(s.cond)
            em(ind, f"if (!({c})) {{ pc = {_n(s.target)}; continue; }}")
        elif isinstance(s, ir.Extract):
            self.extract(s.header, s.short_error, ind, em)
        elif isinstance(s, ir.ExtractStack):
            nxt = _n(s.next_slot)
            em(ind, f"if (S->s{nxt} >= {_n(len(s.headers))}) {{ err = {_n(s.full_error)}; goto done; }}")
            em(ind, f"switch (S->s{nxt}) {{")
            for j, h in enumerate(s.headers):
                em(ind, f"case {_n(j)}:")
                self.extract(h, s.short_error, ind + 1, em)
                em(ind + 1, "break;")
            em(ind, "default: break;")
            em(ind, "}")
            em(ind, f"S->s{nxt} += 1;")
        elif isinstance(s, ir.Require):
            em(ind, f"if (L - o < {_n(s.nbytes)}) {{ err = {_n(s.error)}; goto done; }}")
        elif isinstance(s, ir.Verify):
            c, _ = self.exact(s.cond)
            errv, _ = self.exact(s.error)
            em(ind, f"if (!({c})) {{ err = (i64)({errv}); goto done; }}")
        elif isinstance(s, ir.Advance):
            n, vn = self.exact(s.nbytes)
            if vn.kind is Kind.U64:
                n = f"(i64)rt_clampu64({n})"
            em(
                ind,
                f"{{ i64 adv_ = {n}; if (adv_ < 0 || L - o < adv_) {{ err = {_n(s.short_error)}; goto done; }} "
                f"o += adv_; }}",
            )
        else:
            raise ir.IRError(f"unknown statement {type(s).__name__}")

    def loop(self, s: ir.Loop, ind: int, em: ir.Lines) -> None:
        em(ind, "{")
        em(ind + 1, "i64 pc = 0, steps = 0;")
        em(ind + 1, "for (;;) {")
        em(ind + 2, f"if (++steps > {_n(s.limit)})")
        self.fail(ind + 3, em, "RT_FAIL_ASSERT", _n(s.message))
        em(ind + 2, "switch (pc) {")
        for b in s.blocks:
            em(ind + 2, f"case {_n(b.start)}: {{")
            self.block(b.body, ind + 3, em)
            if not (b.body and isinstance(b.body[-1], ir.Goto)):
                em(ind + 3, f"pc = {_n(b.fall)}; continue;")
            em(ind + 2, "}")
        em(ind + 2, f"default: {self.fn.ret}")
        em(ind + 2, "}")
        em(ind + 1, "}")
        em(ind, "}")

    def extract(self, h: ir.HeaderShape, short: int, ind: int, em: ir.Lines) -> None:
        nb = _n(h.nbytes)
        em(ind, f"if (L - o < {nb}) {{ err = {_n(short)}; goto done; }}")
        bit, j = 0, 0
        while j < len(h.widths):
            w, signed = h.widths[j], h.signed[j]
            slot = h.first + j
            sw, ss = self.slot_types[slot]
            k = self._field_run(h, j, bit) if self.opt.lane_loops else 0
            if k:  # a lane array: one loop (reroll.py says why)
                ct = slot_ctype(sw, ss)
                self._assert_run(slot, k, ind, em)
                read = self.field_read(bit, w, signed, f" + {_n(w // 8)} * j_")
                em(
                    ind,
                    f"for (i64 j_ = 0; j_ < {_n(k)}; j_++) (({ct} *)(void *)((uint8_t *)S + "
                    f"{_n(self._slot_off[slot])}))[j_] = ({ct})({read});",
                )
                self.lane_loops += 1
                bit += w * k
                j += k
                continue
            em(ind, f"S->s{_n(slot)} = ({slot_ctype(sw, ss)})({self.field_read(bit, w, signed)});")
            bit += w
            j += 1
        em(ind, f"S->s{_n(h.valid)} = 1;")
        for sib in h.siblings:
            em(ind, f"S->s{_n(sib)} = 0;")
        em(ind, f"o += {nb};")

    def _field_run(self, h: ir.HeaderShape, j: int, bit: int) -> int:
        """How many fields from field j on are alike (byte-aligned, one width of 8-64 bits, one signedness, one C
        type, evenly laid out in the state), when they are at least reroll.MIN_COUNT; else 0."""
        w, signed = h.widths[j], h.signed[j]
        if bit % 8 or w not in (8, 16, 32, 64):
            return 0
        first = h.first + j
        size = slot_bytes(self.slot_types[first][0])
        k = 1
        while (
            j + k < len(h.widths)
            and h.widths[j + k] == w
            and h.signed[j + k] == signed
            and self.slot_types[first + k] == self.slot_types[first]
            and self._slot_off[first + k] == self._slot_off[first] + k * size
        ):
            k += 1
        return k if k >= reroll.MIN_COUNT else 0

    def _assert_run(self, first: int, k: int, ind: int, em: ir.Lines) -> None:
        for s in (first, first + k - 1):
            em(ind, f'_Static_assert(offsetof(struct st, s{_n(s)}) == {_n(self._slot_off[s])}, "slot layout");')

    @staticmethod
    def field_read(bit: int, w: int, signed: bool, lane: str = "") -> str:
        """Field of width w at bit offset `bit` of D + o, as an expression (signed fields sign-extended); `lane` adds
        a lane loop's byte offset to a byte-aligned field's."""
        if w == 0:
            return "0"
        if bit % 8 == 0 and w in (8, 16, 32, 64):
            raw = f"rt_get{_n(w)}(D + o + {_n(bit // 8)}{lane})" if w > 8 else f"(u64)D[o + {_n(bit // 8)}{lane}]"
        else:
            raw = f"rt_getbits(D + o, {_n(bit)}, {_n(w)})"
        if signed:
            return f"rt_sext({raw}, {_n(w)})"
        return raw

    # ------------------------------------------------------------------ functions
    def function(self, header: str, fn: _Fn, body: ir.Lines) -> None:
        """Emit a function whose temporaries, known only once its body is written, are declared first."""
        em = self.out
        em(0, header)
        em(0, "{")
        for t, k in sorted(fn.temps.items()):
            em(1, f"{ctype(k)} t{_n(t)};")
        em.lines.extend(body.lines)
        em(0, "}")
        em(0, "")

    def action(self, k: int, a: ir.Action) -> None:
        for w in a.params:
            if w > MAX_BITS:
                raise CUnsupported(f"an action parameter of {_n(w)} bits", Where.ACTION, k)
        refs = reroll.temp_refs(a.body, self._temp_memo) if self.opt.lane_loops else None
        self.fn = _Fn(Where.ACTION, k, "return;", a.params, refs=refs)
        body = ir.Lines()
        self.block(a.body, 1, body)
        self.function(
            f"static void a_{_n(k)}(struct st *restrict S, const u64 *restrict P, struct rt_x *restrict X)",
            self.fn,
            body,
        )

    def calc(self, k: int, c: ir.Calc) -> None:
        self.fn = _Fn(Where.CALC, k, "return 0;")
        em = ir.Lines()
        total = 0
        for p in c.parts:
            total += p.width
        nbytes = max(1, (total + 7) // 8)
        em(1, f"uint8_t buf[{_n(nbytes)}];")
        em(1, "struct rt_bits bw = { buf, 0 };")
        em(1, f"memset(buf, 0, {_n(nbytes)});")
        guards = {p.guard for p in c.parts if p.kind is not ir.CalcKind.CONST}
        if len(guards) <= 1:
            # every input present or absent together (an IPv4 header's fields): when present, each is at a bit
            # offset known here, written in place rather than appended bit by bit
            g = next(iter(guards), -1)
            em(1, "{" if g < 0 else f"if (S->s{_n(g)}) {{")
            self._calc_fixed(k, c, em)
            em(2, f"return {_HASH_FN[c.algo]}(buf, {_n((total + 7) // 8)});")
            em(1, "}")
            if g < 0:
                self.function(f"static u64 calc_{_n(k)}(const struct st *restrict S)", self.fn, em)
                return
        for p in c.parts:
            if p.kind is ir.CalcKind.FIELD:
                w, s = self.slot_types[p.slot]
                if p.width > MAX_BITS:
                    raise CUnsupported("a hash input wider than 64 bits", Where.CALC, k)
                guard = f"if (S->s{_n(p.guard)}) " if p.guard >= 0 else ""
                em(1, f"{guard}rt_bits_put(&bw, (u64)S->s{_n(p.slot)}, {_n(p.width)});")
            elif p.kind is ir.CalcKind.CONST:
                # a constant of any width, 64 bits at a time from its most significant end
                w, v = p.width, p.value
                while w > 0:
                    chunk = min(64, w)
                    w -= chunk
                    em(1, f"rt_bits_put(&bw, UINT64_C({_n((v >> w) & ((1 << chunk) - 1))}), {_n(chunk)});")
            else:
                em(1, f"if (S->s{_n(p.guard)}) {{")
                for j, w in enumerate(p.widths):
                    if w > MAX_BITS:
                        raise CUnsupported("a hash input wider than 64 bits", Where.CALC, k)
                    em(2, f"rt_bits_put(&bw, (u64)S->s{_n(p.slot + j)}, {_n(w)});")
                em(1, "}")
        em(1, f"return {_HASH_FN[c.algo]}(buf, (bw.n + 7) >> 3);")
        self.function(f"static u64 calc_{_n(k)}(const struct st *restrict S)", self.fn, em)

    def _calc_fixed(self, k: int, c: ir.Calc, em: ir.Lines) -> None:
        """A calculation's inputs at their fixed bit offsets in buf (zeroed): whole bytes stored, the rest OR-ed in."""
        bit = 0

        def put(v: str, w: int) -> None:
            nonlocal bit
            if w > MAX_BITS:
                raise CUnsupported("a hash input wider than 64 bits", Where.CALC, k)
            if w == 0:
                return
            if bit % 8 == 0 and w in (16, 32, 64):
                em(2, f"rt_put{_n(w)}(buf + {_n(bit // 8)}, {v});")
            elif bit % 8 == 0 and w == 8:
                em(2, f"buf[{_n(bit // 8)}] = (uint8_t)({v});")
            else:
                em(2, f"rt_orbits(buf, {_n(bit)}, {_n(w)}, {v});")
            bit += w

        for p in c.parts:
            if p.kind is ir.CalcKind.FIELD:
                put(f"(u64)S->s{_n(p.slot)}", p.width)
            elif p.kind is ir.CalcKind.CONST:
                w, v = p.width, p.value
                while w > 0:
                    chunk = min(64, w)
                    w -= chunk
                    put(f"UINT64_C({_n((v >> w) & ((1 << chunk) - 1))})", chunk)
            else:
                for j, w in enumerate(p.widths):
                    put(f"(u64)S->s{_n(p.slot + j)}", w)

    def parser(self, p: ir.Parser) -> None:
        self.fn = _Fn(Where.PARSER, 0, "return 0;")
        em = ir.Lines()
        em(1, "i64 o = 0, err = 0;")
        if p.max_steps:
            em(1, "i64 steps = 0;")
        em(1, f"goto {'done' if p.init == ir.ACCEPT else 'P' + _n(p.init)};")
        for i, st in enumerate(p.states):
            self.fn.where, self.fn.index = Where.STATE, i
            em(0, f"P{_n(i)}:")
            if p.max_steps:
                em(1, f"if (++steps > {_n(p.max_steps)}) {{ err = {_n(p.timeout_error)}; goto done; }}")
            em(1, "{")
            self.block(st.body, 2, em)
            self.transition(st, em)
            em(1, "}")
        em(0, "done:")
        self.fn.where, self.fn.index = Where.PARSER, 0
        if p.error_slot >= 0:
            w, s = self.slot_types[p.error_slot]
            em(1, f"S->s{_n(p.error_slot)} = ({slot_ctype(w, s)})err;")
        for c in p.verify:
            self.block(c.pre, 1, em)
            conds = []
            if c.guard >= 0:
                conds.append(f"S->s{_n(c.guard)}")
            if c.cond is not None:
                conds.append(self.exact(c.cond)[0])
            conds.append(
                f"(calc_{_n(c.calc)}(S) & UINT64_C({_n((1 << min(c.width, 64)) - 1)})) != (u64)S->s{_n(c.target)}"
            )
            if c.error_slot >= 0:
                em(1, f"if ({' && '.join(conds)}) S->s{_n(c.error_slot)} = 1;")
        em(1, "return o;")
        self.function(
            "static i64 parse(struct st *restrict S, const uint8_t *restrict D, i64 L, struct rt_x *restrict X)",
            self.fn,
            em,
        )

    def transition(self, s: ir.ParserState, em: ir.Lines) -> None:
        def goto(target: int) -> str:
            return "goto done;" if target == ir.ACCEPT else f"goto P{_n(target)};"

        if s.key is None:
            em(2, goto(s.default))
            return
        k, vk = self.exact(s.key)
        em(2, "{")
        em(2, f"{ctype(vk.kind)} k_ = {k};")
        kv = Val(vk.kind, vk.lo, vk.hi)
        for c in s.cases:
            if c.mask < 0:
                cond = self._cmp_const("k_", kv, c.value)
            else:
                masked = (
                    f"(k_ & {lit(c.mask, vk.kind)})"
                    if c.mask <= (I64_MAX if vk.kind is Kind.I64 else U64_MAX)
                    else "k_"
                )
                cond = self._cmp_const(masked, val(0, max(vk.hi, 0)) if vk.lo >= 0 else kv, c.value)
            em(2, f"if ({cond}) {goto(c.next)}")
        em(2, goto(s.default))
        em(2, "}")

    @staticmethod
    def _cmp_const(text: str, v: Val, value: int) -> str:
        if not v.lo <= value <= v.hi:
            return "0"
        return f"{text} == {lit(value, v.kind)}"

    def deparser(self, d: ir.Deparser) -> int:
        """The deparser function; returns the most header bytes it can write."""
        self.fn = _Fn(Where.DEPARSER, 0, "return 0;")
        em = ir.Lines()
        for c in d.updates:
            self.block(c.pre, 1, em)
            w, s = self.slot_types[c.target]
            assign = (
                f"S->s{_n(c.target)} = ({slot_ctype(w, s)})(calc_{_n(c.calc)}(S) & "
                f"UINT64_C({_n((1 << min(c.width, 64)) - 1)}));"
            )
            if c.cond is not None:
                em(1, f"if ({self.exact(c.cond)[0]}) {assign}")
            else:
                em(1, assign)
        em(1, "uint8_t *p = out;")
        total = 0
        for h in d.emits:
            total += h.nbytes
            em(1, f"if (S->s{_n(h.valid)}) {{")
            aligned = all(w % 8 == 0 for w in h.widths)
            if not aligned:
                em(2, f"memset(p, 0, {_n(h.nbytes)});")
            bit, j = 0, 0
            while j < len(h.widths):
                w, signed = h.widths[j], h.signed[j]
                k = self._field_run(h, j, bit) if self.opt.lane_loops else 0
                if k:
                    slot = h.first + j
                    ct = slot_ctype(*self.slot_types[slot])
                    self._assert_run(slot, k, 2, em)
                    v = f"(u64)(({ct} *)(void *)((uint8_t *)S + {_n(self._slot_off[slot])}))[j_]"
                    if signed and w < 64:
                        v = f"({v} & UINT64_C({_n((1 << w) - 1)}))"
                    write = self.field_write(bit, w, v, aligned, f" + {_n(w // 8)} * j_")
                    em(2, f"for (i64 j_ = 0; j_ < {_n(k)}; j_++) {write}")
                    self.lane_loops += 1
                    bit += w * k
                    j += k
                    continue
                v = f"(u64)S->s{_n(h.first + j)}"
                if signed and w < 64:
                    v = f"({v} & UINT64_C({_n((1 << w) - 1)}))"
                em(2, self.field_write(bit, w, v, aligned))
                bit += w
                j += 1
            em(2, f"p += {_n(h.nbytes)};")
            em(1, "}")
        em(1, "return p - out;")
        self.function(
            "static i64 deparse(struct st *restrict S, uint8_t *restrict out, struct rt_x *restrict X)", self.fn, em
        )
        return total

    @staticmethod
    def field_write(bit: int, w: int, v: str, aligned: bool, lane: str = "") -> str:
        """The statement writing v as the field at bit `bit` of p (`lane`: as field_read's)."""
        if w == 0:
            return ";"
        if bit % 8 == 0 and w in (8, 16, 32, 64):
            if w == 8:
                return f"p[{_n(bit // 8)}{lane}] = (uint8_t)({v});"
            return f"rt_put{_n(w)}(p + {_n(bit // 8)}{lane}, {v});"
        if aligned:
            return f"rt_putbytes(p + {_n(bit // 8)}, {_n(w // 8)}, {v});"
        return f"rt_orbits(p, {_n(bit)}, {_n(w)}, {v});"

    # ------------------------------------------------------------------ control flow
    def _successors(self, n: int) -> list[int]:
        node = self.m.nodes[n]
        if isinstance(node, ir.CondNode):
            return [node.true_next, node.false_next]
        if isinstance(node, ir.CallNode):
            return [node.next]
        t = self.m.tables[node.table]
        if t.kind is ir.TableKind.DIRECT:
            return [t.direct_next]
        return [x for _, x in t.next_by_action] + [t.base_next, t.hit_next, t.miss_next]

    def reachable(self, init: int) -> list[int]:
        seen: set[int] = set()
        stack = [init] if init != ir.ACCEPT else []
        while stack:
            n = stack.pop()
            if n in seen or n == ir.ACCEPT:
                continue
            if not 0 <= n < len(self.m.nodes):
                raise ir.IRError(f"control flow refers to node {n}")
            seen.add(n)
            stack.extend(self._successors(n))
        return sorted(seen)

    def pipeline(self, name: str, init: int) -> None:
        self.fn = _Fn(Where.MODULE, 0, "return;")
        em = ir.Lines()
        nodes = self.reachable(init)
        em(1, "i64 n = -1;")
        em(1, f"goto {self.label(init)};")
        em(0, "dispatch:")
        em(1, "switch (n) {")
        for k in nodes:
            em(1, f"case {_n(k)}: goto N{_n(k)};")
        em(1, "default: return;")
        em(1, "}")
        for k in nodes:
            self.fn.where, self.fn.index = Where.NODE, k
            em(0, f"N{_n(k)}:")
            self.node(k, self.m.nodes[k], em)
        em(0, "finish:")
        em(1, "(void)n;")
        em(1, "return;")
        self.function(f"static void {name}(struct st *restrict S, struct rt_x *restrict X)", self.fn, em)

    @staticmethod
    def label(n: int) -> str:
        return "finish" if n == ir.ACCEPT else f"N{_n(n)}"

    def after_action(self, em: ir.Lines, ind: int) -> None:
        em(ind, "if (X->fail) return;")
        if self.m.uses_exit:
            em(ind, f"if (S->s{_n(self.m.exit_slot)}) return;")

    def node(self, k: int, node: ir.Node, em: ir.Lines) -> None:
        if isinstance(node, ir.CondNode):
            em(1, "{")
            self.block(node.pre, 2, em)
            c, _ = self.exact(node.cond)
            em(2, f"if ({c}) goto {self.label(node.true_next)};")
            em(2, f"goto {self.label(node.false_next)};")
            em(1, "}")
            return
        if isinstance(node, ir.CallNode):
            em(1, f"a_{_n(node.action)}(S, rt_noparams, X);")
            self.after_action(em, 1)
            em(1, f"goto {self.label(node.next)};")
            return
        t = self.m.tables[node.table]
        tk = _n(node.table)
        if t.kind is ir.TableKind.DIRECT:
            if t.direct_action >= 0:
                ps = t.direct_params
                if any(not 0 <= p <= U64_MAX for p in ps):
                    raise CUnsupported("a direct action call with a parameter beyond 64 bits", Where.TABLE, node.table)
                if ps:
                    em(1, "{")
                    values = ", ".join(f"UINT64_C({_n(p)})" for p in ps)
                    em(2, f"static const u64 dp_[{_n(len(ps))}] = {{{values}}};")
                    em(2, f"a_{_n(t.direct_action)}(S, dp_, X);")
                    em(1, "}")
                else:
                    em(1, f"a_{_n(t.direct_action)}(S, rt_noparams, X);")
                self.after_action(em, 1)
            em(1, f"goto {self.label(t.direct_next)};")
            return
        em(1, "{")
        em(2, "const struct rt_res *r;")
        if t.kind is ir.TableKind.KEYLESS:
            em(2, f"r = X->tab[{tk}].def;")
        else:
            keys = []
            for e in t.keys:
                text, v = self.exact(e)
                if v.lo < 0:
                    raise CUnsupported("a table key that may be negative", Where.TABLE, node.table)
                keys.append(u(text, v))
            em(2, f"u64 k_[{_n(len(keys))}] = {{{', '.join(keys)}}};")
            fn = {
                ir.TableKind.EXACT: "rt_exact_find",
                ir.TableKind.LPM: "rt_lpm_find",
                ir.TableKind.SCAN: "rt_scan_find",
            }[t.kind]
            em(2, f"r = {fn}(&X->tab[{tk}], k_);")
            em(2, f"if (!r) r = X->tab[{tk}].def;")
        em(2, "if (!r) { X->fail = RT_FAIL_INTERNAL; return; }")
        actions = sorted({a for a, _ in t.next_by_action} | set(t.actions))
        em(2, "switch (r->action) {")
        for a in actions:
            em(2, f"case {_n(a)}: a_{_n(a)}(S, r->p, X); break;")
        em(2, "default: break;")
        em(2, "}")
        self.after_action(em, 2)
        static = not t.hit_miss and not t.next_by_action
        if static:
            em(2, f"goto {self.label(t.base_next)};")
        else:
            em(2, "n = r->next;")
            em(2, "goto dispatch;")
        em(1, "}")

    # ------------------------------------------------------------------ the packet's way through the switch
    def process(self, max_hdr: int) -> None:
        m, o = self.m, self.opt
        std = dict(zip(_STD, m.std))

        def slot(name: str) -> str | None:
            s = std.get(name, ir.ACCEPT)
            return None if s == ir.ACCEPT else f"S->s{_n(s)}"

        em = self.out
        ing, es, ep = slot("ingress_port"), slot("egress_spec"), slot("egress_port")
        if ing is None or es is None:
            raise CUnsupported("a program without standard_metadata.egress_spec/ingress_port", Where.MODULE, 0)
        em(0, f"#define PROG_MAX_HDR {_n(max_hdr)}")
        em(
            0,
            "static int prog_egress(struct rt_x *restrict X, struct st *restrict S, i64 port, const uint8_t *payload,",
        )
        em(0, "                       i64 plen, struct rt_outs *O)")
        em(0, "{")
        if ep is not None:
            em(1, f"{ep} = ({self.std_type('egress_port')})port;")
        em(1, f"{es} = ({self.std_type('egress_spec')}){_n((DROP_PORT + 1) & 0x1FF)};")
        pl = slot("packet_length")
        if pl is not None:
            em(1, f"{pl} = ({self.std_type('packet_length')})((u64)S->s{_n(m.length_slot)} & UINT64_C(4294967295));")
        ts, dq, enq = slot("egress_global_timestamp"), slot("deq_timedelta"), slot("enq_timestamp")
        if (o.egress_clock and ts) or (o.deq_clock and dq):
            em(1, "{")
            em(2, "i64 now = rt_now_us(X);")
            if o.egress_clock and ts:
                em(2, f"{ts} = ({self.std_type('egress_global_timestamp')})((u64)now & UINT64_C(281474976710655));")
            if o.deq_clock and dq:
                base = f"(i64){enq}" if enq is not None else "now"
                em(2, f"{dq} = ({self.std_type('deq_timedelta')})((u64)(now - {base}) & UINT64_C(4294967295));")
            em(1, "}")
        em(1, "run_egress(S, X);")
        em(1, "if (X->fail) return -1;")
        em(1, f"if ({es} == {_n(DROP_PORT)}) return 0;")
        em(1, "{")
        em(2, "uint8_t *buf = rt_out_reserve(O, PROG_MAX_HDR + plen);")
        em(2, "i64 n;")
        em(2, "if (!buf) { X->fail = RT_FAIL_INTERNAL; return -1; }")
        em(2, "n = deparse(S, buf, X);")
        em(2, "if (X->fail) return -1;")
        em(2, "if (plen) memcpy(buf + n, payload, (size_t)plen);")
        em(2, "rt_out_commit(O, (int)port, (uint32_t)(n + plen));")
        em(1, "}")
        em(1, "return 1;")
        em(0, "}")
        em(0, "")
        em(0, "static int prog_enqueue(struct rt_x *restrict X, struct st *restrict S)")
        em(0, "{")
        pr = slot("priority")
        if pr is not None:
            em(1, f"if ((i64){pr} >= X->queues) return 0;")
        if o.enq_clock and enq is not None:
            em(1, f"{enq} = ({self.std_type('enq_timestamp')})((u64)rt_now_us(X) & UINT64_C(4294967295));")
        em(1, "(void)X; (void)S;")
        em(1, "return 1;")
        em(0, "}")
        em(0, "")
        em(0, "/* One packet through parser, ingress, replication, egress and deparser; -1: the packet failed. */")
        em(
            0,
            "static int prog_process(struct rt_x *restrict X, int port, const uint8_t *D, i64 len, struct rt_outs *O,",
        )
        em(0, "                        u64 *drops)")
        em(0, "{")
        em(1, "struct st *restrict S = (struct st *)X->s0;")
        em(1, "const uint8_t *payload;")
        em(1, "i64 off, plen, espec;")
        mg = slot("mcast_grp")
        if mg is not None:
            em(1, "i64 mgid;")
        # the initial state: zeroes and the template's few other values (a copy of the whole template would read
        # as many bytes again as it writes)
        em(1, "memset(S, 0, sizeof(*S));")
        for s, v in enumerate(m.template):
            if v:
                em(1, f"S->s{_n(s)} = {_n(v)};")
        em(1, f"{ing} = ({self.std_type('ingress_port')})(port & 0x1FF);")
        if pl is not None:
            em(1, f"{pl} = ({self.std_type('packet_length')})((u64)len & UINT64_C(4294967295));")
        em(1, f"S->s{_n(m.length_slot)} = len;")
        em(1, f"S->s{_n(m.ingress_length_slot)} = len;")
        its = slot("ingress_global_timestamp")
        if o.ingress_clock and its is not None:
            # the timestamp is 48 bits wide in v1model: the clock's microseconds mod 2^48
            its_type = self.std_type("ingress_global_timestamp")
            em(1, f"{its} = ({its_type})((u64)rt_now_us(X) & UINT64_C(281474976710655));")
        em(1, "off = parse(S, D, len, X);")
        em(1, "if (X->fail) return -1;")
        em(1, "payload = D + off;")
        em(1, "plen = len - off;")
        em(1, "run_ingress(S, X);")
        em(1, "if (X->fail) return -1;")
        em(1, f"S->s{_n(m.exit_slot)} = 0;")
        it = slot("instance_type")
        if mg is not None:
            rid = slot("egress_rid")
            em(1, f"mgid = (i64){mg};")
            em(1, "if (mgid) {")
            em(2, "const struct rt_group *g = rt_mc_get(X, mgid);")
            em(2, "struct st *restrict G = (struct st *)X->s1;")
            em(2, "uint32_t i;")
            em(2, "if (!g || !g->n) { *drops = 1; return 0; }")
            em(2, "if (!prog_enqueue(X, S)) { *drops = g->n; return 0; }")
            if it is not None:
                em(2, f"{it} = ({self.std_type('instance_type')}){_n(INSTANCE_REPLICATION)};")
            em(2, "for (i = 0; i < g->n; i++) {")
            em(3, "int r;")
            em(3, "struct st *R = S;")
            em(3, "if (i + 1 < g->n) { *G = *S; R = G; }  /* the last replica takes the packet's own state */")
            if rid is not None:
                em(3, f"R->s{_n(std['egress_rid'])} = ({self.std_type('egress_rid')})g->r[i].rid;")
            em(3, "r = prog_egress(X, R, g->r[i].port, payload, plen, O);")
            em(3, "if (r < 0) return -1;")
            em(3, "if (r == 0) *drops += 1;")
            em(2, "}")
            em(2, "return 0;")
            em(1, "}")
        em(1, f"espec = (i64){es};")
        em(1, f"if (espec == {_n(DROP_PORT)}) {{ *drops = 1; return 0; }}")
        if it is not None:
            em(1, f"{it} = ({self.std_type('instance_type')}){_n(INSTANCE_NORMAL)};")
        em(1, "if (!prog_enqueue(X, S)) { *drops = 1; return 0; }")
        em(1, "{")
        em(2, "int r = prog_egress(X, S, espec, payload, plen, O);")
        em(2, "if (r < 0) return -1;")
        em(2, "if (r == 0) *drops = 1;")
        em(1, "}")
        em(1, "return 0;")
        em(0, "}")
        em(0, "")

    def std_type(self, name: str) -> str:
        s = dict(zip(_STD, self.m.std))[name]
        return slot_ctype(*self.slot_types[s])

    # ------------------------------------------------------------------ descriptors
    def descriptors(self) -> None:
        m, em = self.m, self.out
        em(0, f"#define PROG_NTABLES {_n(len(m.tables))}")
        em(0, f"#define PROG_NREGS {_n(len(m.registers))}")
        em(0, f"#define PROG_NCOUNTERS {_n(len(m.counters))}")
        em(0, f"#define PROG_REG_BYTES {_n(self._reg_bytes)}")
        em(0, f"#define PROG_COUNTER_CELLS {_n(self._cnt_cells)}")
        rows = []
        for t in m.tables:
            kind = {ir.TableKind.EXACT: "RT_EXACT", ir.TableKind.LPM: "RT_LPM", ir.TableKind.SCAN: "RT_SCAN"}.get(
                t.kind, "RT_KEYLESS"
            )
            rows.append(f"{{{kind}, {_n(len(t.keys))}, {_n(max(t.lpm_index, 0))}}}")
        table_rows = ", ".join(rows) or "{0, 0, 0}"
        em(0, f"static const struct rt_table_desc PROG_TABLES[{_n(max(1, len(rows)))}] = {{{table_rows}}};")
        regs = [
            f"{{{_n(off)}, {_n(size)}, {_n(width)}, {_n(stride)}}}"
            for off, stride, (size, width) in zip(self._reg_off, self._reg_stride, m.registers)
        ]
        reg_rows = ", ".join(regs) or "{0, 0, 0}"
        em(0, f"static const struct rt_reg_desc PROG_REGS[{_n(max(1, len(regs)))}] = {{{reg_rows}}};")
        cnts = [f"{{{_n(off)}, {_n(size)}}}" for off, size in zip(self._cnt_off, m.counters)]
        counter_rows = ", ".join(cnts) or "{0, 0}"
        em(0, f"static const struct rt_counter_desc PROG_COUNTERS[{_n(max(1, len(cnts)))}] = {{{counter_rows}}};")
        em(0, "")

    def state_struct(self) -> None:
        em = self.out
        em(0, "struct st {")
        for slot, (w, s) in enumerate(self.slot_types):
            em(1, f"{slot_ctype(w, s)} s{_n(slot)};")
        if not self.slot_types:
            em(1, "uint8_t unused;")
        em(0, "};")
        for slot, v in enumerate(self.m.template):  # prog_process sets these after zeroing the state
            ir.check_int(v, "template value")
            if v:
                w, s = self.slot_types[slot]
                if not slot_val(w, s).lo <= v <= slot_val(w, s).hi:
                    raise CUnsupported("an initial value that does not fit its field", Where.SLOT, slot)
        em(0, "")

    # ------------------------------------------------------------------ the whole module
    def module(self) -> str:
        m = self.m
        ir.check_module(m)
        self.layout_registers()
        off = 0
        for size in m.counters:
            self._cnt_off.append(off)
            off += 2 * size
        self._cnt_cells = off
        em = self.out
        em(0, "/* generated by softswitch.compiler.cemit from the program's IR: numbers and generated names only */")
        em(0, "")
        self.state_struct()
        self.descriptors()
        body = ir.Lines()
        saved, self.out = self.out, body
        for k, c in enumerate(m.calcs):
            self.calc(k, c)
        self.out = saved
        # actions come after the stack-field helpers they call; emit them into their own buffer first
        actions = ir.Lines()
        self.out = actions
        for k, a in enumerate(m.actions):
            self.action(k, a)
        parser_lines = ir.Lines()
        self.out = parser_lines
        self.parser(m.parser)
        pipes = ir.Lines()
        self.out = pipes
        for name, init in zip(("run_ingress", "run_egress"), m.pipelines):
            self.pipeline(name, init)
        dep = ir.Lines()
        self.out = dep
        max_hdr = self.deparser(m.deparser)
        self.out = saved
        em.lines.extend(body.lines)
        em.lines.extend(self._stack_out.lines)
        em.lines.extend(actions.lines)
        em.lines.extend(parser_lines.lines)
        em.lines.extend(pipes.lines)
        em.lines.extend(dep.lines)
        self.process(max_hdr)
        return "\n".join(em.lines) + "\n"


def _cells(width: int) -> int:
    """Bits of the C type a register of this width is stored in."""
    return 8 if width <= 8 else 16 if width <= 16 else 32 if width <= 32 else 64


def emit(module: ir.Module, options: Options) -> str:
    """C source for a module, to be compiled between the runtime's head and body."""
    return CEmitter(module, options).module()
