"""What the runner hands an agent: the in-network job it runs (JobTicket) and each step to take (StepCommand).

Both cross hosts.coordination's socket as JSON: the runner sends to_dict(), the agent rebuilds the object with
from_dict(). Each is checked where it is made and again where it is read, field by field: a missing or unknown
field, a value of the wrong type or out of its range raises TicketError naming the field and what it takes, so
a runner and an agent that disagree fail on the first step with a message, not deep inside a worker.

A JobTicket is built from the controller's plan in one place (experiments.harness.job_ticket): the lanes, shift
and slots the switches were given, the controller's error bound and lane limit for the tree, and the runner's
timers. Lanes are named by their integer type (wireformat.fixedpoint.LaneType): up_lanes what the hosts send,
down_lanes what comes back.
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from hosts.methods import METHODS
from hosts.workload import KINDS
from wireformat import AGG
from wireformat.fixedpoint import LaneType

T = TypeVar("T", bound="_Checked")


class TicketError(ValueError):
    """A ticket or command the other side cannot use; the message names the field and what it takes."""


def _range(lo: float | None = None, hi: float | None = None, *, above: float | None = None) -> dict[str, Any]:
    """Field metadata: lo <= value <= hi, or value > above."""
    return {"lo": lo, "hi": hi, "above": above}


def _kind(hint: Any) -> str:
    if get_origin(hint) is Literal:
        return " | ".join(repr(a) for a in get_args(hint))
    if isinstance(hint, type):
        return "a dict of " + hint.__name__ if dataclasses.is_dataclass(hint) else hint.__name__
    return str(hint)


def _check_value(where: str, value: Any, hint: Any, meta: Mapping[str, Any]) -> Any:
    """value as `hint` says (ints for floats are widened, dicts of a checked class rebuilt), or TicketError."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):  # X | None
        if value is None:
            return None
        (inner,) = [a for a in get_args(hint) if a is not type(None)]
        return _check_value(where, value, inner, meta)
    if origin is tuple:  # tuple[int, ...]: a JSON list, each item checked as the item type with this field's range
        if not isinstance(value, list | tuple):
            raise TicketError(f"{where}: expected a list, got {type(value).__name__} {value!r}")
        item = get_args(hint)[0]
        return tuple(_check_value(f"{where}[{i}]", v, item, meta) for i, v in enumerate(value))
    if origin is Literal:
        if value not in get_args(hint):
            old = ' ("none" is int32 now)' if value == "none" and "int32" in get_args(hint) else ""
            raise TicketError(f"{where}: {value!r} is not one of {_kind(hint)}{old}")
        return value
    if isinstance(hint, type) and issubclass(hint, _Checked):
        if isinstance(value, hint):
            return value
        if not isinstance(value, Mapping):
            raise TicketError(f"{where}: expected {_kind(hint)}, got {type(value).__name__} {value!r}")
        return hint.from_dict(value, where=where)
    # bool is an int to Python, not to a ticket: True is no job id
    ok = {
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
        bool: isinstance(value, bool),
    }[hint]
    if not ok:
        raise TicketError(f"{where}: expected {_kind(hint)}, got {type(value).__name__} {value!r}")
    if hint is float:
        value = float(value)
        if not math.isfinite(value):
            raise TicketError(f"{where}: expected a finite number, got {value!r}")
    lo, hi, above = meta.get("lo"), meta.get("hi"), meta.get("above")
    if lo is not None and value < lo:
        raise TicketError(f"{where}: {value!r} is below {lo}" + (f" (takes {lo}..{hi})" if hi is not None else ""))
    if hi is not None and value > hi:
        raise TicketError(f"{where}: {value!r} is above {hi}" + (f" (takes {lo}..{hi})" if lo is not None else ""))
    if above is not None and not value > above:
        raise TicketError(f"{where}: {value!r} must be > {above}")
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise TicketError(
            f"{where}: unknown {where.rsplit('.', 1)[-1]} {value!r}; choose from {', '.join(map(str, choices))}"
        )
    return value


