"""A small in-memory cache that builds each entry once, however many threads ask for it at the same time.

The switches of one process (a test's fat-tree, `emulation.localnet`, the controller benchmark) receive
their pipeline from the controller all at once, each on its own gRPC thread. A plain look-up-then-build
cache let every one of them miss and compile the same program: twenty compiles of p4ina.json where one
suffices. Here the
first thread to miss builds; the others wait for its result. If that build fails, each waiter tries
again itself, so a failure is reported to every caller as its own exception, never as a shared one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class SharedBuilds(Generic[V]):
    """Least-recently-used map of at most `keep` built values, with one build in flight per key."""

    def __init__(self, keep: int = 4) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        self._values: OrderedDict[Hashable, V] = OrderedDict()
        self._building: dict[Hashable, threading.Event] = {}

    def get(self, key: Hashable, build: Callable[[], V], valid: Callable[[V], bool] = lambda _v: True) -> V:
        """The value for `key`: cached (if `valid`), awaited from a build in flight, or built here."""
        while True:
            with self._lock:
                hit = self._values.get(key)
                if hit is not None and valid(hit):
                    self._values.move_to_end(key)
                    return hit
                pending = self._building.get(key)
                if pending is None:
                    done = self._building[key] = threading.Event()
                    break
            pending.wait()  # then look again: built (a hit), failed or evicted (build it here)
        try:
            value = build()
            with self._lock:
                self._values[key] = value
                self._values.move_to_end(key)
                while len(self._values) > self.keep:
                    self._values.popitem(last=False)
            return value
        finally:
            with self._lock:
                del self._building[key]
            done.set()

    def clear(self) -> None:
        """Forget every built value (as a new process would start); builds in flight still finish."""
        with self._lock:
            self._values.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)
