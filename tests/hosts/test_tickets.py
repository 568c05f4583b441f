"""The runner's job ticket and step command: one shape on both sides, every field checked by name."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, cast

import pytest

from hosts.agent import Agent, AgentConfig
from hosts.coordination import CoordinatorClient
from hosts.fakeswitch import FakeSwitch, FakeTransport
from hosts.inc_worker import IncJob
from hosts.packets import Endpoint
from hosts.tickets import JobTicket, RingSettings, StepCommand, TicketError
from wireformat import fixedpoint as fxp

TICKET = JobTicket(
    job_id=7,
    slots=64,
    up_lanes="int32",
    down_lanes="int8",
    shift=24,
    install=3,
    timeout_s=0.5,
    min_timeout_s=0.25,
    error_lsb=8.5,
    q_limit=1000,
    failure_timeout_s=1.5,
    early_window=0.0,
    first_epoch=200,
)
COMMAND = StepCommand(
    step=12,
    method="inc-int8",
    size=4096,
    iteration=2,
    input="ones",
    seed=5,
    checker=0,
    ring=RingSettings(window=64, timeout_s=0.5),
    job=TICKET,
)
GOLDEN_TICKET = {
    "job_id": 7,
    "slots": 64,
    "up_lanes": "int32",
    "down_lanes": "int8",
    "shift": 24,
    "install": 3,
    "timeout_s": 0.5,
    "min_timeout_s": 0.25,
    "error_lsb": 8.5,
    "q_limit": 1000,
    "failure_timeout_s": 1.5,
    "early_window": 0.0,
    "first_epoch": 200,
}
GOLDEN_COMMAND = {
    "step": 12,
    "method": "inc-int8",
    "size": 4096,
    "iteration": 2,
    "input": "ones",
    "seed": 5,
    "checker": 0,
    "ring": {"window": 64, "timeout_s": 0.5},
    "job": GOLDEN_TICKET,
    "members": None,
    "inputs": None,
}


def over_json(d: dict[str, Any]) -> dict[str, Any]:
    """What the coordinator's socket does to a dict."""
    return cast(dict[str, Any], json.loads(json.dumps(d)))


def test_golden_dicts() -> None:
    """The wire shape: a change here is a change of what runner and agent exchange (both ends move together)."""
    assert TICKET.to_dict() == GOLDEN_TICKET
    assert COMMAND.to_dict() == GOLDEN_COMMAND
    assert list(TICKET.to_dict()) == list(GOLDEN_TICKET)  # every field, in declaration order


def test_round_trip_through_json() -> None:
    assert JobTicket.from_dict(over_json(TICKET.to_dict())) == TICKET
    assert StepCommand.from_dict(over_json(COMMAND.to_dict())) == COMMAND
    ring = StepCommand(step=1, method="ring", size=10, iteration=0)  # defaults: no job, no checker, default ring
    assert StepCommand.from_dict(over_json(ring.to_dict())) == ring
    assert ring.to_dict()["job"] is None and ring.to_dict()["ring"] == {"window": None, "timeout_s": None}


def test_whole_numbers_are_read_as_seconds() -> None:
    """JSON writers may drop a float's .0: 5 seconds read back as 5.0, not refused."""
    back = JobTicket.from_dict({**GOLDEN_TICKET, "timeout_s": 5, "error_lsb": 0})
    assert back.timeout_s == 5.0 and isinstance(back.timeout_s, float) and back.error_lsb == 0.0


@pytest.mark.parametrize("name", list(GOLDEN_TICKET))
def test_each_missing_ticket_field_is_refused_by_name(name: str) -> None:
    d = dict(GOLDEN_TICKET)
    del d[name]
    with pytest.raises(TicketError, match=rf"^JobTicket: missing field\(s\) {name} \(a JobTicket has job_id, "):
        JobTicket.from_dict(d)


@pytest.mark.parametrize("name", list(GOLDEN_COMMAND))
def test_each_missing_command_field_is_refused_by_name(name: str) -> None:
    d = dict(GOLDEN_COMMAND)
    del d[name]
    with pytest.raises(TicketError, match=rf"^StepCommand: missing field\(s\) {name} "):
        StepCommand.from_dict(d)


