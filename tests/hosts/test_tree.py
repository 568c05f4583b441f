"""Double binary tree all-reduce: the trees' shape (pure), then sums over loopback UDP with ranks as threads."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from hosts.bf16 import round_bf16
from hosts.reliable import TransferTimeoutError
from hosts.tree import NO_PARENT, TreeAllreduce, TreeConfig, binary_tree, double_binary_tree
from tests.hosts.collective_rig import check, make_ranks, normal_inputs, run


def make_trees(n: int, loss: float = 0.0, order: tuple[int, ...] | None = None, **cfg: Any) -> list[TreeAllreduce]:
    cfg.setdefault("timeout_s", 0.01)

    def build(r: int, peers: Any, group: Any, sock: Any) -> TreeAllreduce:
        return TreeAllreduce(TreeConfig(rank=r, peers=peers, order=order, **cfg), group, sock)

    return make_ranks(n, build, loss)  # type: ignore[return-value]


@pytest.mark.parametrize("n", range(1, 65))
def test_trees_are_binary_shallow_and_complementary(n: int) -> None:
    trees = double_binary_tree(n)
    for t in trees:
        assert t.size == n and t.parent.count(NO_PARENT) == 1
        assert all(len(k) <= 2 for k in t.children)
        assert all(t.root in t.path_to_root(p) for p in range(n))  # connected, no cycles
        assert t.depth <= max(0, math.floor(math.log2(n)))
    assert not trees[0].interior() & trees[1].interior()  # interior in at most one tree
    if n > 2:
        assert trees[0].root != trees[1].root


def test_binary_tree_small_cases() -> None:
    assert binary_tree(1).parent == (NO_PARENT,)
    assert binary_tree(2).parent == (1, NO_PARENT)
    assert binary_tree(3).parent == (1, NO_PARENT, 1)
    # q = 1..6: root 4; 2 -> 4, 6 -> 4; 1, 3 -> 2; 5 -> 6
    assert binary_tree(6).parent == (1, 3, 1, NO_PARENT, 5, 3)
    # q = 1..5: 6 does not exist, so 5 hangs from 4
    assert binary_tree(5).parent == (1, 3, 1, NO_PARENT, 3)
    with pytest.raises(ValueError):
        binary_tree(0)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("size", [1, 7, 1000, 50_000])
def test_sums(n: int, size: int) -> None:
    inputs = normal_inputs(n, size, seed=size)
    trees = make_trees(n)
    check(inputs, run(trees, inputs))
    stats = trees[0].last_stats
    assert stats is not None and stats.method == "tree" and stats.elements == size
    assert stats.t_start < stats.t_done and stats.latency_s == pytest.approx(stats.t_done - stats.t_start)


def test_topology_order_and_repeated_calls_of_a_shaped_tensor() -> None:
    inputs = [np.full((30, 40), r + 1.0, dtype=np.float32) for r in range(5)]
    results = run(make_trees(5, order=(0, 3, 1, 4, 2)), inputs, calls=3)
    for res in results:
        assert np.array_equal(res, np.full((30, 40), 15.0, dtype=np.float32))


def test_bytes_like_a_ring() -> None:
    """Two trees, each half the tensor: every rank sends about twice the tensor, as a ring would."""
    n, size = 6, 40_000
    trees = make_trees(n, timeout_s=0.5)  # no spurious resends on a busy machine
    run(trees, normal_inputs(n, size))
    for t in trees:
        st = t.last_stats
        assert st is not None
        first_copies = st.bytes_sent - st.retransmissions * 1514
        assert first_copies < 2 * size * 4 * 1.1  # 2x the tensor, headers and acks on top


@pytest.mark.parametrize("n", [3, 6])
def test_loss_is_recovered(n: int) -> None:
    inputs = normal_inputs(n, 20_000, seed=7)
    trees = make_trees(n, loss=0.05)
    check(inputs, run(trees, inputs, calls=2))
    assert sum(t.sock.dropped for t in trees) > 0  # type: ignore[attr-defined]
    assert sum(t.last_stats.retransmissions for t in trees if t.last_stats) > 0


def test_bf16_on_the_wire() -> None:
    n = 5
    inputs = normal_inputs(n, 5000)
    trees = make_trees(n, wire="bfloat16")
    results = run(trees, inputs)
    check(inputs, results, wire="bfloat16")
    assert np.array_equal(round_bf16(results[0]), results[0])
    assert trees[0].last_stats is not None and trees[0].last_stats.method == "tree-bf16"


def test_silent_peer_times_out() -> None:
    trees = make_trees(3, max_retries=5)
    trees[1].close()  # rank 1 is interior in tree 0: rank 0 waits for its data or its acks
    trees[0].group = None  # no barrier: rank 0 starts alone
    try:
        with pytest.raises(TransferTimeoutError, match="after 5 retransmissions|nothing from rank"):
            trees[0].allreduce(np.ones(10, dtype=np.float32))
    finally:
        trees[0].close()
        trees[2].close()
