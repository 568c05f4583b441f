"""Hierarchical all-reduce (members -> leader, leader ring, leader -> members) over loopback UDP, ranks as threads."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hosts import hier
from hosts.bf16 import round_bf16
from hosts.hier import HierAllreduce, HierConfig, hier_layout
from hosts.reliable import MAX_TAG, TransferTimeoutError
from tests.hosts.collective_rig import check, make_ranks, normal_inputs, run

LAYOUTS = {
    "one group": lambda n: ["e1"] * n,
    "singletons": lambda n: [f"e{r}" for r in range(n)],
    "pairs": lambda n: [f"e{r // 2}" for r in range(n)],
    "uneven, interleaved": lambda n: [("a", "b", "a", "c", "b", "a", "a", "d")[r] for r in range(n)],
}


def make_hier(n: int, groups: list[str], loss: float = 0.0, **cfg: Any) -> list[HierAllreduce]:
    cfg.setdefault("timeout_s", 0.01)

    def build(r: int, peers: Any, group: Any, sock: Any) -> HierAllreduce:
        return HierAllreduce(HierConfig(rank=r, peers=peers, groups=tuple(groups), **cfg), group, sock)

    return make_ranks(n, build, loss)  # type: ignore[return-value]


def test_layout_follows_the_groups() -> None:
    lay = hier_layout(["b", "a", "b", "c", "a"])
    assert lay.leaders == (0, 1, 3)  # groups in order of first appearance, led by their lowest rank
    assert lay.members == ((2,), (4,), ())
    assert lay.group_of == (0, 1, 0, 2, 1)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8])
def test_sums(layout: str, n: int) -> None:
    size = 1000 + n
    inputs = normal_inputs(n, size, seed=n)
    ranks = make_hier(n, LAYOUTS[layout](n))
    check(inputs, run(ranks, inputs))
    for h in ranks:
        assert h.last_stats is not None and h.last_stats.method == "hier" and h.last_stats.elements == size


@pytest.mark.parametrize("size", [1, 2, 5, 363, 365, 50_000])
@pytest.mark.parametrize("layout", ["pairs", "uneven, interleaved"])
def test_sizes(size: int, layout: str) -> None:
    """Fewer elements than leaders (empty segments), chunk boundaries, and a tensor of many chunks."""
    n = 7
    inputs = normal_inputs(n, size, seed=size)
    ranks = make_hier(n, LAYOUTS[layout](n))
    check(inputs, run(ranks, inputs))
    st = ranks[0].last_stats
    assert st is not None and st.t_start < st.t_done and st.latency_s == pytest.approx(st.t_done - st.t_start)


@pytest.mark.parametrize("piece_chunks", [0, 1, 3, 8])
def test_pieces(piece_chunks: int) -> None:
    """One piece, or many (down to one chunk per leader): the sum on every rank, bit-identical, in any case."""
    n, size, groups = 7, 4001, LAYOUTS["uneven, interleaved"](7)  # 3 groups: 3 leaders, 12 tags a piece
    inputs = normal_inputs(n, size, seed=piece_chunks)
    ranks = make_hier(n, groups, elements_per_packet=50, piece_chunks=piece_chunks)
    pieces = ranks[0]._pieces(size)
    assert len(pieces) == (1 if piece_chunks == 0 else -(-size // (3 * 50 * piece_chunks)))
    assert sum(p.sched.bounds[-1] for p in pieces) == size
    assert [p.tag for p in pieces] == [12 * i for i in range(len(pieces))]
    check(inputs, run(ranks, inputs))


def test_pieces_stay_within_the_tags(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor of more pieces than the 16-bit tags can name is cut into fewer, larger pieces."""
    ranks = make_hier(2, ["a", "b"], elements_per_packet=1, piece_chunks=1)  # 2 leaders: 8 tags a piece
    try:
        pieces = ranks[0]._pieces(100_000)
        assert len(pieces) == 8192 and max(p.tag for p in pieces) + 8 - 1 <= MAX_TAG
    finally:
        for h in ranks:
            h.close()
    # and an all-reduce through capped pieces (segments of several chunks each) is right: 64 tags, 5 pieces
    monkeypatch.setattr(hier, "MAX_TAG", 63)
    n, size = 6, 3000
    inputs = normal_inputs(n, size, seed=9)
    ranks = make_hier(n, LAYOUTS["pairs"](n), elements_per_packet=20, piece_chunks=1)  # 3 leaders: 12 tags a piece
    pieces = ranks[0]._pieces(size)
    assert len(pieces) == 5 and all(p.sched.chunks(0) > 1 for p in pieces)
    check(inputs, run(ranks, inputs))


