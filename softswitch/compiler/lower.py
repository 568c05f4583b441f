"""Lower a loaded BMv2 program (program.py) to the IR (ir.py): the one place that reads expressions and ops.

Everything the JSON names (headers, fields, actions, tables, nodes, registers, counters,
calculations, parser states) is resolved here to a number; the names go into `ir.Names`, never
into the IR. Every construct the switch does not implement is refused here, by name. What an
emitter needs to produce fast code is decided here too: which masks are redundant (from what is
known of each value's range), where temporaries go, which control flow is structured.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from softswitch.compiler import cse, ir
from softswitch.compiler.program import (
    ActionDef,
    HeaderInstance,
    Limits,
    PipelineDef,
    Program,
    TableDef,
    parse_hexstr,
)
from softswitch.errors import ProgramLimitError, UnsupportedProgramError

LOG = logging.getLogger(__name__)

Json = Any

DROP_PORT = 511
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
    "deq_timedelta",
    "priority",
)
# standard_metadata fields simple_switch fills from its egress queues, which the embedded switch
# does not have (it forwards at once; links are shaped by the kernel, after it): reading them
# would silently give 0, so a program that reads one is refused.
UNREADABLE = {
    "enq_qdepth": "the egress queue depth at enqueue",
    "deq_qdepth": "the egress queue depth at dequeue",
}
_ALIAS_PREFIX = {
    "mcast_grp": "intrinsic_metadata",
    "egress_rid": "intrinsic_metadata",
    "ingress_global_timestamp": "intrinsic_metadata",
    "egress_global_timestamp": "intrinsic_metadata",
    "enq_timestamp": "queueing_metadata",
    "enq_qdepth": "queueing_metadata",
    "deq_timedelta": "queueing_metadata",
    "deq_qdepth": "queueing_metadata",
    "priority": "intrinsic_metadata",
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
    # header stacks (P4_16 semantics, as this BMv2 build has them: BM_WP4_16_STACKS)
    "push",
    "pop",
    "assign_header_stack",
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
_P414_BINARY = {
    "add": "+",
    "subtract": "-",
    "bit_and": "&",
    "bit_or": "|",
    "bit_xor": "^",
    "shift_left": "<<",
    "shift_right": ">>",
}
_BINOPS = {
    "+": ir.BinOp.ADD,
    "-": ir.BinOp.SUB,
    "*": ir.BinOp.MUL,
    "/": ir.BinOp.DIV,
    "%": ir.BinOp.MOD,
    "&": ir.BinOp.AND,
    "|": ir.BinOp.OR,
    "^": ir.BinOp.XOR,
    "<<": ir.BinOp.SHL,
    ">>": ir.BinOp.SHR,
    "==": ir.BinOp.EQ,
    "!=": ir.BinOp.NE,
    ">": ir.BinOp.GT,
    ">=": ir.BinOp.GE,
    "<": ir.BinOp.LT,
    "<=": ir.BinOp.LE,
    "and": ir.BinOp.LAND,
    "or": ir.BinOp.LOR,
}
_ALGORITHMS = {
    "crc16": ir.HashAlgo.CRC16,
    "crc16_custom": ir.HashAlgo.CRC16,
    "crc32": ir.HashAlgo.CRC32,
    "crc32_custom": ir.HashAlgo.CRC32,
    "crcCCITT": ir.HashAlgo.CRC_CCITT,
    "csum16": ir.HashAlgo.CSUM16,
    "cksum16": ir.HashAlgo.CSUM16,
    "xor16": ir.HashAlgo.XOR16,
    "identity": ir.HashAlgo.IDENTITY,
}
# at most this many blocks of an action with loops run per packet (then the packet is dropped)
MAX_LOOP_BLOCKS = 1 << 16


class Refused(UnsupportedProgramError):
    pass


def _mask(w: int) -> int:
    return (1 << w) - 1


@dataclass
class Layout:
    """Where each header's validity bit and fields live in the flat packet state."""

    slots: dict[tuple[str, str], int] = field(default_factory=dict)
    widths: dict[tuple[str, str], tuple[int, bool]] = field(default_factory=dict)
    headers: dict[str, HeaderInstance] = field(default_factory=dict)
    valid: dict[str, int] = field(default_factory=dict)
    first: dict[str, int] = field(default_factory=dict)
    union_of: dict[str, tuple[str, ...]] = field(default_factory=dict)  # header -> its union siblings
    stack_next: dict[str, int] = field(default_factory=dict)
    stack_sizes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # stack -> its element headers
    template: list[int] = field(default_factory=list)
    aliases: dict[str, tuple[str, str]] = field(default_factory=dict)
    EXIT: int = 0
    LEN: int = 0
    INGLEN: int = 0
    ZERO: int = 0

    def _key(self, hdr: str, fld: str, table: dict[tuple[str, str], Any]) -> tuple[str, str]:
        key = (hdr, fld)
        if key in table:
            return key
        alias = self.aliases.get(f"{hdr}.{fld}")
        if alias is not None and alias in table:
            return alias
        raise ValueError(f"BMv2 JSON refers to unknown field {hdr!r}.{fld!r}")

    def slot(self, hdr: str, fld: str) -> int:
        return self.slots[self._key(hdr, fld, self.slots)]

    def width(self, hdr: str, fld: str) -> tuple[int, bool]:
        return self.widths[self._key(hdr, fld, self.widths)]

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
        lay.stack_sizes[s.name] = s.headers
        tmpl.append(0)
    lay.EXIT = len(tmpl)
    lay.LEN = len(tmpl) + 1
    lay.INGLEN = len(tmpl) + 2
    lay.ZERO = len(tmpl) + 3
    tmpl.extend([0, 0, 0, 0])
    lay.template = tmpl
    return lay


def slot_types(lay: Layout) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """Every slot's (width, signed), in slot order; width 0 for slots of no declared width (see ir.Module)."""
    widths = [0] * len(lay.template)
    signed = [False] * len(lay.template)
    for key, slot in lay.slots.items():
        w, s = lay.widths[key]
        widths[slot], signed[slot] = w, s
    for name, slot in lay.stack_next.items():  # 0..size: how many elements are extracted or pushed
        size = len(lay.stack_sizes.get(name, ()))
        widths[slot] = max(1, size.bit_length())
    widths[lay.EXIT] = widths[lay.ZERO] = 1
    return tuple(widths), tuple(signed)


class _Unstructured(Exception):
    pass


RUNTIME_INDEX = "a header stack element chosen at run time (hs[i] with a variable i: dereference_header_stack)"


def _runtime_stack_index(j: Json) -> bool:
    """Whether an operand names a stack element or its field through a run-time index."""
    v = j.get("value") if isinstance(j, dict) and j.get("type") == "expression" else None
    while isinstance(v, dict) and v.get("type") == "expression":
        v = v.get("value")
    return isinstance(v, dict) and v.get("op") in ("dereference_header_stack", "dereference_stack", "access_field")


def _name(j: Json, what: str) -> str:
    if not isinstance(j, str):
        raise ValueError(f"{what} must be a name (string), got {type(j).__name__}")
    return j


