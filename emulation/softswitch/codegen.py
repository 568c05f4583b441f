"""Compile a loaded BMv2 program to Python source once, so per-packet work never walks the JSON.

Packet state is one flat list `F` of Python ints: per header a validity slot then one slot
per field (signed fields hold their signed value), plus a few hidden slots. Generated code:

* `parse(F, D) -> int`: the parser as one loop over states; extract unpacks a header with a
  precompiled struct (or one big-int split); returns the number of bytes parsed and sets
  parser_error / checksum_error like simple_switch.
* one function per action `a_<id>(F, P)`: straight-line Python (if/else where p4c emitted
  _jump/_jump_if_zero); fields the action touches live in Python locals and are written back
  at the end, so a 64-lane action costs local-variable arithmetic, not list indexing; long
  actions then go through common-subexpression elimination (cse.py), since p4c's copy
  propagation repeats whole expression trees.
* one function per control node (table, conditional) returning the next node, run by a
  trampoline per pipeline.
* `deparse(F, payload) -> bytes`: checksum updates, then the valid headers in order.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field
from typing import Any

from emulation.softswitch import cse, hashing
from emulation.softswitch.errors import UnsupportedProgramError
from emulation.softswitch.program import (
    ActionDef,
    HeaderInstance,
    PipelineDef,
    Program,
    TableDef,
    parse_hexstr,
)

LOG = logging.getLogger(__name__)

Json = Any

DROP_PORT = 511
# Actions at least this long get common-subexpression elimination (cse.py); shorter ones are not worth it.
CSE_MIN_PRIMITIVES = 8
INSTANCE_NORMAL = 0
INSTANCE_REPLICATION = 5

STANDARD_FIELDS = (
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
)
_ALIAS_PREFIX = {
    "mcast_grp": "intrinsic_metadata",
    "egress_rid": "intrinsic_metadata",
    "ingress_global_timestamp": "intrinsic_metadata",
    "egress_global_timestamp": "intrinsic_metadata",
    "enq_timestamp": "queueing_metadata",
}

# Primitives an action may use; anything else is refused at load time.
PRIMITIVES = {
    "assign",
    "modify_field",
    "assign_header",
    "copy_header",
    "add_header",
    "remove_header",
    "mark_to_drop",
    "drop",
    "register_read",
    "register_write",
    "count",
    "modify_field_with_hash_based_offset",
    "modify_field_rng_uniform",
    "exit",
    "log_msg",
    "no_op",
    "assert",
    "assume",
    "_jump",
    "_jump_if_zero",
    # simple_switch's P4_14-era arithmetic primitives
    "add_to_field",
    "subtract_from_field",
    "add",
    "subtract",
    "bit_and",
    "bit_or",
    "bit_xor",
    "shift_left",
    "shift_right",
}
_P414_BINARY = {"add": "+", "subtract": "-", "bit_and": "&", "bit_or": "|", "bit_xor": "^", "shift_left": "<<", "shift_right": ">>"}
# Primitives whose effect the local-variable cache cannot see (they touch F in bulk).
_BULK_PRIMITIVES = {"modify_field_with_hash_based_offset"}
OPS_BINARY = {"+", "-", "*", "&", "|", "^", "<<", ">>", "==", "!=", ">", ">=", "<", "<=", "and", "or", "/", "%"}
OPS_OTHER = {"not", "~", "d2b", "b2d", "?", "two_comp_mod", "sat_cast", "usat_cast", "valid", "valid_union"}


@dataclass
class Layout:
    """Where each header's validity bit and fields live in the flat packet list F."""

    slots: dict[tuple[str, str], int] = field(default_factory=dict)
    widths: dict[tuple[str, str], tuple[int, bool]] = field(default_factory=dict)
    headers: dict[str, HeaderInstance] = field(default_factory=dict)
    valid: dict[str, int] = field(default_factory=dict)
    first: dict[str, int] = field(default_factory=dict)
    union_of: dict[str, tuple[str, ...]] = field(default_factory=dict)  # header -> its union siblings
    stack_next: dict[str, int] = field(default_factory=dict)
    template: list[int] = field(default_factory=list)
    aliases: dict[str, tuple[str, str]] = field(default_factory=dict)
    EXIT: int = 0
    LEN: int = 0
    INGLEN: int = 0
    ZERO: int = 0

    def slot(self, hdr: str, fld: str) -> int:
        key = (hdr, fld)
        if key not in self.slots:
            alias = self.aliases.get(f"{hdr}.{fld}")
            if alias is not None and alias in self.slots:
                return self.slots[alias]
            raise ValueError(f"BMv2 JSON refers to unknown field {hdr}.{fld}")
        return self.slots[key]

    def width(self, hdr: str, fld: str) -> tuple[int, bool]:
        key = (hdr, fld)
        if key not in self.widths:
            alias = self.aliases.get(f"{hdr}.{fld}")
            if alias is not None and alias in self.widths:
                return self.widths[alias]
            raise ValueError(f"BMv2 JSON refers to unknown field {hdr}.{fld}")
        return self.widths[key]

    def std(self, name: str) -> int | None:
        """Slot of a standard_metadata field (or its simple_switch alias), None when absent."""
        if ("standard_metadata", name) in self.slots:
            return self.slots[("standard_metadata", name)]
        prefix = _ALIAS_PREFIX.get(name)
        if prefix:
            alias = self.aliases.get(f"{prefix}.{name}")
            if alias and alias in self.slots:
                return self.slots[alias]
            if (prefix, name) in self.slots:
                return self.slots[(prefix, name)]
        return None


