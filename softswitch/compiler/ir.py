"""The embedded switch's intermediate representation: what a program does, in ints, enums and numbers.

`lower.py` turns a loaded BMv2 program into this IR once; an emitter (today `pyemit.py`, Python;
later a C emitter) turns the IR into code. Nothing here holds text from the JSON: every slot,
width, mask, constant and node is an int, every operator an enum member, every identifier a number
the lowering chose. Names live beside the IR in `Names` (error messages, P4Runtime look-ups, logs)
and never reach an emitter, so an emitter cannot put JSON text into code: `check_module` verifies
that every number in a module is a plain int before any emitter runs.

Values: packet state is a flat array of slots (per header a validity slot then one slot per field,
plus a few hidden slots, see `Module`). Expressions compute with unbounded integers, as BMv2 does;
every expression carries what is known of its range (`bits`: in [0, 2**bits); `swidth`: in
int<swidth>'s range; `is_bool`), which is what lets an emitter drop masks in Python or pick a
fixed-width C type. Wrap-around and sign handling are explicit nodes (`Binary(AND, x, mask)`,
`SignWrap`, `Clamp`), never implied by a destination.

Expressions are hash-consed by a `Pool`: structurally equal expressions are the same object, so
common-subexpression elimination (cse.py) and emitters may compare and key them by identity.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any


class IRError(ValueError):
    """A module that breaks the IR's own rules (a lowering bug, or a number that is not an int)."""


class BinOp(enum.IntEnum):
    ADD = 1
    SUB = 2
    MUL = 3
    DIV = 4  # BMv2: division by zero gives 0
    MOD = 5  # BMv2: modulo by zero gives 0
    AND = 6
    OR = 7
    XOR = 8
    SHL = 9  # a negative count leaves the value, a count above MAX_SHIFT gives 0
    SHR = 10  # arithmetic (the left operand may be negative); a negative count leaves the value
    EQ = 11
    NE = 12
    GT = 13
    GE = 14
    LT = 15
    LE = 16
    LAND = 17  # boolean, short-circuit
    LOR = 18  # boolean, short-circuit


COMPARISONS = frozenset({BinOp.EQ, BinOp.NE, BinOp.GT, BinOp.GE, BinOp.LT, BinOp.LE})
LOGICAL = frozenset({BinOp.LAND, BinOp.LOR})
MAX_SHIFT = 4096  # shift counts above this give 0 (p4c masks every shift to the destination width)


class UnOp(enum.IntEnum):
    NOT = 1  # boolean not
    INV = 2  # bitwise complement of an unbounded integer (~x == -x - 1)
    B2D = 3  # bool -> 0/1
    D2B = 4  # int -> bool (x != 0)


class HashAlgo(enum.IntEnum):
    CRC16 = 1
    CRC32 = 2
    CRC_CCITT = 3
    CSUM16 = 4
    XOR16 = 5
    IDENTITY = 6


class TableKind(enum.IntEnum):
    EXACT = 1
    LPM = 2
    SCAN = 3  # ternary and range: a scan in priority order
    KEYLESS = 4  # no key: always the default entry
    DIRECT = 5  # p4c's keyless table with a const default and no entries: a direct action call


# ---------------------------------------------------------------------------------------------
# Expressions


@dataclass(frozen=True, slots=True, eq=False)
class Expr:
    """Base of all expressions. `nid` numbers the node in its pool; the range facts are described above."""

    nid: int
    bits: int | None
    swidth: int | None
    is_bool: bool

    def children(self) -> tuple[Expr, ...]:
        return ()


@dataclass(frozen=True, slots=True, eq=False)
class Const(Expr):
    value: int


@dataclass(frozen=True, slots=True, eq=False)
class Bool(Expr):
    value: bool


@dataclass(frozen=True, slots=True, eq=False)
class Field(Expr):
    """A slot of the packet state (a field, a validity bit or a hidden slot)."""

    slot: int


