"""One build per key however many threads ask at once (softswitch.compiler.once), and the switches using it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from softswitch import SoftSwitch
from softswitch.compiler import codegen, compilecache
from softswitch.compiler.once import SharedBuilds

PROGRAMS = Path(__file__).parent / "programs"
IN = b"\x05\x07\x01\x02\x00\x00\x00\x00\x00\x09pl"


def _together(n: int, fn) -> list:
    """Run fn in n threads released at the same moment; their results (or exceptions) in order."""
    start = threading.Barrier(n)
    out: list = [None] * n

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = fn()
        except Exception as ex:  # noqa: BLE001 - handed back to the test
            out[i] = ex

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a caller never got its value"
    return out


def test_concurrent_misses_build_once_and_share_the_value() -> None:
    cache: SharedBuilds[object] = SharedBuilds()
    calls: list[int] = []

    def build() -> object:
        calls.append(1)
        time.sleep(0.3)  # hold the build open so that every other thread arrives while it runs
        return object()

    got = _together(8, lambda: cache.get("k", build))
    assert len(calls) == 1
    assert all(g is got[0] for g in got)
    assert cache.get("k", build) is got[0] and len(calls) == 1


def test_a_failed_build_is_retried_by_each_waiter_and_raised_to_each() -> None:
    cache: SharedBuilds[int] = SharedBuilds()
    calls: list[int] = []

    def build() -> int:
        calls.append(1)
        n = len(calls)
        time.sleep(0.2)  # the others arrive while it runs and wait for it, then build in turn
        raise ValueError(f"bad program #{n}")

    got = _together(4, lambda: cache.get("k", build))
    assert all(isinstance(g, ValueError) for g in got)
    # each caller its own build and exception: none is handed another's failure, none hangs
    assert len(calls) == 4 and len({str(g) for g in got}) == 4
    assert len(cache) == 0
    assert cache.get("k", lambda: 7) == 7  # nothing of the failures is left behind


def test_least_recently_used_values_are_evicted_and_invalid_ones_rebuilt() -> None:
    cache: SharedBuilds[str] = SharedBuilds(keep=2)
    cache.get("a", lambda: "A")
    cache.get("b", lambda: "B")
    cache.get("a", lambda: "stale")  # a is now the most recently used
    cache.get("c", lambda: "C")
    assert len(cache) == 2
    assert cache.get("b", lambda: "B2") == "B2"  # b was evicted
    assert cache.get("a", lambda: "A2", valid=lambda v: v != "A") == "A2"
    cache.clear()
    assert len(cache) == 0


@pytest.mark.parametrize("engine", ["python", "c"])
def test_switches_loading_one_program_at_once_compile_it_once(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the controller's parallel pipeline push does to the switches of one process."""
    compilecache._MEMORY.clear()

    def counting(module, name: str) -> list[int]:
        calls: list[int] = []
        real = getattr(module, name)

        def counted(*a, **kw):
            calls.append(1)
            time.sleep(0.3)  # as long as p4ina.json's build feels to the other threads: they all arrive meanwhile
            return real(*a, **kw)

        monkeypatch.setattr(module, name, counted)
        return calls

    calls = counting(codegen, "compile_program")
    emits: list[int] = []
    if engine == "c":
        from native import cbuild
        from softswitch.compiler import cemit
        from softswitch.runtime import cengine

        if cbuild.toolchain() is None:
            pytest.skip("no C compiler: the C engine is not available")
        monkeypatch.setattr(cengine, "_PROGRAMS", type(cengine._PROGRAMS)())  # as a new process starts
        emits = counting(cemit, "emit")
    raw = (PROGRAMS / "arith.json").read_bytes()
    switches = [SoftSwitch(name=f"s{i}", engine=engine) for i in range(6)]
    it = iter(switches)
    lock = threading.Lock()

    def load() -> SoftSwitch:
        with lock:
            sw = next(it)
        sw.load_program(raw)
        return sw

    got = _together(len(switches), load)
    assert not [g for g in got if isinstance(g, Exception)]
    assert len(calls) == 1
    assert len(emits) == (1 if engine == "c" else 0)
    assert {sw.engine for sw in switches} == {engine}
    outs = [sw.process_packet(1, IN) for sw in switches]
    assert all(o == outs[0] for o in outs)
    switches[0].register_write("ArithIngress.acc", 2, 99)  # shared program, state of its own
    assert switches[1].register_read("ArithIngress.acc", 2) != 99
