"""p4ina's embedded P4 switch: compiles p4c's BMv2 JSON (v1model) to C (or Python) and runs it with
simple_switch's semantics; serves P4Runtime on 127.0.0.1 (docs/softswitch.md)."""

from softswitch.errors import (
    ConstDefaultActionError,
    EntryExistsError,
    EntryNotFoundError,
    InvalidEntryError,
    NoProgramError,
    ProgramLimitError,
    SoftSwitchError,
    TableFullError,
    UnknownObjectError,
    UnsupportedProgramError,
)
from softswitch.runtime.switch import (
    ActionCall,
    ActionInfo,
    Exact,
    KeyFieldInfo,
    Lpm,
    MatchKey,
    Range,
    SoftSwitch,
    TableEntry,
    TableInfo,
    Ternary,
)

__all__ = [
    "ActionCall",
    "ActionInfo",
    "ConstDefaultActionError",
    "EntryExistsError",
    "EntryNotFoundError",
    "Exact",
    "InvalidEntryError",
    "KeyFieldInfo",
    "Lpm",
    "MatchKey",
    "NoProgramError",
    "ProgramLimitError",
    "Range",
    "SoftSwitch",
    "SoftSwitchError",
    "TableEntry",
    "TableFullError",
    "TableInfo",
    "Ternary",
    "UnknownObjectError",
    "UnsupportedProgramError",
]
