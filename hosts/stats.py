"""What one all-reduce cost, reported the same way by the in-network worker and the ring."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class AllreduceStats:
    """Figures of one all-reduce on one worker.

    goodput is the tensor's float32 bytes over the latency ("algorithm
    bandwidth" in nccl-tests' terms), so both methods are compared on what the
    application gets, not on what they put on the wire (bytes_sent).
    """

    method: str
    elements: int
    latency_s: float
    packets_sent: int
    retransmissions: int
    packets_received: int
    duplicates: int
    bytes_sent: int
    overflows: int = 0

    @property
    def goodput_bps(self) -> float:
        return self.elements * 4 * 8 / self.latency_s if self.latency_s > 0 else 0.0

    def to_dict(self) -> dict[str, float | int | str]:
        out: dict[str, float | int | str] = asdict(self)
        out["goodput_bps"] = self.goodput_bps
        return out
