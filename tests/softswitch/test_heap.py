"""The collector pause around program builds and the freeze of a loaded program (softswitch.runtime.heap)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from softswitch.runtime import heap


@pytest.fixture
def collector() -> Iterator[None]:
    """Whatever a test does to the collector, the rest of the session gets it back as it was."""
    was = gc.isenabled()
    try:
        yield
    finally:
        gc.unfreeze()
        if was:
            gc.enable()
        else:
            gc.disable()


def test_paused_nests_and_restores(collector: None) -> None:
    gc.enable()
    with heap.paused():
        assert not gc.isenabled()
        with heap.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()


def test_paused_keeps_a_collector_that_was_off_off(collector: None) -> None:
    gc.disable()
    with heap.paused():
        pass
    assert not gc.isenabled()


def test_overlapping_pauses_of_two_threads_restore_once_both_are_out(collector: None) -> None:
    gc.enable()
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with heap.paused():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    with heap.paused():
        t.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # the other thread still builds
    leave.set()
    t.join(10)
    assert gc.isenabled()


def test_settle_collects_cycles_and_freezes_the_rest(collector: None) -> None:
    gc.unfreeze()
    for _ in range(100):  # unreachable cycles: only the collector frees them
        a: list = []
        a.append(a)
    del a
    kept = [[] for _ in range(1000)]  # alive: tracked containers that a freeze takes out of the collector's walks
    collected, frozen = heap.settle()
    assert collected >= 100
    assert frozen == gc.get_freeze_count() >= len(kept)


def test_settle_soon_coalesces_calls_into_one_settle(collector: None, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(heap, "settle", lambda: calls.append(1) or (0, 0))
    # twenty switches loading one after another; 2 s so that a stalled CI machine does not let the first fire
    timers = [heap.settle_soon(2.0) for _ in range(20)]
    for t in timers:
        t.join(10)
    assert calls == [1]
    assert all(t.finished.is_set() for t in timers)
