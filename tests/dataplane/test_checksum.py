"""The end-to-end checksum: sums are checked before they move on, corruption restarts the round, results are sealed."""

from __future__ import annotations

import random

import pytest

from tests.dataplane.backends import Dut
from tests.dataplane.frames import INT8, NONE, RESULT, checksum, contribution, parse
from tests.dataplane.program import INNER, Job, install_hosts, install_job
from wireformat import AGG

C = "P4inaIngress.aggregation."
L = AGG.num_lanes
CORRUPT, DROP_CORRUPT = C + "corrupt", 12


def values(seed: int) -> list[int]:
    return [seed * 1000 + 37 * (i - 32) for i in range(L)]


def lane_sum(*vectors: list[int]) -> list[int]:
    return [sum(col) for col in zip(*vectors)]


def setup(dut: Dut, job: Job) -> None:
    install_hosts(dut)
    install_job(dut, job)


def sealed(pkt: object) -> bool:
    h = pkt.header  # type: ignore[attr-defined]
    return h["checksum"] == checksum(sum(pkt.lanes), h["offset"], h["job_id"], h["epoch"])  # type: ignore[attr-defined]


def test_results_are_sealed(dut: Dut) -> None:
    setup(dut, Job(children=(1, 2), result_type=INT8, shift=8))
    dut.send(1, contribution(1, values(1), offset=3 * L))
    dut.send(2, contribution(2, values(2), offset=3 * L))
    got = [parse(f) for _p, f in dut.receive(2)]
    assert len(got) == 2 and all(sealed(p) for p in got)  # narrowed lanes, a new checksum that fits them


def test_a_corrupt_contribution_restarts_the_round(dut: Dut) -> None:
    """A flipped lane bit on the way up: the sum does not add up at completion, nothing leaves, and the
    children's retransmissions (the workers time out) rebuild the sum from scratch."""
    setup(dut, Job(children=(1, 2, 3)))
    good = {p: contribution(p, values(p)) for p in (1, 2, 3)}
    bad = bytearray(good[2])
    bad[-5] ^= 0x10  # one bit of one lane, after the sender computed the checksum
    dut.send(1, good[1])
    dut.send(2, bytes(bad))
    dut.send(3, good[3])
    assert dut.receive(0) == []
    assert dut.counter(CORRUPT, 1)[0] == 1 and dut.counter("P4inaIngress.drops", 1 * 16 + DROP_CORRUPT)[0] == 1
    for p in (1, 2, 3):
        dut.send(p, good[p])
    got = [parse(f) for _p, f in dut.receive(3)]
    assert len(got) == 3 and all(p.lanes == lane_sum(values(1), values(2), values(3)) and sealed(p) for p in got)


def test_a_bad_result_from_the_parent_is_dropped(dut: Dut) -> None:
    setup(dut, Job(children=(1, 2), role=INNER, up_port=5))
    final = [(i % 100) - 50 for i in range(L)]
    dut.send(5, contribution(5, final, op=RESULT, checksum=12345))
    assert dut.receive(0) == []
    assert dut.counter(CORRUPT, 1)[0] == 1
    dut.send(5, contribution(5, final, op=RESULT))
    assert len(dut.receive(2)) == 2


def test_an_exponent_round_is_checked_too(dut: Dut) -> None:
    setup(dut, Job(children=(1, 2)))
    dut.send(1, contribution(1, [], elem_type=NONE, next_exponent=3))
    dut.send(2, contribution(2, [], elem_type=NONE, next_exponent=4, checksum=1))
    assert dut.receive(0) == [] and dut.counter(CORRUPT, 1)[0] == 1


@pytest.fixture
def embedded(dut: Dut) -> Dut:
    if dut.name != "embedded":
        pytest.skip("P4Runtime register writes are the embedded switch's extension (BMv2's PI: UNIMPLEMENTED)")
    return dut


def test_flips_in_the_switch_memory_are_caught(embedded: Dut) -> None:
    """1,000 single-bit flips in a cell's lane or checksum registers between contributions, over P4Runtime:
    every one is detected at completion, and the round's retransmissions give the exact sum."""
    dut = embedded
    job = Job(children=(1, 2), slot_count=8)
    setup(dut, job)
    rng = random.Random(4)
    injected = detected = 0
    for k in range(1000):
        slot, shadow, epoch = k % 8, (k // 8) % 2, 1 + (k // 16) % 100
        a = [rng.randrange(-(2**20), 2**20) for _ in range(L)]
        b = [rng.randrange(-(2**20), 2**20) for _ in range(L)]
        kw = dict(slot=slot, shadow=shadow, epoch=epoch, offset=slot * L)
        dut.send(1, contribution(1, a, **kw))
        cell = slot * 2 + shadow
        reg = rng.choice([f"lane_{i:03d}" for i in range(L)] + ["slot_csum"] * 16)
        dut.flip_register_bit(C + reg, cell, rng.randrange(32))
        injected += 1
        dut.send(2, contribution(2, b, **kw))
        if not dut.receive(0):
            detected += 1
        for p, v in ((1, a), (2, b)):  # both time out and resend: a fresh round
            dut.send(p, contribution(p, v, **kw))
        got = [parse(f) for _p, f in dut.receive(2)]
        assert len(got) == 2 and all(g.lanes == lane_sum(a, b) for g in got), k
    assert (detected, injected) == (1000, 1000)
    assert dut.counter(CORRUPT, 1)[0] == 1000


def test_a_flip_in_a_stored_result_is_caught_before_it_is_resent(embedded: Dut) -> None:
    dut = embedded
    setup(dut, Job(children=(1, 2)))
    dut.send(1, contribution(1, values(1)))
    dut.send(2, contribution(2, values(2)))
    assert len(dut.receive(2)) == 2
    dut.flip_register_bit(C + "lane_007", 0, 3)  # the root's stored sum, cell 0
    dut.send(2, contribution(2, values(2)))  # child 2 lost its result: answer from the stored sum?
    assert dut.receive(0) == [] and dut.counter(CORRUPT, 1)[0] == 1  # not with a corrupt one
    for p in (1, 2):
        dut.send(p, contribution(p, values(p)))
    got = [parse(f) for _p, f in dut.receive(2)]
    assert len(got) == 2 and all(g.lanes == lane_sum(values(1), values(2)) for g in got)
