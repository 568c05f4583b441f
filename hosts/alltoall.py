"""All-to-all over the host transport: direct (every pair) and two-phase hierarchical (the group, then the rails).

Mixture-of-experts routing moves every rank's tokens to the ranks that hold their experts: rank s cuts its
send buffer of `size` float32 elements into n blocks (hosts.ring.segment_bounds: block d holds elements
bounds[d]..bounds[d+1]) and block d goes to rank d. Rank d ends with n blocks, block s from rank s, all of
the same length (its own segment's): the receive buffer, `n x len(segment d)` elements. Two ways to move them,
on the same reliable datagrams as the ring (hosts.reliable, one stream per pair and phase):

- direct (`AllToAllDirect`): every rank sends its block to every other rank at once, one stream each, in
  shifted order (rank s starts with s+1) so that no rank is everyone's first destination. Per rank the
  network carries (n-1)/n of the buffer each way: the least any all-to-all can, but in n-1 streams of
  size/n, which for the small blocks of expert routing are short, partly filled frames to every rank of
  the cluster (the "mosh pit").
- hierarchical (`AllToAllHier`): ranks are in groups of g (an edge switch, or a server), G groups, and a
  rank's local index j in its group is its rail. Phase 1, inside the group: rank (a, i) sends rank (a, j)
  one stream with every block it has for the ranks of rail j, in group order, the G blocks consolidated
  into full frames. Phase 2, across the fabric along the rails: rank (a, j) sends rank (b, j) one stream
  of the g blocks its group has for it, (a, 0) .. (a, g-1), again consolidated, each frame leaving as soon
  as the phase-1 data it carries is in (the phases are pipelined chunk by chunk). Across the fabric a
  rank talks to G-1 ranks of its own rail instead of n-1, in streams g times longer; on a network whose
  groups are servers, phase 1 runs over NVLink. Where groups sit under one edge switch with no faster way
  inside (the emulation), phase 1 costs (g-1)/g of the buffer on the host links on top of phase 2's
  (G-1)/G: more bytes on the host links than direct, in fewer, fuller frames.
  Groups must all have the same size, so that every rail has a rank in every group.

Every block's contents derive from (source, destination, call's iteration, seed) only (`block`), so the
receiver can rebuild what it should hold and `check` names any block that came from the wrong rank, went
to the wrong one, or was damaged on the way.
"""

from __future__ import annotations

import socket
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from hosts.collective import HostCollective
from hosts.coordination import Group
from hosts.reliable import CollectiveConfig, Exchange, chunk_count
from hosts.ring import segment_bounds

# the streams' tags (each method has its own UDP port: the tags only tell the phases apart)
TAG_DIRECT, TAG_GROUP, TAG_RAIL = 0, 1, 2


def block(src: int, dst: int, elements: int, seed: int = 0, iteration: int = 0) -> np.ndarray:
    """The block rank `src` sends rank `dst`: float32 values that depend on (seed, src, dst, iteration) only,
    so a block from or to another rank, or of another call, differs from it (almost surely everywhere)."""
    rng = np.random.default_rng([seed, src, dst, iteration, 0xA2A])
    return rng.normal(0.0, 1.0 + src, elements).astype(np.float32)


def send_buffer(rank: int, n: int, size: int, seed: int = 0, iteration: int = 0) -> np.ndarray:
    """Rank `rank`'s send buffer: its n blocks, block d (segment d of `size` elements) for rank d."""
    bounds = segment_bounds(size, n)
    return np.concatenate([block(rank, d, int(bounds[d + 1] - bounds[d]), seed, iteration) for d in range(n)])


def expected(rank: int, n: int, size: int, seed: int = 0, iteration: int = 0) -> np.ndarray:
    """What rank `rank` must hold afterwards: block s from every rank s, in rank order."""
    bounds = segment_bounds(size, n)
    length = int(bounds[rank + 1] - bounds[rank])
    return np.concatenate([block(s, rank, length, seed, iteration) for s in range(n)])


def received_elements(rank: int, n: int, size: int) -> int:
    bounds = segment_bounds(size, n)
    return n * int(bounds[rank + 1] - bounds[rank])


@dataclass(frozen=True)
class BlockCheck:
    """Every received block against what its source sent: which sources' blocks are wrong, and how far off."""

    blocks: int
    wrong: tuple[int, ...]  # source ranks whose block differs from the one they sent
    max_abs_error: float

    @property
    def ok(self) -> bool:
        return not self.wrong