def make_layout(prog: Program) -> Layout:
    lay = Layout(aliases=dict(prog.field_aliases))
    tmpl: list[int] = []
    for h in prog.headers:
        lay.headers[h.name] = h
        lay.valid[h.name] = len(tmpl)
        lay.slots[(h.name, "$valid$")] = len(tmpl)
        lay.widths[(h.name, "$valid$")] = (1, False)
        tmpl.append(1 if h.metadata else 0)
        lay.first[h.name] = len(tmpl)
        for f in h.type.fields:
            lay.slots[(h.name, f.name)] = len(tmpl)
            lay.widths[(h.name, f.name)] = (f.width, f.signed)
            tmpl.append(0)
    for u in prog.unions:
        for m in u.headers:
            lay.union_of[m] = tuple(x for x in u.headers if x != m)
    for s in prog.stacks:
        lay.stack_next[s.name] = len(tmpl)
        tmpl.append(0)
    lay.EXIT = len(tmpl)
    lay.LEN = len(tmpl) + 1
    lay.INGLEN = len(tmpl) + 2
    lay.ZERO = len(tmpl) + 3
    tmpl.extend([0, 0, 0, 0])
    lay.template = tmpl
    return lay


@dataclass
class E:
    """A compiled expression: Python source, whether it is a bool, and what is known of its range."""

    code: str
    is_bool: bool = False
    bits: int | None = None  # value known to lie in [0, 2**bits)
    swidth: int | None = None  # value known to lie in int<swidth>'s range
    const: int | None = None


class Refused(UnsupportedProgramError):
    pass


def _mask(w: int) -> int:
    return (1 << w) - 1


