"""Compile a loaded BMv2 program once, so per-packet work never walks the JSON: one lowering, one emitter.

    program.Program --lower.py--> ir.Module (+ ir.Names) --pyemit.py--> Python source
                                                          --cemit.py---> C source (the C engine)

The lowering (lower.py, with cse.py's temporaries) is the only code that reads the program's
expressions and control flow; it produces an IR of ints, enums and numbered identifiers, with
the JSON's names kept aside as data. The Python emitter (pyemit.py) writes code from the IR
alone, so no text from the JSON can reach generated code. The C emitter (cemit.py) is the
second emitter over the same `ir.Module`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from softswitch.compiler import ir, pyemit
from softswitch.compiler.lower import (  # noqa: F401 - re-exported for the runtime
    DROP_PORT,
    INSTANCE_NORMAL,
    INSTANCE_REPLICATION,
    PRIMITIVES,
    STANDARD_FIELDS,
    Layout,
    Lowering,
    Refused,
)
from softswitch.compiler.program import Limits, Program, TableDef
from softswitch.errors import ProgramLimitError

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Compiled:
    """A program, its IR and names, and the Python emitted from the IR (shared read-only between switches)."""

    prog: Program
    layout: Layout
    module: ir.Module
    names: ir.Names
    table_defs: tuple[TableDef, ...]  # by IR table number
    source: str
    constants: dict[str, Any]
    read_slots: frozenset[int]  # slots the program reads, copies or emits


def lower(
    prog: Program, limits: Limits | None = None, eliminate_common: bool = True
) -> tuple[Lowering, ir.Module, ir.Names]:
    low = Lowering(prog, limits, eliminate_common)
    try:
        module, names = low.lower()
    except RecursionError as ex:  # max_expression_depth keeps well below this; a last line of defence
        raise ProgramLimitError("the program nests deeper than the compiler can follow") from ex
    return low, module, names


def compile_program(prog: Program, limits: Limits | None = None, eliminate_common: bool = True) -> Compiled:
    low, module, names = lower(prog, limits, eliminate_common)
    py = pyemit.emit(module)
    return Compiled(
        prog, low.lay, module, names, tuple(low.table_defs), py.source, py.constants, frozenset(low.read_slots)
    )