def check(result: np.ndarray, rank: int, n: int, size: int, seed: int = 0, iteration: int = 0) -> BlockCheck:
    """Compare every block of `result` (bit for bit) with the block its source sent this rank."""
    want = expected(rank, n, size, seed, iteration)
    got = np.asarray(result, dtype=np.float32).ravel()
    if got.size != want.size:
        return BlockCheck(n, tuple(range(n)), float("inf"))
    length = want.size // n
    wrong = []
    worst = 0.0
    for s in range(n):
        a, b = got[s * length : (s + 1) * length], want[s * length : (s + 1) * length]
        if not np.array_equal(a.view(np.uint32), b.view(np.uint32)):
            wrong.append(s)
            with np.errstate(invalid="ignore", over="ignore"):
                diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
            worst = max(worst, float(np.nanmax(diff)) if np.isfinite(diff).any() else float("inf"))
    return BlockCheck(n, tuple(wrong), worst)


def split_window(window: int, elements: dict[int, int], size: int) -> list[int]:
    """Per rank, the datagrams it may have in flight: a rank keeps `window` in flight in all, as a ring rank
    does with its one neighbour (n-1 full windows would queue on its link), shared among its destinations in
    proportion to the elements each gets, at least one each. Shared evenly, a2a-hier's few long streams inside
    the group would get the in-flight share of the many short ones along the rails, and fall behind them."""
    total = sum(elements.values())
    out = [0] * size
    for dst, count in elements.items():
        out[dst] = max(1, round(window * count / total)) if total else 1
    return out


class AllToAll(HostCollective):
    """alltoall(send buffer) -> receive buffer (see the module docstring), on the host methods' contract."""

    def alltoall(self, send: np.ndarray, call: int | None = None) -> np.ndarray:
        """Block d of `send` to rank d; returns block s of every rank s. `call` as for allreduce."""
        x = np.asarray(send, dtype=np.float32).ravel()
        n, me = self.cfg.size, self.cfg.rank
        bounds = segment_bounds(x.size, n)
        length = int(bounds[me + 1] - bounds[me])
        out = np.empty(n * length, dtype=np.float32)
        out[me * length : (me + 1) * length] = x[bounds[me] : bounds[me + 1]]  # its own block stays
        self._call(x, call, lambda c: self._exchange(x, out, bounds, c))
        return out

    def allreduce(self, tensor: np.ndarray, call: int | None = None) -> np.ndarray:
        raise TypeError(f"{self.name} is an all-to-all: call alltoall()")

    def _exchange(self, x: np.ndarray, out: np.ndarray, bounds: np.ndarray, call: int) -> Exchange:
        raise NotImplementedError


class AllToAllDirect(AllToAll):
    """Every pair exchanges its block: n-1 streams out and in per rank, all at once."""

    name = "a2a-direct"

    def _exchange(self, x: np.ndarray, out: np.ndarray, bounds: np.ndarray, call: int) -> Exchange:
        n, me, per = self.cfg.size, self.cfg.rank, self.cfg.per_packet
        length = int(bounds[me + 1] - bounds[me])

        def on_data(src: int, _tag: int, chunk: int, data: np.ndarray) -> None:
            lo = src * length + chunk * per
            out[lo : lo + data.size] = data

        ex = Exchange(self.endpoint, call, on_data)
        ex.windows = split_window(self.cfg.window, {d: int(bounds[d + 1] - bounds[d]) for d in range(n) if d != me}, n)
        for k in range(1, n):
            src, dst = (me - k) % n, (me + k) % n
            ex.expect(src, TAG_DIRECT, length)
            ex.send_stream(dst, TAG_DIRECT, x[bounds[dst] : bounds[dst + 1]])
        ex.run()
        return ex


@dataclass(frozen=True)
class RailLayout:
    """groups[a] = the ranks of group a in rank order; a rank's index in its group is its rail."""

    groups: tuple[tuple[int, ...], ...]

    @property
    def width(self) -> int:
        return len(self.groups[0])


def rail_layout(groups: Sequence[Hashable]) -> RailLayout:
    """groups[rank] names the rank's group (its edge switch or server), in the order groups first appear."""
    index: dict[Hashable, int] = {}
    ranks: list[list[int]] = []
    for r, g in enumerate(groups):
        if g not in index:
            index[g] = len(ranks)
            ranks.append([])
        ranks[index[g]].append(r)
    sizes = sorted({len(x) for x in ranks})
    if len(sizes) > 1:
        raise ValueError(
            f"a2a-hier needs groups of one size (every rail a rank in every group), got sizes {sizes}: "
            "choose a host count that fills whole groups"
        )
    return RailLayout(tuple(tuple(x) for x in ranks))


