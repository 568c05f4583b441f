"""Workers of a job start together and report to the experiment runner.

The one primitive is ``exchange(tag, value) -> [value of rank 0, ..., rank n-1]``:
it returns once every rank has contributed to that tag, so it is a barrier
(with ``max`` over the values it is an agreement). Two implementations:
``LocalGroup`` for threads of one process (tests), and a line-delimited JSON
server (``CoordinatorServer``) that the runner hosts on a Unix socket or
127.0.0.1.  A Unix socket path is reachable from every Mininet host and
network namespace (they share the file system, not the network), so control
traffic never crosses the emulated network it would perturb; nothing an
all-reduce method needs travels this way (the in-network method agrees its
exponents in the data plane), only the measurement's own start signal.

For experiments the server also drives long-lived agents (hosts.agent), one
per host: the runner posts numbered steps (``post``), each agent takes them in
order (``next_command``), meets the others at the step's barrier, whose
release instant on the shared clock (hosts.clock) is the all-reduce's common
start, and reports its result for the step (``step_report``). A release hook
lets the runner read counters at exactly that instant, and a decide hook lets
it answer a barrier (every rank's value in, one verdict out to all): the
in-network workers' switch-failure report is such a barrier, answered with
the re-planned job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import socketserver
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from hosts import clock

LOG = logging.getLogger(__name__)


class CoordinationError(RuntimeError):
    """The coordinator is unreachable, timed out, or answered nonsense."""


class Group(Protocol):
    rank: int
    size: int

    def exchange(self, tag: str, value: Any) -> list[Any]: ...


class SizeMismatchError(ValueError):
    """The workers of one all-reduce passed tensors of different sizes."""


def agree_max(group: Group) -> Callable[[str, float, int], float]:
    """An Agreement for IncWorker: barrier, same tensor size everywhere, maximum of max|x|."""

    def agree(tag: str, local: float, size: int) -> float:
        values = group.exchange(tag, [float(local), int(size)])
        return float(max(v[0] for v in values)) if same_size(values, tag) else 0.0

    return agree


def same_size(values: Sequence[Sequence[Any]], tag: str) -> bool:
    """Raise SizeMismatchError unless every rank's [..., size] entry agrees."""
    sizes = [int(v[-1]) for v in values]
    if len(set(sizes)) > 1:
        raise SizeMismatchError(f"{tag}: the workers' tensors differ in size (by rank: {sizes})")
    return True


# -- in one process ---------------------------------------------------------------------------
class _LocalHub:
    def __init__(
        self,
        size: int,
        on_release: Callable[[str], None] | None = None,
        decide: Callable[[str, list[Any]], Any] | None = None,
    ) -> None:
        # the ranks a barrier waits for: 0..size-1 until the runner names the survivors (set_members)
        self.members: tuple[int, ...] = tuple(range(size))
        self.decide = decide  # called by the last arrival with every rank's value; its answer goes to all
        self.decisions: dict[str, Any] = {}
        self.cond = threading.Condition()
        self.values: dict[str, dict[int, Any]] = defaultdict(dict)
        self.taken: dict[str, int] = defaultdict(int)
        self.released: dict[str, float] = {}  # tag -> release instant (hosts.clock), while the tag is open
        self.on_release = on_release  # called by the last arrival, before anyone is released
        self.failure: str | None = None  # set when a rank gave up: nobody waits for it any more

    @property
    def size(self) -> int:
        return len(self.members)

    def fail(self, why: str) -> None:
        with self.cond:
            self.failure = self.failure or why
            self.cond.notify_all()

    def set_members(self, members: Sequence[int]) -> None:
        """Barriers from now on wait for these ranks (in this order in every answer), and a failure that named a
        rank no longer among them is over: a job that goes on without a dead host, or with a spare in its place."""
        with self.cond:
            self.members = tuple(members)
            self.failure = None
            self.cond.notify_all()

    def complete(self, tag: str) -> bool:
        return all(r in self.values[tag] for r in self.members)