def test_unknown_fields_are_refused_by_name_and_the_old_lane_names_with_them() -> None:
    old = {**GOLDEN_TICKET, "contrib_type": 0, "result_type": 2}
    with pytest.raises(TicketError, match=r"JobTicket: unknown field\(s\) contrib_type, result_type \("):
        JobTicket.from_dict(old)
    with pytest.raises(TicketError, match=r"StepCommand: unknown field\(s\) phase"):
        StepCommand.from_dict({**GOLDEN_COMMAND, "phase": "loss"})
    # nested: the ticket inside a command, and the ring settings, name their path
    with pytest.raises(TicketError, match=r"StepCommand.job: missing field\(s\) q_limit; unknown field\(s\) max_lane"):
        job = {k: v for k, v in GOLDEN_TICKET.items() if k != "q_limit"}
        StepCommand.from_dict({**GOLDEN_COMMAND, "job": {**job, "max_lane": 3}})
    with pytest.raises(TicketError, match=r"StepCommand.ring: unknown field\(s\) ack_every"):
        StepCommand.from_dict({**GOLDEN_COMMAND, "ring": {"window": 1, "timeout_s": 1.0, "ack_every": 4}})


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("job_id", "7", "expected int, got str '7'"),
        ("job_id", True, "expected int, got bool True"),
        ("job_id", 7.0, "expected int, got float 7.0"),
        ("job_id", 0, r"0 is below 1 \(takes 1..65535\)"),
        ("job_id", 65536, r"65536 is above 65535 \(takes 1..65535\)"),
        ("slots", 0, "0 is below 1"),
        ("slots", None, "expected int, got NoneType None"),
        ("up_lanes", "none", "'none' is not one of 'int32' | 'int16' | 'int8' \\(\"none\" is int32 now\\)"),
        ("down_lanes", 2, "2 is not one of 'int32' | 'int16' | 'int8'"),
        ("shift", 32, "32 is above 31"),
        ("install", -1, "-1 is below 0"),
        ("timeout_s", 0.0, "0.0 must be > 0.0"),
        ("timeout_s", "fast", "expected float, got str 'fast'"),
        ("min_timeout_s", float("nan"), "expected a finite number, got nan"),
        ("error_lsb", -1.0, "-1.0 is below 0.0"),
        ("q_limit", 0, "0 is below 1"),
        ("q_limit", 1.5, "expected int, got float 1.5"),
        ("failure_timeout_s", -0.5, "-0.5 must be > 0.0"),
        ("early_window", "off", "expected float, got str 'off'"),
        ("first_epoch", 256, "256 is above 255"),
    ],
)
def test_each_ill_typed_or_out_of_range_ticket_field_is_refused_by_name(name: str, value: Any, why: str) -> None:
    with pytest.raises(TicketError, match=rf"^JobTicket\.{name}: {why}"):
        JobTicket.from_dict({**GOLDEN_TICKET, name: value})
    # the runner's side refuses the same at construction
    with pytest.raises(TicketError, match=rf"^JobTicket\.{name}: {why}"):
        dataclasses.replace(TICKET, **{name: value})


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("step", -1, "-1 is below 0"),
        ("method", "inc-fp8", "unknown method 'inc-fp8'; choose from inc-int32, inc-int16, inc-int8, ring"),
        ("size", 0, "0 is below 1"),
        ("size", "4096", "expected int, got str '4096'"),
        ("iteration", None, "expected int, got NoneType None"),
        ("input", "gaussian", "unknown input 'gaussian'; choose from normal, uniform, ones, zeros, wide"),
        ("seed", 1.0, "expected int, got float 1.0"),
        ("checker", -1, "-1 is below 0"),
        ("ring", [64, 0.5], "expected a dict of RingSettings, got list"),
        ("job", "7", "expected a dict of JobTicket, got str '7'"),
        ("job", None, "inc-int8 runs through the switches and needs its job ticket"),
    ],
)
def test_each_ill_typed_or_out_of_range_command_field_is_refused_by_name(name: str, value: Any, why: str) -> None:
    with pytest.raises(TicketError, match=rf"^StepCommand\.{name}: {why}"):
        StepCommand.from_dict({**GOLDEN_COMMAND, name: value})


