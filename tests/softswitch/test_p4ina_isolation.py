"""Fuzzing p4ina.json on the embedded switch: nothing that does not belong to a job touches its registers.

Job 9 owns ports 3 and 4 and cells [16, 32). Random bytes, and mutated
aggregation packets for any job arriving on ports outside its tree, or
naming another job on its own ports, are thrown at the switch; job 9's cells
must stay bit-identical and the switch must raise nothing. Both engines get the fuzz (C skipped
where there is no compiler), each on a switch of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from softswitch import ActionCall, Exact, SoftSwitch, TableEntry
from tests.dataplane.frames import contribution
from wireformat import AGG

PROGRAM = Path(__file__).resolve().parents[2] / "p4" / "build" / "p4ina.json"
A = "P4inaIngress.aggregation."
JOB9_CELLS = range(16, 32)  # slot_base 8, 8 slots, 2 shadow copies


def _switch(engine: str) -> SoftSwitch:
    sw = SoftSwitch(name=f"p4ina-fuzz-{engine}", engine=engine)
    sw.load_program(PROGRAM.read_bytes())
    assert sw.engine == engine
    # job 7: ports 1, 2, slots [0, 8); job 9: ports 3, 4, slots [8, 16). Both roots.
    for job, index, ports, base, grp in ((7, 1, (1, 2), 0, 1), (9, 2, (3, 4), 8, 2)):
        sw.table_insert(
            A + "job_config",
            TableEntry((Exact(job),), ActionCall(A + "set_job", (index, 1, 2, base, 8, grp, 0, 0, 0, 1, 0, 0, 0))),
        )
        for child, port in enumerate(ports):
            sw.table_insert(
                A + "job_ports", TableEntry((Exact(job), Exact(port)), ActionCall(A + "from_child", (child,)))
            )
        sw.mc_group_set(grp, [(p, c) for c, p in enumerate(ports)])
    # Leave job 9 mid-round in several cells, so there is state to corrupt.
    for slot in range(0, 8, 2):
        sw.process_packet(
            3, contribution(3, [slot * 100 + i for i in range(AGG.num_lanes)], job=9, slot=slot, shadow=slot % 4 // 2)
        )
    return sw


def job9_state(sw: SoftSwitch) -> list[int]:
    return [sw.register_read(name, cell) for name in sorted(sw.registers()) for cell in JOB9_CELLS]


_SWITCHES: dict[str, tuple[SoftSwitch, list[int]]] = {}


def switch_for(engine: str) -> tuple[SoftSwitch, list[int]]:
    """The engine's switch (made once: the fuzz keeps throwing packets at one switch) and job 9's state then."""
    if engine not in _SWITCHES:
        sw = _switch(engine)
        _SWITCHES[engine] = (sw, job9_state(sw))
    return _SWITCHES[engine]


def _mutate(frame: bytes, edits: list[tuple[int, int]], cut: int | None) -> bytes:
    out = bytearray(frame)
    for pos, value in edits:
        out[pos % len(out)] = value
    return bytes(out[:cut] if cut else out)


agg_frames = st.builds(
    lambda port, job, slot, shadow, elem, edits, cut: _mutate(
        contribution(port, [slot] * AGG.num_lanes, job=job, slot=slot, shadow=shadow, elem_type=elem), edits, cut
    ),
    port=st.integers(1, 5),
    job=st.integers(0, 0xFFFF),
    slot=st.integers(0, 20),
    shadow=st.integers(0, 1),
    elem=st.sampled_from(sorted(AGG.elem_types.values())),
    edits=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4),
    cut=st.none() | st.integers(0, 320),
)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(port=st.integers(0, 511), frame=st.binary(max_size=400) | agg_frames)
def test_foreign_packets_never_touch_job9(engine: str, port: int, frame: bytes) -> None:
    sw, before = switch_for(engine)
    if port in (3, 4) and len(frame) >= 46 and int.from_bytes(frame[46:48], "big") == 9:
        port = 5  # on job 9's own ports a packet naming job 9 does belong to it: send it elsewhere
    sw.process_packet(port, frame)
    assert sw.stats["errors"] == 0
    assert job9_state(sw) == before
