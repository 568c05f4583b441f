"""Hierarchical all-reduce (NCCL-style): reduce under each edge switch, ring among the leaders, broadcast back.

What NCCL and Horovod do across servers, and the seed's "local reduce, leader
ring, broadcast": the ranks under one edge switch form a group (hosts.ring's
groups, i.e. AgentConfig.groups); its lowest rank is the group's leader. Three
phases, pipelined chunk by chunk rather than run one after the other:

1. every member sends its whole tensor to its leader, which adds the
   members' copies of a chunk (in rank order, float32) to its own as soon as
   all of them have arrived;
2. the leaders run the ring all-reduce among themselves (the ring's schedule,
   hosts.ring.RingSchedule, with one segment per leader), a chunk entering the
   ring as soon as its group's sum is complete (a neighbour's partial sum that
   arrives earlier waits for it);
3. a leader sends each chunk of the result to its members as soon as it holds
   it (when it computed the segment's sum itself, or received it in the ring's
   all-gather).

Only one rank (a leader) computes each element's sum, and everyone else copies
it, so every rank ends with bit-identical float32 results; the order of the
additions is fixed, so a rerun gives the same bits too. One group is reduce +
broadcast; singleton groups are the ring. Per rank, a member sends its tensor
once and receives it once; a leader's downlink carries (members) x the tensor:
the price of the hierarchy on a network whose edge links are no faster than
the rest (NCCL's intra-server phase runs over NVLink instead).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from hosts.bf16 import round_bf16
from hosts.collective import HostCollective
from hosts.coordination import Group
from hosts.reliable import MAX_TAG, CollectiveConfig, Exchange
from hosts.ring import RingSchedule

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class HierLayout:
    """Groups in the order they first appear (the leader ring's order), each led by its lowest rank."""

    group_of: tuple[int, ...]  # rank -> group index
    leaders: tuple[int, ...]  # group index -> leader rank
    members: tuple[tuple[int, ...], ...]  # group index -> the other ranks of the group, ascending

    @property
    def size(self) -> int:
        return len(self.group_of)


def hier_layout(groups: Sequence[Hashable]) -> HierLayout:
    """groups[rank] names the rank's group (its edge switch), as hosts.ring.topology_order takes them."""
    index: dict[Hashable, int] = {}
    ranks: list[list[int]] = []
    for r, g in enumerate(groups):
        if g not in index:
            index[g] = len(ranks)
            ranks.append([])
        ranks[index[g]].append(r)
    return HierLayout(group_of=tuple(index[g] for g in groups), leaders=tuple(rs[0] for rs in ranks),
                      members=tuple(tuple(rs[1:]) for rs in ranks))


@dataclass(frozen=True)
class HierConfig(CollectiveConfig):
    """groups[rank] = the rank's edge switch (any hashable name); leaders are the groups' lowest ranks."""

    groups: tuple[Hashable, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.groups) != len(self.peers):
            raise ValueError(f"groups names {len(self.groups)} ranks' groups for {len(self.peers)} peers")
        if 4 * len(set(self.groups)) > MAX_TAG + 1:
            raise ValueError(f"{len(set(self.groups))} groups: the 16-bit tags hold at most {(MAX_TAG + 1) // 4}")

    @property
    def layout(self) -> HierLayout:
        return hier_layout(self.groups)


class HierAllreduce(HostCollective):
    """allreduce(tensor) -> summed tensor: members -> leader, ring of leaders, leader -> members."""

    name = "hier"

    def __init__(self, config: HierConfig, group: Group | None = None, sock: socket.socket | None = None) -> None:
        super().__init__(config, group, sock)
        self.layout = config.layout
        self.group_index = self.layout.group_of[config.rank]
        self.leader = self.layout.leaders[self.group_index]

    # Tags: UP + s (member -> leader, segment s), RING + step (leader ring), DOWN + s (leader -> member).
    def _tags(self) -> tuple[int, int, int]:
        n_leaders = len(self.layout.leaders)
        return 0, n_leaders, 3 * n_leaders

    def _run(self, acc: np.ndarray, call: int) -> Exchange:
        lay, g = self.layout, self.group_index
        sched = RingSchedule(acc.size, len(lay.leaders), g, self.cfg.per_packet)
        if self.cfg.rank == self.leader:
            return self._lead(acc, call, sched)
        return self._follow(acc, call, sched)

    def _follow(self, acc: np.ndarray, call: int, sched: RingSchedule) -> Exchange:
        """A member: the tensor up to the leader, the result back."""
        up, _ring, down = self._tags()
        leader, span = self.leader, sched.span

        def on_data(_src: int, tag: int, chunk: int, data: np.ndarray) -> None:
            acc[span(tag - down, chunk)] = data

        ex = Exchange(self.endpoint, call, on_data)
        for s in range(sched.n):
            ex.expect(leader, down + s, sched.seg_len(s))
        # Chunk by chunk, segments in the order the leader's ring consumes them: its own segment (step 0)
        # first, then the segment each reduce-scatter step adds to, so every step can start early.
        order = [(self.group_index - t) % sched.n for t in range(sched.n)]
        for c in range(max(sched.chunks(s) for s in order)):
            for s in order:
                if c < sched.chunks(s):
                    ex.send(leader, up + s, c, acc[span(s, c)])
        ex.run()
        return ex

    def _lead(self, acc: np.ndarray, call: int, sched: RingSchedule) -> Exchange:
        """A leader: sum the group's chunks, run them through the leaders' ring, hand the results down."""
        up, ring, down = self._tags()
        lay, g, n_ring = self.layout, self.group_index, sched.n
        members = lay.members[g]
        right, left = lay.leaders[(g + 1) % n_ring], lay.leaders[(g - 1) % n_ring]
        bf16 = self.cfg.wire == "bfloat16"
        span, seg_recv, last_step, owner_step = sched.span, sched.seg_recv, sched.last_step, n_ring - 2
        parts = {m: np.empty(acc.size, dtype=np.float32) for m in members}  # the members' contributions
        need = [np.full(sched.chunks(s), len(members), dtype=np.int32) for s in range(n_ring)]
        ready = [np.zeros(sched.chunks(s), dtype=bool) for s in range(n_ring)]  # the group's sum is in acc
        early: dict[tuple[int, int], list[tuple[int, np.ndarray]]] = {}  # ring data waiting for the group's sum

        def result(s: int, c: int, where: slice, owner: bool) -> None:
            """acc[where] holds the final sum: round it if this rank made it (bf16), then send it down."""
            if bf16 and owner:
                acc[where] = round_bf16(acc[where])  # as the others receive it: identical everywhere
            for m in members:
                ex.send(m, down + s, c, acc[where])

        def group_sum(s: int, c: int) -> None:
            where = span(s, c)
            for m in members:  # rank order: the same additions every run
                acc[where] += parts[m][where]
            ready[s][c] = True
            if n_ring == 1:
                result(s, c, where, owner=True)
                return
            if s == g:  # this leader's own segment enters the ring at step 0
                ex.send(right, ring, c, acc[where])
            for step, data in early.pop((s, c), ()):
                ring_step(step, s, c, data)

        def ring_step(step: int, s: int, c: int, data: np.ndarray) -> None:
            where = span(s, c)
            if step <= owner_step:
                acc[where] += data
                if step == owner_step:
                    result(s, c, where, owner=True)
            else:
                acc[where] = data
                result(s, c, where, owner=False)
            if step < last_step:
                ex.send(right, ring + step + 1, c, acc[where])

        def on_data(src: int, tag: int, chunk: int, data: np.ndarray) -> None:
            if tag < ring:  # a member's contribution
                s = tag - up
                parts[src][span(s, chunk)] = data
                need[s][chunk] -= 1
                if need[s][chunk] == 0:
                    group_sum(s, chunk)
            else:
                step = tag - ring
                s = seg_recv(step)
                if ready[s][chunk]:
                    ring_step(step, s, chunk, data)
                else:  # the left leader is ahead of this group's members: keep a copy until the sum is here
                    early.setdefault((s, chunk), []).append((step, data.copy()))

        ex = Exchange(self.endpoint, call, on_data)
        for m in members:
            for s in range(n_ring):
                ex.expect(m, up + s, sched.seg_len(s))
        if n_ring > 1:
            for step in range(last_step + 1):
                ex.expect(left, ring + step, sched.seg_len(seg_recv(step)))
        if not members:  # a group of one: its sum is its input, ready now
            for s in range(n_ring):
                for c in range(sched.chunks(s)):
                    group_sum(s, c)
        ex.run()
        return ex
