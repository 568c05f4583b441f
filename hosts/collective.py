"""What every host all-reduce (ring, hier, tree) promises its caller, written once.

The contract, shared with the in-network worker where it applies:
``allreduce(tensor, call=None) -> float32 array`` of the tensor's shape, the
same bits on every rank; inputs must be finite (``NonFiniteError``); `call`
numbers the all-reduce the same on every rank and grows from call to call
(an agent passes its step number and holds the barrier itself, outside the
timing; without it the ranks number their calls and meet at a barrier first);
``last_stats`` says what it cost (hosts.stats, t_start/t_done on hosts.clock);
``service()`` answers late packets between calls, so no rank leaves while a
peer still needs an acknowledgement; ``fileno()`` lets an agent wait on many.

Subclasses only say how data moves: ``_run`` declares the streams of one call
on an ``Exchange`` (hosts.reliable) and reduces chunks as they arrive.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from hosts import clock
from hosts.coordination import Group, same_size
from hosts.quantization import check_finite
from hosts.reliable import CollectiveConfig, Endpoint, Exchange
from hosts.stats import AllreduceStats

LOG = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class OrderedConfig(CollectiveConfig):
    """A collective over the ranks in one order (ring positions, tree positions): default rank order.

    hosts.ring.topology_order gives the order that keeps ranks under one edge
    switch next to each other, so most hops stay under that switch.
    """

    order: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        n = len(self.peers)
        if self.order is not None and sorted(self.order) != list(range(n)):
            raise ValueError(f"order {self.order} is not a permutation of 0..{n - 1}")

    @property
    def positions(self) -> tuple[int, ...]:
        """positions[i] = the rank at position i."""
        return self.order if self.order is not None else tuple(range(self.size))


class HostCollective:
    """Base of the host methods: one Endpoint (UDP socket) per method, call ids, barrier, stats."""

    name = "collective"  # the method's name in reports (a bfloat16 wire appends "-bf16")

    def __init__(self, config: CollectiveConfig, group: Group | None = None, sock: socket.socket | None = None) -> None:
        self.cfg = config
        self.group = group
        self.endpoint = Endpoint(config, sock)
        self.calls = 0
        self.last_stats: AllreduceStats | None = None

    @property
    def method(self) -> str:
        return self.name if self.cfg.wire == "float32" else f"{self.name}-bf16"

    @property
    def sock(self) -> socket.socket:
        return self.endpoint.sock

    @property
    def last_call(self) -> int:
        return self.endpoint.last_call

    def fileno(self) -> int:
        return self.endpoint.fileno()

    def service(self) -> None:
        """Answer what arrived between calls (an agent calls this while it waits for its next command)."""
        self.endpoint.service()

    def service_while(self, fn: Callable[[], T]) -> T:
        return self.endpoint.service_while(fn)

    def close(self) -> None:
        self.endpoint.close()

    def barrier(self, tag: str, size: int = 0) -> None:
        """All ranks arrive (with tensors of the same size) before anyone goes on."""
        if self.group is not None:
            group = self.group
            same_size(self.service_while(lambda: group.exchange(tag, [size])), tag)

    def allreduce(self, tensor: np.ndarray, call: int | None = None) -> np.ndarray:
        """The float32 sum over every rank (see the module docstring for `call`)."""
        x = np.asarray(tensor, dtype=np.float32)
        acc = x.ravel().copy()
        self._call(x, call, lambda c: self._run(acc, c))
        return acc.reshape(x.shape)

    def _call(self, x: np.ndarray, call: int | None, run: Callable[[int], Exchange]) -> None:
        """One call's bookkeeping, shared by every collective: the input's check, the barrier when the caller
        holds none, the call id, and the stats of the exchange `run(call)` finished (none for one rank)."""
        t_start = clock.now()
        check_finite(x)  # same contract as the in-network worker
        if call is None:
            self.barrier(f"{self.name}-{self.calls}", x.size)
            t_start = clock.now()
            call = self.last_call + 1
        if call <= self.last_call:
            raise ValueError(f"call {call} does not follow the last call {self.last_call}")
        if call > 0xFFFFFFFF:
            raise ValueError(f"call {call} does not fit the header's 32 bits")
        self.calls += 1
        try:
            if self.cfg.size == 1:
                now = clock.now()
                self.last_stats = AllreduceStats(
                    self.method, x.size, now - t_start, 0, 0, 0, 0, 0, t_start=t_start, t_done=now
                )
            else:
                ex = run(call)
                self.last_stats = self._stats(ex, x.size, t_start)
        finally:
            self.endpoint.last_call = call

    def _run(self, acc: np.ndarray, call: int) -> Exchange:
        """All-reduce acc in place (it holds this rank's input); returns the finished exchange."""
        raise NotImplementedError

    def _stats(self, ex: Exchange, elements: int, t_start: float) -> AllreduceStats:
        done = ex.t_done if ex.t_done is not None else clock.now()
        return AllreduceStats(
            method=self.method,
            elements=elements,
            latency_s=done - t_start,
            packets_sent=ex.sent,
            retransmissions=ex.retransmissions,
            packets_received=ex.packets_received,
            duplicates=ex.duplicates,
            bytes_sent=ex.bytes_sent,
            t_start=t_start,
            t_done=done,
        )
