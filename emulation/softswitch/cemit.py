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
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from emulation.softswitch import ir

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
    if have.kind is want or (want is Kind.MOD and have.kind is Kind.U64) or (want is Kind.U64 and have.kind is Kind.MOD):
        return text
    return f"(({ctype(want)})({text}))"


def u(text: str, v: Val) -> str:
    return text if v.kind is not Kind.I64 else f"((u64)({text}))"


def slot_ctype(width: int, signed: bool) -> str:
    if width == 0:
        return "int64_t"
    size = 8 if width <= 8 else 16 if width <= 16 else 32 if width <= 32 else 64
    return f"{'int' if signed else 'uint'}{_n(size)}_t"


def slot_val(width: int, signed: bool) -> Val:
    if width == 0:
        return Val(Kind.I64, I64_MIN, I64_MAX)
    if signed:
        return val(-(1 << (width - 1)), (1 << (width - 1)) - 1)
    return val(0, (1 << width) - 1)


def _bits_span(*bounds: int) -> int:
    return max((b.bit_length() for b in bounds), default=0)


_HASH_BITS = {
    ir.HashAlgo.CRC16: 16, ir.HashAlgo.CRC32: 32, ir.HashAlgo.CRC_CCITT: 16,
    ir.HashAlgo.CSUM16: 16, ir.HashAlgo.XOR16: 16, ir.HashAlgo.IDENTITY: 64,
}
_HASH_FN = {
    ir.HashAlgo.CRC16: "rt_crc16", ir.HashAlgo.CRC32: "rt_crc32", ir.HashAlgo.CRC_CCITT: "rt_crc_ccitt",
    ir.HashAlgo.CSUM16: "rt_csum16", ir.HashAlgo.XOR16: "rt_xor16", ir.HashAlgo.IDENTITY: "rt_identity",
}
_CMP = {ir.BinOp.EQ: "==", ir.BinOp.NE: "!=", ir.BinOp.GT: ">", ir.BinOp.GE: ">=", ir.BinOp.LT: "<", ir.BinOp.LE: "<="}
_RING = {ir.BinOp.ADD: "+", ir.BinOp.SUB: "-", ir.BinOp.MUL: "*", ir.BinOp.AND: "&", ir.BinOp.OR: "|", ir.BinOp.XOR: "^"}
_STD = (
    "ingress_port", "egress_spec", "egress_port", "instance_type", "packet_length", "parser_error", "checksum_error",
    "mcast_grp", "egress_rid", "ingress_global_timestamp", "egress_global_timestamp", "enq_timestamp",
    "deq_timedelta", "priority",
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

    # ------------------------------------------------------------------ module layout
    def _slot_types(self) -> list[tuple[int, bool]]:
        m = self.m
        if len(m.slot_widths) != len(m.template) or len(m.slot_signed) != len(m.template):
            raise ir.IRError("the module lacks slot widths (lowered by an older lowering?)")
        out = []
        for slot, (w, s) in enumerate(zip(m.slot_widths, m.slot_signed)):
            if w > MAX_BITS:
                raise CUnsupported(f"a field of {_n(w)} bits (the C engine stores at most {_n(MAX_BITS)})", Where.SLOT, slot)
            out.append((w, bool(s)))
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
        B = ir.BinOp
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
            return f"(({ctype(v.kind)})S->s{_n(e.slot)})", v
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
            if op is B.SHL:
                return self.shl(e.a, e.b)
            if op is B.SHR:
                return self.shr(e.a, e.b)
            if op in (B.DIV, B.MOD):
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
            off, stride = self._reg_off[e.reg], self._reg_stride[e.reg]
            text = f"rt_regget{_n(_cells(width))}(X, {_n(off)}, {_n(stride)}, {_n(size)}, {u(idx, vi)})"
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
        B = ir.BinOp
        a, va = self.ex(ea)
        b, vb = self.ex(eb)
        r: Val
        if op is B.AND and (not va.exact or not vb.exact):
            other = vb if not va.exact else va
            r = val(0, other.hi) if other.nonneg else MOD
        elif not va.exact or not vb.exact:
            r = MOD
        elif op is B.ADD:
            r = val(va.lo + vb.lo, va.hi + vb.hi)
        elif op is B.SUB:
            r = val(va.lo - vb.hi, va.hi - vb.lo)
        elif op is B.MUL:
            corners = (va.lo * vb.lo, va.lo * vb.hi, va.hi * vb.lo, va.hi * vb.hi)
            r = val(min(corners), max(corners))
        elif op is B.AND:
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
        if r.exact and va.kind is Kind.I64 and vb.kind is Kind.I64 and r.kind is Kind.I64 and op in (B.AND, B.OR, B.XOR):
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
        return f"S->s{_n(slot)} = ({slot_ctype(w, s)})({text});"

    def block(self, stmts: tuple[ir.Stmt, ...], ind: int, em: ir.Lines) -> None:
        for s in stmts:
            self.stmt(s, ind, em)

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
                em(ind, f"{{ i64 x_ = (i64)S->s{_n(a)}; S->s{_n(a)} = ({slot_ctype(wa, sa)})S->s{_n(b)}; "
                        f"S->s{_n(b)} = ({slot_ctype(wb, sb)})x_; }}")
        elif isinstance(s, ir.ZeroFields):
            for j in range(s.count):
                em(ind, f"S->s{_n(s.first + j)} = 0;")
        elif isinstance(s, ir.RegWrite):
            size, width = self.m.registers[s.reg]
            if width > MAX_BITS:
                raise CUnsupported(f"a register of {_n(width)} bits", Where.REGISTER, s.reg)
            idx, vi = self.exact(s.index)
            value, vv = self.ex(s.value)
            off, stride = self._reg_off[s.reg], self._reg_stride[s.reg]
            em(ind, f"rt_regset{_n(_cells(width))}(X, {_n(off)}, {_n(stride)}, {_n(size)}, {u(idx, vi)}, "
                    f"{u(value, vv)});")
        elif isinstance(s, ir.Count):
            idx, vi = self.exact(s.index)
            size = self.m.counters[s.counter]
            em(ind, f"rt_count(X, {_n(self._cnt_off[s.counter])}, {_n(size)}, {u(idx, vi)}, "
                    f"(u64)S->s{_n(s.bytes_slot)});")
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
            em(ind, f"{{ i64 adv_ = {n}; if (adv_ < 0 || L - o < adv_) {{ err = {_n(s.short_error)}; goto done; }} "
                    f"o += adv_; }}")
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
        bit = 0
        for j, (w, signed) in enumerate(zip(h.widths, h.signed)):
            slot = h.first + j
            sw, ss = self.slot_types[slot]
            em(ind, f"S->s{_n(slot)} = ({slot_ctype(sw, ss)})({self.field_read(bit, w, signed)});")
            bit += w
        em(ind, f"S->s{_n(h.valid)} = 1;")
        for sib in h.siblings:
            em(ind, f"S->s{_n(sib)} = 0;")
        em(ind, f"o += {nb};")

    @staticmethod
    def field_read(bit: int, w: int, signed: bool) -> str:
        """Field of width w at bit offset `bit` of D + o, as an expression (signed fields sign-extended)."""
        if w == 0:
            return "0"
        if bit % 8 == 0 and w in (8, 16, 32, 64):
            raw = f"rt_get{_n(w)}(D + o + {_n(bit // 8)})" if w > 8 else f"(u64)D[o + {_n(bit // 8)}]"
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
        self.fn = _Fn(Where.ACTION, k, "return;", a.params)
        body = ir.Lines()
        self.block(a.body, 1, body)
        self.function(
            f"static void a_{_n(k)}(struct st *restrict S, const u64 *restrict P, struct rt_x *restrict X)",
            self.fn, body,
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
            conds.append(f"(calc_{_n(c.calc)}(S) & UINT64_C({_n((1 << min(c.width, 64)) - 1)})) != (u64)S->s{_n(c.target)}")
            if c.error_slot >= 0:
                em(1, f"if ({' && '.join(conds)}) S->s{_n(c.error_slot)} = 1;")
        em(1, "return o;")
        self.function(
            "static i64 parse(struct st *restrict S, const uint8_t *restrict D, i64 L, struct rt_x *restrict X)",
            self.fn, em,
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
                masked = f"(k_ & {lit(c.mask, vk.kind)})" if c.mask <= (I64_MAX if vk.kind is Kind.I64 else U64_MAX) else "k_"
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
            assign = (f"S->s{_n(c.target)} = ({slot_ctype(w, s)})(calc_{_n(c.calc)}(S) & "
                      f"UINT64_C({_n((1 << min(c.width, 64)) - 1)}));")
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
            bit = 0
            for j, (w, signed) in enumerate(zip(h.widths, h.signed)):
                v = f"(u64)S->s{_n(h.first + j)}"
                if signed and w < 64:
                    v = f"({v} & UINT64_C({_n((1 << w) - 1)}))"
                em(2, self.field_write(bit, w, v, aligned))
                bit += w
            em(2, f"p += {_n(h.nbytes)};")
            em(1, "}")
        em(1, "return p - out;")
        self.function("static i64 deparse(struct st *restrict S, uint8_t *restrict out, struct rt_x *restrict X)",
                      self.fn, em)
        return total

    @staticmethod
    def field_write(bit: int, w: int, v: str, aligned: bool) -> str:
        if w == 0:
            return ";"
        if bit % 8 == 0 and w in (8, 16, 32, 64):
            if w == 8:
                return f"p[{_n(bit // 8)}] = (uint8_t)({v});"
            return f"rt_put{_n(w)}(p + {_n(bit // 8)}, {v});"
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
                    em(2, f"static const u64 dp_[{_n(len(ps))}] = {{{', '.join('UINT64_C(' + _n(p) + ')' for p in ps)}}};")
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
            fn = {ir.TableKind.EXACT: "rt_exact_find", ir.TableKind.LPM: "rt_lpm_find", ir.TableKind.SCAN: "rt_scan_find"}[t.kind]
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
        em(0, "static int prog_egress(struct rt_x *restrict X, struct st *restrict S, i64 port, const uint8_t *payload,")
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
        em(0, "static int prog_process(struct rt_x *restrict X, int port, const uint8_t *D, i64 len, struct rt_outs *O,")
        em(0, "                        u64 *drops)")
        em(0, "{")
        em(1, "struct st *restrict S = (struct st *)X->s0;")
        em(1, "const uint8_t *payload;")
        em(1, "i64 off, plen, espec;")
        mg = slot("mcast_grp")
        if mg is not None:
            em(1, "i64 mgid;")
        em(1, "*S = PROG_TEMPLATE;")
        em(1, f"{ing} = ({self.std_type('ingress_port')})(port & 0x1FF);")
        if pl is not None:
            em(1, f"{pl} = ({self.std_type('packet_length')})((u64)len & UINT64_C(4294967295));")
        em(1, f"S->s{_n(m.length_slot)} = len;")
        em(1, f"S->s{_n(m.ingress_length_slot)} = len;")
        its = slot("ingress_global_timestamp")
        if o.ingress_clock and its is not None:
            em(1, f"{its} = ({self.std_type('ingress_global_timestamp')})((u64)rt_now_us(X) & UINT64_C(281474976710655));")
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
            em(3, "*G = *S;")
            if rid is not None:
                em(3, f"G->s{_n(std['egress_rid'])} = ({self.std_type('egress_rid')})g->r[i].rid;")
            em(3, "r = prog_egress(X, G, g->r[i].port, payload, plen, O);")
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
            kind = {ir.TableKind.EXACT: "RT_EXACT", ir.TableKind.LPM: "RT_LPM", ir.TableKind.SCAN: "RT_SCAN"}.get(t.kind, "RT_KEYLESS")
            rows.append(f"{{{kind}, {_n(len(t.keys))}, {_n(max(t.lpm_index, 0))}}}")
        em(0, f"static const struct rt_table_desc PROG_TABLES[{_n(max(1, len(rows)))}] = {{{', '.join(rows) or '{0, 0, 0}'}}};")
        regs = [f"{{{_n(off)}, {_n(size)}, {_n(width)}, {_n(stride)}}}"
                for off, stride, (size, width) in zip(self._reg_off, self._reg_stride, m.registers)]
        em(0, f"static const struct rt_reg_desc PROG_REGS[{_n(max(1, len(regs)))}] = {{{', '.join(regs) or '{0, 0, 0}'}}};")
        cnts = [f"{{{_n(off)}, {_n(size)}}}" for off, size in zip(self._cnt_off, m.counters)]
        em(0, f"static const struct rt_counter_desc PROG_COUNTERS[{_n(max(1, len(cnts)))}] = {{{', '.join(cnts) or '{0, 0}'}}};")
        em(0, "")

    def state_struct(self) -> None:
        em = self.out
        em(0, "struct st {")
        for slot, (w, s) in enumerate(self.slot_types):
            em(1, f"{slot_ctype(w, s)} s{_n(slot)};")
        if not self.slot_types:
            em(1, "uint8_t unused;")
        em(0, "};")
        inits = []
        for slot, v in enumerate(self.m.template):
            ir.check_int(v, "template value")
            if v:
                w, s = self.slot_types[slot]
                if not slot_val(w, s).lo <= v <= slot_val(w, s).hi:
                    raise CUnsupported("an initial value that does not fit its field", Where.SLOT, slot)
                inits.append(f".s{_n(slot)} = {_n(v)}")
        em(0, f"static const struct st PROG_TEMPLATE = {{{', '.join(inits) or '0'}}};")
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
        em(0, "/* generated by emulation.softswitch.cemit from the program's IR: numbers and generated names only */")
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
