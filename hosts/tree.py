"""Tree all-reduce for small messages: NCCL's double binary tree, pipelined by chunks.

A ring needs 2(n-1) dependent hops; a tree reduces up and broadcasts down in
2 log2(n), which is what matters when per-hop latency, not bandwidth,
dominates (small tensors, many ranks). One binary tree alone would halve the
bandwidth (leaves send, interior nodes send twice what they receive), so, as
NCCL does since 2.4 (after Sanders, Speck and Träff's two-tree algorithms),
two trees each carry half of the tensor, built so that every rank is an
interior node in at most one of them: each rank then sends and receives about
twice the tensor in all, as in a ring.

The trees, over positions 0..n-1 of the topology order (hosts.ring.topology_order,
so neighbours in the order share an edge switch):

- tree 0 is the in-order binary tree on q = position + 1: q's level is its
  number of trailing zero bits, a node of level k has children q -/+ 2^(k-1),
  and a node whose parent would be beyond n hangs from the nearest existing
  ancestor instead. Interior nodes are the odd positions, leaves the even
  ones; the root is the largest power of two <= n (minus one); depth <= log2 n.
- tree 1 is tree 0 shifted by one position (position p takes node (p-1) mod n),
  so its interior nodes are the even positions (NCCL mirrors instead when n is
  even; the shift works for both parities: position 0 is a leaf in both trees
  when n is odd, every other rank interior in exactly one).

Within each tree the chunks (MTU-sized) are pipelined: a leaf sends its half
up at once; an interior node adds its children's copies of a chunk to its own
(children in a fixed order, float32) as soon as both arrived and sends the sum
up; the root's sum is the result, sent down; interior nodes pass each result
chunk on to their children as it arrives. One rank (the root) computes each
element's sum and everyone else copies it: bit-identical results everywhere.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass

import numpy as np

from hosts.bf16 import round_bf16
from hosts.collective import HostCollective, OrderedConfig
from hosts.coordination import Group
from hosts.reliable import Exchange
from hosts.ring import segment_bounds

LOG = logging.getLogger(__name__)

NO_PARENT = -1


@dataclass(frozen=True)
class BinaryTree:
    """A rooted tree over positions 0..n-1: parent[p] (NO_PARENT at the root), children[p] ascending."""

    parent: tuple[int, ...]

    @property
    def size(self) -> int:
        return len(self.parent)

    @property
    def root(self) -> int:
        return self.parent.index(NO_PARENT)

    @property
    def children(self) -> tuple[tuple[int, ...], ...]:
        kids: list[list[int]] = [[] for _ in self.parent]
        for p, up in enumerate(self.parent):
            if up != NO_PARENT:
                kids[up].append(p)
        return tuple(tuple(k) for k in kids)

    def path_to_root(self, p: int) -> list[int]:
        """p, its parent, ..., the root."""
        path = [p]
        while self.parent[path[-1]] != NO_PARENT:
            path.append(self.parent[path[-1]])
        return path

    @property
    def depth(self) -> int:
        """Edges on the longest root-to-node path."""
        return max(len(self.path_to_root(p)) - 1 for p in range(self.size))

    def interior(self) -> frozenset[int]:
        return frozenset(up for up in self.parent if up != NO_PARENT)


def binary_tree(n: int) -> BinaryTree:
    """The in-order binary tree on positions 0..n-1 (see the module docstring)."""
    if n < 1:
        raise ValueError(f"a tree needs at least one node, got {n}")
    top = 1 << (n.bit_length() - 1)  # the root's q: the largest power of two <= n
    parent = [NO_PARENT] * n
    for p in range(n):
        q = p + 1
        level = (q & -q).bit_length() - 1
        while q != top:
            # q is a left child (bit level+1 clear) of q + 2^level, else a right child of q - 2^level
            up = q + (1 << level) if not (q >> (level + 1)) & 1 else q - (1 << level)
            if up <= n:
                parent[p] = up - 1
                break
            q, level = up, level + 1  # that parent does not exist: hang from its own parent
    return BinaryTree(tuple(parent))


def double_binary_tree(n: int) -> tuple[BinaryTree, BinaryTree]:
    """Two trees over positions 0..n-1; every position is interior in at most one of them."""
    first = binary_tree(n)
    # position p takes node (p - 1) mod n of the first tree, so node i's parent j becomes position j + 1
    shifted = tuple(
        NO_PARENT if first.parent[(p - 1) % n] == NO_PARENT else (first.parent[(p - 1) % n] + 1) % n for p in range(n)
    )
    return first, BinaryTree(shifted)


@dataclass(frozen=True)
class TreeConfig(OrderedConfig):
    """order = the ranks in topology order (tree positions); default: rank order."""


class TreeAllreduce(HostCollective):
    """allreduce(tensor) -> summed tensor over a double binary tree of UDP sockets."""

    name = "tree"

    def __init__(self, config: TreeConfig, group: Group | None = None, sock: socket.socket | None = None) -> None:
        super().__init__(config, group, sock)
        self.order = config.positions
        self.pos = self.order.index(config.rank)
        self.trees = double_binary_tree(config.size)

    def _run(self, acc: np.ndarray, call: int) -> Exchange:
        order, pos, per, bf16 = self.order, self.pos, self.cfg.per_packet, self.cfg.wire == "bfloat16"
        halves = segment_bounds(acc.size, 2)  # tree k carries acc[halves[k]:halves[k+1]]
        lo = [int(halves[0]), int(halves[1])]
        hi = [int(halves[1]), int(halves[2])]
        parent = [order[t.parent[pos]] if t.parent[pos] != NO_PARENT else NO_PARENT for t in self.trees]
        kids = [tuple(order[c] for c in t.children[pos]) for t in self.trees]
        parts = [{kid: np.empty(hi[k] - lo[k], dtype=np.float32) for kid in kids[k]} for k in range(2)]
        need = [np.full(-(-(hi[k] - lo[k]) // per), len(kids[k]), dtype=np.int32) for k in range(2)]

        # Tags: 2k = up tree k (towards the root), 2k + 1 = down tree k.
        def on_data(src: int, tag: int, chunk: int, data: np.ndarray) -> None:
            k = tag >> 1
            start = lo[k] + chunk * per
            where = slice(start, min(start + per, hi[k]))
            if tag & 1:  # the result, from the parent: keep it and pass it on
                acc[where] = data
                for kid in kids[k]:
                    ex.send(kid, tag, chunk, acc[where])
                return
            local = slice(chunk * per, where.stop - lo[k])
            parts[k][src][local] = data
            need[k][chunk] -= 1
            if need[k][chunk]:
                return
            for kid in kids[k]:  # a fixed order: the same additions every run
                acc[where] += parts[k][kid][local]
            if parent[k] != NO_PARENT:
                ex.send(parent[k], tag, chunk, acc[where])
                return
            if bf16:
                acc[where] = round_bf16(acc[where])  # the root's sum, as the others receive it
            for kid in kids[k]:
                ex.send(kid, tag + 1, chunk, acc[where])

        ex = Exchange(self.endpoint, call, on_data)
        for k in range(2):
            for kid in kids[k]:
                ex.expect(kid, 2 * k, hi[k] - lo[k])
            if parent[k] != NO_PARENT:
                ex.expect(parent[k], 2 * k + 1, hi[k] - lo[k])
                if not kids[k]:  # a leaf: its half goes up at once
                    ex.send_stream(parent[k], 2 * k, acc[lo[k] : hi[k]])
        ex.run()
        return ex