@pytest.mark.parametrize(("n", "member_window"), [(4, 1), (4, 5), (4, 0), (8, 1), (8, 3), (8, 6)])
def test_a_member_stays_within_its_window(n: int, member_window: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A member never has more than member_window chunks sent beyond the results it holds (0: all at once), and
    never fewer than one per leader: a smaller window deadlocks (each member waits on a chunk another holds)."""
    size, per = 3000, 50  # groups of 2 (n / 2 leaders): 60-64 upload chunks per member
    ahead: dict[int, list[int]] = {}  # member rank -> (chunks sent - results received) after every send

    class Recording(hier.Exchange):
        def __init__(self, endpoint: Any, call: int, on_data: Any) -> None:
            rank = endpoint.cfg.rank
            counts = [0, 0]

            def counted(src: int, tag: int, chunk: int, data: np.ndarray) -> None:
                counts[1] += 1
                on_data(src, tag, chunk, data)

            super().__init__(endpoint, call, counted if rank % 2 else on_data)
            self._rank, self._counts = rank, counts

        def send(self, dst: int, tag: int, chunk: int, values: np.ndarray) -> None:
            if self._rank % 2:  # the odd ranks are the members
                self._counts[0] += 1
                ahead.setdefault(self._rank, []).append(self._counts[0] - self._counts[1])
            super().send(dst, tag, chunk, values)

    monkeypatch.setattr(hier, "Exchange", Recording)
    inputs = normal_inputs(n, size, seed=member_window)
    ranks = make_hier(n, LAYOUTS["pairs"](n), elements_per_packet=per, member_window=member_window)
    check(inputs, run(ranks, inputs))
    uploads = sum(p.sched.chunks(s) for p in ranks[1]._pieces(size) for s in range(n // 2))
    assert uploads >= size // per
    for member in range(1, n, 2):
        assert len(ahead[member]) == uploads  # the whole tensor, each chunk once
        assert max(ahead[member]) == (max(member_window, n // 2) if member_window else uploads)


def test_the_same_bits_as_a_rerun() -> None:
    """The leader adds its members' chunks in rank order, whatever order they arrive in."""
    n, groups = 6, LAYOUTS["uneven, interleaved"](6)
    inputs = normal_inputs(n, 20_000, seed=3)
    first = run(make_hier(n, groups), inputs)
    second = run(make_hier(n, groups, loss=0.05), inputs)
    assert np.array_equal(first[0], second[0])


def test_repeated_calls_of_a_shaped_tensor() -> None:
    inputs = [np.full((30, 40), r + 1.0, dtype=np.float32) for r in range(5)]
    results = run(make_hier(5, ["x", "x", "y", "y", "y"]), inputs, calls=3)
    for res in results:
        assert np.array_equal(res, np.full((30, 40), 15.0, dtype=np.float32))


@pytest.mark.parametrize("layout", ["pairs", "one group"])
def test_loss_is_recovered(layout: str) -> None:
    n = 5
    inputs = normal_inputs(n, 20_000, seed=11)
    ranks = make_hier(n, LAYOUTS[layout](n), loss=0.05)
    check(inputs, run(ranks, inputs, calls=2))
    assert sum(h.sock.dropped for h in ranks) > 0  # type: ignore[attr-defined]
    assert sum(h.last_stats.retransmissions for h in ranks if h.last_stats) > 0


def test_members_send_and_receive_the_tensor_once() -> None:
    n, size = 6, 40_000
    ranks = make_hier(n, LAYOUTS["pairs"](n), timeout_s=0.5)
    run(ranks, normal_inputs(n, size))
    member = ranks[1].last_stats  # rank 1 is the member of group e0
    assert member is not None
    assert member.bytes_sent - member.retransmissions * 1514 < size * 4 * 1.1


def test_bf16_on_the_wire() -> None:
    n = 6
    inputs = normal_inputs(n, 5000)
    ranks = make_hier(n, LAYOUTS["uneven, interleaved"](n), wire="bfloat16")
    results = run(ranks, inputs)
    check(inputs, results, wire="bfloat16")
    assert np.array_equal(round_bf16(results[0]), results[0])
    assert ranks[0].last_stats is not None and ranks[0].last_stats.method == "hier-bf16"


def test_config_is_validated() -> None:
    peers = (("127.0.0.1", 1), ("127.0.0.1", 2))
    with pytest.raises(ValueError, match="groups"):
        HierConfig(rank=0, peers=peers, groups=("a",))
    with pytest.raises(ValueError, match="piece_chunks and member_window"):
        HierConfig(rank=0, peers=peers, groups=("a", "b"), piece_chunks=-1)
    with pytest.raises(ValueError, match="piece_chunks and member_window"):
        HierConfig(rank=0, peers=peers, groups=("a", "b"), member_window=-1)


def test_silent_leader_times_out() -> None:
    ranks = make_hier(3, ["a", "a", "b"], max_retries=5)
    ranks[0].close()  # the leader of rank 1's group
    ranks[1].group = None  # no barrier: rank 1 starts alone
    try:
        with pytest.raises(TransferTimeoutError, match="after 5 retransmissions|nothing from rank"):
            ranks[1].allreduce(np.ones(10, dtype=np.float32))
    finally:
        ranks[1].close()
        ranks[2].close()
