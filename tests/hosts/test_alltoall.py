"""All-to-all (direct and hierarchical) over loopback UDP, ranks as threads: every block checked."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from hosts import alltoall as a2a
from hosts.alltoall import AllToAll, AllToAllConfig, AllToAllDirect, AllToAllHier, rail_layout
from tests.hosts.collective_rig import make_ranks

LAYOUTS = {
    "pairs": lambda n: [f"e{r // 2}" for r in range(n)],
    "interleaved": lambda n: [f"e{r % 2}" for r in range(n)],
    "one group": lambda n: ["e"] * n,
    "singletons": lambda n: [f"e{r}" for r in range(n)],
}


def make(kind: str, n: int, groups: Sequence[str] = (), loss: float = 0.0, **cfg: Any) -> list[AllToAll]:
    cfg.setdefault("timeout_s", 0.01)
    cls = AllToAllDirect if kind == "direct" else AllToAllHier

    def build(r: int, peers: Any, group: Any, sock: Any) -> AllToAll:
        return cls(AllToAllConfig(rank=r, peers=peers, groups=tuple(groups), **cfg), group, sock)

    return make_ranks(n, build, loss)  # type: ignore[return-value]


def run(ranks: Sequence[AllToAll], size: int, calls: int = 1, seed: int = 0) -> list[np.ndarray]:
    """Every rank sends its buffer of iteration `it` for each call; returns the last call's receive buffers."""
    n = len(ranks)
    out: list[Any] = [None] * n
    errors: list[BaseException] = []

    def body(r: int) -> None:
        try:
            for it in range(calls):
                out[r] = ranks[r].alltoall(a2a.send_buffer(r, n, size, seed, it))
            ranks[r].barrier("done")
        except BaseException as ex:  # noqa: BLE001 - handed to the test thread, which re-raises it
            errors.append(ex)
        finally:
            ranks[r].close()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]
    return out


def assert_every_block(results: Sequence[np.ndarray], size: int, iteration: int = 0, seed: int = 0) -> None:
    n = len(results)
    for r, got in enumerate(results):
        c = a2a.check(got, r, n, size, seed, iteration)
        assert c.ok, (r, c)
        assert c.blocks == n


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("size", [1, 7, 3000, 40_001])
def test_direct_delivers_every_block(n: int, size: int) -> None:
    assert_every_block(run(make("direct", n), size), size)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n", [4, 6])
def test_hier_delivers_every_block(layout: str, n: int) -> None:
    size = 2 * 366 * n + 13  # blocks of a few chunks that do not end on a chunk's edge
    assert_every_block(run(make("hier", n, LAYOUTS[layout](n)), size), size)


@pytest.mark.parametrize("kind", ["direct", "hier"])
def test_repeated_calls_and_loss(kind: str) -> None:
    n, size = 4, 20_000
    ranks = make(kind, n, LAYOUTS["pairs"](n), loss=0.05)
    assert_every_block(run(ranks, size, calls=3), size, iteration=2)