def _fields(obj: Any) -> tuple[dataclasses.Field[Any], ...]:
    """dataclasses.fields of a _Checked class or instance (typed Any: _Checked itself is no dataclass)."""
    return dataclasses.fields(obj)


class _Checked:
    """A frozen dataclass whose fields are checked against their annotations and metadata when it is made."""

    _hints: ClassVar[dict[str, Any]]

    @classmethod
    def _field_hints(cls) -> dict[str, Any]:
        if "_hints" not in cls.__dict__:
            cls._hints = get_type_hints(cls)
        return {f.name: cls._hints[f.name] for f in _fields(cls)}

    def __post_init__(self) -> None:
        for f in _fields(self):
            where = f"{type(self).__name__}.{f.name}"
            value = _check_value(where, getattr(self, f.name), self._field_hints()[f.name], f.metadata)
            object.__setattr__(self, f.name, value)  # frozen: the checked value (an int widened to float)

    def to_dict(self) -> dict[str, Any]:
        """Every field, nested tickets as dicts: plain JSON types."""
        out: dict[str, Any] = {}
        for f in _fields(self):
            value = getattr(self, f.name)
            out[f.name] = (
                value.to_dict() if isinstance(value, _Checked) else list(value) if isinstance(value, tuple) else value
            )
        return out

    @classmethod
    def from_dict(cls: type[T], d: Mapping[str, Any], *, where: str | None = None) -> T:
        """The object to_dict() described: every field present, none unknown (TicketError names them)."""
        name = where or cls.__name__
        if not isinstance(d, Mapping):
            raise TicketError(f"{name}: expected a dict, got {type(d).__name__}")
        names = [f.name for f in _fields(cls)]
        missing = [n for n in names if n not in d]
        unknown = sorted(str(k) for k in d if k not in names)
        if missing or unknown:
            raise TicketError(
                f"{name}: "
                + "; ".join(
                    ([f"missing field(s) {', '.join(missing)}"] if missing else [])
                    + ([f"unknown field(s) {', '.join(unknown)}"] if unknown else [])
                )
                + f" (a {cls.__name__} has {', '.join(names)}: runner and agent from different versions?)"
            )
        hints = cls._field_hints()
        kwargs = {}
        for f in _fields(cls):
            kwargs[f.name] = _check_value(f"{name}.{f.name}", d[f.name], hints[f.name], f.metadata)
        return cls(**kwargs)


MAX_JOB_ID = AGG.field("job_id").max_value
MAX_SLOTS = AGG.field("slot").max_value + 1


@dataclass(frozen=True)
class JobTicket(_Checked):
    """One install of an in-network job, as its workers need it (hosts.inc_worker.IncJob is built from it)."""

    job_id: int = field(metadata=_range(1, MAX_JOB_ID))  # the id in every packet
    slots: int = field(metadata=_range(1, MAX_SLOTS))  # the job's slots on every switch: the worker's window
    up_lanes: LaneType  # what the hosts send
    down_lanes: LaneType  # what comes back (the root narrows the sum to it)
    shift: int = field(metadata=_range(0, 31))  # the root's right shift before narrowing
    # which install of the job: a new one (another token on the switches) gets a fresh worker, epochs from 1
    install: int = field(metadata=_range(0))
    timeout_s: float = field(metadata=_range(above=0.0))  # initial retransmission timeout
    min_timeout_s: float = field(metadata=_range(above=0.0))  # its floor (the timer follows the round trips)
    # the controller's bound on a decoded sum's rounding error for this tree (JobPlan.error_lsb); None: one root
    # switch does all the shifting
    error_lsb: float | None = field(default=None, metadata=_range(0.0))
    # the controller's limit on |lane| for this tree (JobPlan.q_limit); None: wireformat.fixedpoint's formula
    q_limit: int | None = field(default=None, metadata=_range(1))
    # no result for this long (after two timeouts): a switch of the tree is suspected dead; None: only retries end
    failure_timeout_s: float | None = field(default=None, metadata=_range(above=0.0))
    early_window: float | None = field(default=None, metadata=_range(0.0))  # IncJob.early_window; None: its default
    # the epoch of the install's first all-reduce by these workers; None: 1, as after a fresh install. A later
    # set of workers on the same install (`p4ina allreduce` run again) starts past the epochs its cells hold
    first_epoch: int | None = field(default=None, metadata=_range(0, 255))


