"""Ring all-reduce over UDP: the host baseline the in-network worker is measured against.

Reduce-scatter then all-gather (Patarasuk and Yuan's bandwidth-optimal ring, as
NCCL and Horovod run it): the tensor is cut into one segment per rank, and in
2(n-1) steps each rank sends one segment to its right neighbour, adding (first
n-1 steps) or storing (last n-1 steps) what it receives from its left.  Each
segment travels in MTU-sized chunks and every chunk moves on to the next step
as soon as it arrives, so the steps are pipelined over the ring rather than run
in lock step.  Sums are float32; each segment's sum is computed by one rank and
then copied, so every rank ends with bit-identical results.  With
``wire="bfloat16"`` the values cross the network as bfloat16 (2 bytes, as NCCL
all-reduces bf16 gradients): each partial sum is rounded to bfloat16 before it
is sent and widened back to float32 to be added to.

Loss recovery is hosts.reliable's, shared with the other host methods:
batched selective acknowledgements, a window of unacknowledged packets to the
right neighbour, resends on the adapted timeout, duplicates re-acknowledged and
ignored.  Step t of the ring is the stream's tag.  A rank's result is complete
when it received everything (that moment is the all-reduce's end); it returns
once its own packets are acknowledged too, and keeps answering late copies
while it waits for the next call (``service``).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from hosts.bf16 import round_bf16
from hosts.collective import HostCollective, OrderedConfig
from hosts.coordination import Group
from hosts.reliable import (  # noqa: F401  (re-exported: the ring's wire format is the layer's)
    DATA_HDR,
    FRAME_OVERHEAD,
    WIRE_BYTES,
    Exchange,
    TransferTimeoutError,
    chunk_count,
    elements_per_packet,
)

LOG = logging.getLogger(__name__)

DEFAULT_PORT = 16712
RingTimeoutError = TransferTimeoutError  # the ring's name for the layer's timeout (callers catch either)


@dataclass(frozen=True)
class RingConfig(OrderedConfig):
    """One rank's view of the ring: order = ring positions (default: rank order)."""

    @property
    def ring(self) -> tuple[int, ...]:
        return self.positions


def topology_order(groups: Sequence[Hashable]) -> tuple[int, ...]:
    """Ring order keeping ranks of one group (e.g. one edge switch) next to each other.

    groups[rank] names the rank's group; groups keep the order in which they
    first appear, ranks keep their order within a group.  Like NCCL's rank
    reordering, this makes all but one hop per group cross the edge switch only.
    """
    first: dict[Hashable, int] = {}
    for g in groups:
        first.setdefault(g, len(first))
    return tuple(sorted(range(len(groups)), key=lambda r: (first[groups[r]], r)))


def segment_bounds(n_elements: int, n_segments: int) -> np.ndarray:
    """Start index of each segment plus the end: sizes differ by at most one."""
    return np.array([n_elements * i // n_segments for i in range(n_segments + 1)], dtype=np.int64)


class RingSchedule:
    """Which segment a ring position receives at each step, and where each chunk lies.

    Reduce-scatter steps 0..n-2 receive segment (pos-1-step) mod n and add to it
    (the sum of that segment is complete at step n-2, on this rank); all-gather
    steps n-1..2n-3 receive segment (pos-(step-(n-1))) mod n, already summed.
    Shared by the ring and by hier's ring among the leaders.
    """

    def __init__(self, elements: int, n: int, pos: int, per: int) -> None:
        self.n, self.pos, self.per = n, pos, per
        self.bounds = segment_bounds(elements, n)
        self.last_step = 2 * n - 3

    def seg_recv(self, step: int) -> int:
        n, pos = self.n, self.pos
        return (pos - 1 - step) % n if step <= n - 2 else (pos - (step - (n - 1))) % n

    def seg_len(self, seg: int) -> int:
        return int(self.bounds[seg + 1] - self.bounds[seg])

    def chunks(self, seg: int) -> int:
        return chunk_count(self.seg_len(seg), self.per)

    def span(self, seg: int, chunk: int) -> slice:
        lo = int(self.bounds[seg]) + chunk * self.per
        return slice(lo, min(lo + self.per, int(self.bounds[seg + 1])))


class RingAllreduce(HostCollective):
    """allreduce(tensor) -> summed tensor over a ring of UDP sockets."""

    name = "ring"

    def __init__(self, config: RingConfig, group: Group | None = None, sock: socket.socket | None = None) -> None:
        super().__init__(config, group, sock)
        ring = config.ring
        self.pos = ring.index(config.rank)
        n = config.size
        self.right_rank = ring[(self.pos + 1) % n]
        self.left_rank = ring[(self.pos - 1) % n]
        self.right = config.peers[self.right_rank]
        self.left = config.peers[self.left_rank]

    def _run(self, acc: np.ndarray, call: int) -> Exchange:
        n = self.cfg.size
        sched = RingSchedule(acc.size, n, self.pos, self.cfg.per_packet)
        bf16 = self.cfg.wire == "bfloat16"
        right, last_step, per = self.right_rank, sched.last_step, sched.per
        # per step: where the received segment starts and ends (the hot path looks these up, nothing more)
        lo_of = [int(sched.bounds[sched.seg_recv(t)]) for t in range(last_step + 1)]
        hi_of = [int(sched.bounds[sched.seg_recv(t) + 1]) for t in range(last_step + 1)]
        owner_step = n - 2

        def on_data(_src: int, step: int, chunk: int, data: np.ndarray) -> None:
            lo = lo_of[step] + chunk * per
            where = slice(lo, min(lo + per, hi_of[step]))
            if step <= owner_step:
                acc[where] += data
                if bf16 and step == owner_step:
                    # This rank owns the segment's sum: round it as the others will receive it,
                    # so every rank ends with the same values.
                    acc[where] = round_bf16(acc[where])
            else:
                acc[where] = data
            if step < last_step:
                ex.send(right, step + 1, chunk, acc[where])

        ex = Exchange(self.endpoint, call, on_data)
        for step in range(last_step + 1):
            ex.expect(self.left_rank, step, hi_of[step] - lo_of[step])
        seg0 = self.pos % n  # step 0 sends this rank's own segment
        for c in range(sched.chunks(seg0)):
            ex.send(right, 0, c, acc[sched.span(seg0, c)])
        ex.run()
        return ex