class LocalGroup:
    """One member of a group of threads; make them with ``LocalGroup.create(n)``."""

    def __init__(self, hub: _LocalHub, rank: int, timeout_s: float) -> None:
        self._hub, self.rank, self.size, self.timeout_s = hub, rank, hub.size, timeout_s

    @classmethod
    def create(cls, size: int, timeout_s: float = 60.0) -> list[LocalGroup]:
        hub = _LocalHub(size)
        return [cls(hub, r, timeout_s) for r in range(size)]

    def exchange(self, tag: str, value: Any) -> list[Any]:
        return self.timed_exchange(tag, value)[0]

    def timed_exchange(self, tag: str, value: Any) -> tuple[list[Any], float]:
        """exchange(), and the instant (hosts.clock) the last rank arrived and released everyone."""
        values, released, _ = self.decided_exchange(tag, value)
        return values, released

    def decided_exchange(self, tag: str, value: Any) -> tuple[list[Any], float, Any]:
        """timed_exchange(), and what the hub's `decide` hook answered for this tag (None without one)."""
        hub = self._hub
        with hub.cond:
            if self.rank in hub.values[tag]:
                raise CoordinationError(f"rank {self.rank} contributed to {tag!r} twice")
            if self.rank not in hub.members:
                raise CoordinationError(f"rank {self.rank} is not a member of {tag!r} (members {list(hub.members)})")
            hub.values[tag][self.rank] = value
            if hub.complete(tag):
                if hub.on_release is not None:
                    hub.on_release(tag)
                if hub.decide is not None:
                    values = [hub.values[tag][r] for r in hub.members]
                    try:
                        hub.decisions[tag] = hub.decide(tag, values)
                    except Exception as ex:  # the ranks get the reason instead of a hang
                        LOG.exception("deciding %s failed", tag)
                        hub.decisions[tag] = {"error": f"{type(ex).__name__}: {ex}"}
                hub.released[tag] = clock.now()
            hub.cond.notify_all()
            arrived = hub.cond.wait_for(lambda: hub.complete(tag) or hub.failure, self.timeout_s)
            if hub.failure and not hub.complete(tag):
                raise CoordinationError(f"{tag!r}: {hub.failure}")
            if not arrived:
                raise CoordinationError(f"{tag!r}: only ranks {sorted(hub.values[tag])} arrived in {self.timeout_s}s")
            out = [hub.values[tag][r] for r in hub.members]
            released = hub.released[tag]
            decision = hub.decisions.get(tag)
            hub.taken[tag] += 1
            if hub.taken[tag] == hub.size:
                del hub.values[tag], hub.taken[tag], hub.released[tag]
                hub.decisions.pop(tag, None)
            return out, released, decision


# -- across processes ---------------------------------------------------------------------------
def parse_address(address: str) -> tuple[int, Any]:
    """'unix:/path' or 'tcp:127.0.0.1:port' -> (socket family, sockaddr)."""
    kind, _, rest = address.partition(":")
    if kind == "unix" and rest:
        return socket.AF_UNIX, rest
    if kind == "tcp":
        host, _, port = rest.rpartition(":")
        if host and port.isdigit():
            return socket.AF_INET, (host, int(port))
    raise ValueError(f"coordinator address {address!r}: expected 'unix:/path' or 'tcp:HOST:PORT'")


