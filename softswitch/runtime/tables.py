"""Match tables: entry storage for the control plane plus the lookup structures the generated code reads.

A lookup result is built once when the entry is installed (Python engine: a tuple (action_function,
params, next_node); C engine: (action number, params, next node number)), so the per-packet path is
a dict lookup (exact), a dict lookup per installed prefix length (lpm), or a scan in priority order
(ternary, range).

The C engine keeps its own copy of the lookup structures: a `TableMirror` receives every change as
one call, each of which the C side applies atomically (a modify replaces a result in place; it is
never a delete followed by an insert), so a packet there sees either the old entry or the new one.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from softswitch.errors import (
    EntryExistsError,
    EntryNotFoundError,
    InvalidEntryError,
    TableFullError,
)

LOG = logging.getLogger(__name__)

Result = tuple[Any, tuple[int, ...], Any]


@dataclass(frozen=True)
class Exact:
    value: int


@dataclass(frozen=True)
class Lpm:
    value: int
    prefix_len: int


@dataclass(frozen=True)
class Ternary:
    value: int
    mask: int


@dataclass(frozen=True)
class Range:
    low: int
    high: int


MatchKey = Exact | Lpm | Ternary | Range

_KIND = {"exact": Exact, "lpm": Lpm, "ternary": Ternary, "range": Range}


class TableMirror(Protocol):
    """Receives a table's changes, one call per change (the C engine's copy of the lookup structures)."""

    def exact_put(self, parts: tuple[int, ...], result: Result) -> None: ...
    def exact_del(self, parts: tuple[int, ...]) -> None: ...
    def lpm_put(self, plen: int, parts: tuple[int, ...], result: Result) -> None: ...
    def lpm_del(self, plen: int, parts: tuple[int, ...]) -> None: ...
    def scan_insert(self, at: int, row: tuple[tuple[int, int], ...], result: Result) -> None: ...
    def scan_delete(self, at: int) -> None: ...
    def scan_set(self, at: int, result: Result) -> None: ...
    def clear(self) -> None: ...
    def set_default(self, result: Result) -> None: ...


@dataclass(frozen=True)
class KeySpec:
    name: str
    match_type: str
    width: int


class MatchTable:
    """One table's entries; `kind` is the JSON table match_type (exact, lpm, ternary, range)."""

    def __init__(self, name: str, kind: str, keys: tuple[KeySpec, ...], max_size: int, immutable: bool) -> None:
        self.name = name
        self.kind = kind
        self.keys = keys
        self.max_size = max_size
        self.immutable = immutable
        # canonical key -> (api key tuple, priority, action call, result)
        self.entries: dict[tuple, tuple[tuple[MatchKey, ...], int, Any, Result]] = {}
        # lookup structures read by generated code; mutated in place, never rebound
        self.exact: dict[Any, Result] = {}
        self.lpm: list[tuple[int, dict[Any, Result]]] = []  # (mask, dict) longest prefix first
        self._lpm_by_len: dict[int, dict[Any, Result]] = {}
        self.scan: list[tuple[tuple[tuple[int, int], ...], Result]] = []  # ((a, b) per key), priority order
        # beside `scan`, the sort key of each row: (-priority, installation number), and each entry's key
        self._scan_order: list[tuple[int, int]] = []
        self._scan_key: dict[tuple, tuple[int, int]] = {}
        self._installed = itertools.count()
        self.default: list[Result] = [None]  # type: ignore[list-item]
        self.default_call: Any = None  # the API's ActionCall for the current default
        self._lpm_index = next((i for i, k in enumerate(keys) if k.match_type == "lpm"), -1)
        self._lpm_width = keys[self._lpm_index].width if self._lpm_index >= 0 else 0
        self._needs_priority = kind in ("ternary", "range")
        self._range_flags = tuple(k.match_type == "range" for k in keys)
        self.mirror: TableMirror | None = None

    @property
    def lpm_width(self) -> int:
        return self._lpm_width

    @property
    def range_flags(self) -> tuple[bool, ...]:
        return self._range_flags

    def set_default(self, result: Result, call: Any) -> None:
        if self.mirror is not None:
            self.mirror.set_default(result)
        self.default[0] = result
        self.default_call = call

    # ---- validation -------------------------------------------------------------------------
    def canonical(self, key: tuple[MatchKey, ...], priority: int) -> tuple:
        """Validate a key against the table's declaration; return its identity."""
        if len(key) != len(self.keys):
            raise InvalidEntryError(f"table {self.name!r}: key has {len(key)} fields, the table has {len(self.keys)}")
        if self._needs_priority:
            if priority <= 0:
                raise InvalidEntryError(f"table {self.name!r}: ternary/range tables need a priority > 0")
        elif priority != 0:
            raise InvalidEntryError(
                f"table {self.name!r}: priority {priority} given for a table without ternary/range keys"
            )
        parts: list[Any] = []
        for spec, k in zip(self.keys, key):
            want = _KIND[spec.match_type]
            if not isinstance(k, want):
                raise InvalidEntryError(
                    f"table {self.name!r}: key field {spec.name!r} is {spec.match_type}, got {type(k).__name__}"
                )
            top = (1 << spec.width) - 1
            if isinstance(k, Exact):
                _fits(self.name, spec, k.value)
                parts.append(k.value)
            elif isinstance(k, Lpm):
                _fits(self.name, spec, k.value)
                if not 0 <= k.prefix_len <= spec.width:
                    raise InvalidEntryError(
                        f"table {self.name!r}: prefix length {k.prefix_len} of {spec.name!r} outside 0..{spec.width}"
                    )
                mask = _prefix_mask(k.prefix_len, spec.width)
                if k.value & ~mask & top:
                    raise InvalidEntryError(
                        f"table {self.name!r}: {spec.name!r} value {k.value:#x} "
                        f"has bits beyond its /{k.prefix_len} prefix"
                    )
                parts.append((k.value, k.prefix_len))
            elif isinstance(k, Ternary):
                _fits(self.name, spec, k.value)
                _fits(self.name, spec, k.mask)
                if k.value & ~k.mask:
                    raise InvalidEntryError(
                        f"table {self.name!r}: {spec.name!r} value {k.value:#x} has bits outside mask {k.mask:#x}"
                    )
                parts.append((k.value, k.mask))
            else:
                _fits(self.name, spec, k.low)
                _fits(self.name, spec, k.high)
                if k.low > k.high:
                    raise InvalidEntryError(
                        f"table {self.name!r}: range of {spec.name!r} has low {k.low} > high {k.high}"
                    )
                parts.append((k.low, k.high))
        return (tuple(parts), priority)

    # ---- mutation ---------------------------------------------------------------------------
    def insert(self, key: tuple[MatchKey, ...], priority: int, call: Any, result: Result, const: bool = False) -> None:
        if self.immutable and not const:
            raise InvalidEntryError(f"table {self.name!r} has const entries in the program; it cannot be changed")
        ident = self.canonical(key, priority)
        if ident in self.entries:
            raise EntryExistsError(f"table {self.name!r}: an entry with this key{_prio(priority)} exists")
        if len(self.entries) >= self.max_size:
            raise TableFullError(f"table {self.name!r} is full ({self.max_size} entries)")
        self._add(ident, result)  # first: a mirror that fails leaves no entry behind
        self.entries[ident] = (key, priority, call, result)

    def modify(self, key: tuple[MatchKey, ...], priority: int, call: Any, result: Result) -> None:
        if self.immutable:
            raise InvalidEntryError(f"table {self.name!r} has const entries in the program; it cannot be changed")
        ident = self.canonical(key, priority)
        if ident not in self.entries:
            raise EntryNotFoundError(f"table {self.name!r}: no entry with this key{_prio(priority)}")
        # in place, one change: the entry is never absent between the old result and the new one
        parts, _ = ident
        if self.kind == "exact":
            if self.mirror is not None:
                self.mirror.exact_put(parts, result)
            self.exact[parts[0] if len(parts) == 1 else parts] = result
        elif self.kind == "lpm":
            plen, k, flat = self._lpm_key(parts)
            if self.mirror is not None:
                self.mirror.lpm_put(plen, flat, result)
            self._lpm_by_len[plen][k] = result
        else:  # same key and priority: the row keeps its place, only its result changes
            i = self._scan_index(ident)
            if self.mirror is not None:
                self.mirror.scan_set(i, result)
            self.scan[i] = (self.scan[i][0], result)
        self.entries[ident] = (key, priority, call, result)

    def delete(self, key: tuple[MatchKey, ...], priority: int) -> None:
        if self.immutable:
            raise InvalidEntryError(f"table {self.name!r} has const entries in the program; it cannot be changed")
        ident = self.canonical(key, priority)
        if ident not in self.entries:
            raise EntryNotFoundError(f"table {self.name!r}: no entry with this key{_prio(priority)}")
        self._remove(ident)
        del self.entries[ident]

    def clear(self) -> None:
        if self.immutable:
            raise InvalidEntryError(f"table {self.name!r} has const entries in the program; it cannot be changed")
        if self.mirror is not None:
            self.mirror.clear()
        self.entries.clear()
        self.exact.clear()
        self.lpm.clear()
        self._lpm_by_len.clear()
        self._clear_scan()

    def _clear_scan(self) -> None:
        self.scan.clear()
        self._scan_order.clear()
        self._scan_key.clear()

    # ---- lookup structures --------------------------------------------------------------------
    def _lpm_key(self, parts: tuple) -> tuple[int, Any, tuple[int, ...]]:
        """(prefix length, the dict key, the flat key: every part a value) of an lpm table's entry."""
        i = self._lpm_index
        value, plen = parts[i]
        flat = parts[:i] + (value,) + parts[i + 1 :]
        return plen, flat[0] if len(flat) == 1 else flat, flat

    def _add(self, ident: tuple, result: Result) -> None:
        parts, priority = ident
        if self.kind == "exact":
            if self.mirror is not None:
                self.mirror.exact_put(parts, result)
            self.exact[parts[0] if len(parts) == 1 else parts] = result
        elif self.kind == "lpm":
            plen, k, flat = self._lpm_key(parts)
            if self.mirror is not None:
                self.mirror.lpm_put(plen, flat, result)
            d = self._lpm_by_len.get(plen)
            if d is None:
                d = self._lpm_by_len[plen] = {}
                self._rebuild_lpm_list()
            d[k] = result
        else:
            order = (-priority, next(self._installed))
            i = bisect.bisect_right(self._scan_order, order)
            row = self._matcher(parts)
            if self.mirror is not None:
                self.mirror.scan_insert(i, row, result)
            self._scan_order.insert(i, order)
            self.scan.insert(i, (row, result))
            self._scan_key[ident] = order

    def _scan_index(self, ident: tuple) -> int:
        return bisect.bisect_left(self._scan_order, self._scan_key[ident])

    def _remove(self, ident: tuple) -> None:
        parts, priority = ident
        if self.kind == "exact":
            if self.mirror is not None:
                self.mirror.exact_del(parts)
            self.exact.pop(parts[0] if len(parts) == 1 else parts, None)
        elif self.kind == "lpm":
            plen, k, flat = self._lpm_key(parts)
            if self.mirror is not None:
                self.mirror.lpm_del(plen, flat)
            d = self._lpm_by_len.get(plen, {})
            d.pop(k, None)
            if not d:
                self._lpm_by_len.pop(plen, None)
                self._rebuild_lpm_list()
        else:
            i = self._scan_index(ident)
            if self.mirror is not None:
                self.mirror.scan_delete(i)
            del self._scan_order[i]
            del self.scan[i]
            del self._scan_key[ident]

    def _rebuild_lpm_list(self) -> None:
        self.lpm[:] = [
            (_prefix_mask(plen, self._lpm_width), self._lpm_by_len[plen])
            for plen in sorted(self._lpm_by_len, reverse=True)
        ]

    def _matcher(self, parts: tuple) -> tuple[tuple[int, int], ...]:
        """One scan row: (value, mask) per exact/lpm/ternary key part, (low, high) per range part."""
        matcher = []
        for spec, p in zip(self.keys, parts):
            if spec.match_type == "exact":
                matcher.append((p, (1 << spec.width) - 1))
            elif spec.match_type == "lpm":
                matcher.append((p[0], _prefix_mask(p[1], spec.width)))
            else:
                matcher.append((p[0], p[1]))
        return tuple(matcher)

    def scan_lookup(self, values: tuple[int, ...]) -> Result | None:
        """Ternary/range match: the first entry in priority order whose every key part matches."""
        kinds = self._range_flags
        for matcher, result in self.scan:
            for kind, (a, b), v in zip(kinds, matcher, values):
                if kind:  # range
                    if not a <= v <= b:
                        break
                elif v & b != a:
                    break
            else:
                return result
        return None


def _prefix_mask(plen: int, width: int) -> int:
    return ((1 << plen) - 1) << (width - plen) if plen else 0


def _fits(table: str, spec: KeySpec, value: int) -> None:
    if not isinstance(value, int) or value < 0 or value >> spec.width:
        raise InvalidEntryError(
            f"table {table!r}: value {value!r} does not fit key field {spec.name!r} (bit<{spec.width}>)"
        )


def _prio(priority: int) -> str:
    return f" and priority {priority}" if priority else ""