@dataclass(frozen=True)
class AllToAllConfig(CollectiveConfig):
    """groups[rank] = the rank's group (hier only; direct ignores it). `window` is the rank's in flight in all
    (split_window shares it among its destinations), where the other host methods' is per peer."""

    groups: tuple[Hashable, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.groups and len(self.groups) != len(self.peers):
            raise ValueError(f"groups names {len(self.groups)} ranks' groups for {len(self.peers)} peers")


class AllToAllHier(AllToAll):
    """Phase 1 inside the group (what goes to rail j, to the group's rank on rail j), phase 2 along the rails."""

    name = "a2a-hier"
    cfg: AllToAllConfig

    def __init__(self, config: AllToAllConfig, group: Group | None = None, sock: socket.socket | None = None) -> None:
        if not config.groups:
            raise ValueError("a2a-hier needs every rank's group (groups)")
        super().__init__(config, group, sock)
        self.layout = rail_layout(config.groups)
        self.where = {r: (a, i) for a, members in enumerate(self.layout.groups) for i, r in enumerate(members)}

    def _exchange(self, x: np.ndarray, out: np.ndarray, bounds: np.ndarray, call: int) -> Exchange:
        lay, me, per, where = self.layout, self.cfg.rank, self.cfg.per_packet, self.where
        groups, g = lay.groups, lay.width
        a, j = where[me]
        big = len(groups)
        mine = int(bounds[me + 1] - bounds[me])

        def seg(d: int) -> slice:
            return slice(int(bounds[d]), int(bounds[d + 1]))

        def blen(d: int) -> int:
            return int(bounds[d + 1] - bounds[d])

        # phase 2 out: to (b, j) for every other group b, the g blocks (a, 0..g-1) -> (b, j), in that order
        rail_out = {b: np.empty(g * blen(groups[b][j]), dtype=np.float32) for b in range(big) if b != a}
        missing: dict[int, np.ndarray] = {}  # per stream: elements each chunk still waits for (phase 1)
        for b, buf in rail_out.items():
            d, length = groups[b][j], blen(groups[b][j])
            buf[j * length : (j + 1) * length] = x[seg(d)]  # this rank's own block for (b, j)
            chunks = chunk_count(buf.size, per)
            starts = np.arange(chunks) * per
            sizes = np.minimum(starts + per, buf.size) - starts
            own = np.clip(np.minimum(starts + per, (j + 1) * length) - np.maximum(starts, j * length), 0, None)
            missing[b] = sizes - own
        # phase 1 in: from (a, i), the blocks (a, i) -> (b, j) for every group b, in group order
        offsets = np.concatenate([[0], np.cumsum([blen(groups[b][j]) for b in range(big)])]).astype(np.int64)

        def send_ready(b: int, c0: int, c1: int) -> None:
            buf, left = rail_out[b], missing[b]
            for c in range(c0, c1):
                if left[c] == 0:
                    left[c] = -1  # sent
                    ex.send(groups[b][j], TAG_RAIL, c, buf[c * per : (c + 1) * per])

        def on_data(src: int, tag: int, chunk: int, data: np.ndarray) -> None:
            lo = chunk * per
            if tag == TAG_RAIL:  # from (b, j): blocks (b, 0..g-1) -> me
                b = where[src][0]
                # stream element e is block (b, e // mine) at offset e % mine
                e, k = lo, 0
                while k < data.size:
                    i, off = divmod(e, mine)
                    take = min(mine - off, data.size - k)
                    s = groups[b][i]
                    out[s * mine + off : s * mine + off + take] = data[k : k + take]
                    e, k = e + take, k + take
                return
            i = where[src][1]  # from (a, i): blocks for (0, j), (1, j), ... in turn
            e, k = lo, 0
            while k < data.size:
                b = int(np.searchsorted(offsets, e, side="right")) - 1
                off = e - int(offsets[b])
                length = int(offsets[b + 1] - offsets[b])
                take = min(length - off, data.size - k)
                if b == a:  # a block for this rank itself: final
                    out[src * mine + off : src * mine + off + take] = data[k : k + take]
                else:
                    buf, left = rail_out[b], missing[b]
                    p0 = i * length + off
                    buf[p0 : p0 + take] = data[k : k + take]
                    c0, c1 = p0 // per, (p0 + take - 1) // per + 1
                    for c in range(c0, c1):
                        left[c] -= min(p0 + take, (c + 1) * per) - max(p0, c * per)
                    send_ready(b, c0, c1)
                e, k = e + take, k + take

        ex = Exchange(self.endpoint, call, on_data)
        share = {groups[a][i]: int(offsets[-1]) for i in range(g) if i != j}  # phase 1: G blocks each
        share.update({groups[b][j]: buf.size for b, buf in rail_out.items()})  # phase 2: g blocks each
        ex.windows = split_window(self.cfg.window, share, self.cfg.size)
        for i in range(1, g):  # phase 1, shifted order inside the group
            peer = groups[a][(j + i) % g]
            src = groups[a][(j - i) % g]
            ex.expect(src, TAG_GROUP, int(offsets[-1]))
            p = where[peer][1]
            ex.send_stream(peer, TAG_GROUP, np.concatenate([x[seg(groups[b][p])] for b in range(big)]))
        for k in range(1, big):  # phase 2: expect from every other group's rank on this rail
            ex.expect(groups[(a - k) % big][j], TAG_RAIL, g * mine)
        for k in range(1, big):  # what is ready now (chunks of this rank's own block alone, or g = 1)
            b = (a + k) % big
            send_ready(b, 0, len(missing[b]))
        ex.run()
        return ex
