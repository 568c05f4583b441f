"""The embedded software switch: a pure-Python executor of p4c's BMv2 JSON (v1model) with simple_switch semantics."""

from emulation.softswitch.errors import (
    ConstDefaultActionError,
    EntryExistsError,
    EntryNotFoundError,
    InvalidEntryError,
    NoProgramError,
    SoftSwitchError,
    TableFullError,
    UnknownObjectError,
    UnsupportedProgramError,
)
from emulation.softswitch.switch import (
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