def test_hier_consolidates_what_crosses_the_fabric_into_full_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank's phase-2 stream to another group carries g blocks in one stream, so ceil(g x block / per)
    frames, where direct sends g x ceil(block / per) frames for the same blocks; phase 1 likewise."""
    from hosts.reliable import Exchange

    sent: dict[tuple[int, int], int] = {}  # (tag, size of the frame's payload == per) -> frames
    real = Exchange.send

    def count(self: Exchange, dst: int, tag: int, chunk: int, values: np.ndarray) -> None:
        key = (tag, int(values.size == self.per))
        sent[key] = sent.get(key, 0) + 1
        real(self, dst, tag, chunk, values)

    monkeypatch.setattr(Exchange, "send", count)
    n, per, size = 8, 10, 8 * 15  # blocks of 15 elements; groups of g = 2, G = 4
    assert_every_block(run(make("hier", n, LAYOUTS["pairs"](n), elements_per_packet=per), size), size)
    g, big = 2, 4
    assert sent[(a2a.TAG_GROUP, 1)] + sent.get((a2a.TAG_GROUP, 0), 0) == n * (g - 1) * -(-(big * 15) // per)
    assert sent[(a2a.TAG_RAIL, 1)] + sent.get((a2a.TAG_RAIL, 0), 0) == n * (big - 1) * -(-(g * 15) // per)
    assert sent.get((a2a.TAG_RAIL, 0), 0) == 0  # 30 elements a stream: three full frames, none partial
    sent.clear()
    assert_every_block(run(make("direct", n, elements_per_packet=per), size), size)
    assert sent[(a2a.TAG_DIRECT, 0)] == sent[(a2a.TAG_DIRECT, 1)] == n * (n - 1)  # every block: a full, a half


def test_a_wrong_block_is_caught() -> None:
    n, size = 4, 1000
    good = [a2a.expected(r, n, size) for r in range(n)]
    assert all(a2a.check(good[r], r, n, size).ok for r in range(n))
    length = size // n
    swapped = good[1].copy()
    swapped[0:length], swapped[length : 2 * length] = good[1][length : 2 * length], good[1][0:length]
    assert a2a.check(swapped, 1, n, size).wrong == (0, 1)  # two blocks in each other's place
    other = good[2].copy()
    other[3 * length : 4 * length] = good[3][3 * length : 4 * length]  # rank 3's block for rank 3, not rank 2
    assert a2a.check(other, 2, n, size).wrong == (3,)
    flipped = good[0].copy()
    flipped.view(np.uint32)[5 * 1 + length] ^= 1  # one bit of one element of the block from rank 1
    c = a2a.check(flipped, 0, n, size)
    assert c.wrong == (1,) and c.max_abs_error > 0
    stale = a2a.expected(0, n, size, iteration=1)  # last call's blocks
    assert a2a.check(stale, 0, n, size).wrong == tuple(range(n))
    assert not a2a.check(good[0][:-1], 0, n, size).ok


def test_a_misrouting_transport_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sender that puts a block in the wrong stream (to the wrong rank): the receivers' check names it."""
    n, size = 3, 3000
    real = AllToAllDirect._exchange

    def misroute(self: AllToAllDirect, x: np.ndarray, out: np.ndarray, bounds: np.ndarray, call: int) -> Any:
        if self.cfg.rank == 0:  # rank 0 sends its block for rank 2 to rank 1 and vice versa
            x = x.copy()
            b1, b2 = slice(int(bounds[1]), int(bounds[2])), slice(int(bounds[2]), int(bounds[3]))
            x[b1], x[b2] = x[b2].copy(), x[b1].copy()
        return real(self, x, out, bounds, call)

    monkeypatch.setattr(AllToAllDirect, "_exchange", misroute)
    results = run(make("direct", n), size)
    assert a2a.check(results[1], 1, n, size).wrong == (0,)
    assert a2a.check(results[2], 2, n, size).wrong == (0,)
    assert a2a.check(results[0], 0, n, size).ok


def test_groups_of_different_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="groups of one size"):
        rail_layout(["a", "a", "b"])
    assert rail_layout(["b", "a", "b", "a"]).groups == ((0, 2), (1, 3))


def test_allreduce_is_refused() -> None:
    (r,) = make("direct", 1)
    with pytest.raises(TypeError, match="all-to-all"):
        r.allreduce(np.zeros(4, dtype=np.float32))
    r.close()


def test_one_rank_keeps_its_block() -> None:
    (r,) = make("direct", 1)
    x = a2a.send_buffer(0, 1, 10)
    assert np.array_equal(r.alltoall(x, call=0), x)
    r.close()


def test_a_rank_keeps_one_window_in_flight_shared_by_the_bytes_each_peer_gets() -> None:
    # a2a-hier at 16 ranks in pairs: the group peer gets 8 blocks, each of the 7 rail peers 2
    w = a2a.split_window(64, {1: 8000, **{d: 2000 for d in range(2, 16, 2)}}, 16)
    assert w[1] == 23 and all(w[d] == 6 for d in range(2, 16, 2)) and w[0] == 0 and w[3] == 0
    assert a2a.split_window(4, {d: 100 for d in range(1, 16)}, 16)[1:] == [1] * 15  # never below one
    assert a2a.split_window(64, {1: 0, 2: 0}, 3) == [0, 1, 1]