def test_nested_fields_name_their_path() -> None:
    with pytest.raises(TicketError, match=r"^StepCommand\.ring\.window: 0 is below 1"):
        StepCommand.from_dict({**GOLDEN_COMMAND, "ring": {"window": 0, "timeout_s": None}})
    with pytest.raises(TicketError, match=r"^StepCommand\.job\.shift: expected int, got str '24'"):
        StepCommand.from_dict({**GOLDEN_COMMAND, "job": {**GOLDEN_TICKET, "shift": "24"}})
    with pytest.raises(TicketError, match=r"^JobTicket: expected a dict, got list"):
        JobTicket.from_dict([1, 2])  # type: ignore[arg-type]


def test_the_harness_builds_what_the_agent_reads() -> None:
    """A job planned by the controller on a fat-tree (int16 up, int8 down, over two pods) becomes the ticket the
    harness hands out, crosses JSON, and the agent's worker is configured as the switches were."""
    from controller.fattree import fat_tree
    from controller.planner import JobSpec, plan_job
    from experiments.harness import job_ticket

    hosts = ["h1", "h2", "h5", "h6"]
    plan = plan_job(fat_tree(4), JobSpec.make(9, hosts, "int8", up_lanes="int16", slots=32))
    ticket = job_ticket(plan, install=4, timeout_s=0.5, failure_timeout_s=2.0)
    assert ticket.min_timeout_s == 0.5 and ticket.early_window is None  # the builder's defaults
    read = StepCommand.from_dict(
        over_json(StepCommand(step=1, method="inc-int8", size=10, iteration=0, job=ticket).to_dict())
    )
    assert read.job == ticket

    root = plan.on(plan.root)
    switch = FakeSwitch(job_id=9, n_workers=len(hosts), slot_count=32, result_type=root.result_type, shift=root.shift)
    agent = Agent(
        AgentConfig(rank=1, workers=len(hosts), coord="unix:/nonexistent"),
        cast(CoordinatorClient, None),  # never asked: building a worker talks to nobody
        transport=FakeTransport(switch, 1),
        endpoint=Endpoint("02:00:00:00:00:02", "10.0.0.2"),
    )
    assert read.job is not None
    job: IncJob = agent._inc_worker(read.job).job
    assert (job.job_id, job.rank, job.n_workers, job.slot_count) == (9, 1, 4, 32)
    assert (job.up_lanes, job.down_lanes) == ("int16", "int8") == (plan.spec.up_lanes, plan.spec.down_lanes)
    # what the switches send down, at the shift they apply: a worker configured otherwise refuses every result
    assert all(sp.result_type == job.down_elem == fxp.lane_elem("int8") for sp in plan.switches)
    assert job.shift == plan.spec.shift == root.shift == 10
    assert job.up_elem == fxp.lane_elem("int16")
    # the controller's figures for this tree, not the single-switch defaults
    assert job.q_limit == plan.q_limit and job.error_lsb == plan.error_lsb
    assert (job.timeout_s, job.min_timeout_s, job.failure_timeout_s) == (0.5, 0.5, 2.0)
    assert job.early_window == IncJob.early_window  # None in the ticket: the worker's own
    assert job.first_epoch == 1  # None in the ticket: a fresh install's
    later = agent._inc_worker(dataclasses.replace(read.job, install=6, first_epoch=130)).job
    assert later.first_epoch == 130  # a later run on the same install starts past its cells' epochs
    # a new install is a new worker; the same install, the same one
    assert agent._inc_worker(read.job) is agent._inc_worker(read.job)
    again = agent._inc_worker(dataclasses.replace(read.job, install=5))
    assert again.job.job_id == 9 and ("inc", 9, 4) not in agent._workers