@dataclass(frozen=True, slots=True, eq=False)
class Param(Expr):
    """An action's runtime parameter (action data) by position."""

    index: int


@dataclass(frozen=True, slots=True, eq=False)
class Temp(Expr):
    """A temporary set by a `Let` earlier in the same function."""

    index: int


@dataclass(frozen=True, slots=True, eq=False)
class Binary(Expr):
    op: BinOp
    a: Expr
    b: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.a, self.b)


@dataclass(frozen=True, slots=True, eq=False)
class Unary(Expr):
    op: UnOp
    a: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.a,)


@dataclass(frozen=True, slots=True, eq=False)
class Mux(Expr):
    """cond ? a : b (only the chosen arm is evaluated)."""

    cond: Expr
    a: Expr
    b: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.cond, self.a, self.b)


@dataclass(frozen=True, slots=True, eq=False)
class Clamp(Expr):
    """min(max(a, lo), hi): BMv2's sat_cast / usat_cast."""

    a: Expr
    lo: int
    hi: int

    def children(self) -> tuple[Expr, ...]:
        return (self.a,)


@dataclass(frozen=True, slots=True, eq=False)
class SignWrap(Expr):
    """a reduced to int<width> (two's complement wrap-around): ((a + 2**(w-1)) & (2**w - 1)) - 2**(w-1)."""

    a: Expr
    width: int

    def children(self) -> tuple[Expr, ...]:
        return (self.a,)


@dataclass(frozen=True, slots=True, eq=False)
class InRange(Expr):
    """0 <= a < size, a bool; `nonneg` when a is known not to be negative (only a < size is tested)."""

    a: Expr
    size: int
    nonneg: bool

    def children(self) -> tuple[Expr, ...]:
        return (self.a,)


@dataclass(frozen=True, slots=True, eq=False)
class StackField(Expr):
    """A field of a header stack's last extracted element: slots[F[next_slot]] (slots[0] is the zero slot)."""

    next_slot: int
    slots: tuple[int, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Lookahead(Expr):
    """Parser only: `width` bits at bit `offset` of the unparsed bytes; `padded` reads zeros past the end."""

    offset: int
    width: int
    nbytes: int
    padded: bool


@dataclass(frozen=True, slots=True, eq=False)
class Hash(Expr):
    """The unreduced value of calculation `calc` over the current packet state."""

    calc: int


@dataclass(frozen=True, slots=True, eq=False)
class RegRead(Expr):
    """Cell `index` of register array `reg`; the index is range-checked by the enclosing `If`."""

    reg: int
    index: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.index,)


@dataclass(frozen=True, slots=True, eq=False)
class Random(Expr):
    """A uniform random integer in [lo, hi] (lo when lo > hi); impure, never shared."""

    lo: Expr
    hi: Expr

    def children(self) -> tuple[Expr, ...]:
        return (self.lo, self.hi)


# Expressions whose value depends on more than their operands and the slots they name.
IMPURE = (Random, RegRead, Hash, StackField, Lookahead)


