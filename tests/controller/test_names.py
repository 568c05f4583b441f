"""controller/names.py agrees with the P4 source's constants (the P4 source wins)."""

from __future__ import annotations

import re
from pathlib import Path

from controller import names as N
from wireformat import AGG

TYPES_P4 = Path(__file__).resolve().parents[2] / "p4" / "include" / "types.p4"


def p4_constants() -> dict[str, int]:
    text = TYPES_P4.read_text()
    out = {m[0]: int(m[1], 0) for m in re.findall(r"^#define\s+(\w+)\s+(\w+)\s*$", text, re.M) if m[1][0].isdigit()}
    out.update({m[0]: int(m[1], 0) for m in re.findall(r"^const\s+bit<\d+>\s+(\w+)\s*=\s*(\w+)\s*;", text, re.M)})
    return out


def test_constants_match_types_p4() -> None:
    consts = p4_constants()
    for name in ("MAX_JOBS", "NUM_SLOTS", "NUM_DROP_REASONS", "ROLE_ROOT", "ROLE_INNER"):
        assert getattr(N, name) == consts[name], name
    drops = {k: v for k, v in consts.items() if k.startswith("DROP_") and k not in ("DROP_NONE", "DROP_PORT")}
    assert drops, "no DROP_* constants found in types.p4"
    for name, value in drops.items():
        assert getattr(N, name, None) == value, f"{name} = {value} in types.p4, {getattr(N, name, None)} in names.py"
    assert set(N.DROP_REASONS) == set(drops.values())
    assert max(N.DROP_REASONS) < N.NUM_DROP_REASONS


def test_elem_types_come_from_the_wire_format() -> None:
    assert (N.ELEM_INT32, N.ELEM_INT16, N.ELEM_INT8) == (
        AGG.elem_types["ELEM_INT32"],
        AGG.elem_types["ELEM_INT16"],
        AGG.elem_types["ELEM_INT8"],
    )
