"""Behaviour of p4ina.p4's aggregation, identical on every back end (see conftest.py)."""

from __future__ import annotations

import pytest

from tests.dataplane.backends import Dut
from tests.dataplane.frames import (
    AGG_IP,
    AGG_MAC,
    CONTRIB,
    INT8,
    INT16,
    INT32,
    NONE,
    OVERFLOW,
    RESULT,
    RETRANSMIT,
    contribution,
    host_ip,
    host_mac,
    parse,
)
from tests.dataplane.program import INNER, JOB_CONFIG, Job, install_hosts, install_job
from wireformat import AGG

C = "P4inaIngress.aggregation."
L = AGG.num_lanes
INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)


def values(seed: int) -> list[int]:
    """NUM_LANES distinct lanes, negatives included."""
    return [seed * 1000 + 37 * (i - 32) for i in range(L)]


def lane_sum(*vectors: list[int]) -> list[int]:
    return [sum(col) for col in zip(*vectors)]


def rshift(value: int, shift: int) -> int:
    """The switch's right shift: arithmetic, rounding to nearest with ties to even, as DESIGN.md says.

    Written out here (not fixedpoint.shift_even) so the oracle is independent of the code it checks."""
    if shift == 0:
        return value
    q, r = divmod(value, 1 << shift)  # floor division: r in [0, 2^s)
    half = 1 << (shift - 1)
    return q + 1 if r > half or (r == half and q % 2) else q


def setup(dut: Dut, job: Job) -> None:
    install_hosts(dut)
    install_job(dut, job)


def results_by_port(frames: list[tuple[int, bytes]], expect: int | None = None) -> dict[int, object]:
    """One parsed frame per port; `expect` frames exactly (a loop over no results would assert nothing)."""
    if expect is not None:
        assert len(frames) == expect, f"{len(frames)} frames out, expected {expect}"
    out = {}
    for port, frame in frames:
        assert port not in out, f"two frames out of port {port}"
        out[port] = parse(frame)
    return out


@pytest.mark.parametrize("n", [2, 3, 4])
def test_sum_of_n_children_is_multicast_to_each(dut: Dut, n: int) -> None:
    job = Job(children=tuple(range(1, n + 1)))
    setup(dut, job)
    inputs = {p: values(p) for p in job.children}
    for p in job.children[:-1]:
        dut.send(p, contribution(p, inputs[p], slot=3, shadow=1, epoch=5, exponent=-4, offset=192))
    assert dut.receive(0) == [], "a partial sum must not leave the switch"
    last = job.children[-1]
    dut.send(last, contribution(last, inputs[last], slot=3, shadow=1, epoch=5, exponent=-4, offset=192))

    got = results_by_port(dut.receive(n))
    assert sorted(got) == list(job.children)
    for port, pkt in got.items():
        assert pkt.lanes == lane_sum(*inputs.values())
        assert pkt.header["op"] == RESULT and pkt.header["elem_type"] == INT32 and pkt.header["flags"] == 0
        assert (pkt.header["job_id"], pkt.header["slot"], pkt.header["shadow"]) == (7, 3, 1)
        assert (pkt.header["epoch"], pkt.header["exponent"], pkt.header["offset"]) == (5, -4, 192)
        assert pkt.eth_dst == host_mac(port) and pkt.ip_dst == host_ip(port), "results are addressed to the host"
        assert pkt.eth_src == AGG_MAC and pkt.ip_src == AGG_IP, "results come from the aggregation address"
        assert pkt.ip_checksum_ok and pkt.ip_total_len == 20 + 8 + AGG.payload_bytes(INT32)
        assert pkt.udp_len == 8 + AGG.payload_bytes(INT32)
    assert dut.counter(C + "contributions", 1)[0] == n
    assert dut.counter(C + "completions", 1)[0] == 1
    assert dut.counter("P4inaEgress.results_sent", 1)[0] == n


def test_retransmission_is_not_added_twice(dut: Dut) -> None:
    job = Job(children=(1, 2, 3))
    setup(dut, job)
    dut.send(1, contribution(1, values(1)))
    dut.send(1, contribution(1, values(1), flags=RETRANSMIT))
    dut.send(2, contribution(2, values(2)))
    dut.send(2, contribution(2, values(2)))  # a duplicate without the flag is caught by the bitmap too
    assert dut.receive(0) == []
    dut.send(3, contribution(3, values(3)))
    got = results_by_port(dut.receive(3), 3)
    assert {p: pkt.lanes for p, pkt in got.items()} == {p: lane_sum(values(1), values(2), values(3)) for p in (1, 2, 3)}
    assert dut.counter(C + "retransmissions", 1)[0] == 2
    assert dut.counter(C + "contributions", 1)[0] == 3


