"""Ring all-reduce over loopback UDP, ranks as threads (collective_rig); loss injected at the sender."""

from __future__ import annotations

import socket
from typing import Any

import numpy as np
import pytest

from hosts.bf16 import round_bf16
from hosts.quantization import NonFiniteError
from hosts.ring import RingAllreduce, RingConfig, RingTimeoutError, elements_per_packet, segment_bounds, topology_order
from hosts.stats import AllreduceStats
from tests.hosts.collective_rig import check, make_ranks, run


def make_rings(
    n: int, loss: float = 0.0, order: tuple[int, ...] | None = None, timeout_s: float = 0.01, **cfg: Any
) -> list[RingAllreduce]:
    def build(r: int, peers: Any, group: Any, sock: Any) -> RingAllreduce:
        return RingAllreduce(RingConfig(rank=r, peers=peers, order=order, timeout_s=timeout_s, **cfg), group, sock)

    return make_ranks(n, build, loss)  # type: ignore[return-value]


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("size", [1, 5, 1000, 30_001])
def test_sums(n: int, size: int) -> None:
    inputs = [np.random.default_rng(r).normal(0, 1, size).astype(np.float32) for r in range(n)]
    rings = make_rings(n)
    check(inputs, run(rings, inputs))
    stats = rings[0].last_stats
    assert isinstance(stats, AllreduceStats) and stats.method == "ring" and stats.elements == size


def test_sums_of_a_shaped_tensor_over_repeated_calls() -> None:
    inputs = [np.full((30, 40), r + 1.0, dtype=np.float32) for r in range(3)]
    results = run(make_rings(3), inputs, calls=3)
    assert np.array_equal(results[0], np.full((30, 40), 6.0, dtype=np.float32))


@pytest.mark.parametrize("n", [2, 4])
def test_loss_is_recovered(n: int) -> None:
    inputs = [np.random.default_rng(r).uniform(-1, 1, 20_000).astype(np.float32) for r in range(n)]
    rings = make_rings(n, loss=0.05)
    results = run(rings, inputs, calls=2)
    check(inputs, results)
    assert sum(r.sock.dropped for r in rings) > 0  # type: ignore[attr-defined]
    assert sum(r.last_stats.retransmissions for r in rings if r.last_stats) > 0


@pytest.mark.parametrize("n", [2, 4])
def test_bf16_on_the_wire(n: int) -> None:
    """bfloat16 on the wire, float32 sums: within 2^-8 per rounding, identical on every rank, 2 B a value."""
    inputs = [np.random.default_rng(r).normal(0, 1, 5000).astype(np.float32) for r in range(n)]
    slow = dict(timeout_s=5.0, min_timeout_s=5.0)  # no spurious resend on a loaded machine: bytes are compared
    rings = make_rings(n, wire="bfloat16", **slow)
    results = run(rings, inputs)
    ref = np.sum([x.astype(np.float64) for x in inputs], axis=0)
    mag = np.sum([np.abs(x.astype(np.float64)) for x in inputs], axis=0)
    for res in results:
        assert np.array_equal(res, results[0])
    err = np.abs(results[0] - ref)
    assert (err <= n * 2.0**-8 * mag * 1.01).all()
    assert err.max() > 0  # it really was rounded
    assert np.array_equal(round_bf16(results[0]), results[0])  # every value is a bfloat16
    stats = rings[0].last_stats
    assert stats is not None and stats.method == "ring-bf16"
    f32 = make_rings(n, **slow)
    run(f32, inputs)
    assert f32[0].last_stats is not None and stats.retransmissions == f32[0].last_stats.retransmissions == 0
    assert stats.bytes_sent < 0.6 * f32[0].last_stats.bytes_sent  # half the payload bytes


def test_acks_are_batched() -> None:
    """One ack datagram per ack_every data packets, not one each: the ring pays a fair transport's overhead."""
    inputs = [np.random.default_rng(r).normal(0, 1, 200_000).astype(np.float32) for r in range(2)]
    # a long timeout: no spurious retransmission (each would be acknowledged again) on a loaded machine
    rings = make_rings(2, timeout_s=5.0, min_timeout_s=5.0, ack_every=16, ack_delay_s=1.0)
    run(rings, inputs)
    stats = rings[0].last_stats
    assert stats is not None and stats.retransmissions == 0
    data = -(-200_000 // elements_per_packet("float32"))  # 2(n-1) = 2 steps of one segment each, per rank
    acks = stats.packets_sent - data - stats.retransmissions  # a stall on a busy machine may cause resends
    assert 0 < acks <= data // 16 + 3, (acks, data)


def test_result_time_is_when_the_last_chunk_arrived() -> None:
    rings = make_rings(3)
    run(rings, [np.ones(10_000, dtype=np.float32)] * 3)
    for ring in rings:
        st = ring.last_stats
        assert st is not None and st.t_start < st.t_done and st.latency_s == pytest.approx(st.t_done - st.t_start)


def test_topology_order_keeps_groups_together() -> None:
    assert topology_order(["e1", "e2", "e1", "e2"]) == (0, 2, 1, 3)
    assert topology_order(["a", "a", "b"]) == (0, 1, 2)
    inputs = [np.arange(100, dtype=np.float32) * (r + 1) for r in range(4)]
    results = run(make_rings(4, order=(0, 2, 1, 3)), inputs)
    check(inputs, results)


def test_segments_cover_the_tensor() -> None:
    b = segment_bounds(10, 4)
    assert b.tolist() == [0, 2, 5, 7, 10]
    assert segment_bounds(2, 4).tolist() == [0, 0, 1, 1, 2]


def test_single_rank_and_bad_input() -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    ring = RingAllreduce(RingConfig(rank=0, peers=(s.getsockname(),)), None, s)
    try:
        assert ring.allreduce(np.ones(3, dtype=np.float32)).tolist() == [1.0, 1.0, 1.0]
        with pytest.raises(NonFiniteError):
            ring.allreduce(np.array([np.inf], dtype=np.float32))
    finally:
        ring.close()


def test_config_is_validated() -> None:
    peers = (("127.0.0.1", 1), ("127.0.0.1", 2))
    with pytest.raises(ValueError, match="not a permutation"):
        RingConfig(rank=0, peers=peers, order=(0, 0))
    with pytest.raises(ValueError, match="MTU"):
        RingConfig(rank=0, peers=peers, elements_per_packet=1000)


def test_silent_neighbour_times_out() -> None:
    rings = make_rings(2, max_retries=5)
    rings[1].close()
    rings[0].group = None  # no barrier: rank 0 starts alone
    try:
        with pytest.raises(RingTimeoutError, match="after 5 retransmissions|nothing from"):
            rings[0].allreduce(np.ones(10, dtype=np.float32))
    finally:
        rings[0].close()
