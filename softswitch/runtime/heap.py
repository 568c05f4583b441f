"""The switch process's garbage collector around its one big allocation, the compiled program.

Compiling p4ina.json leaves about half a million objects that live as long as the program (the IR, its pools
and tables). Python's cyclic collector walks every one of them in each full collection, which costs seconds
during the compile and again at exit, where the emulation's SIGTERM grace only just covers twenty switches
(docs/results-history.md has the measurements). Two remedies, the usual ones for a server with a large long-lived heap:
no collection while the program is built (`paused`), and, in a switch process, the built program moved out of
the collector's sight once it is loaded (`settle`: one collection, then gc.freeze()).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
from collections.abc import Iterator

LOG = logging.getLogger(__name__)

_LOCK = threading.Lock()
_pauses = 0
_was_enabled = False


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No automatic collection inside (nested and concurrent uses count; the last one out restores it)."""
    global _pauses, _was_enabled
    with _LOCK:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _LOCK:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()


def settle() -> tuple[int, int]:
    """Collect what building the program left unreachable, then freeze every object still alive, so that later
    collections (and the one at exit) skip the program. For a process that lives for its program (the switch
    process); a program replaced later is freed by reference counting, its cycles are not reclaimed.
    Returns (objects collected, objects frozen)."""
    t0 = time.perf_counter()
    found = gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    LOG.debug("heap: %d unreachable objects collected, %d frozen, in %.2f s", found, frozen, time.perf_counter() - t0)
    return found, frozen


_timer: threading.Timer | None = None


def settle_soon(delay_s: float = 0.5) -> threading.Timer:
    """settle() once, `delay_s` after the last call: a process of many switches that all get a program at once
    (emulation.localnet) collects once, not once per switch. Returns the pending timer."""
    global _timer
    with _LOCK:
        if _timer is not None:
            _timer.cancel()
        _timer = threading.Timer(delay_s, settle)
        _timer.daemon = True  # a pending settle never holds the process at exit
        _timer.start()
        return _timer
