"""Errors of the embedded switch; the P4Runtime server maps each class to a gRPC status code."""

from __future__ import annotations


class SoftSwitchError(Exception):
    """Base class of every error the embedded switch raises on purpose."""


class UnsupportedProgramError(SoftSwitchError):
    """The BMv2 JSON uses a construct this switch does not implement (the message names it)."""


class NoProgramError(SoftSwitchError):
    """A control-plane call arrived before load_program."""


class UnknownObjectError(SoftSwitchError):
    """No table, action, counter or register of that name in the loaded program."""


class InvalidEntryError(SoftSwitchError):
    """A table entry, default action, index or value does not fit the program's declaration."""


class EntryExistsError(SoftSwitchError):
    """An entry with the same match key (and priority) is already installed."""


class EntryNotFoundError(SoftSwitchError):
    """No installed entry (or multicast group) matches."""


class TableFullError(SoftSwitchError):
    """The table already holds its declared size of entries."""


class ConstDefaultActionError(SoftSwitchError):
    """The program declares the table's default action const."""


class ProgramLimitError(SoftSwitchError):
    """A pushed program asks for more than the switch allows (the message names the limit)."""
