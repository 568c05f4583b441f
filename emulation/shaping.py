"""Link shaping with tc, without hidden credit: HTB at the link rate with a one-frame burst.

Mininet's TCLink gives HTB a 15 kB burst: at 1 Mbit/s that is 120 ms of free
credit, more than a small all-reduce takes, so short runs beat the link rate
and "bytes / rate" stops being a lower bound. Here every interface gets

    root HTB, one class: rate = ceil = the link rate, burst = cburst = one
    full Ethernet frame (1514 B), quantum = one frame (no warnings at low rates)
    a pfifo under it, queue_pkts long

so a link never sends faster than its rate over any window longer than one
frame. Commands are argument lists (no shell); `run(*cmd)` executes them in the
interface's namespace.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

FRAME_BYTES = 1514  # the largest frame on these links (1500 B MTU + Ethernet header)
DEFAULT_QUEUE_PKTS = 1000  # veth's txqueuelen


class ShapingError(ValueError):
    pass


class LinkShapeError(ValueError):
    """A bandwidth, delay or loss that tc cannot apply."""


@dataclass(frozen=True)
class LinkShape:
    """What every link does, both directions (None leaves it as it is): rate, propagation delay, random loss."""

    bw_mbps: float | None = None
    delay_ms: float | None = None
    loss_pct: float | None = None
    max_queue: int | None = None

    def __post_init__(self) -> None:
        if self.bw_mbps is not None and not 0 < self.bw_mbps <= 1000:
            raise LinkShapeError(f"link bandwidth {self.bw_mbps} Mbit/s outside (0, 1000]")
        if self.delay_ms is not None and not 0 <= self.delay_ms <= 10_000:
            raise LinkShapeError(f"link delay {self.delay_ms} ms outside 0..10000")
        if self.loss_pct is not None and not 0 <= self.loss_pct < 100:
            raise LinkShapeError(f"link loss {self.loss_pct}% outside [0, 100)")
        if self.max_queue is not None and self.max_queue < 1:
            raise LinkShapeError(f"max queue {self.max_queue} packets must be >= 1")

    @property
    def shaped(self) -> bool:
        return any(v for v in (self.bw_mbps, self.delay_ms, self.loss_pct))

    def shaping(self) -> Shaping | None:
        """The HTB settings of one interface, or None when the rate is not limited."""
        if not self.bw_mbps:
            return None
        return Shaping(self.bw_mbps * 1e6, queue_pkts=self.max_queue or DEFAULT_QUEUE_PKTS)


@dataclass(frozen=True)
class Shaping:
    rate_bps: float
    burst_bytes: int = FRAME_BYTES
    queue_pkts: int = DEFAULT_QUEUE_PKTS

    def __post_init__(self) -> None:
        if not 0 < self.rate_bps <= 100e9:
            raise ShapingError(f"rate {self.rate_bps} bit/s outside (0, 100 Gbit/s]")
        if self.burst_bytes < FRAME_BYTES:
            raise ShapingError(
                f"burst {self.burst_bytes} B is smaller than one frame ({FRAME_BYTES} B): HTB would stall"
            )
        if self.queue_pkts < 1:
            raise ShapingError(f"queue of {self.queue_pkts} packets")

    @property
    def credit_bytes(self) -> int:
        """The most a link can send beyond rate x time: HTB dequeues a frame whenever its bucket is not
        negative and charges it afterwards, so the burst plus one more full frame."""
        return self.burst_bytes + FRAME_BYTES

    def commands(self, dev: str) -> list[list[str]]:
        rate = f"{int(round(self.rate_bps))}bit"
        burst = str(self.burst_bytes)
        return [
            ["tc", "qdisc", "replace", "dev", dev, "root", "handle", "5:", "htb", "default", "1"],
            [
                "tc",
                "class",
                "add",
                "dev",
                dev,
                "parent",
                "5:",
                "classid",
                "5:1",
                "htb",
                "rate",
                rate,
                "ceil",
                rate,
                "burst",
                burst,
                "cburst",
                burst,
                "quantum",
                str(FRAME_BYTES),
            ],
            [
                "tc",
                "qdisc",
                "add",
                "dev",
                dev,
                "parent",
                "5:1",
                "handle",
                "10:",
                "pfifo",
                "limit",
                str(self.queue_pkts),
            ],
        ]

    def apply(self, run: Callable[..., object], dev: str) -> None:
        for cmd in self.commands(dev):
            run(*cmd)


def read_class_config(show: str) -> dict[str, str]:
    """The rate/ceil/burst/cburst words of `tc class show` output (for tests and the results' config)."""
    words = show.split()
    out = {}
    for key in ("rate", "ceil", "burst", "cburst"):
        if key in words:
            out[key] = words[words.index(key) + 1]
    return out