def test_retransmission_to_a_completed_slot_gets_the_result_back(dut: Dut) -> None:
    job = Job(children=(1, 2))
    setup(dut, job)
    dut.send(1, contribution(1, values(1)))
    dut.send(2, contribution(2, values(2)))
    first = results_by_port(dut.receive(2), 2)
    dut.send(2, contribution(2, values(2), flags=RETRANSMIT))  # its result was lost
    again = dut.receive(1)
    assert [p for p, _ in again] == [2], "only the child that asked gets the result again"
    pkt = parse(again[0][1])
    assert pkt.lanes == first[2].lanes and pkt.header["op"] == RESULT
    assert pkt.eth_dst == host_mac(2)
    assert dut.counter(C + "completions", 1)[0] == 1


@pytest.mark.parametrize("result_type,bits", [(INT8, 8), (INT16, 16)])
def test_results_are_narrowed_with_a_saturating_shift(dut: Dut, result_type: int, bits: int) -> None:
    shift = 4
    job = Job(children=(1, 2), result_type=result_type, shift=shift)
    setup(dut, job)
    a = [(i - 32) * (1 << bits) // 2 for i in range(L)]  # sums reach past the narrow range at both ends
    b = [(i - 32) * 7 for i in range(L)]
    dut.send(1, contribution(1, a))
    dut.send(2, contribution(2, b))
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    expected = [min(hi, max(lo, rshift(s, shift))) for s in lane_sum(a, b)]
    assert any(e in (lo, hi) for e in expected), "the case must exercise clamping"
    got = results_by_port(dut.receive(2), 2)
    for pkt in got.values():
        assert pkt.header["elem_type"] == result_type and pkt.header["shift"] == shift
        assert pkt.lanes == expected
        assert pkt.header["flags"] & OVERFLOW, "clamped lanes set the overflow flag"
        assert pkt.ip_total_len == 20 + 8 + AGG.header_bytes + AGG.num_lanes * bits // 8 and pkt.ip_checksum_ok
    assert dut.counter(C + "overflows", 1)[0] >= 1


def test_narrowing_without_clamping_leaves_the_flag_clear(dut: Dut) -> None:
    job = Job(children=(1, 2), result_type=INT8, shift=2)
    setup(dut, job)
    a, b = [i % 64 - 32 for i in range(L)], [2 * (i % 64 - 32) for i in range(L)]  # |sum| <= 96, >> 2 fits
    dut.send(1, contribution(1, a))
    dut.send(2, contribution(2, b))
    for _, pkt in results_by_port(dut.receive(2), 2).items():
        assert pkt.lanes == [rshift(s, 2) for s in lane_sum(a, b)]
        assert pkt.header["flags"] == 0
    assert dut.counter(C + "overflows", 1)[0] == 0


def test_int32_sums_saturate_and_such_a_sum_is_not_delivered(dut: Dut) -> None:
    """Saturation cannot happen with the hosts' scaling (no sum of n contributions reaches 2^31), so a
    saturated sum is a corrupted one (a flipped high bit saturates the next addition): counted as an
    overflow, it fails the checksum (the clamped lanes no longer add up), and the round restarts."""
    job = Job(children=(1, 2))
    setup(dut, job)
    a = [INT32_MAX - 10, INT32_MIN + 5, 1000, -1000] * (L // 4)
    b = [100, -100, 2000, -2000] * (L // 4)
    dut.send(1, contribution(1, a))
    dut.send(2, contribution(2, b))
    assert dut.receive(0) == []
    assert dut.counter(C + "overflows", 1)[0] == 1 and dut.counter(C + "corrupt", 1)[0] == 1
    c = [5, -5, 1000, -1000] * (L // 4)  # the retransmitted round (here with sums that fit): delivered
    dut.send(1, contribution(1, c))
    dut.send(2, contribution(2, b))
    got = results_by_port(dut.receive(2), 2)
    assert sorted(got) == [1, 2] and all(
        p.lanes == lane_sum(c, b) and not p.header["flags"] & OVERFLOW for p in got.values()
    )


@pytest.mark.parametrize("elem_type", [INT8, INT16])
def test_narrow_contributions_are_widened(dut: Dut, elem_type: int) -> None:
    # int8 lanes answered in int32 would outgrow BMv2's headroom (DROP_GROWTH, below): int16 results
    result_type = INT32 if elem_type == INT16 else INT16
    job = Job(children=(1, 2, 3), result_type=result_type)
    setup(dut, job)
    vecs = {p: [((i * 5 + p * 31) % 256) - 128 for i in range(L)] for p in job.children}
    for p in job.children:
        dut.send(p, contribution(p, vecs[p], elem_type=elem_type))
    for _, pkt in results_by_port(dut.receive(3), 3).items():
        assert pkt.header["elem_type"] == result_type
        assert pkt.lanes == lane_sum(*vecs.values())


def test_inner_node_sends_partial_up_and_relays_the_result_down(dut: Dut) -> None:
    job = Job(children=(1, 2), role=INNER, up_port=5, result_type=INT8, shift=3)
    setup(dut, job)
    dut.send(1, contribution(1, values(1), slot=2, epoch=9))
    dut.send(2, contribution(2, values(2), slot=2, epoch=9))
    up = dut.receive(1)
    assert [p for p, _ in up] == [5]
    partial = parse(up[0][1])
    assert partial.header["op"] == CONTRIB and partial.header["elem_type"] == INT32
    assert partial.lanes == lane_sum(values(1), values(2)), "inner nodes pass int32 partial sums up"
    assert (partial.header["slot"], partial.header["epoch"]) == (2, 9)

    # A child that missed nothing yet retransmits while the parent has not answered: the partial goes up again.
    dut.send(1, contribution(1, values(1), slot=2, epoch=9, flags=RETRANSMIT))
    again = dut.receive(1)
    assert [p for p, _ in again] == [5]
    assert parse(again[0][1]).header["flags"] & RETRANSMIT
    assert parse(again[0][1]).lanes == partial.lanes

    # The parent's (already narrowed) result comes down and is relayed unchanged to both children.
    final = [(i % 100) - 50 for i in range(L)]
    dut.send(5, contribution(5, final, slot=2, epoch=9, op=RESULT, elem_type=INT8, shift=3))
    down = results_by_port(dut.receive(2), 2)
    assert sorted(down) == [1, 2]
    for port, pkt in down.items():
        assert pkt.lanes == final and pkt.header["elem_type"] == INT8 and pkt.header["shift"] == 3
        assert pkt.eth_dst == host_mac(port)

    # A lost result is recovered from the inner node's copy, identical to the first.
    dut.send(2, contribution(2, values(2), slot=2, epoch=9, flags=RETRANSMIT))
    back = dut.receive(1)
    assert [p for p, _ in back] == [2]
    pkt = parse(back[0][1])
    assert pkt.lanes == final and pkt.header["elem_type"] == INT8 and pkt.header["shift"] == 3


def test_shadow_copies_let_a_slot_be_reused(dut: Dut) -> None:
    job = Job(children=(1, 2), slot_count=1)
    setup(dut, job)
    for round_ in range(4):  # shadow 0, 1, 0, 1: each round needs the other copy's bits cleared
        shadow = round_ % 2
        a, b = values(round_ + 1), values(round_ + 7)
        dut.send(1, contribution(1, a, shadow=shadow))
        dut.send(2, contribution(2, b, shadow=shadow))
        got = results_by_port(dut.receive(2), 2)
        assert {p: pkt.lanes for p, pkt in got.items()} == {1: lane_sum(a, b), 2: lane_sum(a, b)}, f"round {round_}"
    assert dut.counter(C + "retransmissions", 1)[0] == 0


def test_a_newer_epoch_starts_afresh_and_an_older_one_is_dropped(dut: Dut) -> None:
    job = Job(children=(1, 2))
    setup(dut, job)
    dut.send(1, contribution(1, values(1), epoch=1))
    dut.send(2, contribution(2, values(2), epoch=1))
    assert len(dut.receive(2)) == 2
    # Same slot and shadow in the next all-reduce: not a retransmission, a new round.
    dut.send(1, contribution(1, values(3), epoch=2))
    dut.send(2, contribution(2, values(4), epoch=2))
    got = results_by_port(dut.receive(2), 2)
    assert got[1].lanes == lane_sum(values(3), values(4))
    # A late packet of epoch 1 must not touch epoch 2's cell.
    dut.send(1, contribution(1, values(9), epoch=1, flags=RETRANSMIT))
    assert dut.receive(0) == []
    assert dut.counter("P4inaIngress.drops", 1 * 16 + 10)[0] == 1
    # Epochs compare in serial-number order and wrap: each of these is newer than the one before.
    for epoch in (100, 227, 255, 0):
        dut.send(1, contribution(1, values(5), epoch=epoch))
        dut.send(2, contribution(2, values(6), epoch=epoch))
        assert results_by_port(dut.receive(2), 2)[2].lanes == lane_sum(values(5), values(6))


def test_a_new_install_token_resets_cells(dut: Dut) -> None:
    job = Job(children=(1, 2))
    setup(dut, job)
    dut.send(1, contribution(1, values(1), epoch=1))
    dut.send(2, contribution(2, values(2), epoch=1))
    assert len(dut.receive(2)) == 2
    # Reinstall (new token) and start again at epoch 1, as a restarted job does.
    dut.modify(
        JOB_CONFIG,
        {"job_id": 7},
        "set_job",
        dict(
            job_index=1,
            role=1,
            fan_in=2,
            slot_base=0,
            slot_count=8,
            mcast_grp=1,
            up_port=0,
            result_type=INT32,
            shift=0,
            token=2,
            up_type=INT32,
            up_shift=0,
            in_shift=0,
        ),
    )
    dut.send(1, contribution(1, values(3), epoch=1))
    dut.send(2, contribution(2, values(4), epoch=1))
    assert results_by_port(dut.receive(2), 2)[1].lanes == lane_sum(values(3), values(4))


def test_jobs_are_isolated(dut: Dut) -> None:
    install_hosts(dut)
    a = Job(job_id=7, job_index=1, children=(1, 2), slot_base=0, mcast_grp=1)
    b = Job(job_id=9, job_index=2, children=(3, 4), slot_base=8, mcast_grp=2)
    install_job(dut, a)
    install_job(dut, b)
    dut.send(1, contribution(1, values(1), job=7))
    dut.send(3, contribution(3, values(3), job=9))
    dut.send(4, contribution(4, values(4), job=9))
    got_b = results_by_port(dut.receive(2), 2)
    assert sorted(got_b) == [3, 4] and got_b[3].lanes == lane_sum(values(3), values(4))
    dut.send(2, contribution(2, values(2), job=7))
    got_a = results_by_port(dut.receive(2), 2)
    assert sorted(got_a) == [1, 2] and got_a[1].lanes == lane_sum(values(1), values(2))
    assert dut.counter(C + "contributions", 1)[0] == 2 and dut.counter(C + "contributions", 2)[0] == 2


# -- in-band exponent agreement: the next round's exponent is the minimum of the proposals ---------------
def test_an_exponent_round_agrees_the_minimum_proposal(dut: Dut) -> None:
    """ELEM_NONE contributions carry no lanes; the result carries min(next_exponent) to every child."""
    job = Job(children=(1, 2, 3))
    setup(dut, job)
    for port, proposal in ((1, 20), (2, -3), (3, 7)):
        dut.send(port, contribution(port, [], elem_type=NONE, slot=4, epoch=2, next_exponent=proposal, offset=4 * L))
    got = results_by_port(dut.receive(3), 3)
    assert sorted(got) == [1, 2, 3]
    for pkt in got.values():
        assert pkt.header["elem_type"] == NONE and pkt.lanes == [] and pkt.header["next_exponent"] == -3
        assert pkt.ip_total_len == 20 + 8 + AGG.header_bytes and pkt.header["op"] == RESULT
    assert dut.counter(C + "completions", 1)[0] == 1
    # a lost result: the retransmission gets the agreed exponent back, not its own proposal
    dut.send(1, contribution(1, [], elem_type=NONE, slot=4, epoch=2, next_exponent=20, offset=4 * L, flags=RETRANSMIT))
    ((port, frame),) = dut.receive(1)
    assert port == 1 and parse(frame).header["next_exponent"] == -3


def test_data_rounds_carry_the_next_agreement_with_their_sum(dut: Dut) -> None:
    job = Job(children=(1, 2))
    setup(dut, job)
    dut.send(1, contribution(1, values(1), shadow=1, exponent=5, next_exponent=9))
    dut.send(2, contribution(2, values(2), shadow=1, exponent=5, next_exponent=11))
    for pkt in results_by_port(dut.receive(2), 2).values():
        assert pkt.lanes == lane_sum(values(1), values(2))
        assert pkt.header["exponent"] == 5 and pkt.header["next_exponent"] == 9


def test_lanes_and_no_lanes_do_not_mix_in_a_round(dut: Dut) -> None:
    """An exponent-only contribution to a round that carries lanes (or the reverse) would corrupt the sum."""
    job = Job(children=(1, 2))
    setup(dut, job)
    dut.send(1, contribution(1, values(1)))
    dut.send(2, contribution(2, [], elem_type=NONE))
    assert dut.receive(0) == []
    assert dut.counter("P4inaIngress.drops", 1 * 16 + 5)[0] == 1  # DROP_SCALE_MISMATCH
    dut.send(2, contribution(2, [], elem_type=NONE, slot=1))
    dut.send(1, contribution(1, values(1), slot=1))
    assert dut.receive(0) == []
    assert dut.counter("P4inaIngress.drops", 1 * 16 + 5)[0] == 2


def test_an_exponent_round_with_trailing_bytes_is_malformed(dut: Dut) -> None:
    job = Job(children=(1, 2))
    setup(dut, job)
    dut.send(1, contribution(1, [], elem_type=NONE, trailer=b"\x00" * 4))
    assert dut.receive(0) == []
    assert dut.counter("P4inaIngress.drops", 1 * 16 + 1)[0] + dut.counter("P4inaIngress.drops", 0 * 16 + 1)[0] == 1


def test_an_inner_node_passes_the_partial_minimum_up(dut: Dut) -> None:
    job = Job(children=(1, 2), role=INNER, up_port=5)
    setup(dut, job)
    dut.send(1, contribution(1, [], elem_type=NONE, slot=3, next_exponent=12))
    dut.send(2, contribution(2, [], elem_type=NONE, slot=3, next_exponent=4))
    ((port, frame),) = dut.receive(1)
    up = parse(frame)
    assert port == 5 and up.header["op"] == CONTRIB and up.header["elem_type"] == NONE
    assert up.header["next_exponent"] == 4 and up.lanes == []
    # the root's answer (its own minimum over the whole tree) is stored and relayed down
    dut.send(5, contribution(5, [], elem_type=NONE, slot=3, op=RESULT, next_exponent=-1))
    down = results_by_port(dut.receive(2), 2)
    assert all(p.header["next_exponent"] == -1 and p.header["elem_type"] == NONE for p in down.values())
    dut.send(2, contribution(2, [], elem_type=NONE, slot=3, next_exponent=4, flags=RETRANSMIT))
    ((port, frame),) = dut.receive(1)
    assert port == 2 and parse(frame).header["next_exponent"] == -1


def test_an_inner_node_keeps_partial_sums_narrow_with_a_rounding_shift(dut: Dut) -> None:
    """up_shift 1: int8 lanes from two children go up as int8, the sum shifted right by one (rounded), the
    packet marked with the shift it now carries (in_shift + up_shift), so the parent can check the scales."""
    job = Job(children=(1, 2), role=INNER, up_port=5, result_type=INT8, shift=2, up_type=INT8, up_shift=1)
    setup(dut, job)
    a = [(i % 255) - 127 for i in range(L)]
    b = [((7 * i) % 255) - 127 for i in range(L)]
    dut.send(1, contribution(1, a, elem_type=INT8))
    dut.send(2, contribution(2, b, elem_type=INT8))
    ((port, frame),) = dut.receive(1)
    up = parse(frame)
    assert port == 5 and up.header["elem_type"] == INT8 and up.header["shift"] == 1
    assert up.lanes == [rshift(s, 1) for s in lane_sum(a, b)]
    assert up.ip_total_len == 20 + 8 + AGG.payload_bytes(INT8) and up.header["flags"] == 0


def test_a_child_packet_with_another_shift_is_refused(dut: Dut) -> None:
    """A switch whose children are switches expects their partials at its in_shift; anything else is a
    sum of different scales."""
    job = Job(children=(1, 2), result_type=INT8, shift=3, in_shift=1)
    setup(dut, job)
    dut.send(1, contribution(1, [3] * L, elem_type=INT8, shift=1))
    dut.send(2, contribution(2, [4] * L, elem_type=INT8, shift=0))
    assert dut.receive(0) == []
    assert dut.counter("P4inaIngress.drops", 1 * 16 + 5)[0] == 1  # DROP_SCALE_MISMATCH
    dut.send(2, contribution(2, [4] * L, elem_type=INT8, shift=1))
    for pkt in results_by_port(dut.receive(2), 2).values():  # the root shifts the remaining 3 - 1 = 2
        assert pkt.lanes == [rshift(7, 2)] * L and pkt.header["shift"] == 3


def test_a_contribution_that_would_outgrow_bmv2s_headroom_is_dropped(dut: Dut) -> None:
    """int8 lanes into a job that answers in int32 would grow the packet by 768 B (BMv2 allows 512)."""
    setup(dut, Job(children=(1, 2)))  # int32 results
    dut.send(1, contribution(1, [5] * L, elem_type=INT8))
    assert dut.receive(0) == []
    assert dut.counter("P4inaIngress.drops", 1 * 16 + 11)[0] == 1