class Pool:
    """Makes expressions, interning them: equal structure, same object."""

    def __init__(self) -> None:
        self._interned: dict[tuple[Any, ...], Expr] = {}
        self._rand = 0

    def _make(
        self, cls: type, key: tuple[Any, ...], bits: int | None, swidth: int | None, is_bool: bool, *args: Any
    ) -> Any:
        full = (cls, *key)
        node = self._interned.get(full)
        if node is None:
            node = cls(len(self._interned), bits, swidth, is_bool, *args)
            self._interned[full] = node
        return node

    def const(self, value: int) -> Const:
        value = check_int(value, "constant")
        return self._make(Const, (value,), value.bit_length() if value >= 0 else None, None, False, value)

    def boolean(self, value: bool) -> Expr:
        return self._make(Bool, (bool(value),), None, None, True, bool(value))

    def field(self, slot: int, bits: int | None, swidth: int | None) -> Field:
        return self._make(Field, (check_int(slot, "slot"), bits, swidth), bits, swidth, False, slot)

    def param(self, index: int, width: int) -> Param:
        return self._make(Param, (check_int(index, "parameter"), width), width, None, False, index)

    def temp(self, index: int, like: Expr) -> Temp:
        return self._make(
            Temp,
            (check_int(index, "temporary"), like.bits, like.swidth, like.is_bool),
            like.bits,
            like.swidth,
            like.is_bool,
            index,
        )

    def binary(self, op: BinOp, a: Expr, b: Expr, bits: int | None = None, swidth: int | None = None) -> Expr:
        is_bool = op in COMPARISONS or op in LOGICAL
        return self._make(Binary, (op, a.nid, b.nid, bits, swidth), bits, swidth, is_bool, BinOp(op), a, b)

    def unary(self, op: UnOp, a: Expr, bits: int | None = None) -> Expr:
        is_bool = op in (UnOp.NOT, UnOp.D2B)
        return self._make(Unary, (op, a.nid, bits), bits, None, is_bool, UnOp(op), a)

    def mux(self, cond: Expr, a: Expr, b: Expr) -> Expr:
        bits = max(a.bits, b.bits) if a.bits is not None and b.bits is not None else None
        sw = a.swidth if a.swidth is not None and a.swidth == b.swidth else None
        is_bool = a.is_bool and b.is_bool
        return self._make(Mux, (cond.nid, a.nid, b.nid), bits, sw, is_bool, cond, a, b)

    def clamp(self, a: Expr, lo: int, hi: int, bits: int | None, swidth: int | None) -> Expr:
        return self._make(
            Clamp, (a.nid, check_int(lo, "bound"), check_int(hi, "bound"), bits, swidth), bits, swidth, False, a, lo, hi
        )

    def sign_wrap(self, a: Expr, width: int) -> Expr:
        return self._make(SignWrap, (a.nid, check_int(width, "width")), None, width, False, a, width)

    def in_range(self, a: Expr, size: int, nonneg: bool) -> Expr:
        return self._make(
            InRange, (a.nid, check_int(size, "size"), bool(nonneg)), None, None, True, a, size, bool(nonneg)
        )

    def stack_field(self, next_slot: int, slots: tuple[int, ...], bits: int | None, swidth: int | None) -> Expr:
        slots = tuple(check_int(s, "slot") for s in slots)
        return self._make(
            StackField, (check_int(next_slot, "slot"), slots, bits, swidth), bits, swidth, False, next_slot, slots
        )

    def lookahead(self, offset: int, width: int, padded: bool) -> Expr:
        offset, width = check_int(offset, "lookahead offset"), check_int(width, "lookahead width")
        nbytes = (offset + width + 7) // 8
        return self._make(
            Lookahead, (offset, width, bool(padded)), width, None, False, offset, width, nbytes, bool(padded)
        )

    def hash(self, calc: int) -> Expr:
        return self._make(Hash, (check_int(calc, "calculation"),), None, None, False, calc)

    def reg_read(self, reg: int, index: Expr, width: int) -> Expr:
        return self._make(RegRead, (check_int(reg, "register"), index.nid, width), width, None, False, reg, index)

    def random(self, lo: Expr, hi: Expr) -> Expr:
        self._rand += 1  # never interned with another draw
        return self._make(Random, (lo.nid, hi.nid, self._rand), None, None, False, lo, hi)


def walk(e: Expr) -> Iterator[Expr]:
    """e and every subexpression, each node once (iteratively: expression trees may be deep)."""
    seen: set[int] = set()
    stack = [e]
    while stack:
        n = stack.pop()
        if n.nid in seen:
            continue
        seen.add(n.nid)
        yield n
        stack.extend(n.children())