class Emitter:
    """Indented source lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class FieldAccess:
    """Field references inside one generated function: list slots, or cached Python locals."""

    def __init__(self, cached: bool) -> None:
        self.cached = cached
        self.used: set[int] = set()
        self.written: set[int] = set()

    def ref(self, slot: int) -> str:
        if not self.cached:
            return f"F[{slot}]"
        self.used.add(slot)
        return f"f{slot}"

    def store(self, slot: int) -> str:
        if not self.cached:
            return f"F[{slot}]"
        self.used.add(slot)
        self.written.add(slot)
        return f"f{slot}"

    def prologue(self) -> list[str]:
        return [f"f{s} = F[{s}]" for s in sorted(self.used)]

    def epilogue(self) -> list[str]:
        return [f"F[{s}] = f{s}" for s in sorted(self.written)]


class Compiler:
    """Generates the program module; `namespace` holds the objects the source refers to."""

    def __init__(self, prog: Program, eliminate_common: bool = True) -> None:
        self.prog = prog
        self.eliminate_common = eliminate_common
        self.lay = make_layout(prog)
        self.ns: dict[str, Any] = {}
        self.out = Emitter()
        self.node_ids: dict[str, str] = {}
        self.register_ids = {r.name: i for i, r in enumerate(prog.registers)}
        self.counter_ids = {c.name: i for i, c in enumerate(prog.counters)}
        self.calc_ids: dict[str, int] = {}
        self.table_defs: dict[str, TableDef] = {}
        self.uses_exit = any(p.get("op") == "exit" for a in prog.actions for p in a.primitives)
        self._tmp = 0
        self.where = ""

    # ------------------------------------------------------------------ helpers
    def refuse(self, what: str) -> Refused:
        return Refused(f"{what} in {self.where}" if self.where else what)

    def tmp(self) -> str:
        self._tmp += 1
        return f"_t{self._tmp}"

    def node_id(self, name: str | None) -> str:
        if name is None:
            return "None"
        if name not in self.node_ids:
            self.node_ids[name] = f"n_{len(self.node_ids)}"
        return self.node_ids[name]

    # ------------------------------------------------------------------ expressions
    def rv(self, j: Json, fa: FieldAccess, params: tuple[int, ...] | None = None) -> E:
        if not isinstance(j, dict):
            raise self.refuse(f"operand {j!r}")
        t = j.get("type")
        v = j.get("value")
        if t == "field":
            hdr, fld = v[0], v[1]
            slot = self.lay.slot(hdr, fld)
            w, signed = self.lay.width(hdr, fld)
            if fld == "$valid$":
                return E(fa.ref(slot), bits=1)
            if signed:
                return E(fa.ref(slot), swidth=w)
            return E(fa.ref(slot), bits=w)
        if t == "hexstr":
            n = parse_hexstr(v)
            return E(repr(n), bits=n.bit_length() if n >= 0 else None, const=n)
        if t == "bool":
            return E("True" if v else "False", is_bool=True)
        if t in ("runtime_data", "local"):
            if params is None:
                raise self.refuse("action data outside an action")
            idx = int(v)
            if not 0 <= idx < len(params):
                raise ValueError(f"{self.where}: runtime_data index {idx} out of range")
            return E(f"P[{idx}]", bits=params[idx])
        if t == "expression":
            if isinstance(v, dict) and "op" in v:
                return self.op(v, fa, params)
            return self.rv(v, fa, params)
        if t == "stack_field":
            stack, fld = v[0], v[1]
            return self.stack_field(stack, fld, fa)
        raise self.refuse(f"operand type {t!r}")

    def stack_field(self, stack: str, fld: str, fa: FieldAccess) -> E:
        st = next((s for s in self.prog.stacks if s.name == stack), None)
        if st is None:
            raise ValueError(f"unknown header stack {stack!r}")
        if fa.cached:
            raise self.refuse("stack field access in a cached action")  # never happens: see _cacheable
        slots = [self.lay.ZERO] + [self.lay.slot(h, fld) for h in st.headers]
        name = f"SF_{stack}_{fld}".replace(".", "_").replace("[", "_").replace("]", "_")
        self.ns[name] = slots
        w, signed = self.lay.width(st.headers[0], fld)
        return E(f"F[{name}[F[{self.lay.stack_next[stack]}]]]", bits=None if signed else w)

    def op(self, j: dict[str, Json], fa: FieldAccess, params: tuple[int, ...] | None) -> E:
        op = j["op"]
        left, right = j.get("left"), j.get("right")
        if op in OPS_BINARY:
            a = self.rv(left, fa, params)
            b = self.rv(right, fa, params)
            if op in ("==", "!=", ">", ">=", "<", "<="):
                return E(f"({a.code} {op} {b.code})", is_bool=True)
            if op == "and" or op == "or":
                return E(f"({a.code} {op} {b.code})", is_bool=True)
            if op == "&":
                known = [x for x in (a.bits, b.bits) if x is not None]
                # drop p4c's width masks when the other side already fits them
                if b.const is not None and b.const > 0 and b.const == _mask(b.const.bit_length()) and a.bits is not None and a.bits <= b.const.bit_length():
                    return a
                if a.const is not None and a.const > 0 and a.const == _mask(a.const.bit_length()) and b.bits is not None and b.bits <= a.const.bit_length():
                    return b
                return E(f"({a.code} & {b.code})", bits=min(known) if known else None)
            if op in ("|", "^"):
                bits = max(a.bits, b.bits) if a.bits is not None and b.bits is not None else None
                return E(f"({a.code} {op} {b.code})", bits=bits)
            if op == "<<":
                if b.const is not None and 0 <= b.const <= 4096:
                    return E(f"({a.code} << {b.const})")
                return E(f"_shl({a.code}, {b.code})")
            if op == ">>":
                if b.const is not None and b.const >= 0:
                    return E(f"({a.code} >> {b.const})", bits=a.bits)
                return E(f"_shr({a.code}, {b.code})", bits=a.bits)
            if op == "/":
                return E(f"_div({a.code}, {b.code})")
            if op == "%":
                return E(f"_mod({a.code}, {b.code})")
            return E(f"({a.code} {op} {b.code})")
        if op == "not":
            return E(f"(not {self.rv(right, fa, params).code})", is_bool=True)
        if op == "~":
            return E(f"(~{self.rv(right, fa, params).code})")
        if op == "d2b":
            return E(f"({self.rv(right, fa, params).code} != 0)", is_bool=True)
        if op == "b2d":
            r = self.rv(right, fa, params)
            return E(f"(1 if {r.code} else 0)", bits=1)
        if op == "?":
            a = self.rv(left, fa, params)
            b = self.rv(right, fa, params)
            c = self.rv(j["cond"], fa, params)
            bits = max(a.bits, b.bits) if a.bits is not None and b.bits is not None else None
            sw = a.swidth if a.swidth is not None and a.swidth == b.swidth else None
            return E(f"({a.code} if {c.code} else {b.code})", is_bool=a.is_bool and b.is_bool, bits=bits, swidth=sw)
        if op in ("two_comp_mod", "sat_cast", "usat_cast"):
            a = self.rv(left, fa, params)
            w = self.rv(right, fa, params).const
            if w is None or w <= 0:
                raise self.refuse(f"{op} with a non-constant width")
            if op == "two_comp_mod":
                h = 1 << (w - 1)
                return E(f"((({a.code} + {h}) & {_mask(w)}) - {h})", swidth=w)
            if op == "sat_cast":
                lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
                return E(f"min(max({a.code}, {lo}), {hi})", swidth=w)
            return E(f"min(max({a.code}, 0), {_mask(w)})", bits=w)
        if op == "valid":
            if not isinstance(right, dict) or right.get("type") != "header":
                raise self.refuse(f"'valid' on {right!r}")
            return E(f"({fa.ref(self.lay.valid[right['value']])} != 0)", is_bool=True)
        if op == "valid_union":
            if not isinstance(right, dict) or right.get("type") != "header_union":
                raise self.refuse(f"'valid_union' on {right!r}")
            u = next((u for u in self.prog.unions if u.name == right["value"]), None)
            if u is None:
                raise ValueError(f"unknown header union {right['value']!r}")
            parts = " or ".join(f"{fa.ref(self.lay.valid[m])} != 0" for m in u.headers) or "False"
            return E(f"({parts})", is_bool=True)
        raise self.refuse(f"expression op {op!r}")

    def assign_code(self, dst_slot: int, w: int, signed: bool, e: E, fa: FieldAccess) -> str:
        code = e.code
        if e.is_bool:
            code = f"(1 if {code} else 0)"
            e = E(code, bits=1)
        if signed:
            if e.swidth is not None and e.swidth <= w:
                value = code
            elif e.bits is not None and e.bits < w:
                value = code
            else:
                h = 1 << (w - 1)
                value = f"((({code}) + {h}) & {_mask(w)}) - {h}"
        else:
            if e.bits is not None and e.bits <= w:
                value = code
            else:
                value = f"{code} & {_mask(w)}"
        return f"{fa.store(dst_slot)} = {value}"

    def lvalue(self, j: Json) -> tuple[int, int, bool]:
        if not isinstance(j, dict) or j.get("type") != "field":
            raise self.refuse(f"assignment to {j.get('type') if isinstance(j, dict) else j!r} (only header fields)")
        hdr, fld = j["value"][0], j["value"][1]
        if fld == "$valid$":
            raise self.refuse("assignment to a $valid$ field")
        w, signed = self.lay.width(hdr, fld)
        return self.lay.slot(hdr, fld), w, signed

    # ------------------------------------------------------------------ primitives
    def primitive(self, p: dict[str, Json], ind: int, em: Emitter, fa: FieldAccess, params: tuple[int, ...] | None) -> None:
        op = p.get("op")
        args = p.get("parameters") or []
        if op not in PRIMITIVES:
            raise self.refuse(f"primitive {op!r}")
        if op in ("assign", "modify_field"):
            slot, w, signed = self.lvalue(args[0])
            em(ind, self.assign_code(slot, w, signed, self.rv(args[1], fa, params), fa))
        elif op in ("add_to_field", "subtract_from_field"):
            slot, w, signed = self.lvalue(args[0])
            sym = "+" if op == "add_to_field" else "-"
            e = self.op({"op": sym, "left": args[0], "right": args[1]}, fa, params)
            em(ind, self.assign_code(slot, w, signed, e, fa))
        elif op in _P414_BINARY:
            slot, w, signed = self.lvalue(args[0])
            e = self.op({"op": _P414_BINARY[op], "left": args[1], "right": args[2]}, fa, params)
            em(ind, self.assign_code(slot, w, signed, e, fa))
        elif op in ("assign_header", "copy_header"):
            dst, src = self._header_arg(args[0]), self._header_arg(args[1])
            hd, hs = self.lay.headers[dst], self.lay.headers[src]
            if hd.type.name != hs.type.name:
                raise ValueError(f"{self.where}: assign_header between different types")
            n = len(hd.type.fields)
            vd, vs = self.lay.valid[dst], self.lay.valid[src]
            fd, fs = self.lay.first[dst], self.lay.first[src]
            em(ind, f"if {fa.ref(vs)}:")
            if fa.cached:
                for j in range(n):
                    em(ind + 1, f"{fa.store(fd + j)} = {fa.ref(fs + j)}")
            else:
                em(ind + 1, f"F[{fd}:{fd + n}] = F[{fs}:{fs + n}]")
            if not hd.metadata:
                em(ind + 1, f"{fa.store(vd)} = 1")
                em(ind, "else:")
                em(ind + 1, f"{fa.store(vd)} = 0")
            else:
                em(ind + 1, "pass")
        elif op == "add_header":
            h = self._header_arg(args[0])
            hi = self.lay.headers[h]
            if hi.metadata:
                return
            n = len(hi.type.fields)
            v, f0 = self.lay.valid[h], self.lay.first[h]
            em(ind, f"if not {fa.ref(v)}:")
            if fa.cached:
                for j in range(n):
                    em(ind + 1, f"{fa.store(f0 + j)} = 0")
            elif n:
                em(ind + 1, f"F[{f0}:{f0 + n}] = _ZEROS[:{n}]")
            em(ind + 1, f"{fa.store(v)} = 1")
            em(ind + 1, f"{fa.store(self.lay.LEN)} += {hi.type.width // 8}")
            for sib in self.lay.union_of.get(h, ()):
                em(ind + 1, f"{fa.store(self.lay.valid[sib])} = 0")
        elif op == "remove_header":
            h = self._header_arg(args[0])
            hi = self.lay.headers[h]
            if hi.metadata:
                return
            v = self.lay.valid[h]
            em(ind, f"if {fa.ref(v)}:")
            em(ind + 1, f"{fa.store(v)} = 0")
            em(ind + 1, f"{fa.store(self.lay.LEN)} -= {hi.type.width // 8}")
        elif op in ("mark_to_drop", "drop"):
            es, mg = self.lay.std("egress_spec"), self.lay.std("mcast_grp")
            if es is None:
                raise self.refuse("mark_to_drop without standard_metadata.egress_spec")
            em(ind, f"{fa.store(es)} = {DROP_PORT}")
            if mg is not None:
                em(ind, f"{fa.store(mg)} = 0")
        elif op == "register_read":
            slot, w, signed = self.lvalue(args[0])
            rname = args[1]["value"]
            r = self._register(rname)
            idx = self.rv(args[2], fa, params)
            t = self._index(idx, ind, em)
            em(ind, f"if {self._in_range(t, idx, r.size)}:")
            em(ind + 1, self.assign_code(slot, w, signed, E(f"R{self.register_ids[rname]}[{t}]", bits=r.width), fa))
        elif op == "register_write":
            rname = args[0]["value"]
            r = self._register(rname)
            idx = self.rv(args[1], fa, params)
            val = self.rv(args[2], fa, params)
            t = self._index(idx, ind, em)
            vcode = val.code if (val.bits is not None and val.bits <= r.width) else f"{val.code} & {_mask(r.width)}"
            if val.is_bool:
                vcode = f"(1 if {val.code} else 0)"
            em(ind, f"if {self._in_range(t, idx, r.size)}:")
            em(ind + 1, f"R{self.register_ids[rname]}[{t}] = {vcode}")
        elif op == "count":
            cname = args[0]["value"]
            if cname not in self.counter_ids:
                raise ValueError(f"{self.where}: unknown counter {cname!r}")
            c = self.prog.counters[self.counter_ids[cname]]
            idx = self.rv(args[1], fa, params)
            k = self.counter_ids[cname]
            t = self._index(idx, ind, em)
            em(ind, f"if {self._in_range(t, idx, c.size)}:")
            em(ind + 1, f"CP{k}[{t}] += 1")
            em(ind + 1, f"CB{k}[{t}] += {fa.ref(self.lay.INGLEN)}")
        elif op == "modify_field_with_hash_based_offset":
            slot, w, signed = self.lvalue(args[0])
            base = self.rv(args[1], fa, params)
            calc = args[2]["value"]
            fn = self.calculation(calc)
            size = self.rv(args[3], fa, params)
            t = self.tmp()
            em(ind, f"{t} = {size.code}")
            em(ind, self.assign_code(slot, w, signed, E(f"({fn}(F) % ({t} or 1) + {base.code})"), fa))
        elif op == "modify_field_rng_uniform":
            slot, w, signed = self.lvalue(args[0])
            lo, hi = self.rv(args[1], fa, params), self.rv(args[2], fa, params)
            em(ind, self.assign_code(slot, w, signed, E(f"_rand({lo.code}, {hi.code})"), fa))
        elif op == "exit":
            em(ind, f"{fa.store(self.lay.EXIT)} = 1")
        elif op in ("assert", "assume"):
            cond = self.rv(args[0], fa, params)
            em(ind, f"if not {cond.code}:")
            em(ind + 1, f"raise ProgramAssertion({(op + ' failed in ' + self.where)!r})")
        elif op in ("log_msg", "no_op"):
            em(ind, "pass")
        else:  # _jump / _jump_if_zero are handled by the action structurer
            raise self.refuse(f"misplaced {op!r}")

    def _index(self, idx: E, ind: int, em: Emitter) -> str:
        """A name or literal for an index expression, evaluating it once."""
        if idx.code.isidentifier() or idx.const is not None:
            return idx.code
        t = self.tmp()
        em(ind, f"{t} = {idx.code}")
        return t

    def _in_range(self, t: str, idx: E, size: int) -> str:
        if idx.bits is not None:
            if (1 << idx.bits) <= size:
                return "True"
            return f"{t} < {size}"
        return f"0 <= {t} < {size}"

    def _register(self, name: str) -> Any:
        if name not in self.register_ids:
            raise ValueError(f"{self.where}: unknown register {name!r}")
        return self.prog.registers[self.register_ids[name]]

    def _header_arg(self, j: Json) -> str:
        if not isinstance(j, dict) or j.get("type") != "header":
            raise self.refuse(f"header argument {j!r}")
        name = j["value"]
        if name not in self.lay.headers:
            raise ValueError(f"{self.where}: unknown header {name!r}")
        return name

    # ------------------------------------------------------------------ calculations
    def calculation(self, name: str) -> str:
        if name in self.calc_ids:
            return f"calc_{self.calc_ids[name]}"
        calc = self.prog.calculations.get(name)
        if calc is None:
            raise ValueError(f"{self.where}: unknown calculation {name!r}")
        algo = hashing.ALGORITHMS.get(calc.algo)
        if algo is None:
            raise Refused(f"hash algorithm {calc.algo!r} in calculation {name!r}")
        k = len(self.calc_ids)
        self.calc_ids[name] = k
        self.ns[f"HASH_{k}"] = algo
        em = self.out
        em(0, f"def calc_{k}(F):")
        em(1, "x = 0")
        em(1, "n = 0")
        fa = FieldAccess(False)
        group_hdr: str | None = None
        ind = 1
        for item in calc.inputs:
            t = item.get("type")
            if t == "field":
                hdr, fld = item["value"][0], item["value"][1]
                w, signed = self.lay.width(hdr, fld)
                need = None if self.lay.headers[hdr].metadata else hdr
                if need != group_hdr:
                    ind = 1
                    if need is not None:
                        em(1, f"if F[{self.lay.valid[need]}]:")
                        ind = 2
                    group_hdr = need
                ref = fa.ref(self.lay.slot(hdr, fld))
                val = f"({ref} & {_mask(w)})" if signed or fld == "$valid$" else ref
                em(ind, f"x = (x << {w}) | {val}")
                em(ind, f"n += {w}")
            elif t == "hexstr":
                w = int(item.get("bitwidth") or 0)
                if w <= 0:
                    raise Refused(f"constant without bitwidth in calculation {name!r}")
                group_hdr, ind = None, 1
                em(1, f"x = (x << {w}) | {parse_hexstr(item['value']) & _mask(w)}")
                em(1, f"n += {w}")
            elif t == "header":
                hdr = item["value"]
                hi = self.lay.headers[hdr]
                group_hdr, ind = None, 1
                em(1, f"if F[{self.lay.valid[hdr]}]:")
                for f in hi.type.fields:
                    ref = fa.ref(self.lay.slot(hdr, f.name))
                    val = f"({ref} & {_mask(f.width)})" if f.signed else ref
                    em(2, f"x = (x << {f.width}) | {val}")
                em(2, f"n += {hi.type.width}")
            else:
                raise Refused(f"calculation input of type {t!r} in {name!r}")
        em(1, "p = -n % 8")
        em(1, f"return HASH_{k}((x << p).to_bytes((n + p) >> 3, 'big'))")
        em(0, "")
        return f"calc_{k}"

    # ------------------------------------------------------------------ actions
    def action(self, a: ActionDef) -> None:
        self.where = f"action {a.name!r}"
        params = tuple(p.width for p in a.params)
        prims = list(a.primitives)
        for p in prims:
            if p.get("op") not in PRIMITIVES:
                raise self.refuse(f"primitive {p.get('op')!r}")
        cached = self._cacheable(prims)
        fa = FieldAccess(cached)
        body = Emitter()
        try:
            self._structured(prims, 0, len(prims), 1, body, fa, params)
            structured = True
        except _Unstructured:
            structured = False
        if not structured:
            fa = FieldAccess(False)
            body = Emitter()
            self._dispatch(prims, body, fa, params)
        fn = Emitter()
        fn(0, f"def a_{a.id}(F, P):")
        fn(0, f"    # {a.name}")
        for line in fa.prologue():
            fn(1, line)
        epi = fa.epilogue()
        for line in body.lines:
            if line.strip() == "return" and epi:
                pad = line[: len(line) - len(line.lstrip())]
                for e in epi:
                    fn.lines.append(pad + e)
            fn.lines.append(line)
        for line in epi:
            fn(1, line)
        fn(1, "return")
        text = fn.text()
        if self.eliminate_common and fa.cached and len(prims) >= CSE_MIN_PRIMITIVES:
            text = cse.eliminate(text) + "\n"
        self.out.lines.extend(text.rstrip("\n").split("\n"))
        self.out(0, "")

    @staticmethod
    def _cacheable(prims: list[Json]) -> bool:
        for p in prims:
            if p.get("op") in _BULK_PRIMITIVES:
                return False
            if "stack_field" in repr(p.get("parameters")):
                return False
        return True

    def _jump_target(self, p: Json, idx: int) -> int:
        return parse_hexstr(p["parameters"][idx]["value"])

    def _structured(
        self, prims: list[Json], lo: int, hi: int, ind: int, em: Emitter, fa: FieldAccess, params: tuple[int, ...]
    ) -> None:
        n = len(prims)
        i = lo
        emitted = False
        while i < hi:
            p = prims[i]
            op = p.get("op")
            if op == "_jump_if_zero":
                t = self._jump_target(p, 1)
                if not i < t <= hi:
                    raise _Unstructured
                cond = self.rv(p["parameters"][0], fa, params)
                last = prims[t - 1] if t - 1 > i else None
                if last is not None and last.get("op") == "_jump" and t <= self._jump_target(last, 0) <= hi:
                    end = self._jump_target(last, 0)
                    em(ind, f"if {cond.code}:")
                    self._structured(prims, i + 1, t - 1, ind + 1, em, fa, params)
                    if end > t:
                        em(ind, "else:")
                        self._structured(prims, t, end, ind + 1, em, fa, params)
                    i = end
                else:
                    em(ind, f"if {cond.code}:")
                    self._structured(prims, i + 1, t, ind + 1, em, fa, params)
                    i = t
                emitted = True
                continue
            if op == "_jump":
                t = self._jump_target(p, 0)
                if t == n:
                    em(ind, "return")
                    emitted = True
                    i += 1
                    # anything after an unconditional return in this block is dead unless it is a target
                    if i < hi:
                        raise _Unstructured
                    continue
                raise _Unstructured
            self.primitive(p, ind, em, fa, params)
            emitted = True
            i += 1
        if not emitted:
            em(ind, "pass")

    def _dispatch(self, prims: list[Json], em: Emitter, fa: FieldAccess, params: tuple[int, ...]) -> None:
        """General _jump code (loops): a program counter over basic blocks."""
        n = len(prims)
        leaders = {0}
        for i, p in enumerate(prims):
            if p.get("op") == "_jump":
                leaders.add(self._jump_target(p, 0))
                leaders.add(i + 1)
            elif p.get("op") == "_jump_if_zero":
                leaders.add(self._jump_target(p, 1))
                leaders.add(i + 1)
        starts = sorted(x for x in leaders if 0 <= x < n)
        if not starts:
            em(1, "pass")
            return
        em(1, "pc = 0")
        em(1, "while True:")
        for bi, s in enumerate(starts):
            e = starts[bi + 1] if bi + 1 < len(starts) else n
            em(2, f"{'if' if bi == 0 else 'elif'} pc == {s}:")
            fell = True
            for i in range(s, e):
                p = prims[i]
                op = p.get("op")
                if op == "_jump":
                    em(3, f"pc = {self._jump_target(p, 0)}")
                    em(3, "continue")
                    fell = False
                    break
                if op == "_jump_if_zero":
                    cond = self.rv(p["parameters"][0], fa, params)
                    em(3, f"if not {cond.code}:")
                    em(4, f"pc = {self._jump_target(p, 1)}")
                    em(4, "continue")
                    continue
                self.primitive(p, 3, em, fa, params)
            if fell:
                em(3, f"pc = {e}")
                em(3, "continue")
        em(2, "else:")
        em(3, "return")

    # ------------------------------------------------------------------ control flow
    def pipeline(self, pl: PipelineDef) -> None:
        for t in pl.tables:
            self.table(t)
        for c in pl.conditionals:
            self.where = f"conditional {c.name!r}"
            fa = FieldAccess(False)
            cond = self.rv({"type": "expression", "value": c.expression}, fa)
            self.out(0, f"def {self.node_id(c.name)}(F):")
            self.out(1, f"return {self.node_id(c.true_next)} if {cond.code} else {self.node_id(c.false_next)}")
            self.out(0, "")
        for ac in pl.action_calls:
            a = self.prog.action_by_id(ac.action_id)
            self.out(0, f"def {self.node_id(ac.name)}(F):")
            self.out(1, f"a_{a.id}(F, ())")
            if self.uses_exit:
                self.out(1, f"if F[{self.lay.EXIT}]: return None")
            self.out(1, f"return {self.node_id(ac.next_node)}")
            self.out(0, "")
        self.out(0, f"def run_{pl.name}(F):")
        self.out(1, f"n = {self.node_id(pl.init)}")
        self.out(1, "while n is not None:")
        self.out(2, "n = n(F)")
        self.out(0, "")

    def table(self, t: TableDef) -> None:
        self.where = f"table {t.name!r}"
        self.table_defs[t.name] = t
        fn = self.node_id(t.name)
        k = t.id
        em = self.out
        fa = FieldAccess(False)
        key_codes = []
        for key in t.keys:
            slot = self.lay.slot(key.header, key.field)
            w, signed = self.lay.width(key.header, key.field)
            code = fa.ref(slot)
            if signed:
                code = f"({code} & {_mask(w)})"
            if key.mask is not None:
                code = f"({code} & {key.mask})"
            key_codes.append(code)
        em(0, f"def {fn}(F):")
        em(0, f"    # table {t.name}")
        if not t.keys and t.default_const and not t.const_entries:
            # a p4c "dummy table": a direct action call from the control body
            a = self.prog.action_by_id(t.default_action_id) if t.default_action_id is not None else None
            if a is not None:
                em(1, f"a_{a.id}(F, {t.default_action_data!r})")
                if self.uses_exit:
                    em(1, f"if F[{self.lay.EXIT}]: return None")
            nxt = self._next_for(t, a.name if a else None, hit=False)
            em(1, f"return {self.node_id(nxt)}")
            em(0, "")
            return
        if not t.keys:
            em(1, f"e = DEF_{k}[0]")
        elif t.match_type == "exact":
            kc = key_codes[0] if len(key_codes) == 1 else "(" + ", ".join(key_codes) + ",)"
            em(1, f"e = EX_{k}.get({kc})")
            em(1, "if e is None:")
            em(2, f"e = DEF_{k}[0]")
        elif t.match_type == "lpm":
            li = next(i for i, kk in enumerate(t.keys) if kk.match_type == "lpm")
            em(1, f"v = {key_codes[li]}")
            parts = [c if i != li else "v & m" for i, c in enumerate(key_codes)]
            kc = parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ",)"
            em(1, f"for m, d in LPM_{k}:")
            em(2, f"e = d.get({kc})")
            em(2, "if e is not None:")
            em(3, "break")
            em(1, "else:")
            em(2, f"e = DEF_{k}[0]")
        elif t.match_type in ("ternary", "range"):
            em(1, f"e = SCAN_{k}((" + ", ".join(key_codes) + ",))")
            em(1, "if e is None:")
            em(2, f"e = DEF_{k}[0]")
        else:
            raise self.refuse(f"table match type {t.match_type!r}")
        em(1, "e[0](F, e[1])")
        if self.uses_exit:
            em(1, f"if F[{self.lay.EXIT}]: return None")
        em(1, "return e[2]")
        em(0, "")

    @staticmethod
    def _next_for(t: TableDef, action_name: str | None, hit: bool) -> str | None:
        return next_node_name(t, action_name, hit)

    # ------------------------------------------------------------------ parser
    def parser(self) -> None:
        prog, lay = self.prog, self.lay
        em = self.out
        states = {s["name"]: i for i, s in enumerate(prog.parser.states)}
        pts = prog.errors["PacketTooShort"]
        em(0, "def parse(F, D):")
        em(1, "L = len(D)")
        em(1, "o = 0")
        em(1, "err = 0")
        init = prog.parser.init_state
        if init is None or init not in states:
            em(1, "st = -1")
        else:
            em(1, f"st = {states[init]}")
        em(1, "while True:")
        for i, s in enumerate(prog.parser.states):
            self.where = f"parser state {s['name']!r}"
            em(2, f"{'if' if i == 0 else 'elif'} st == {i}:")
            fa = FieldAccess(False)
            for opj in s.get("parser_ops") or []:
                self.parser_op(opj, 3, fa, pts)
            self.transition(s, states, 3, fa)
        em(2, "else:" if prog.parser.states else "if True:")
        em(3, "break")
        pe = lay.std("parser_error")
        if pe is not None:
            em(1, f"F[{pe}] = err")
        # checksum verification runs after parsing, also after a parser error
        verify = [c for c in prog.checksums if c.verify]
        ce = lay.std("checksum_error")
        for c in verify:
            self.where = f"checksum {c.name!r}"
            fa = FieldAccess(False)
            tslot = lay.slot(*c.target)
            w, _ = lay.width(*c.target)
            fn = self.calculation(c.calculation)
            cond = "True"
            if c.if_cond is not None:
                cond = self.rv({"type": "expression", "value": c.if_cond}, fa).code
            em(1, f"if F[{lay.valid[c.target[0]]}] and {cond} and ({fn}(F) & {_mask(w)}) != F[{tslot}]:")
            em(2, f"F[{ce}] = 1" if ce is not None else "pass")
        em(1, "return o")
        em(0, "")

    def parser_op(self, opj: Json, ind: int, fa: FieldAccess, pts: int) -> None:
        em = self.out
        op = opj.get("op")
        params = opj.get("parameters") or []
        if op == "extract":
            p = params[0]
            if p.get("type") == "regular":
                self.extract(p["value"], ind, pts)
            elif p.get("type") == "stack":
                st = next((s for s in self.prog.stacks if s.name == p["value"]), None)
                if st is None:
                    raise ValueError(f"{self.where}: unknown stack {p['value']!r}")
                nxt = self.lay.stack_next[st.name]
                em(ind, f"if F[{nxt}] >= {len(st.headers)}:")
                em(ind + 1, f"err = {self.prog.errors['StackOutOfBounds']}")
                em(ind + 1, "break")
                for j, h in enumerate(st.headers):
                    em(ind, f"{'if' if j == 0 else 'elif'} F[{nxt}] == {j}:")
                    self.extract(h, ind + 1, pts)
                em(ind, f"F[{nxt}] += 1")
            else:
                raise self.refuse(f"extract into {p.get('type')!r}")
        elif op == "set":
            dst, src = params[0], params[1]
            slot, w, signed = self.lvalue(dst)
            if src.get("type") == "lookahead":
                off, width = int(src["value"][0]), int(src["value"][1])
                nb = (off + width + 7) // 8
                em(ind, f"if L - o < {nb}:")
                em(ind + 1, f"err = {pts}")
                em(ind + 1, "break")
                e = E(f"((int.from_bytes(D[o:o + {nb}], 'big') >> {nb * 8 - off - width}) & {_mask(width)})", bits=width)
                em(ind, self.assign_code(slot, w, signed, e, fa))
            else:
                em(ind, self.assign_code(slot, w, signed, self.rv(src, fa), fa))
        elif op == "verify":
            cond = self.rv(params[0], fa)
            errv = self.rv(params[1], fa)
            em(ind, f"if not {cond.code}:")
            em(ind + 1, f"err = {errv.code}")
            em(ind + 1, "break")
        elif op in ("advance", "shift"):
            n = self.rv(params[0], fa)
            t = self.tmp()
            if op == "shift":
                em(ind, f"{t} = {n.code}")
            else:
                em(ind, f"{t} = ({n.code}) >> 3")
            em(ind, f"if L - o < {t}:")
            em(ind + 1, f"err = {pts}")
            em(ind + 1, "break")
            em(ind, f"o += {t}")
        elif op == "primitive":
            inner = params[0]
            self.primitive(inner, ind, self.out, fa, None)
        else:
            raise self.refuse(f"parser op {op!r}")

    def extract(self, hname: str, ind: int, pts: int) -> None:
        em = self.out
        lay = self.lay
        h = lay.headers[hname]
        width = h.type.width
        if width % 8:
            raise Refused(f"header {hname!r} is {width} bits, not a whole number of bytes")
        nb = width // 8
        em(ind, f"if L - o < {nb}:")
        em(ind + 1, f"err = {pts}")
        em(ind + 1, "break")
        f0 = lay.first[hname]
        fields = h.type.fields
        fmt = _struct_format(fields)
        if fmt is not None:
            name = f"S_{lay.valid[hname]}"
            self.ns[name] = struct.Struct(fmt)
            em(ind, f"F[{f0}:{f0 + len(fields)}] = {name}.unpack_from(D, o)")
        elif fields:
            em(ind, f"x = int.from_bytes(D[o:o + {nb}], 'big')")
            shift = width
            for j, f in enumerate(fields):
                shift -= f.width
                val = f"(x >> {shift})" if shift else "x"
                if j:
                    val = f"({val} & {_mask(f.width)})"
                if f.signed:
                    h_ = 1 << (f.width - 1)
                    val = f"(({val} ^ {h_}) - {h_})"
                em(ind, f"F[{f0 + j}] = {val}")
        em(ind, f"F[{lay.valid[hname]}] = 1")
        for sib in lay.union_of.get(hname, ()):
            em(ind, f"F[{lay.valid[sib]}] = 0")
        em(ind, f"o += {nb}")

    def transition(self, s: Json, states: dict[str, int], ind: int, fa: FieldAccess) -> None:
        em = self.out
        trans = s.get("transitions") or []
        keyj = s.get("transition_key") or []

        def goto(name: str | None, at: int) -> None:
            if name is None:
                em(at, "break")
            elif name not in states:
                raise ValueError(f"{self.where}: transition to unknown state {name!r}")
            else:
                em(at, f"st = {states[name]}")
                em(at, "continue")

        if not keyj:
            for tr in trans:
                if tr.get("type", "default" if tr.get("value") in (None, "default") else "hexstr") == "default":
                    goto(tr.get("next_state"), ind)
                    return
            em(ind, "break")
            return
        parts = []
        total = 0
        for kj in reversed(keyj):
            t = kj.get("type")
            if t == "field":
                hdr, fld = kj["value"][0], kj["value"][1]
                w, signed = self.lay.width(hdr, fld)
                code = fa.ref(self.lay.slot(hdr, fld))
                if signed:
                    code = f"({code} & {_mask(w)})"
            elif t == "stack_field":
                w, signed = self.lay.width(
                    next(s for s in self.prog.stacks if s.name == kj["value"][0]).headers[0], kj["value"][1]
                )
                code = self.stack_field(kj["value"][0], kj["value"][1], fa).code
                if signed:
                    code = f"({code} & {_mask(w)})"
            elif t == "lookahead":
                off, w = int(kj["value"][0]), int(kj["value"][1])
                nb = (off + w + 7) // 8
                code = f"((int.from_bytes(D[o:o + {nb}].ljust({nb}, b'\\x00'), 'big') >> {nb * 8 - off - w}) & {_mask(w)})"
            else:
                raise self.refuse(f"transition key of type {t!r}")
            parts.append(f"({code} << {total})" if total else code)
            total += 8 * ((w + 7) // 8)
        em(ind, f"k = {' | '.join(reversed(parts))}")
        for tr in trans:
            tt = tr.get("type")
            if tt is None:  # JSON written before "type" existed
                tt = "default" if tr.get("value") in (None, "default") else "hexstr"
            if tt == "default":
                goto(tr.get("next_state"), ind)
                return
            if tt != "hexstr":
                raise self.refuse(f"transition of type {tt!r} (value sets are not supported)")
            value = parse_hexstr(tr["value"])
            mask = tr.get("mask")
            if mask is None:
                em(ind, f"if k == {value}:")
            else:
                m = parse_hexstr(mask)
                em(ind, f"if k & {m} == {value & m}:")
            goto(tr.get("next_state"), ind + 1)
        em(ind, "break")

    # ------------------------------------------------------------------ deparser
    def deparser(self) -> None:
        lay, em = self.lay, self.out
        em(0, "def deparse(F, payload):")
        for c in self.prog.checksums:
            if not c.update:
                continue
            self.where = f"checksum {c.name!r}"
            fa = FieldAccess(False)
            tslot = lay.slot(*c.target)
            w, _ = lay.width(*c.target)
            fn = self.calculation(c.calculation)
            if c.if_cond is not None:
                cond = self.rv({"type": "expression", "value": c.if_cond}, fa).code
                em(1, f"if {cond}:")
                em(2, f"F[{tslot}] = {fn}(F) & {_mask(w)}")
            else:
                em(1, f"F[{tslot}] = {fn}(F) & {_mask(w)}")
        em(1, "out = []")
        for hname in self.prog.deparser_order:
            if hname not in lay.headers:
                raise ValueError(f"deparser emits unknown header {hname!r}")
            h = lay.headers[hname]
            fields = h.type.fields
            if h.type.width % 8:
                raise Refused(f"header {hname!r} is {h.type.width} bits, not a whole number of bytes")
            if not fields:
                continue
            f0 = lay.first[hname]
            em(1, f"if F[{lay.valid[hname]}]:")
            fmt = _struct_format(fields)
            if fmt is not None:
                name = f"S_{lay.valid[hname]}"
                self.ns[name] = struct.Struct(fmt)
                em(2, f"out.append({name}.pack(*F[{f0}:{f0 + len(fields)}]))")
            else:
                acc = ""
                for j, f in enumerate(fields):
                    ref = f"F[{f0 + j}]"
                    if f.signed:
                        ref = f"({ref} & {_mask(f.width)})"
                    acc = ref if j == 0 else f"(({acc}) << {f.width} | {ref})"
                em(2, f"out.append(({acc}).to_bytes({h.type.width // 8}, 'big'))")
        em(1, "out.append(payload)")
        em(1, "return b''.join(out)")
        em(0, "")

    # ------------------------------------------------------------------ whole program
    def compile(self) -> str:
        em = self.out
        em(0, "# generated by emulation.softswitch.codegen; one module per loaded program")
        for name in self.prog.calculations:
            self.where = f"calculation {name!r}"
            self.calculation(name)
        for a in self.prog.actions:
            self.action(a)
        for name in ("ingress", "egress"):
            self.pipeline(self.prog.pipelines[name])
        self.parser()
        self.deparser()
        self.where = ""
        return em.text()


def next_node_name(t: TableDef, action_name: str | None, hit: bool) -> str | None:
    """The control node after table t ran action_name (hit or miss), per its next_tables."""
    if t.uses_hit_miss:
        return t.next_tables.get("__HIT__" if hit else "__MISS__", t.base_default_next)
    if action_name is not None and action_name in t.next_tables:
        return t.next_tables[action_name]
    return t.base_default_next


class _Unstructured(Exception):
    pass


def _struct_format(fields: tuple[Any, ...]) -> str | None:
    codes = {8: "B", 16: "H", 32: "I", 64: "Q"}
    out = [">"]
    for f in fields:
        c = codes.get(f.width)
        if c is None:
            return None
        out.append(c.lower() if f.signed else c)
    return "".join(out) if fields else None
