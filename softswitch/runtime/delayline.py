"""Propagation delay inside the switch: this kernel has no netem (nor fq's earliest departure time), so
a link's delay is held where the link meets a switch.

A link of one-way delay d gets it once per direction: a switch holds every frame it sends for d
(egress delay of the port), and a port whose other end is a host (which has no delay stage) also holds
every frame it receives for d (ingress delay). So switch-switch links are delayed by the sending switch
and host links by the switch in both directions. Frames of one port and direction keep their order
(one delay per port and direction, ties broken by arrival). The port loop waits on the next due frame
with its epoll timeout: no thread per frame, no sleeping.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

MAX_DELAY_S = 10.0


class DelaySpecError(ValueError):
    """A delay option that is not PORT=MS with a sane value."""


@dataclass(frozen=True)
class PortDelays:
    """Seconds each port holds a frame: `egress` before sending it, `ingress` before processing it."""

    egress: Mapping[int, float] = field(default_factory=dict)
    ingress: Mapping[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for kind, table in (("egress", self.egress), ("ingress", self.ingress)):
            for port, d in table.items():
                if not isinstance(port, int) or port < 0:
                    raise DelaySpecError(f"{kind} delay: port {port!r} is not a port number")
                if not (isinstance(d, (int, float)) and math.isfinite(d) and 0 <= d <= MAX_DELAY_S):
                    raise DelaySpecError(f"{kind} delay of port {port}: {d!r} s outside 0..{MAX_DELAY_S:g} s")

    @property
    def any(self) -> bool:
        return any(self.egress.values()) or any(self.ingress.values())


def parse_delay(text: str) -> tuple[int, float]:
    """'3=2.5' -> (3, 0.0025): a port and its delay in ms, as `--egress-delay` / `--ingress-delay` take it."""
    port_text, sep, ms_text = text.partition("=")
    if not sep or not port_text.strip().isdigit():
        raise DelaySpecError(f"delay {text!r} is not PORT=MS (e.g. 1=5)")
    try:
        ms = float(ms_text)
    except ValueError:
        raise DelaySpecError(f"delay {text!r}: {ms_text!r} is not a number of milliseconds") from None
    if not math.isfinite(ms) or not 0 <= ms <= MAX_DELAY_S * 1000:
        raise DelaySpecError(f"delay {text!r}: {ms_text} ms outside 0..{MAX_DELAY_S * 1000:g} ms")
    return int(port_text), ms / 1000.0


INGRESS, EGRESS = 0, 1


class DelayLine:
    """Frames waiting for their time: (due, kind, port, frame), released in due order."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int, bytes]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, due: float, kind: int, port: int, frame: bytes) -> None:
        heapq.heappush(self._heap, (due, next(self._seq), kind, port, frame))

    def next_due(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[tuple[int, int, bytes]]:
        """Every frame due by `now`, oldest first, as (kind, port, frame)."""
        out = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            _due, _seq, kind, port, frame = heapq.heappop(heap)
            out.append((kind, port, frame))
        return out