def _pair(v: Json, what: str) -> tuple[str, str]:
    if not (isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v)):
        raise ValueError(f"{what} must be [header, field], got {v!r:.80}")
    return v[0], v[1]


def _int(v: Json, what: str) -> int:
    if type(v) is not int:
        raise ValueError(f"{what} must be an integer, got {type(v).__name__} {v!r:.40}")
    return v


class Lowering:
    """Builds one `ir.Module` and its `ir.Names` from a Program."""

    def __init__(self, prog: Program, limits: Limits | None = None, eliminate_common: bool = True) -> None:
        self.prog = prog
        self.eliminate_common = eliminate_common
        self.limits = limits or Limits()
        self.lay = make_layout(prog)
        self.pool = ir.Pool()
        self.where = ""
        self.action_index: dict[int, int] = {a.id: i for i, a in enumerate(prog.actions)}
        self.register_index = {r.name: i for i, r in enumerate(prog.registers)}
        self.counter_index = {c.name: i for i, c in enumerate(prog.counters)}
        self.calc_index: dict[str, int] = {}
        self.calcs: list[ir.Calc] = []
        self.calc_names: list[str] = []
        self.messages: list[str] = []
        self.tables: list[ir.Table] = []
        self.table_defs: list[TableDef] = []
        self.nodes: list[ir.Node | None] = []
        self.node_names: list[str] = []
        self._node_index: dict[tuple[str, str], int] = {}
        self._temps = 0  # temporaries are numbered across the module (each function uses its own)
        self.spiller = cse.Spiller(self.pool, self.temp)
        # every slot the program reads, copies or emits: the runtime sets intrinsic metadata (clocks)
        # only where the program can see it
        self.read_slots: set[int] = set()
        self.unreadable: dict[int, str] = {}
        for name in UNREADABLE:
            slot = self.lay.std(name)
            if slot is not None:
                self.unreadable[slot] = name
        self._spread_unreadable()
        self.uses_exit = any(p.get("op") == "exit" for a in prog.actions for p in a.primitives if isinstance(p, dict))

    # ------------------------------------------------------------------ helpers
    def read(self, hdr: str, fld: str) -> int:
        """The slot of a field the program reads (refusing the queue depths, see UNREADABLE)."""
        slot = self.lay.slot(hdr, fld)
        if slot in self.unreadable:
            self.refuse_unreadable(slot)
        self.read_slots.add(slot)
        return slot

    def read_header(self, hdr: str) -> None:
        """A whole header is read (copied, hashed): none of its fields may be unreadable."""
        first = self.lay.first[hdr]
        for slot in range(first, first + len(self.lay.headers[hdr].type.fields)):
            if slot in self.unreadable:
                self.refuse_unreadable(slot)
            self.read_slots.add(slot)

    def _spread_unreadable(self) -> None:
        """Slots that plain copies fill from an unreadable one are unreadable too (to a fixpoint).

        p4c copies standard_metadata field by field into and out of an action's inout parameter, so
        a copy is not a use: only a read that computes with the value is refused.
        """
        edges: dict[int, set[int]] = {}
        prims = [p for a in self.prog.actions for p in a.primitives]
        for state in self.prog.parser.states:
            for op in (state.get("parser_ops") or []) if isinstance(state, dict) else []:
                if isinstance(op, dict) and op.get("op") == "primitive" and op.get("parameters"):
                    prims.append(op["parameters"][0])
                elif isinstance(op, dict) and op.get("op") == "set":
                    prims.append({"op": "assign", "parameters": op.get("parameters")})
        for p in prims:
            copy = self._plain_copy(p)
            if copy is not None:
                edges.setdefault(copy[1], set()).add(copy[0])
        todo = list(self.unreadable)
        while todo:
            src = todo.pop()
            for dst in edges.get(src, ()):
                if dst not in self.unreadable:
                    self.unreadable[dst] = self.unreadable[src]
                    todo.append(dst)

    def _plain_copy(self, p: Json) -> tuple[int, int] | None:
        """(dst slot, src slot) when a primitive assigns one field to another unchanged, else None."""
        if not isinstance(p, dict) or p.get("op") not in ("assign", "modify_field"):
            return None
        args = p.get("parameters")
        if not (isinstance(args, list) and len(args) == 2):
            return None
        dst, src = args
        try:
            if not (isinstance(dst, dict) and isinstance(src, dict) and dst.get("type") == src.get("type") == "field"):
                return None
            return self.lay.slot(*_pair(dst.get("value"), "field")), self.lay.slot(*_pair(src.get("value"), "field"))
        except ValueError:
            return None

    def refuse_unreadable_copy(self, slot: int) -> Refused:
        name = self.unreadable[slot]
        return self.refuse(
            f"a header copy of standard_metadata.{name} ({UNREADABLE[name]}), which the embedded switch cannot provide"
        )

    def refuse_unreadable(self, slot: int) -> None:
        name = self.unreadable[slot]
        raise self.refuse(
            f"a read of standard_metadata.{name} ({UNREADABLE[name]}): the embedded switch has no egress "
            "queue of its own, so it cannot provide it"
        )

    def refuse(self, what: str) -> Refused:
        return Refused(f"{what} in {self.where}" if self.where else what)

    def temp(self, like: ir.Expr) -> ir.Temp:
        self._temps += 1
        return self.pool.temp(self._temps, like)

    def message(self, text: str) -> int:
        self.messages.append(text)
        return len(self.messages) - 1

    def node(self, pipeline: str, name: str | None) -> int:
        if name is None:
            return ir.ACCEPT
        key = (pipeline, _name(name, "control node"))
        if key not in self._node_index:
            self._node_index[key] = len(self.node_names)
            self.node_names.append(name)
            self.nodes.append(None)
        return self._node_index[key]

    def action_of(self, action_id: int) -> int:
        if action_id not in self.action_index:
            raise ValueError(f"{self.where}: unknown action id {action_id}")
        return self.action_index[action_id]

    def fit(self, e: ir.Expr, w: int, signed: bool) -> ir.Expr:
        """e reduced to a slot of width w (signed or not): a mask or a wrap unless e already fits."""
        pool = self.pool
        if e.is_bool:
            e = pool.unary(ir.UnOp.B2D, e, bits=1)
        if signed:
            if (e.swidth is not None and e.swidth <= w) or (e.bits is not None and e.bits < w):
                return e
            return pool.sign_wrap(e, w)
        if e.bits is not None and e.bits <= w:
            return e
        return pool.binary(ir.BinOp.AND, e, pool.const(_mask(w)), bits=w)

    def atom(self, e: ir.Expr, out: list[ir.Stmt]) -> ir.Expr:
        """e itself when cheap to repeat, else a temporary set before it (evaluated once)."""
        if isinstance(e, (ir.Const, ir.Field, ir.Temp, ir.Param)):
            return e
        t = self.temp(e)
        out.append(ir.Let(t.index, e))
        return t

    def in_range(self, idx: ir.Expr, size: int) -> ir.Expr | None:
        """The index check for an array of `size` cells; None when the index always fits."""
        if idx.bits is not None:
            if (1 << idx.bits) <= size:
                return None
            return self.pool.in_range(idx, size, nonneg=True)
        return self.pool.in_range(idx, size, nonneg=False)

    @staticmethod
    def guarded(cond: ir.Expr | None, body: list[ir.Stmt]) -> list[ir.Stmt]:
        return body if cond is None else [ir.If(cond, tuple(body), ())]

    # ------------------------------------------------------------------ expressions
    def rv(self, j: Json, params: tuple[int, ...] | None, depth: int = 0) -> ir.Expr:
        if depth > self.limits.max_expression_depth:
            raise ProgramLimitError(
                f"limit max_expression_depth={self.limits.max_expression_depth}: an expression in {self.where} "
                "is nested deeper"
            )
        if not isinstance(j, dict):
            raise self.refuse(f"operand {j!r:.80}")
        t = j.get("type")
        v = j.get("value")
        pool = self.pool
        if t == "field":
            hdr, fld = _pair(v, "field")
            slot = self.read(hdr, fld)
            w, signed = self.lay.width(hdr, fld)
            if fld == "$valid$":
                return pool.field(slot, 1, None)
            if signed:
                return pool.field(slot, None, w)
            return pool.field(slot, w, None)
        if t == "hexstr":
            return pool.const(self.constant(v))
        if t == "bool":
            if type(v) is not bool:
                raise ValueError(f"{self.where}: bool operand {v!r:.40} is not true/false")
            return pool.boolean(v)
        if t in ("runtime_data", "local"):
            if params is None:
                raise self.refuse("action data outside an action")
            idx = _int(v, "runtime_data index")
            if not 0 <= idx < len(params):
                raise ValueError(f"{self.where}: runtime_data index {idx} out of range")
            return pool.param(idx, params[idx])
        if t == "expression":
            if isinstance(v, dict) and "op" in v:
                return self.op(v, params, depth + 1)
            return self.rv(v, params, depth + 1)
        if t == "stack_field":
            stack, fld = _pair(v, "stack_field")
            return self.stack_field(stack, fld)
        raise self.refuse(f"operand type {t!r:.80}")

    def constant(self, v: Json) -> int:
        n = parse_hexstr(v)
        if n.bit_length() > self.limits.max_constant_bits:
            raise ProgramLimitError(
                f"limit max_constant_bits={self.limits.max_constant_bits}: "
                f"a constant in {self.where} has {n.bit_length()} bits"
            )
        return n

    def stack_field(self, stack: str, fld: str) -> ir.Expr:
        st = next((s for s in self.prog.stacks if s.name == stack), None)
        if st is None:
            raise ValueError(f"unknown header stack {stack!r}")
        if not st.headers:
            raise ValueError(f"header stack {stack!r} is empty")
        slots = (self.lay.ZERO,) + tuple(self.lay.slot(h, fld) for h in st.headers)
        w, signed = self.lay.width(st.headers[0], fld)
        return self.pool.stack_field(self.lay.stack_next[stack], slots, None if signed else w, None)

    def width_operand(self, j: Json, params: tuple[int, ...] | None, depth: int, op: str) -> int:
        w = self.rv(j, params, depth)
        if not isinstance(w, ir.Const) or w.value <= 0:
            raise self.refuse(f"{op} with a non-constant width")
        if w.value > self.limits.max_field_bits:
            raise ProgramLimitError(
                f"limit max_field_bits={self.limits.max_field_bits}: {op} to {w.value} bits in {self.where}"
            )
        return w.value

    def op(self, j: dict[str, Json], params: tuple[int, ...] | None, depth: int) -> ir.Expr:
        op = j.get("op")
        left, right = j.get("left"), j.get("right")
        pool = self.pool
        if isinstance(op, str) and op in _BINOPS:
            a = self.rv(left, params, depth)
            b = self.rv(right, params, depth)
            bop = _BINOPS[op]
            if bop in ir.COMPARISONS or bop in ir.LOGICAL:
                return pool.binary(bop, a, b)
            if bop is ir.BinOp.AND:
                # drop p4c's width masks when the other side already fits them
                if (
                    isinstance(b, ir.Const)
                    and b.value > 0
                    and b.value == _mask(b.value.bit_length())
                    and a.bits is not None
                    and a.bits <= b.value.bit_length()
                ):
                    return a
                if (
                    isinstance(a, ir.Const)
                    and a.value > 0
                    and a.value == _mask(a.value.bit_length())
                    and b.bits is not None
                    and b.bits <= a.value.bit_length()
                ):
                    return b
                known = [x for x in (a.bits, b.bits) if x is not None]
                return pool.binary(ir.BinOp.AND, a, b, bits=min(known) if known else None)
            if bop in (ir.BinOp.OR, ir.BinOp.XOR):
                bits = max(a.bits, b.bits) if a.bits is not None and b.bits is not None else None
                return pool.binary(bop, a, b, bits=bits)
            if bop is ir.BinOp.SHR:
                return pool.binary(ir.BinOp.SHR, a, b, bits=a.bits)
            return pool.binary(bop, a, b)
        if op == "not":
            return pool.unary(ir.UnOp.NOT, self.rv(right, params, depth))
        if op == "~":
            return pool.unary(ir.UnOp.INV, self.rv(right, params, depth))
        if op == "d2b":
            return pool.unary(ir.UnOp.D2B, self.rv(right, params, depth))
        if op == "b2d":
            return pool.unary(ir.UnOp.B2D, self.rv(right, params, depth), bits=1)
        if op == "?":
            a = self.rv(left, params, depth)
            b = self.rv(right, params, depth)
            c = self.rv(j.get("cond"), params, depth)
            return pool.mux(c, a, b)
        if op in ("two_comp_mod", "sat_cast", "usat_cast"):
            a = self.rv(left, params, depth)
            w = self.width_operand(right, params, depth, op)
            if op == "two_comp_mod":
                return pool.sign_wrap(a, w)
            if op == "sat_cast":
                return pool.clamp(a, -(1 << (w - 1)), (1 << (w - 1)) - 1, None, w)
            return pool.clamp(a, 0, _mask(w), w, None)
        if op == "valid":
            if not isinstance(right, dict) or right.get("type") != "header":
                raise self.refuse(f"'valid' on {right!r:.80}")
            v = self.lay.valid[self.header_name(right)]
            return pool.binary(ir.BinOp.NE, pool.field(v, 1, None), pool.const(0))
        if op == "valid_union":
            if not isinstance(right, dict) or right.get("type") != "header_union":
                raise self.refuse(f"'valid_union' on {right!r:.80}")
            u = next((u for u in self.prog.unions if u.name == right.get("value")), None)
            if u is None:
                raise ValueError(f"unknown header union {right.get('value')!r:.80}")
            parts = [pool.binary(ir.BinOp.NE, pool.field(self.lay.valid[m], 1, None), pool.const(0)) for m in u.headers]
            if not parts:
                return pool.boolean(False)
            e = parts[0]
            for p in parts[1:]:
                e = pool.binary(ir.BinOp.LOR, e, p)
            return e
        if op in ("dereference_header_stack", "dereference_stack", "access_field", "last_stack_index", "size_stack"):
            raise self.refuse(f"{RUNTIME_INDEX} (expression op {op!r})")
        raise self.refuse(f"expression op {op!r:.80}")

    def lvalue(self, j: Json) -> tuple[int, int, bool]:
        if _runtime_stack_index(j):
            raise self.refuse(RUNTIME_INDEX)
        if not isinstance(j, dict) or j.get("type") != "field":
            raise self.refuse(f"assignment to {j.get('type') if isinstance(j, dict) else j!r:.80} (only header fields)")
        hdr, fld = _pair(j.get("value"), "field")
        if fld == "$valid$":
            raise self.refuse("assignment to a $valid$ field")
        w, signed = self.lay.width(hdr, fld)
        return self.lay.slot(hdr, fld), w, signed

    def header_name(self, j: Json) -> str:
        if _runtime_stack_index(j):
            raise self.refuse(RUNTIME_INDEX)
        if not isinstance(j, dict) or j.get("type") != "header":
            raise self.refuse(f"header argument {j!r:.80}")
        name = j.get("value")
        if not isinstance(name, str) or name not in self.lay.headers:
            raise ValueError(f"{self.where}: unknown header {name!r:.80}")
        return name

    def register(self, j: Json) -> int:
        name = j.get("value") if isinstance(j, dict) else None
        if not isinstance(name, str) or name not in self.register_index:
            raise ValueError(f"{self.where}: unknown register {name!r:.80}")
        return self.register_index[name]

    # ------------------------------------------------------------------ primitives
    def primitive(self, p: Json, params: tuple[int, ...] | None) -> list[ir.Stmt]:
        if not isinstance(p, dict):
            raise ValueError(f"{self.where}: a primitive must be an object")
        op = p.get("op")
        args = p.get("parameters") or []
        if not isinstance(args, list):
            raise ValueError(f"{self.where}: primitive parameters must be a list")
        if op not in PRIMITIVES:
            raise self.refuse(f"primitive {op!r:.80}")
        pool, lay = self.pool, self.lay
        out: list[ir.Stmt] = []
        if op in ("assign", "modify_field"):
            slot, w, signed = self.lvalue(args[0])
            copy = self._plain_copy(p)
            if copy is not None:
                self.read_slots.add(copy[1])
            if copy is not None and copy[1] in self.unreadable:  # a copy, not a use (see _spread_unreadable)
                sw_, ss = self.lay.width(*args[1]["value"])
                src = pool.field(copy[1], None if ss else sw_, sw_ if ss else None)
                out.append(ir.Assign(slot, self.fit(src, w, signed)))
                return out
            out.append(ir.Assign(slot, self.fit(self.rv(args[1], params), w, signed)))
        elif op in ("add_to_field", "subtract_from_field"):
            slot, w, signed = self.lvalue(args[0])
            sym = "+" if op == "add_to_field" else "-"
            e = self.op({"op": sym, "left": args[0], "right": args[1]}, params, 1)
            out.append(ir.Assign(slot, self.fit(e, w, signed)))
        elif op in _P414_BINARY:
            slot, w, signed = self.lvalue(args[0])
            e = self.op({"op": _P414_BINARY[op], "left": args[1], "right": args[2]}, params, 1)
            out.append(ir.Assign(slot, self.fit(e, w, signed)))
        elif op in ("assign_header", "copy_header") and not self.is_header_ref(args[1]):
            # the source is `cond ? hdr_a : hdr_b` (nested, possibly): one copy per branch, as BMv2 evaluates it
            return [self.header_choice(args[0], self.header_mux(args[1], params), op, params)]
        elif op in ("assign_header", "copy_header"):
            dst, src = self.header_name(args[0]), self.header_name(args[1])
            hd, hs = lay.headers[dst], lay.headers[src]
            self.read_slots.update(range(lay.first[src], lay.first[src] + len(hs.type.fields)))
            for j in range(len(hs.type.fields)):  # a header copy carries unreadable fields along, as a field copy does
                if lay.first[src] + j in self.unreadable and lay.first[dst] + j not in self.unreadable:
                    raise self.refuse_unreadable_copy(lay.first[src] + j)
            if hd.type.name != hs.type.name:
                raise ValueError(f"{self.where}: assign_header between different types")
            n = len(hd.type.fields)
            vd, vs = lay.valid[dst], lay.valid[src]
            then: list[ir.Stmt] = [ir.CopyFields(lay.first[dst], lay.first[src], n)] if n else []
            orelse: list[ir.Stmt] = []
            if not hd.metadata:
                then.append(ir.Assign(vd, pool.const(1)))
                # as BMv2: a union member made valid invalidates its siblings
                then.extend(ir.Assign(lay.valid[sib], pool.const(0)) for sib in lay.union_of.get(dst, ()))
                orelse.append(ir.Assign(vd, pool.const(0)))
            out.append(ir.If(self.is_valid(vs), tuple(then), tuple(orelse)))
        elif op == "add_header":
            h = self.header_name(args[0])
            hi = lay.headers[h]
            if hi.metadata:
                return out
            n = len(hi.type.fields)
            v, f0 = lay.valid[h], lay.first[h]
            body: list[ir.Stmt] = [ir.ZeroFields(f0, n)] if n else []
            body.append(ir.Assign(v, pool.const(1)))
            body.append(self.add_length(hi.type.width // 8))
            body.extend(ir.Assign(lay.valid[sib], pool.const(0)) for sib in lay.union_of.get(h, ()))
            out.append(ir.If(pool.binary(ir.BinOp.EQ, pool.field(v, 1, None), pool.const(0)), tuple(body), ()))
        elif op == "remove_header":
            h = self.header_name(args[0])
            hi = lay.headers[h]
            if hi.metadata:
                return out
            v = lay.valid[h]
            out.append(
                ir.If(self.is_valid(v), (ir.Assign(v, pool.const(0)), self.add_length(-(hi.type.width // 8))), ())
            )
        elif op in ("mark_to_drop", "drop"):
            es, mg = lay.std("egress_spec"), lay.std("mcast_grp")
            if es is None:
                raise self.refuse("mark_to_drop without standard_metadata.egress_spec")
            out.append(ir.Assign(es, pool.const(DROP_PORT)))
            if mg is not None:
                out.append(ir.Assign(mg, pool.const(0)))
        elif op == "register_read":
            slot, w, signed = self.lvalue(args[0])
            k = self.register(args[1])
            size, width = self.prog.registers[k].size, self.prog.registers[k].width
            idx = self.atom(self.rv(args[2], params), out)
            value = self.fit(pool.reg_read(k, idx, width), w, signed)
            out.extend(self.guarded(self.in_range(idx, size), [ir.Assign(slot, value)]))
        elif op == "register_write":
            k = self.register(args[0])
            size, width = self.prog.registers[k].size, self.prog.registers[k].width
            idx = self.atom(self.rv(args[1], params), out)
            val = self.fit(self.rv(args[2], params), width, False)
            out.extend(self.guarded(self.in_range(idx, size), [ir.RegWrite(k, idx, val)]))
        elif op == "count":
            cname = args[0].get("value") if isinstance(args[0], dict) else None
            if not isinstance(cname, str) or cname not in self.counter_index:
                raise ValueError(f"{self.where}: unknown counter {cname!r:.80}")
            k = self.counter_index[cname]
            idx = self.atom(self.rv(args[1], params), out)
            out.extend(self.guarded(self.in_range(idx, self.prog.counters[k].size), [ir.Count(k, idx, lay.INGLEN)]))
        elif op == "modify_field_with_hash_based_offset":
            slot, w, signed = self.lvalue(args[0])
            base = self.rv(args[1], params)
            calc_name = args[2].get("value") if isinstance(args[2], dict) else None
            calc = self.calculation(_name(calc_name, "calculation"))
            size_expr = self.rv(args[3], params)
            size = self.temp(size_expr)
            out.append(ir.Let(size.index, size_expr))
            divisor = pool.mux(pool.binary(ir.BinOp.NE, size, pool.const(0)), size, pool.const(1))
            e = pool.binary(ir.BinOp.ADD, pool.binary(ir.BinOp.MOD, pool.hash(calc), divisor), base)
            out.append(ir.Assign(slot, self.fit(e, w, signed)))
        elif op == "modify_field_rng_uniform":
            slot, w, signed = self.lvalue(args[0])
            lo, hi = self.rv(args[1], params), self.rv(args[2], params)
            out.append(ir.Assign(slot, self.fit(pool.random(lo, hi), w, signed)))
        elif op == "exit":
            out.append(ir.Assign(lay.EXIT, pool.const(1)))
        elif op in ("assert", "assume"):
            cond = self.rv(args[0], params)
            out.append(
                ir.If(pool.unary(ir.UnOp.NOT, cond), (ir.Fail(self.message(f"{op} failed in {self.where}")),), ())
            )
        elif op in ("push", "pop"):
            out.extend(self.stack_shift(args, push=op == "push"))
        elif op == "assign_header_stack":
            dst, src = self.stack_of(args[0]), self.stack_of(args[1])
            if len(dst.headers) != len(src.headers):
                raise ValueError(f"{self.where}: assign_header_stack between stacks of different sizes")
            out.append(ir.Assign(lay.stack_next[dst.name], pool.field(lay.stack_next[src.name], None, None)))
            for d, h in zip(dst.headers, src.headers):
                out.extend(
                    self.primitive(
                        {
                            "op": "assign_header",
                            "parameters": [{"type": "header", "value": d}, {"type": "header", "value": h}],
                        },
                        params,
                    )
                )
        elif op in ("log_msg", "no_op"):
            pass
        else:  # _jump / _jump_if_zero are handled by the action structurer
            raise self.refuse(f"misplaced {op!r}")
        return out

    def stack_of(self, j: Json) -> Any:
        name = j.get("value") if isinstance(j, dict) and j.get("type") == "header_stack" else None
        st = next((x for x in self.prog.stacks if x.name == name), None)
        if st is None:
            raise self.refuse(f"header stack argument {j!r:.80}")
        return st

    def stack_shift(self, args: list[Json], push: bool) -> list[ir.Stmt]:
        """push_front/pop_front as BMv2's P4_16 stacks do them: elements swap places, the freed ones become invalid."""
        st = self.stack_of(args[0])
        num = self.rv(args[1], None)
        if not isinstance(num, ir.Const) or num.value < 0:
            raise self.refuse("push/pop by a non-constant count")
        n, size, lay, pool = num.value, len(st.headers), self.lay, self.pool
        if n == 0:
            return []
        nxt = lay.stack_next[st.name]
        width = 1 + len(lay.headers[st.headers[0]].type.fields)  # the validity slot, then the fields
        valid = [lay.valid[h] for h in st.headers]
        out: list[ir.Stmt] = []
        op = ir.BinOp.ADD if push else ir.BinOp.SUB
        moved = pool.binary(op, pool.field(nxt, None, None), pool.const(n))
        out.append(ir.Assign(nxt, pool.clamp(moved, 0, size, size.bit_length(), None)))
        if push:
            for i in range(size - 1, n - 1, -1):
                out.append(ir.SwapFields(valid[i], valid[i - n], width))
            freed = range(min(size, n))
        else:
            for i in range(0, size - n):
                out.append(ir.SwapFields(valid[i], valid[i + n], width))
            freed = range(max(size - n, 0), size)
        out.extend(ir.Assign(valid[i], pool.const(0)) for i in freed)
        return out

    @staticmethod
    def is_header_ref(j: Json) -> bool:
        return isinstance(j, dict) and j.get("type") == "header"

    def header_mux(self, j: Json, params: tuple[int, ...] | None, depth: int = 0) -> Any:
        """A header argument as a header name, or (condition, when true, when false) for a `?:` of headers."""
        if depth > self.limits.max_expression_depth:
            raise ProgramLimitError(f"limit max_expression_depth={self.limits.max_expression_depth} in {self.where}")
        if self.is_header_ref(j):
            return self.header_name(j)
        v = j.get("value") if isinstance(j, dict) and j.get("type") == "expression" else None
        if isinstance(v, dict) and v.get("type") == "expression":
            return self.header_mux(v, params, depth + 1)
        if isinstance(v, dict) and v.get("op") == "?":
            return (
                self.rv(v.get("cond"), params, depth + 1),
                self.header_mux(v.get("left"), params, depth + 1),
                self.header_mux(v.get("right"), params, depth + 1),
            )
        raise self.refuse(f"header argument {j!r:.120}")

    def header_choice(self, dst: Json, mux: Any, op: str, params: tuple[int, ...] | None) -> ir.Stmt:
        if isinstance(mux, str):
            [stmt] = self.primitive({"op": op, "parameters": [dst, {"type": "header", "value": mux}]}, params)
            return stmt
        cond, a, b = mux
        return ir.If(cond, (self.header_choice(dst, a, op, params),), (self.header_choice(dst, b, op, params),))

    def is_valid(self, valid_slot: int) -> ir.Expr:
        return self.pool.binary(ir.BinOp.NE, self.pool.field(valid_slot, 1, None), self.pool.const(0))

    def add_length(self, delta: int) -> ir.Assign:
        length = self.lay.LEN
        return ir.Assign(
            length, self.pool.binary(ir.BinOp.ADD, self.pool.field(length, None, None), self.pool.const(delta))
        )

    # ------------------------------------------------------------------ calculations
    def calculation(self, name: str) -> int:
        if name in self.calc_index:
            return self.calc_index[name]
        calc = self.prog.calculations.get(name)
        if calc is None:
            raise ValueError(f"{self.where}: unknown calculation {name!r}")
        algo = _ALGORITHMS.get(calc.algo) if isinstance(calc.algo, str) else None
        if algo is None:
            raise Refused(f"hash algorithm {calc.algo!r:.80} in calculation {name!r}")
        parts: list[ir.CalcPart] = []
        lay = self.lay
        for item in calc.inputs:
            t = item.get("type") if isinstance(item, dict) else None
            if t == "field":
                hdr, fld = _pair(item.get("value"), "calculation input")
                w, signed = lay.width(hdr, fld)
                guard = -1 if lay.headers[hdr].metadata else lay.valid[hdr]
                parts.append(
                    ir.CalcPart(ir.CalcKind.FIELD, self.read(hdr, fld), w, 0, guard, signed or fld == "$valid$")
                )
            elif t == "hexstr":
                w = item.get("bitwidth") or 0
                if type(w) is not int or w <= 0:
                    raise Refused(f"constant without bitwidth in calculation {name!r}")
                if w > self.limits.max_field_bits:
                    raise ProgramLimitError(
                        f"limit max_field_bits={self.limits.max_field_bits}: a {w}-bit constant in calculation {name!r}"
                    )
                parts.append(
                    ir.CalcPart(ir.CalcKind.CONST, 0, w, self.constant(item.get("value")) & _mask(w), -1, False)
                )
            elif t == "header":
                hdr = self.header_name(item)
                self.read_header(hdr)
                hi = lay.headers[hdr]
                parts.append(
                    ir.CalcPart(
                        ir.CalcKind.HEADER,
                        lay.first[hdr],
                        hi.type.width,
                        0,
                        lay.valid[hdr],
                        False,
                        tuple(f.width for f in hi.type.fields),
                        tuple(f.signed for f in hi.type.fields),
                    )
                )
            else:
                raise Refused(f"calculation input of type {t!r:.80} in {name!r}")
        k = len(self.calcs)
        self.calc_index[name] = k
        self.calcs.append(ir.Calc(algo, tuple(parts)))
        self.calc_names.append(name)
        return k

    # ------------------------------------------------------------------ actions
    def action(self, a: ActionDef) -> ir.Action:
        self.where = f"action {a.name!r}"
        params = tuple(p.width for p in a.params)
        prims = list(a.primitives)
        for p in prims:
            if not isinstance(p, dict) or p.get("op") not in PRIMITIVES:
                raise self.refuse(f"primitive {p.get('op') if isinstance(p, dict) else p!r:.80}")
        try:
            body = tuple(self.structured(prims, 0, len(prims), params))
        except _Unstructured:
            body = (self.loop(prims, params),)
        if self.eliminate_common:
            body = cse.eliminate(body, self.pool, self.temp)
        return ir.Action(params, self.spiller.block(body))

    def _jump_target(self, p: Json, idx: int, n: int) -> int:
        try:
            t = self.constant(p["parameters"][idx]["value"])
        except (KeyError, IndexError, TypeError) as ex:
            raise ValueError(f"{self.where}: malformed {p.get('op')!r}") from ex
        if t < 0:
            raise ValueError(f"{self.where}: {p.get('op')!r} to {t}, before the action's first primitive")
        return min(t, n)  # past the end ends the action, as in BMv2

    def structured(self, prims: list[Json], lo: int, hi: int, params: tuple[int, ...]) -> list[ir.Stmt]:
        n = len(prims)
        out: list[ir.Stmt] = []
        i = lo
        while i < hi:
            p = prims[i]
            op = p.get("op")
            if op == "_jump_if_zero":
                t = self._jump_target(p, 1, n)
                if not i < t <= hi:
                    raise _Unstructured
                cond = self.rv(p["parameters"][0], params)
                last = prims[t - 1] if t - 1 > i else None
                if last is not None and last.get("op") == "_jump" and t <= self._jump_target(last, 0, n) <= hi:
                    end = self._jump_target(last, 0, n)
                    then = self.structured(prims, i + 1, t - 1, params)
                    orelse = self.structured(prims, t, end, params) if end > t else []
                    out.append(ir.If(cond, tuple(then), tuple(orelse)))
                    i = end
                else:
                    out.append(ir.If(cond, tuple(self.structured(prims, i + 1, t, params)), ()))
                    i = t
                continue
            if op == "_jump":
                t = self._jump_target(p, 0, n)
                if t == n:
                    out.append(ir.Return())
                    i += 1
                    # anything after an unconditional return in this block is dead unless it is a target
                    if i < hi:
                        raise _Unstructured
                    continue
                raise _Unstructured
            out.extend(self.primitive(p, params))
            i += 1
        return out

    def loop(self, prims: list[Json], params: tuple[int, ...]) -> ir.Loop:
        """General _jump code (loops): basic blocks run by a program counter."""
        n = len(prims)
        leaders = {0}
        for i, p in enumerate(prims):
            if p.get("op") == "_jump":
                leaders.add(self._jump_target(p, 0, n))
                leaders.add(i + 1)
            elif p.get("op") == "_jump_if_zero":
                leaders.add(self._jump_target(p, 1, n))
                leaders.add(i + 1)
        starts = sorted(x for x in leaders if 0 <= x < n)
        blocks = []
        for bi, s in enumerate(starts):
            e = starts[bi + 1] if bi + 1 < len(starts) else n
            body: list[ir.Stmt] = []
            for i in range(s, e):
                p = prims[i]
                op = p.get("op")
                if op == "_jump":
                    body.append(ir.Goto(self._jump_target(p, 0, n)))
                    break
                if op == "_jump_if_zero":
                    body.append(ir.GotoUnless(self.rv(p["parameters"][0], params), self._jump_target(p, 1, n)))
                    continue
                body.extend(self.primitive(p, params))
            blocks.append(ir.Block(s, tuple(body), e))
        return ir.Loop(
            tuple(blocks),
            n,
            MAX_LOOP_BLOCKS,
            self.message(f"a loop ran more than {MAX_LOOP_BLOCKS} steps in {self.where}"),
        )

    # ------------------------------------------------------------------ control flow
    def pipeline(self, pl: PipelineDef) -> int:
        for t in pl.tables:
            self.table(pl.name, t)
        for c in pl.conditionals:
            self.where = f"conditional {c.name!r}"
            pre: list[ir.Stmt] = []
            cond = self.spiller.expr(self.rv({"type": "expression", "value": c.expression}, None), pre)
            self.nodes[self.node(pl.name, c.name)] = ir.CondNode(
                cond, self.node(pl.name, c.true_next), self.node(pl.name, c.false_next), tuple(pre)
            )
        for ac in pl.action_calls:
            self.where = f"action call {ac.name!r}"
            self.nodes[self.node(pl.name, ac.name)] = ir.CallNode(
                self.action_of(ac.action_id), self.node(pl.name, ac.next_node)
            )
        return self.node(pl.name, pl.init)

    def table(self, pipeline: str, t: TableDef) -> None:
        self.where = f"table {t.name!r}"
        index = len(self.tables)
        lay, pool = self.lay, self.pool
        keys = []
        for key in t.keys:
            slot = self.read(key.header, key.field)
            w, signed = lay.width(key.header, key.field)
            e: ir.Expr = pool.field(slot, None if signed else w, w if signed else None)
            if signed:
                e = pool.binary(ir.BinOp.AND, e, pool.const(_mask(w)), bits=w)
            if key.mask is not None:
                e = pool.binary(
                    ir.BinOp.AND, e, pool.const(key.mask), bits=min(w, key.mask.bit_length()) if key.mask >= 0 else None
                )
            keys.append(e)

        def node(name: str | None) -> int:
            return self.node(pipeline, name)

        by_action = []
        for aid in t.action_ids:
            a = self.prog.actions[self.action_of(aid)]
            if a.name in t.next_tables:
                by_action.append((self.action_of(aid), node(t.next_tables[a.name])))
        base = node(t.base_default_next)
        hit_next = node(t.next_tables.get("__HIT__", t.base_default_next)) if t.uses_hit_miss else base
        miss_next = node(t.next_tables.get("__MISS__", t.base_default_next)) if t.uses_hit_miss else base
        direct_action, direct_params, direct_next = -1, (), ir.ACCEPT
        if not t.keys and t.default_const and not t.const_entries:
            kind = ir.TableKind.DIRECT  # a p4c "dummy table": a direct action call from the control body
            if t.default_action_id is not None:
                direct_action = self.action_of(t.default_action_id)
                direct_params = t.default_action_data
            a_name = self.prog.actions[direct_action].name if direct_action >= 0 else None
            if t.uses_hit_miss:
                direct_next = miss_next
            else:
                direct_next = node(t.next_tables[a_name]) if a_name is not None and a_name in t.next_tables else base
        elif not t.keys:
            kind = ir.TableKind.KEYLESS
        elif t.match_type == "exact":
            kind = ir.TableKind.EXACT
        elif t.match_type == "lpm":
            kind = ir.TableKind.LPM
        elif t.match_type in ("ternary", "range"):
            kind = ir.TableKind.SCAN
        else:
            raise self.refuse(f"table match type {t.match_type!r:.80}")
        lpm_index = (
            next((i for i, k in enumerate(t.keys) if k.match_type == "lpm"), -1) if kind is ir.TableKind.LPM else -1
        )
        if kind is ir.TableKind.LPM and lpm_index < 0:
            raise ValueError(f"table {t.name!r} has match type lpm but no lpm key")
        runs = [self.action_of(aid) for aid in t.action_ids]
        if t.default_action_id is not None:
            runs.append(self.action_of(t.default_action_id))
        runs.extend(self.action_of(e.action_id) for e in t.const_entries)
        self.tables.append(
            ir.Table(
                kind,
                tuple(keys),
                lpm_index,
                direct_action,
                tuple(direct_params),
                direct_next,
                tuple(by_action),
                t.uses_hit_miss,
                base,
                hit_next,
                miss_next,
                tuple(sorted(set(runs))),
            )
        )
        self.table_defs.append(t)
        self.nodes[node(t.name)] = ir.TableNode(index)

    # ------------------------------------------------------------------ parser
    def shape(self, hname: str) -> ir.HeaderShape:
        h = self.lay.headers[hname]
        if h.type.width % 8:
            raise Refused(f"header {hname!r} is {h.type.width} bits, not a whole number of bytes")
        return ir.HeaderShape(
            self.lay.valid[hname],
            self.lay.first[hname],
            tuple(f.width for f in h.type.fields),
            tuple(f.signed for f in h.type.fields),
            h.type.width // 8,
            tuple(self.lay.valid[s] for s in self.lay.union_of.get(hname, ())),
            h.metadata,
        )

    def parser(self) -> ir.Parser:
        prog, lay = self.prog, self.lay
        states = {}
        for i, s in enumerate(prog.parser.states):
            if not isinstance(s, dict):
                raise ValueError("a parser state must be an object")
            states[_name(s.get("name"), "parser state name")] = i
        pts = prog.errors["PacketTooShort"]
        out_states = []
        for s in prog.parser.states:
            self.where = f"parser state {s['name']!r}"
            body: list[ir.Stmt] = []
            for opj in s.get("parser_ops") or []:
                body.extend(self.parser_op(opj, pts))
            state = self.transition(s, states, self.spiller.block(tuple(body)))
            if state.key is not None:
                lets: list[ir.Stmt] = []
                key = self.spiller.expr(state.key, lets)
                state = ir.ParserState(state.body + tuple(lets), key, state.cases, state.default)
            out_states.append(state)
        init = prog.parser.init_state
        init_index = states[init] if isinstance(init, str) and init in states else ir.ACCEPT
        self.where = "parser"
        verify = []
        for c in prog.checksums:
            if not c.verify:
                continue
            self.where = f"checksum {c.name!r}"
            cond, pre = self.checksum_cond(c.if_cond)
            ce = lay.std("checksum_error")
            verify.append(
                ir.ChecksumIR(
                    self.calculation(c.calculation),
                    lay.slot(*c.target),
                    lay.width(*c.target)[0],
                    cond,
                    -1 if ce is None else ce,
                    lay.valid[c.target[0]],
                    pre,
                )
            )
        pe = lay.std("parser_error")
        steps = self.limits.max_parser_steps if _cyclic(out_states, init_index) else 0
        return ir.Parser(
            tuple(out_states),
            init_index,
            -1 if pe is None else pe,
            steps,
            prog.errors.get("ParserTimeout", 5),
            tuple(verify),
        )

    def parser_op(self, opj: Json, pts: int) -> list[ir.Stmt]:
        if not isinstance(opj, dict):
            raise ValueError(f"{self.where}: a parser op must be an object")
        op = opj.get("op")
        params = opj.get("parameters") or []
        pool = self.pool
        if op == "extract":
            p = params[0]
            kind = p.get("type")
            if kind == "regular":
                name = p.get("value")
                if not isinstance(name, str) or name not in self.lay.headers:
                    raise ValueError(f"{self.where}: extract of unknown header {name!r:.80}")
                return [ir.Extract(self.shape(name), pts)]
            if kind == "stack":
                st = next((s for s in self.prog.stacks if s.name == p.get("value")), None)
                if st is None:
                    raise ValueError(f"{self.where}: unknown stack {p.get('value')!r:.80}")
                return [
                    ir.ExtractStack(
                        self.lay.stack_next[st.name],
                        tuple(self.shape(h) for h in st.headers),
                        self.prog.errors["StackOutOfBounds"],
                        pts,
                    )
                ]
            raise self.refuse(f"extract into {kind!r:.80}")
        if op == "set":
            dst, src = params[0], params[1]
            slot, w, signed = self.lvalue(dst)
            if isinstance(src, dict) and src.get("type") == "lookahead":
                off, width = self.lookahead_args(src.get("value"))
                la = pool.lookahead(off, width, padded=False)
                return [ir.Require(la.nbytes, pts), ir.Assign(slot, self.fit(la, w, signed))]
            copy = self._plain_copy({"op": "assign", "parameters": params})
            if copy is not None:
                self.read_slots.add(copy[1])
            if copy is not None and copy[1] in self.unreadable:  # a copy, not a use
                sw_, ss = self.lay.width(*src["value"])
                value = pool.field(copy[1], None if ss else sw_, sw_ if ss else None)
                return [ir.Assign(slot, self.fit(value, w, signed))]
            return [ir.Assign(slot, self.fit(self.rv(src, None), w, signed))]
        if op == "verify":
            return [ir.Verify(self.rv(params[0], None), self.rv(params[1], None))]
        if op in ("advance", "shift"):
            n = self.rv(params[0], None)
            if op == "advance":  # bits
                n = pool.binary(ir.BinOp.SHR, n, pool.const(3), bits=n.bits)
            return [ir.Advance(n, pts)]
        if op == "primitive":
            return self.primitive(params[0], None)
        raise self.refuse(f"parser op {op!r:.80}")

    def lookahead_args(self, v: Json) -> tuple[int, int]:
        if not (isinstance(v, list) and len(v) == 2):
            raise ValueError(f"{self.where}: lookahead must be [offset, width]")
        off, width = _int(v[0], "lookahead offset"), _int(v[1], "lookahead width")
        if not (0 <= off <= self.limits.max_header_bits and 0 < width <= self.limits.max_field_bits):
            raise ProgramLimitError(
                f"limit max_field_bits={self.limits.max_field_bits}: lookahead of {width} bits at {off} in {self.where}"
            )
        return off, width

    def transition(self, s: Json, states: dict[str, int], body: tuple[ir.Stmt, ...]) -> ir.ParserState:
        trans = s.get("transitions") or []
        keyj = s.get("transition_key") or []
        pool = self.pool

        def target(name: Json) -> int:
            if name is None:
                return ir.ACCEPT
            if not isinstance(name, str) or name not in states:
                raise ValueError(f"{self.where}: transition to unknown state {name!r:.80}")
            return states[name]

        def kind(tr: Json) -> str:
            tt = tr.get("type")
            if tt is None:  # JSON written before "type" existed
                tt = "default" if tr.get("value") in (None, "default") else "hexstr"
            return tt

        if not keyj:
            for tr in trans:
                if kind(tr) == "default":
                    return ir.ParserState(body, None, (), target(tr.get("next_state")))
            return ir.ParserState(body, None, (), ir.ACCEPT)
        key: ir.Expr | None = None
        total = 0
        for kj in reversed(keyj):
            t = kj.get("type") if isinstance(kj, dict) else None
            if t == "field":
                hdr, fld = _pair(kj.get("value"), "transition key")
                w, signed = self.lay.width(hdr, fld)
                e = pool.field(self.read(hdr, fld), None if signed else w, w if signed else None)
            elif t == "stack_field":
                stack, fld = _pair(kj.get("value"), "transition key")
                e = self.stack_field(stack, fld)
                st = next(x for x in self.prog.stacks if x.name == stack)
                w, signed = self.lay.width(st.headers[0], fld)
            elif t == "lookahead":
                off, w = self.lookahead_args(kj.get("value"))
                e, signed = pool.lookahead(off, w, padded=True), False
            else:
                raise self.refuse(f"transition key of type {t!r:.80}")
            if signed:
                e = pool.binary(ir.BinOp.AND, e, pool.const(_mask(w)), bits=w)
            if total:
                e = pool.binary(ir.BinOp.SHL, e, pool.const(total))
            key = e if key is None else pool.binary(ir.BinOp.OR, e, key)
            total += 8 * ((w + 7) // 8)
        cases = []
        default = ir.ACCEPT
        for tr in trans:
            tt = kind(tr)
            if tt == "default":
                default = target(tr.get("next_state"))
                break
            if tt != "hexstr":
                raise self.refuse(f"transition of type {tt!r:.80} (value sets are not supported)")
            value = self.constant(tr.get("value"))
            mask = tr.get("mask")
            if mask is None:
                cases.append(ir.Case(value, -1, target(tr.get("next_state"))))
            else:
                m = self.constant(mask)
                cases.append(ir.Case(value & m, m, target(tr.get("next_state"))))
        return ir.ParserState(body, key, tuple(cases), default)

    def checksum_cond(self, j: Json) -> tuple[ir.Expr | None, tuple[ir.Stmt, ...]]:
        if j is None:
            return None, ()
        pre: list[ir.Stmt] = []
        cond = self.spiller.expr(self.rv({"type": "expression", "value": j}, None), pre)
        return cond, tuple(pre)

    # ------------------------------------------------------------------ deparser
    def deparser(self) -> ir.Deparser:
        lay = self.lay
        updates = []
        for c in self.prog.checksums:
            if not c.update:
                continue
            self.where = f"checksum {c.name!r}"
            cond, pre = self.checksum_cond(c.if_cond)
            updates.append(
                ir.ChecksumIR(
                    self.calculation(c.calculation), lay.slot(*c.target), lay.width(*c.target)[0], cond, -1, -1, pre
                )
            )
        self.where = "deparser"
        emits = []
        for hname in self.prog.deparser_order:
            if hname not in lay.headers:
                raise ValueError(f"deparser emits unknown header {hname!r:.80}")
            shape = self.shape(hname)
            if shape.widths:
                self.read_header(hname)  # what leaves the switch is a use
                emits.append(shape)
        return ir.Deparser(tuple(updates), tuple(emits))

    # ------------------------------------------------------------------ whole program
    def lower(self) -> tuple[ir.Module, ir.Names]:
        prog = self.prog
        for name in prog.calculations:
            self.where = f"calculation {name!r}"
            self.calculation(name)
        actions = [self.action(a) for a in prog.actions]
        inits = (self.pipeline(prog.pipelines["ingress"]), self.pipeline(prog.pipelines["egress"]))
        for i, n in enumerate(self.nodes):
            if n is None:
                raise ValueError(f"control flow refers to unknown node {self.node_names[i]!r}")
        parser = self.parser()
        deparser = self.deparser()
        self.where = ""
        lay = self.lay
        widths, signed = slot_types(lay)
        module = ir.Module(
            template=tuple(lay.template),
            exit_slot=lay.EXIT,
            length_slot=lay.LEN,
            ingress_length_slot=lay.INGLEN,
            zero_slot=lay.ZERO,
            calcs=tuple(self.calcs),
            actions=tuple(actions),
            tables=tuple(self.tables),
            nodes=tuple(n for n in self.nodes if n is not None),  # all set: checked above
            pipelines=inits,
            parser=parser,
            deparser=deparser,
            registers=tuple((r.size, r.width) for r in prog.registers),
            counters=tuple(c.size for c in prog.counters),
            uses_exit=self.uses_exit,
            slot_widths=widths,
            slot_signed=signed,
            std=tuple(ir.ACCEPT if lay.std(n) is None else lay.std(n) for n in STANDARD_FIELDS),
        )
        names = ir.Names(
            actions=tuple(a.name for a in prog.actions),
            action_json_ids=tuple(a.id for a in prog.actions),
            tables=tuple(t.name for t in self.table_defs),
            nodes=tuple(self.node_names),
            registers=tuple(r.name for r in prog.registers),
            counters=tuple(c.name for c in prog.counters),
            calcs=tuple(self.calc_names),
            states=tuple(s["name"] for s in prog.parser.states),
            messages=tuple(self.messages),
        )
        return module, names


def _cyclic(states: list[ir.ParserState], init: int) -> bool:
    """Whether the parser's state graph has a cycle reachable from init (a loop that might not consume)."""
    colour: dict[int, int] = {}
    stack: list[tuple[int, int]] = [(init, 0)] if init >= 0 else []
    while stack:
        s, i = stack.pop()
        succ = [c.next for c in states[s].cases] + [states[s].default]
        succ = [x for x in succ if x >= 0]
        if i == 0:
            if colour.get(s) == 2:
                continue
            colour[s] = 1
        if i < len(succ):
            stack.append((s, i + 1))
            nxt = succ[i]
            if colour.get(nxt) == 1:
                return True
            if colour.get(nxt) is None:
                stack.append((nxt, 0))
        else:
            colour[s] = 2
    return False