def fold(e: Expr, memo: dict[int, Any], combine: Any) -> Any:
    """combine(node, children's values) for e and every subexpression, bottom-up, each node once (memoised by node
    id in `memo`, which callers may keep across calls); iterative, so deep trees do not recurse."""
    stack: list[tuple[Expr, bool]] = [(e, False)]
    while stack:
        n, done = stack.pop()
        if n.nid in memo:
            continue
        kids = n.children()
        if done or not kids:
            memo[n.nid] = combine(n, [memo[k.nid] for k in kids])
            continue
        stack.append((n, True))
        stack.extend((k, False) for k in kids if k.nid not in memo)
    return memo[e.nid]


def depth(e: Expr, memo: dict[int, int]) -> int:
    """Nesting depth of an expression (an atom is 1), memoised by node id; iterative."""
    return fold(e, memo, lambda _n, kids: 1 + max(kids, default=0))


# ---------------------------------------------------------------------------------------------
# Statements


@dataclass(frozen=True, slots=True)
class Assign:
    slot: int
    value: Expr  # already fits the slot (the lowering added the mask or wrap)


@dataclass(frozen=True, slots=True)
class Let:
    temp: int
    value: Expr


@dataclass(frozen=True, slots=True)
class If:
    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Return:
    """Leave the action (fields cached by an emitter are written back first)."""


@dataclass(frozen=True, slots=True)
class CopyFields:
    dst: int
    src: int
    count: int


@dataclass(frozen=True, slots=True)
class SwapFields:
    """Exchange the slot ranges [a, a+count) and [b, b+count) (a header's validity and fields: stack shifts)."""

    a: int
    b: int
    count: int


@dataclass(frozen=True, slots=True)
class ZeroFields:
    first: int
    count: int


@dataclass(frozen=True, slots=True)
class RegWrite:
    reg: int
    index: Expr  # range-checked by the enclosing If
    value: Expr  # already fits the register's width


@dataclass(frozen=True, slots=True)
class Count:
    counter: int
    index: Expr  # range-checked by the enclosing If
    bytes_slot: int  # the slot holding the byte count to add


@dataclass(frozen=True, slots=True)
class Fail:
    """An assert()/assume() failed: the packet is dropped; `message` indexes Names.messages."""

    message: int


@dataclass(frozen=True, slots=True)
class Block:
    """A basic block of a `Loop`: starts at program counter `start`, falls through to `fall`."""

    start: int
    body: tuple[Stmt, ...]
    fall: int


@dataclass(frozen=True, slots=True)
class Goto:
    target: int  # a Block.start, or the Loop's end (leave the action)


@dataclass(frozen=True, slots=True)
class GotoUnless:
    cond: Expr
    target: int


@dataclass(frozen=True, slots=True)
class Loop:
    """Unstructured jumps (p4c's _jump/_jump_if_zero forming loops): blocks run by a program counter.

    At most `limit` blocks run per call; beyond that the packet fails with message `message`.
    """

    blocks: tuple[Block, ...]
    end: int
    limit: int
    message: int


# parser statements
@dataclass(frozen=True, slots=True)
class HeaderShape:
    """Where a header lives and how it is laid out on the wire."""

    valid: int
    first: int
    widths: tuple[int, ...]
    signed: tuple[bool, ...]
    nbytes: int
    siblings: tuple[int, ...]  # validity slots of its header-union siblings (invalidated when it becomes valid)
    metadata: bool = False


@dataclass(frozen=True, slots=True)
class Extract:
    header: HeaderShape
    short_error: int  # error code when the packet is too short


@dataclass(frozen=True, slots=True)
class ExtractStack:
    next_slot: int
    headers: tuple[HeaderShape, ...]
    full_error: int  # StackOutOfBounds
    short_error: int


@dataclass(frozen=True, slots=True)
class Require:
    """Parser: fail with `error` unless `nbytes` bytes remain."""

    nbytes: int
    error: int


@dataclass(frozen=True, slots=True)
class Verify:
    """Parser: fail with the error value `error` unless `cond`."""

    cond: Expr
    error: Expr