class CoordinatorServer:
    """Serves exchanges for `size` ranks and collects their reports (JSON objects).

    on_release(tag) runs when the last rank reaches a barrier, before it is released (the runner reads
    its link and CPU counters there, so they bracket exactly the all-reduce that follows).
    """

    def __init__(
        self,
        address: str,
        size: int,
        timeout_s: float = 300.0,
        on_release: Callable[[str], None] | None = None,
        decide: Callable[[str, list[Any]], Any] | None = None,
        ask: Callable[[str, int, Any], Any] | None = None,
        standby: int = 0,
    ) -> None:
        self.size = size
        # hot-standby agents, ranks size..size+standby-1: they take no step until the runner names one a member
        # (set_members) in a dead rank's place
        self.standby = standby
        self.timeout_s = timeout_s
        self.ask = ask  # one rank's question, answered at once (no barrier): e.g. "is my job's tree alive?"
        self._hub = _LocalHub(size, on_release, decide)
        self.reports: dict[int, dict[str, Any]] = {}
        self._reports_cond = threading.Condition()
        self._commands: dict[int, dict[str, Any]] = {}  # step -> command, for the agents
        self._step_reports: dict[int, dict[int, dict[str, Any]]] = defaultdict(dict)
        self._commands_cond = threading.Condition()
        # Barriers that call back ranks which already finished their step (tag -> step, attempt, ranks called)
        self._call_ins: dict[str, dict[str, Any]] = {}
        # failure notices for the agents' watchers (notify / watch), in order
        self._notices: list[dict[str, Any]] = []
        self._notices_cond = threading.Condition()
        # an agent's command connection that closes before the runner said quit: its process is gone (the kernel
        # closed its socket). Every barrier fails at once with the rank's name (nobody waits for it), and
        # on_agent_lost(rank) lets the runner tell the others' workers to stop waiting on the data plane.
        self.lost: set[int] = set()
        self.on_agent_lost: Callable[[int], None] | None = None
        self._quitting = False
        family, sockaddr = parse_address(address)
        if family == socket.AF_UNIX and os.path.exists(sockaddr):
            os.unlink(sockaddr)
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                agent: int | None = None  # the rank whose command loop this connection is (it asked "next")
                try:
                    for line in self.rfile:
                        try:
                            msg = json.loads(line)
                            if msg.get("op") == "next":
                                agent = int(msg["rank"])
                            reply = outer._handle(msg)
                        except (ValueError, KeyError, CoordinationError) as ex:
                            reply = {"error": str(ex)}
                        self.wfile.write((json.dumps(reply) + "\n").encode())
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    # the agent went while its answer was on the way (a quitting or killed agent): nothing to
                    # tell it; a lost agent is handled below
                    LOG.debug("coordinator: a connection closed before its reply", exc_info=True)
                finally:
                    if agent is not None:
                        outer._agent_gone(agent)

        base = socketserver.ThreadingUnixStreamServer if family == socket.AF_UNIX else socketserver.ThreadingTCPServer
        base.allow_reuse_address = True
        base.daemon_threads = True

        class Server(base):  # type: ignore[valid-type,misc]
            # every agent opens two connections (commands, notices), standby agents too, all at start: the
            # default backlog of 5 refuses a Unix socket's connect with EAGAIN while the accept thread catches up
            request_queue_size = 128

        self._server = Server(sockaddr, Handler)
        if family == socket.AF_UNIX:
            self.address = f"unix:{sockaddr}"
        else:
            bound = self._server.server_address  # an AF_INET server's (host, port), the port the kernel chose
            assert isinstance(bound, tuple) and isinstance(bound[0], str)
            self.address = f"tcp:{bound[0]}:{bound[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="coordinator", daemon=True)

    def _handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        rank = int(msg["rank"])
        if not 0 <= rank < self.size + self.standby:
            raise CoordinationError(f"rank {rank} not in 0..{self.size + self.standby - 1}")
        if msg["op"] == "exchange":
            tag = str(msg["tag"])
            call_in = msg.get("call_in")
            if call_in is not None:
                self._open_call_in(tag, int(call_in["step"]), int(call_in.get("attempt", 0)), rank)
            member = LocalGroup(self._hub, rank, self.timeout_s)
            try:
                values, released, decision = member.decided_exchange(tag, msg.get("value"))
            finally:
                if call_in is not None:
                    self._close_call_in(tag)
            return {"values": values, "released": released, "decision": decision}
        if msg["op"] == "ask":
            try:
                answer = self.ask(str(msg["topic"]), rank, msg.get("value")) if self.ask is not None else None
            except Exception as ex:  # the rank gets the reason
                LOG.exception("answering %s failed", msg["topic"])
                answer = {"error": f"{type(ex).__name__}: {ex}"}
            return {"answer": answer}
        if msg["op"] == "watch":
            return {"notices": self._watch(int(msg.get("after", 0)), float(msg.get("wait", self.timeout_s)))}
        if msg["op"] == "next":
            return {
                "command": self._next_command(int(msg.get("after", -1)), float(msg.get("wait", self.timeout_s)), rank)
            }
        if msg["op"] == "step_report":
            step = int(msg["step"])
            with self._commands_cond:
                self._step_reports[step][rank] = msg["report"]
                self._commands_cond.notify_all()
            return {"ok": True}
        if msg["op"] == "report":
            report = msg["report"]
            if isinstance(report, dict) and "error" in report:
                self._hub.fail(f"rank {rank} failed: {report['error']}")
            with self._reports_cond:
                self.reports[rank] = report
                self._reports_cond.notify_all()
            return {"ok": True}
        raise CoordinationError(f"unknown op {msg['op']!r}")

    # -- failure notices ---------------------------------------------------------------------
    def notify(self, notice: dict[str, Any]) -> int:
        """Hand a failure notice (hosts.tickets.FailureNotice's fields but seq) to every agent's watcher at
        once; returns its seq."""
        with self._notices_cond:
            seq = len(self._notices) + 1
            self._notices.append({**notice, "seq": seq})
            self._notices_cond.notify_all()
            return seq

    def _watch(self, after: int, wait_s: float) -> list[dict[str, Any]]:
        with self._notices_cond:
            self._notices_cond.wait_for(lambda: len(self._notices) > after, wait_s)
            return self._notices[after:]

    @property
    def members(self) -> tuple[int, ...]:
        """The ranks that barriers and step reports wait for."""
        return self._hub.members

    def set_members(self, members: Sequence[int]) -> None:
        """Barriers and step reports wait for these ranks from now on (survivors, or survivors and a spare)."""
        known = range(self.size + self.standby)
        bad = [r for r in members if r not in known or r in self.lost]
        if bad or len(set(members)) != len(members) or not members:
            raise CoordinationError(
                f"members {list(members)}: each rank once, none lost ({sorted(self.lost)}), all in 0..{known.stop - 1}"
            )
        self._hub.set_members(members)
        with self._commands_cond:
            self._commands_cond.notify_all()

    def start(self) -> CoordinatorServer:
        self._thread.start()
        return self

    # -- driving agents -------------------------------------------------------------------
    def _agent_gone(self, rank: int) -> None:
        with self._commands_cond:
            if self._quitting or rank in self.lost:
                return
            self.lost.add(rank)
            self._commands_cond.notify_all()
        LOG.warning("rank %d's agent is gone (its coordinator connection closed)", rank)
        self._hub.fail(f"rank {rank}'s agent is gone (its process ended)")
        if self.on_agent_lost is not None:
            try:
                self.on_agent_lost(rank)
            except Exception:
                LOG.exception("telling the runner rank %d is gone failed", rank)

    def post(self, step: int, command: dict[str, Any]) -> None:
        """Make `command` the agents' step `step` (steps are taken in increasing order)."""
        with self._commands_cond:
            if command.get("op") == "quit":
                self._quitting = True
            self._commands[step] = {**command, "step": step}
            self._commands_cond.notify_all()

    def _next_command(self, after: int, wait_s: float, rank: int | None = None) -> dict[str, Any] | None:
        """The first step after `after`; or, for a rank that finished a step whose other ranks now meet at a
        calling-in barrier without it, a "rejoin" command naming that barrier (its report is withdrawn: the
        step is not over for it until it reports again)."""
        with self._commands_cond:
            called: list[dict[str, Any]] = []

            def ready() -> bool:
                if rank is not None:
                    for tag, c in self._call_ins.items():
                        if self._owes(tag, c, rank):
                            c["called"].add(rank)
                            self._step_reports[c["step"]].pop(rank, None)
                            called.append({"op": "rejoin", "tag": tag, "step": c["step"], "attempt": c["attempt"]})
                            return True
                return any(s > after for s in self._commands)

            if not self._commands_cond.wait_for(ready, wait_s):
                return None
            if called:
                return called[0]
            return self._commands[min(s for s in self._commands if s > after)]

    def _owes(self, tag: str, c: dict[str, Any], rank: int) -> bool:
        """Whether `rank` is wanted at the calling-in barrier `tag`: it reported the barrier's step without an
        error (it finished it), has not arrived there, and was not called yet. Caller holds _commands_cond.
        Every rank of a calling-in barrier passes call_in, so arrivals are the barrier's own record (no lock
        of the hub, which is held while the runner decides)."""
        if rank in c["called"] or rank in c["arrived"]:
            return False
        report = self._step_reports.get(c["step"], {}).get(rank)
        return isinstance(report, dict) and "error" not in report

    def _open_call_in(self, tag: str, step: int, attempt: int, rank: int) -> None:
        with self._commands_cond:
            c = self._call_ins.setdefault(tag, {"step": step, "attempt": attempt, "called": set(), "arrived": set()})
            c["arrived"].add(rank)
            self._commands_cond.notify_all()

    def _close_call_in(self, tag: str) -> None:
        with self._commands_cond:
            self._call_ins.pop(tag, None)

    def step_reports(
        self, step: int, timeout_s: float, alive: Callable[[], bool] = lambda: True
    ) -> dict[int, dict[str, Any]]:
        """Every member's report of `step`; fewer if the timeout passes, `alive()` turns False or the members that
        have not reported are gone (`lost`)."""
        deadline = clock.now() + timeout_s
        with self._commands_cond:
            while (
                not set(self.members) <= set(self._step_reports[step]) | self.lost
                and clock.now() < deadline
                and alive()
            ):
                self._commands_cond.wait(min(0.2, max(0.0, deadline - clock.now())))
            return dict(self._step_reports[step])

    def wait_reports(self, timeout_s: float) -> dict[int, dict[str, Any]]:
        with self._reports_cond:
            if not self._reports_cond.wait_for(lambda: len(self.reports) == self.size, timeout_s):
                raise CoordinationError(f"only ranks {sorted(self.reports)} reported within {timeout_s}s")
            return dict(self.reports)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        family, sockaddr = parse_address(self.address)
        if family == socket.AF_UNIX and os.path.exists(sockaddr):
            os.unlink(sockaddr)

    def __enter__(self) -> CoordinatorServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class CoordinatorClient:
    """A worker's connection to the CoordinatorServer."""

    def __init__(self, address: str, rank: int, size: int, timeout_s: float = 300.0) -> None:
        family, sockaddr = parse_address(address)
        self.rank, self.size = rank, size
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.settimeout(timeout_s)
        try:
            self._sock.connect(sockaddr)
        except OSError as ex:
            self._sock.close()
            raise CoordinationError(f"cannot reach the coordinator at {address}: {ex}") from ex
        self._file = self._sock.makefile("rwb")

    def _call(self, msg: dict[str, Any]) -> dict[str, Any]:
        try:
            self._file.write((json.dumps({**msg, "rank": self.rank}) + "\n").encode())
            self._file.flush()
            line = self._file.readline()
        except OSError as ex:
            raise CoordinationError(f"coordinator connection failed during {msg['op']}: {ex}") from ex
        if not line:
            raise CoordinationError("the coordinator closed the connection")
        reply = json.loads(line)
        if "error" in reply:
            raise CoordinationError(f"coordinator: {reply['error']}")
        return reply

    def exchange(self, tag: str, value: Any) -> list[Any]:
        return list(self._call({"op": "exchange", "tag": tag, "value": value})["values"])

    def timed_exchange(self, tag: str, value: Any) -> tuple[list[Any], float]:
        reply = self._call({"op": "exchange", "tag": tag, "value": value})
        return list(reply["values"]), float(reply["released"])

    def decided_exchange(
        self, tag: str, value: Any, call_in: dict[str, int] | None = None
    ) -> tuple[list[Any], float, Any]:
        """timed_exchange(), and what the server's `decide` hook answered (the runner's verdict, e.g. a new job).

        call_in {"step": S, "attempt": k}: ranks that already finished step S and have not come to this barrier
        are handed a "rejoin" command for it (next_command), so a barrier after a failure cannot wait on a rank
        that had finished before it."""
        msg: dict[str, Any] = {"op": "exchange", "tag": tag, "value": value}
        if call_in is not None:
            msg["call_in"] = call_in
        reply = self._call(msg)
        return list(reply["values"]), float(reply["released"]), reply.get("decision")

    def ask(self, topic: str, value: Any = None) -> Any:
        """One question to the runner, answered without waiting for the other ranks (None: nobody answers it)."""
        return self._call({"op": "ask", "topic": topic, "value": value})["answer"]

    def watch(self, after: int, wait_s: float = 60.0) -> list[dict[str, Any]]:
        """The failure notices numbered after `after` (hosts.tickets.FailureNotice dicts), waiting up to wait_s for
        one; on a connection of its own (a call blocks)."""
        return list(self._call({"op": "watch", "after": after, "wait": wait_s})["notices"])

    def barrier(self, tag: str) -> None:
        self.exchange(tag, None)

    def next_command(self, after: int, wait_s: float = 3600.0) -> dict[str, Any] | None:
        """The runner's next step after `after` (None if none came within wait_s)."""
        return self._call({"op": "next", "after": after, "wait": wait_s})["command"]

    def step_report(self, step: int, report: dict[str, Any]) -> None:
        self._call({"op": "step_report", "step": step, "report": report})

    def report(self, report: dict[str, Any]) -> None:
        self._call({"op": "report", "report": report})

    def close(self) -> None:
        # a call blocked in another thread (watch) holds the file's lock: shutting the socket down wakes it first
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._file.close()
        self._sock.close()


