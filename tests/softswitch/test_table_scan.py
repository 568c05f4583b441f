"""Ternary and range tables keep their scan structure up to date entry by entry (issue 14, item 17).

Every insert used to rebuild the whole priority-ordered scan list, so a bulk load of n entries
cost O(n^2) (145 CPU-s for 10k entries; `python -m bench softswitch` reports the figure). The
structure is now updated in place; these tests check that no insert rebuilds it and that lookups
stay those of a brute-force model under random inserts, modifies and deletes.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from softswitch.errors import EntryExistsError, EntryNotFoundError
from softswitch.runtime.tables import Exact, KeySpec, MatchTable, Range, Ternary

KEYS = (KeySpec("t", "ternary", 8), KeySpec("r", "range", 8), KeySpec("e", "exact", 4))


def table() -> MatchTable:
    return MatchTable("t", "ternary", KEYS, 100_000, immutable=False)


def test_each_row_is_built_once_per_insert(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    original = MatchTable._matcher

    def counting(self: MatchTable, parts: tuple) -> Any:
        nonlocal calls
        calls += 1
        return original(self, parts)

    monkeypatch.setattr(MatchTable, "_matcher", counting)
    t = table()
    for i in range(300):
        t.insert((Ternary(i & 0xFF, 0xFF), Range(0, 255), Exact(i >> 8)), 1 + i % 7, None, ("r", i))
    for i in range(0, 300, 3):
        t.modify((Ternary(i & 0xFF, 0xFF), Range(0, 255), Exact(i >> 8)), 1 + i % 7, None, ("m", i))
    for i in range(0, 300, 2):
        t.delete((Ternary(i & 0xFF, 0xFF), Range(0, 255), Exact(i >> 8)), 1 + i % 7)
    assert calls == 300  # one row per insert; modify and delete build none (an insert used to rebuild all)
    assert len(t.scan) == 150


def reference(entries: dict[tuple[Any, int], tuple[int, Any]], values: tuple[int, int, int]) -> Any:
    """Highest priority wins; among equal priorities, the entry installed first."""
    best = None
    for (key, prio), (seq, result) in entries.items():
        (tv, tm), (lo, hi), ev = key
        if values[0] & tm == tv and lo <= values[1] <= hi and values[2] == ev:
            if best is None or (-prio, seq) < best[0]:
                best = ((-prio, seq), result)
    return None if best is None else best[1]


@pytest.mark.parametrize("seed", range(5))
def test_lookups_match_a_brute_force_model(seed: int) -> None:
    rng = random.Random(seed)
    t = table()
    model: dict[tuple[Any, int], tuple[int, Any]] = {}
    seq = 0
    for step in range(600):
        mask = rng.choice([0xFF, 0xF0, 0x0F, 0x00])
        key = (
            (rng.randrange(256) & mask, mask),
            tuple(sorted((rng.randrange(256), rng.randrange(256)))),
            rng.randrange(2),
        )
        prio = rng.randint(1, 5)
        api = (Ternary(*key[0]), Range(*key[1]), Exact(key[2]))
        op = rng.random()
        if op < 0.6:
            try:
                t.insert(api, prio, None, ("i", step))
                model[(key, prio)] = (seq, ("i", step))
                seq += 1
            except EntryExistsError:
                assert (key, prio) in model
        elif op < 0.8:
            try:
                t.modify(api, prio, None, ("m", step))
                model[(key, prio)] = (model[(key, prio)][0], ("m", step))
            except EntryNotFoundError:
                assert (key, prio) not in model
        else:
            try:
                t.delete(api, prio)
                del model[(key, prio)]
            except EntryNotFoundError:
                assert (key, prio) not in model
        if step % 20 == 0:
            for _ in range(30):
                values = (rng.randrange(256), rng.randrange(256), rng.randrange(2))
                assert t.scan_lookup(values) == reference(model, values)
    assert len(t.scan) == len(model)