@dataclass(frozen=True, slots=True)
class Advance:
    """Parser: skip `nbytes` bytes (an expression), failing with `short_error` past the end."""

    nbytes: Expr
    short_error: int


Stmt = (
    Assign
    | Let
    | If
    | Return
    | CopyFields
    | SwapFields
    | ZeroFields
    | RegWrite
    | Count
    | Fail
    | Loop
    | Goto
    | GotoUnless
    | Extract
    | ExtractStack
    | Require
    | Verify
    | Advance
)

ACCEPT = -1  # parser: the accept state; control: no next node


@dataclass(frozen=True, slots=True)
class Case:
    value: int
    mask: int  # -1: no mask (compare the whole key)
    next: int  # state index or ACCEPT


@dataclass(frozen=True, slots=True)
class ParserState:
    body: tuple[Stmt, ...]
    key: Expr | None
    cases: tuple[Case, ...]
    default: int  # state index or ACCEPT; taken when no case matches (ACCEPT when the JSON gives none)


@dataclass(frozen=True, slots=True)
class ChecksumIR:
    calc: int
    target: int  # slot
    width: int
    cond: Expr | None
    error_slot: int  # verify: checksum_error's slot, -1 when the program has none
    guard: int  # verify: the validity slot that must be set for the check to run; -1: always
    pre: tuple[Stmt, ...] = ()  # temporaries the condition uses (spilled deep subexpressions)


@dataclass(frozen=True, slots=True)
class Parser:
    states: tuple[ParserState, ...]
    init: int  # ACCEPT when the JSON has no (known) init state
    error_slot: int  # parser_error's slot, -1 when absent
    max_steps: int  # states visited per packet before ParserTimeout; 0 for an acyclic parser (no check)
    timeout_error: int
    verify: tuple[ChecksumIR, ...]


@dataclass(frozen=True, slots=True)
class Deparser:
    updates: tuple[ChecksumIR, ...]
    emits: tuple[HeaderShape, ...]


class CalcKind(enum.IntEnum):
    FIELD = 1
    CONST = 2
    HEADER = 3


@dataclass(frozen=True, slots=True)
class CalcPart:
    kind: CalcKind
    slot: int  # FIELD: its slot; HEADER: the first field's slot; CONST: unused (0)
    width: int  # bits contributed (HEADER: the header's total)
    value: int  # CONST: the constant (already masked to width)
    guard: int  # validity slot that must be set for the part to count; -1: always
    mask: bool  # FIELD: mask the value to width (signed fields, validity bits)
    widths: tuple[int, ...] = ()  # HEADER: each field's width
    signed: tuple[bool, ...] = ()  # HEADER: which fields are signed (masked)


@dataclass(frozen=True, slots=True)
class Calc:
    algo: HashAlgo
    parts: tuple[CalcPart, ...]


@dataclass(frozen=True, slots=True)
class Action:
    params: tuple[int, ...]  # parameter widths
    body: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class Table:
    kind: TableKind
    keys: tuple[Expr, ...]  # the lookup key, per field, already masked as the table compares it
    lpm_index: int  # LPM: which key is the prefix; else -1
    direct_action: int  # DIRECT: the action called; else -1
    direct_params: tuple[int, ...]
    direct_next: int  # DIRECT: next node
    # what the runtime needs to build a lookup result: the node after the table ran an action
    next_by_action: tuple[tuple[int, int], ...]  # (action, node): the node after that action
    hit_miss: bool  # the next node depends on hit or miss only (hit_next, miss_next), not on the action
    base_next: int  # the node after an action not in next_by_action
    hit_next: int
    miss_next: int
    # every action an entry, the default or a const entry of the table may run (an emitter that
    # dispatches on the action number needs them all)
    actions: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TableNode:
    table: int


@dataclass(frozen=True, slots=True)
class CondNode:
    cond: Expr
    true_next: int
    false_next: int
    pre: tuple[Stmt, ...] = ()  # temporaries the condition uses (spilled deep subexpressions)