# -- checking results -------------------------------------------------------------------------
def result_digest(result: np.ndarray) -> str:
    """A short fingerprint of a float32 result; equal sums give equal digests."""
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(result, dtype=np.float32).tobytes()).hexdigest()[:16]


@dataclass(frozen=True)
class CheckOutcome:
    ok: bool
    problems: tuple[str, ...]


def check_reports(reports: Sequence[dict[str, Any]], size: int | None = None) -> CheckOutcome:
    """Every worker got the same sum, and each sum is within its error bound of numpy's.

    Each report carries 'digest' (of its result) and 'max_error_ratio': the
    largest |result - float64 numpy sum of all inputs| / bound over the
    elements, the bound being the quantization (or float32 summation) bound.
    """
    problems = []
    if size is not None and len(reports) != size:
        problems.append(f"{len(reports)} reports for {size} workers")
    digests = {r.get("digest") for r in reports}
    if len(digests) != 1:
        problems.append(f"workers disagree on the sum: digests {sorted(map(str, digests))}")
    for r in reports:
        if "error" in r:
            problems.append(f"rank {r.get('rank')}: {r['error']}")
        elif not r.get("max_error_ratio", float("inf")) <= 1.0:
            problems.append(
                f"rank {r.get('rank')}: error {r.get('max_abs_error')} exceeds its bound "
                f"(ratio {r.get('max_error_ratio')})"
            )
    return CheckOutcome(not problems, tuple(problems))


