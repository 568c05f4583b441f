"""Bad input is dropped and counted by reason, and never touches a job's sums."""

from __future__ import annotations

import pytest

from tests.dataplane.backends import Dut
from tests.dataplane.frames import RESULT, contribution, parse
from tests.dataplane.program import Job, install_hosts, install_job
from wireformat import AGG

DROPS = "P4inaIngress.drops"
MALFORMED, UNKNOWN_JOB, BAD_PORT, BAD_SLOT, SCALE_MISMATCH = 1, 2, 3, 4, 5


def lanes(seed: int) -> list[int]:
    return [seed * 100 + i for i in range(AGG.num_lanes)]


BAD_PACKETS = {
    # name: (port, frame, job_index the drop is charged to, reason)
    "unknown job": (1, contribution(1, lanes(9), job=99), 0, UNKNOWN_JOB),
    "slot out of range": (1, contribution(1, lanes(9), slot=8), 1, BAD_SLOT),
    "port not in the tree": (4, contribution(4, lanes(9)), 1, BAD_PORT),
    "result from a child": (1, contribution(1, lanes(9), op=RESULT), 1, BAD_PORT),
    "truncated lanes": (1, contribution(1, lanes(9))[:-10], 0, MALFORMED),
    "trailing bytes": (1, contribution(1, lanes(9), trailer=b"\0" * 8), 0, MALFORMED),
    "bad version": (1, contribution(1, lanes(9), version=AGG.version - 1), 0, MALFORMED),  # the 64-lane v1 header
    "bad elem type": (1, contribution(1, lanes(9), elem_type=7), 0, MALFORMED),
    "bad op": (1, contribution(1, lanes(9), op=9), 0, MALFORMED),
}


@pytest.mark.parametrize("case", sorted(BAD_PACKETS))
def test_bad_packets_are_dropped_counted_and_harmless(dut: Dut, case: str) -> None:
    port, frame, job_index, reason = BAD_PACKETS[case]
    job = Job(children=(1, 2, 3))
    install_hosts(dut)
    install_job(dut, job)
    dut.send(1, contribution(1, lanes(1)))
    dut.send(port, frame)
    assert dut.receive(0) == [], f"{case}: nothing may leave the switch"
    assert dut.counter(DROPS, job_index * 16 + reason)[0] == 1, f"{case}: counted under its reason"
    dut.send(2, contribution(2, lanes(2)))
    dut.send(3, contribution(3, lanes(3)))
    got = dut.receive(3)
    assert len(got) == 3
    assert parse(got[0][1]).lanes == [a + b + c for a, b, c in zip(lanes(1), lanes(2), lanes(3))], (
        f"{case} changed the sum"
    )


def test_a_contribution_with_another_exponent_is_refused(dut: Dut) -> None:
    install_hosts(dut)
    install_job(dut, Job(children=(1, 2)))
    dut.send(1, contribution(1, lanes(1), exponent=8))
    dut.send(2, contribution(2, lanes(2), exponent=7))
    assert dut.receive(0) == []
    assert dut.counter(DROPS, 1 * 16 + SCALE_MISMATCH)[0] == 1
    dut.send(2, contribution(2, lanes(2), exponent=8))
    assert len(dut.receive(2)) == 2