@dataclass(frozen=True, slots=True)
class CallNode:
    action: int
    next: int


Node = TableNode | CondNode | CallNode


@dataclass(frozen=True, slots=True)
class Module:
    """One program. Slots: `template` gives every slot's initial value; the hidden ones are named here."""

    template: tuple[int, ...]
    exit_slot: int  # nonzero after exit: the rest of the current pipeline is skipped
    length_slot: int  # the packet's current length (headers added and removed)
    ingress_length_slot: int  # the length as received (what counters count)
    zero_slot: int  # always 0 (a stack field of an empty stack)
    calcs: tuple[Calc, ...]
    actions: tuple[Action, ...]
    tables: tuple[Table, ...]
    nodes: tuple[Node, ...]
    pipelines: tuple[int, int]  # first node of ingress and of egress (ACCEPT: empty)
    parser: Parser
    deparser: Deparser
    registers: tuple[tuple[int, int], ...]  # (size, width)
    counters: tuple[int, ...]  # sizes
    uses_exit: bool
    # what each slot holds, for an emitter that stores slots in fixed-width types: a field's width
    # and signedness (a validity bit: 1, unsigned); 0 for the hidden slots and stack indexes, which
    # hold small integers of no declared width (lengths, counts, flags)
    slot_widths: tuple[int, ...] = ()
    slot_signed: tuple[bool, ...] = ()
    # the slot of each standard_metadata field in lower.STANDARD_FIELDS order, ACCEPT (-1) when absent
    std: tuple[int, ...] = ()


@dataclass(frozen=True)
class Names:
    """The JSON's names, by IR number: for messages, P4Runtime and logs only; never for an emitter."""

    actions: tuple[str, ...]
    action_json_ids: tuple[int, ...]
    tables: tuple[str, ...]
    nodes: tuple[str, ...]
    registers: tuple[str, ...]
    counters: tuple[str, ...]
    calcs: tuple[str, ...]
    states: tuple[str, ...]
    messages: tuple[str, ...]


def stmt_parts(s: Stmt) -> tuple[list[Expr], list[Stmt]]:
    """A statement's own expressions and the statements nested in it (for passes that read, not rewrite)."""
    if isinstance(s, (Let, Assign)):
        return [s.value], []
    if isinstance(s, If):
        return [s.cond], [*s.then, *s.orelse]
    if isinstance(s, RegWrite):
        return [s.index, s.value], []
    if isinstance(s, Count):
        return [s.index], []
    if isinstance(s, (GotoUnless, Verify)):
        return [s.cond], []
    if isinstance(s, Loop):
        return [], [x for b in s.blocks for x in b.body]
    if isinstance(s, Advance):
        return [s.nbytes], []
    return [], []


# ---------------------------------------------------------------------------------------------
# Checking


def check_int(value: Any, what: str) -> int:
    """value if it is a plain int (not a bool, str or float); every number in the IR goes through this."""
    if type(value) is not int:
        raise IRError(f"{what} must be an integer, got {type(value).__name__} {value!r:.40}")
    return value


def check_module(module: Module) -> None:
    """Verify that the module holds only ints, bools, enums, tuples of them and IR nodes.

    Run before any emitter, so that an emitter may format any scalar it finds as a number.
    """
    stack: list[Any] = [module]
    seen: set[int] = set()
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, enum.Enum):
            continue
        if type(obj) in (int, bool) or obj is None:
            continue
        if type(obj) is tuple:
            stack.extend(obj)
            continue
        if type(obj).__module__ == __name__ and hasattr(obj, "__dataclass_fields__"):
            stack.extend(getattr(obj, f.name) for f in fields(obj))
            continue
        raise IRError(f"IR holds a {type(obj).__name__}; only ints, enums and IR nodes are allowed")


class Lines:
    """Generated source, one indented line at a time (both emitters write through it)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)