def check_step(
    reports: dict[int, dict[str, Any]], members: Sequence[int], sum_over: Sequence[int], checker: int
) -> CheckOutcome:
    """One step of agents (hosts.agent) as the runner judges it: every member reported without an error, all
    hold the same sum, the checker's comparison with numpy is within its bound, and every report says the sum is
    over exactly `sum_over`, the inputs the runner expects (after a host died: the survivors', unless a spare
    took its place). A survivors' sum passed off as the full one fails here, twice: the checker compares it with
    the sum of the inputs it claims, and the claim is not the runner's."""
    problems = [f"member {r} did not report" for r in members if r not in reports]
    problems += [f"rank {r} is no member of the step" for r in reports if r not in members]
    got = [reports[r] for r in members if r in reports]
    problems += [f"rank {r.get('rank')}: {r['error']}" for r in got if "error" in r]
    if len({r.get("digest") for r in got}) > 1:
        problems.append(f"members disagree on the sum: digests {sorted({str(r.get('digest')) for r in got})}")
    expected = sorted(sum_over)
    for r in got:
        if "error" not in r and sorted(r.get("sum_over") or ()) != expected:
            problems.append(f"rank {r.get('rank')}: reports a sum over ranks {r.get('sum_over')}, expected {expected}")
    check = reports.get(checker, {})
    if "error" not in check and not check.get("max_error_ratio", float("inf")) <= 1.0:
        problems.append(
            f"checker rank {checker}: error {check.get('max_abs_error')} exceeds its bound "
            f"(ratio {check.get('max_error_ratio')})"
        )
    return CheckOutcome(not problems, tuple(problems))
