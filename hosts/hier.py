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

Two things keep both directions of a leader's link busy (without them hier ran
well above its wire bound on the emulation; docs/results-history.md has the runs):

- the tensor goes through the phases in pieces of `piece_chunks` chunks per
  leader, one after another, as NCCL's ring loops over slices of its buffer, so
  the first pieces' results go down while later pieces still come up;
- a member keeps at most `member_window` chunks sent beyond the results it
  holds, as an NCCL sender waits for a free buffer slot. Without that limit a
  member's upload, one greedy flow, takes most of its leader's downlink until
  it is done, starving the ring there; the results then come late and go down
  the leader's uplink alone, with its downlink half idle.

Only one rank (a leader) computes each element's sum, and everyone else copies
it, so every rank ends with bit-identical float32 results; the order of the
additions is fixed, so a rerun gives the same bits too. One group is reduce +
broadcast; singleton groups are the ring. Per rank, a member sends its tensor
once and receives it once; a leader's downlink carries (members) x the tensor:
the price of the hierarchy on a network whose edge links are no faster than
the rest (NCCL's intra-server phase runs over NVLink instead).
"""

from __future__ import annotations

import socket
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from hosts.bf16 import round_bf16
from hosts.collective import HostCollective
from hosts.coordination import Group
from hosts.reliable import MAX_TAG, CollectiveConfig, Exchange
from hosts.ring import RingSchedule, segment_bounds

# A piece's tags, per leader: up + s (member -> leader, segment s), ring + step (2 x leaders - 2 steps of the
# leaders' ring, from ring = leaders), down + s (leader -> member, from 3 x leaders).
TAGS_PER_LEADER = 4


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
    return HierLayout(
        group_of=tuple(index[g] for g in groups),
        leaders=tuple(rs[0] for rs in ranks),
        members=tuple(tuple(rs[1:]) for rs in ranks),
    )


@dataclass(frozen=True)
class HierConfig(CollectiveConfig):
    """groups[rank] = the rank's edge switch (any hashable name); leaders are the groups' lowest ranks."""

    groups: tuple[Hashable, ...] = ()
    # Chunks per leader in one piece of the pipeline (0: the whole tensor is one piece); every rank must use the
    # same piece_chunks and member_window (a mismatch shows as a timeout). Small pieces start the way down
    # early (2 was the best measured: docs/results-history.md). Pieces are cut evenly, so a segment's last chunk
    # may be short.
    piece_chunks: int = 2
    # A member sends a chunk only while it has fewer than member_window chunks sent beyond the results it holds
    # (0: no limit; never fewer than one per leader). It bounds a member's rate by its round trip through the
    # ring, so a network with far more in flight than the emulation's needs more (the runs that chose 16:
    # docs/results-history.md).
    member_window: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.groups) != len(self.peers):
            raise ValueError(f"groups names {len(self.groups)} ranks' groups for {len(self.peers)} peers")
        if TAGS_PER_LEADER * len(set(self.groups)) > MAX_TAG + 1:
            most = (MAX_TAG + 1) // TAGS_PER_LEADER
            raise ValueError(f"{len(set(self.groups))} groups: the 16-bit tags hold at most {most}")
        if self.piece_chunks < 0 or self.member_window < 0:
            raise ValueError(
                f"piece_chunks and member_window must be >= 0 (0: one piece; no limit), got "
                f"{self.piece_chunks} and {self.member_window}"
            )

    @property
    def layout(self) -> HierLayout:
        return hier_layout(self.groups)


class HierAllreduce(HostCollective):
    """allreduce(tensor) -> summed tensor: members -> leader, ring of leaders, leader -> members."""

    name = "hier"
    cfg: HierConfig  # the base class keeps the config it is given: this one's

    def __init__(self, config: HierConfig, group: Group | None = None, sock: socket.socket | None = None) -> None:
        super().__init__(config, group, sock)
        self.layout = config.layout
        self.group_index = self.layout.group_of[config.rank]
        self.leader = self.layout.leaders[self.group_index]

    def _pieces(self, elements: int) -> list[Piece]:
        """The tensor's pieces, in order; each has its own ring schedule and its own 4 x leaders tags."""
        n_ring = len(self.layout.leaders)
        per, width = self.cfg.per_packet, TAGS_PER_LEADER * n_ring
        count = 1
        if self.cfg.piece_chunks:
            count = -(-elements // (n_ring * per * self.cfg.piece_chunks))
        count = max(1, min(count, (MAX_TAG + 1) // width))
        bounds = segment_bounds(elements, count)
        return [
            Piece(
                int(bounds[i]), RingSchedule(int(bounds[i + 1] - bounds[i]), n_ring, self.group_index, per), i * width
            )
            for i in range(count)
        ]

    def _run(self, acc: np.ndarray, call: int) -> Exchange:
        pieces = self._pieces(acc.size)
        if self.cfg.rank == self.leader:
            return self._lead(acc, call, pieces)
        return self._follow(acc, call, pieces)

    def _follow(self, acc: np.ndarray, call: int, pieces: list[Piece]) -> Exchange:
        """A member: the tensor up to the leader, at most `member_window` chunks ahead of the results it holds."""
        leader, n_ring = self.leader, len(self.layout.leaders)
        down, width = 3 * n_ring, TAGS_PER_LEADER * n_ring
        # Chunk by chunk, piece by piece, segments in the order the leader's ring consumes them: its own segment
        # (step 0) first, then the segment each reduce-scatter step adds to, so every step can start early.
        order = [(self.group_index - t) % n_ring for t in range(n_ring)]
        uploads = [
            (piece, s, c)
            for piece in pieces
            for c in range(max(piece.sched.chunks(s) for s in order))
            for s in order
            if c < piece.sched.chunks(s)
        ]
        # At least one chunk per leader: members send the chunks of a row (piece, chunk) in different orders,
        # and a result needs every group's copy, so a window smaller than a row could leave each member waiting
        # on a chunk another has not sent. With a full row allowed, the member furthest behind can always send.
        limit = max(self.cfg.member_window, n_ring) if self.cfg.member_window else len(uploads)
        sent = got = 0

        def top_up() -> None:
            nonlocal sent
            while sent < len(uploads) and sent - got < limit:
                piece, s, c = uploads[sent]
                ex.send(leader, piece.tag + s, c, acc[piece.span(s, c)])
                sent += 1

        def on_data(_src: int, tag: int, chunk: int, data: np.ndarray) -> None:
            nonlocal got
            acc[pieces[tag // width].span(tag % width - down, chunk)] = data
            got += 1
            top_up()

        ex = Exchange(self.endpoint, call, on_data)
        for piece in pieces:
            for s in range(n_ring):
                ex.expect(leader, piece.tag + down + s, piece.sched.seg_len(s))
        top_up()
        ex.run()
        return ex

    def _lead(self, acc: np.ndarray, call: int, pieces: list[Piece]) -> Exchange:
        """A leader: sum the group's chunks, run them through the leaders' ring, hand the results down."""
        lay, g, n_ring = self.layout, self.group_index, len(self.layout.leaders)
        ring, down, width = n_ring, 3 * n_ring, TAGS_PER_LEADER * n_ring
        members = lay.members[g]
        right, left = lay.leaders[(g + 1) % n_ring], lay.leaders[(g - 1) % n_ring]
        bf16 = self.cfg.wire == "bfloat16"
        last_step, owner_step = pieces[0].sched.last_step, n_ring - 2
        parts = {m: np.empty(acc.size, dtype=np.float32) for m in members}  # the members' contributions
        need = [[np.full(p.sched.chunks(s), len(members), dtype=np.int32) for s in range(n_ring)] for p in pieces]
        ready = [[np.zeros(p.sched.chunks(s), dtype=bool) for s in range(n_ring)] for p in pieces]  # sum in acc
        early: dict[tuple[int, int, int], list[tuple[int, np.ndarray]]] = {}  # ring data waiting for the group's sum

        def result(p: int, s: int, c: int, where: slice, owner: bool) -> None:
            """acc[where] holds the final sum: round it if this rank made it (bf16), then send it down."""
            if bf16 and owner:
                acc[where] = round_bf16(acc[where])  # as the others receive it: identical everywhere
            for m in members:
                ex.send(m, pieces[p].tag + down + s, c, acc[where])

        def group_sum(p: int, s: int, c: int) -> None:
            where = pieces[p].span(s, c)
            for m in members:  # rank order: the same additions every run
                acc[where] += parts[m][where]
            ready[p][s][c] = True
            if n_ring == 1:
                result(p, s, c, where, owner=True)
                return
            if s == g:  # this leader's own segment enters the ring at step 0
                ex.send(right, pieces[p].tag + ring, c, acc[where])
            for step, data in early.pop((p, s, c), ()):
                ring_step(p, step, s, c, data)

        def ring_step(p: int, step: int, s: int, c: int, data: np.ndarray) -> None:
            where = pieces[p].span(s, c)
            if step <= owner_step:
                acc[where] += data
                if step == owner_step:
                    result(p, s, c, where, owner=True)
            else:
                acc[where] = data
                result(p, s, c, where, owner=False)
            if step < last_step:
                ex.send(right, pieces[p].tag + ring + step + 1, c, acc[where])

        def on_data(src: int, tag: int, chunk: int, data: np.ndarray) -> None:
            p, kind = divmod(tag, width)
            piece = pieces[p]
            if kind < ring:  # a member's contribution
                s = kind
                parts[src][piece.span(s, chunk)] = data
                need[p][s][chunk] -= 1
                if need[p][s][chunk] == 0:
                    group_sum(p, s, chunk)
            else:
                step = kind - ring
                s = piece.sched.seg_recv(step)
                if ready[p][s][chunk]:
                    ring_step(p, step, s, chunk, data)
                else:  # the left leader is ahead of this group's members: keep a copy until the sum is here
                    early.setdefault((p, s, chunk), []).append((step, data.copy()))

        ex = Exchange(self.endpoint, call, on_data)
        for piece in pieces:
            for m in members:
                for s in range(n_ring):
                    ex.expect(m, piece.tag + s, piece.sched.seg_len(s))
            if n_ring > 1:
                for step in range(last_step + 1):
                    ex.expect(left, piece.tag + ring + step, piece.sched.seg_len(piece.sched.seg_recv(step)))
        if not members:  # a group of one: its sum is its input, ready now
            for p, piece in enumerate(pieces):
                for s in range(n_ring):
                    for c in range(piece.sched.chunks(s)):
                        group_sum(p, s, c)
        ex.run()
        return ex


@dataclass(frozen=True)
class Piece:
    """One slice of the tensor through all three phases: where it starts, its ring schedule, its first tag."""

    start: int
    sched: RingSchedule
    tag: int

    def span(self, seg: int, chunk: int) -> slice:
        where = self.sched.span(seg, chunk)
        return slice(self.start + where.start, self.start + where.stop)