@dataclass(frozen=True)
class RingSettings(_Checked):
    """The host methods' transport (ring, hier and tree alike); None: the method's default."""

    window: int | None = field(default=None, metadata=_range(1))  # datagrams in flight per peer
    timeout_s: float | None = field(default=None, metadata=_range(above=0.0))  # initial and minimum timeout


@dataclass(frozen=True)
class StepCommand(_Checked):
    """One measurement step: every rank all-reduces its input of this iteration with `method` and reports."""

    step: int = field(metadata=_range(0))  # the runner's step number (hosts.coordination's)
    method: str = field(metadata={"choices": tuple(METHODS)})  # hosts.methods
    size: int = field(metadata=_range(1))  # float32 elements
    iteration: int = field(metadata=_range(0))  # which inputs (hosts.workload: new tensors every iteration)
    input: str = field(default="normal", metadata={"choices": KINDS})  # hosts.workload's kind
    seed: int = field(default=0, metadata=_range(0))
    checker: int | None = field(default=None, metadata=_range(0))  # the rank that compares with numpy (None: none)
    ring: RingSettings = field(default_factory=RingSettings)
    job: JobTicket | None = None  # the in-network methods' job
    # After a host died: the agents (coordinator ranks) that take this step, in the order of their ranks in the job
    # (a member's rank is its index, the job's worker count their number); None: ranks 0..workers-1, each its own
    members: tuple[int, ...] | None = field(default=None, metadata=_range(0))
    # whose input each member contributes (hosts.workload's rank), in the members' order: a spare takes the dead
    # rank's; None: each member its own. The step's sum is over exactly these inputs, and is reported so
    inputs: tuple[int, ...] | None = field(default=None, metadata=_range(0))

    def __post_init__(self) -> None:
        super().__post_init__()
        if METHODS[self.method].in_network and self.job is None:
            raise TicketError(f"StepCommand.job: {self.method} runs through the switches and needs its job ticket")
        if self.members is not None:
            if not self.members or len(set(self.members)) != len(self.members):
                raise TicketError(f"StepCommand.members: {list(self.members)}: each agent once, at least one")
            if not METHODS[self.method].in_network:
                raise TicketError(
                    f"StepCommand.members: {self.method} is a host method; only in-network jobs change members"
                )
        if self.inputs is not None:
            if self.members is None or len(self.inputs) != len(self.members):
                raise TicketError("StepCommand.inputs: one input rank per member (and members given)")
            if len(set(self.inputs)) != len(self.inputs):
                raise TicketError(f"StepCommand.inputs: {list(self.inputs)}: each input once (a sum counts it once)")

    def seat(self, agent: int, workers: int) -> tuple[int, int, int] | None:
        """(rank in the job, the job's worker count, input rank) of coordinator rank `agent` of a job of `workers`
        in this step; None if it takes no part (a standby agent not called, or a rank left out)."""
        if self.members is None:
            return (agent, workers, agent) if agent < workers else None
        if agent not in self.members:
            return None
        i = self.members.index(agent)
        return i, len(self.members), (self.inputs[i] if self.inputs is not None else agent)


@dataclass(frozen=True)
class FailureNotice(_Checked):
    """The runner's word to the workers of one install of a job: a part of its tree failed (the controller heard
    it: a switch's P4Runtime stream broke, a link's port went down). They stop waiting for results at once and
    meet at the fail-over barrier, as after a failure timeout."""

    seq: int = field(metadata=_range(1))  # the coordinator's running number (a watcher asks for those after one)
    job_id: int = field(metadata=_range(1, MAX_JOB_ID))
    install: int = field(metadata=_range(0))  # which install's workers stop (JobTicket.install)
    kind: Literal["switch", "link", "host"]
    what: str  # the switch's name, the link "a-b", or the host (rank) whose agent is gone
    at: float = field(metadata=_range(0.0))  # when the controller heard it (hosts.clock)
