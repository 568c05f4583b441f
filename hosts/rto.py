"""Retransmission timeout from measured round trips (RFC 6298), shared by the worker and the ring.

A fixed timeout is either too short on a loaded emulation host (every slow
answer becomes a spurious retransmission, which adds load) or too long on an
idle one.  Samples come only from packets sent once (Karn's rule); a packet's
own timeout doubles with each retransmission of it, and the shared timer
backs off on expiry, so a congested switch or peer is not flooded.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RtoEstimator:
    initial_s: float
    min_s: float = 0.002
    max_s: float = 2.0
    srtt: float | None = None
    rttvar: float = 0.0
    _calm_until: float = 0.0

    def __post_init__(self) -> None:
        if not 0 < self.min_s <= self.max_s:
            raise ValueError(f"need 0 < min_s <= max_s, got {self.min_s}, {self.max_s}")
        self.rto = min(max(self.initial_s, self.min_s), self.max_s)

    def sample(self, rtt: float) -> None:
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.rto = min(max(self.srtt + 4 * self.rttvar, self.min_s), self.max_s)

    def expired(self, now: float) -> None:
        """A packet timed out: back the timer off (RFC 6298 5.5), at most once per timeout period.

        Once per period because a burst of a whole window timing out together is
        one event (the peer or switch stalled), not a hundred.
        """
        if now >= self._calm_until:
            self.rto = min(self.rto * 2, self.max_s)
            self._calm_until = now + self.rto

    @property
    def calm_until(self) -> float:
        """Until when a further expiry does not back the timer off again."""
        return self._calm_until

    def restore(self, rto: float, rttvar: float, calm_until: float, srtt: float | None) -> None:
        """Take the timer's state from where another loop ran it (the in-network worker's C loop keeps its own
        copy while it streams, and hands it back)."""
        self.rto, self.rttvar, self._calm_until, self.srtt = rto, rttvar, calm_until, srtt

    def timeout(self, sends: int) -> float:
        """Timeout for a packet already sent `sends` times (1 = first transmission)."""
        return min(self.rto * (1 << min(sends - 1, 16)), self.max_s)
