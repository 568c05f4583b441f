"""What one all-reduce cost, reported the same way by every method."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class AllreduceStats:
    """Figures of one all-reduce on one worker.

    Times are on hosts.clock (shared by all processes): `t_start` when the
    worker began (it got the barrier's release), `t_done` when its float32
    result was complete in its output array. `parts` splits the worker's time
    into what it did: e.g. agree (until the first exponent was agreed),
    quantize, dequantize; the rest is the network. goodput is the tensor's
    float32 bytes over the latency ("algorithm bandwidth" in nccl-tests'
    terms), so methods are compared on what the application gets, not on what
    they put on the wire (bytes_sent, which counts every frame with its
    Ethernet, IPv4 and UDP headers, acks and retransmissions included).
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
    fast_retransmissions: int = (
        0  # of the retransmissions, those sent early (a later round answered first), not on a timeout
    )
    corrupt: int = 0  # results whose checksum did not match their lanes (dropped; the chunk was fetched again)
    exponent_rounds: int = 0  # in-network: header-only rounds that agreed the first exponents (0: speculated)
    missed_exponents: int = 0  # in-network: chunks sent again because the speculated exponent was not the agreed one
    t_start: float = 0.0
    t_done: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def goodput_bps(self) -> float:
        return self.elements * 4 * 8 / self.latency_s if self.latency_s > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = asdict(self)
        out["goodput_bps"] = self.goodput_bps
        return out
