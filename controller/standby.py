"""A standby controller: backup by P4Runtime election id until the switches promote it, then the controller.

Arbitration decides, not the controllers: each switch makes primary the live stream with the highest election id
(softswitch.p4runtime.server.Arbiter, as PI does) and tells every stream of the device when that changes. A
standby opens its sessions with an election id below the primary's, so every switch answers "Is backup". When
the primary's process dies its kernel closes its connections, each switch drops its stream and sends the standby
an arbitration update "Is primary". The standby waits for that on every switch of the fabric (`bound_s` after the
first), then adopts the primary's state file and reconciles it with the switches (installer.reconcile: which of
its jobs they hold, which jobs they hold that it lacks, and the install tokens their entries and cells hold, so
no token in use is handed out again); with `repair`, the switches are made to hold what the state says (which
deletes the jobs it does not know: a half-installed one of the dead primary's, but also another controller's).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from controller.api import Controller
from controller.state import State

LOG = logging.getLogger(__name__)

# Every switch promotes the standby when its own stream from the primary ends: for a killed process that is the
# same instant everywhere, give or take the switches' scheduling. A switch still naming another primary this long
# after the first promotion has a live primary: another controller there, or a network cut, not a dead process.
DEFAULT_BOUND_S = 10.0
_POLL_S = 0.1  # how often a wait looks at its stop event (the promotions themselves wake it at once)


class TakeoverError(Exception):
    """The standby did not become primary on every switch (within its bound): it writes nothing."""


@dataclass(frozen=True)
class Takeover:
    """How a standby became the controller. Times are CLOCK_MONOTONIC seconds (time.monotonic: one clock for
    every process of the machine, so a test or an experiment compares them with when it killed the primary)."""

    election_id: int
    backup_since: float  # every session open (as backup, or already primary)
    promoted: dict[str, float]  # switch -> when its arbitration update made this controller primary
    primary_from_start: tuple[str, ...]  # switches whose first answer (or one an instant later) was "Is primary"
    reconcile_s: float
    reconciliation: dict[str, Any]  # installer.Reconciliation.to_dict()
    tokens: dict[int, dict[str, int]]  # job -> switch -> install token, of the adopted state after reconcile
    lost: dict[str, float] = field(default_factory=dict)  # switch -> when its stream ended while this one waited

    @property
    def first_promoted(self) -> float:
        return min(self.promoted.values())

    @property
    def all_primary_at(self) -> float:
        return max(self.promoted.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "election_id": self.election_id,
            "backup_since": self.backup_since,
            "promoted": dict(sorted(self.promoted.items())),
            "primary_from_start": list(self.primary_from_start),
            "first_promoted": self.first_promoted,
            "all_primary_at": self.all_primary_at,
            "promotion_spread_s": self.all_primary_at - self.first_promoted,
            "reconcile_s": self.reconcile_s,
            "reconciliation": self.reconciliation,
            "tokens": {str(j): dict(sorted(t.items())) for j, t in sorted(self.tokens.items())},
            "lost": dict(sorted(self.lost.items())),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Takeover:
        return cls(
            int(d["election_id"]),
            float(d["backup_since"]),
            {str(k): float(v) for k, v in d["promoted"].items()},
            tuple(str(s) for s in d["primary_from_start"]),
            float(d["reconcile_s"]),
            dict(d["reconciliation"]),
            {int(j): {str(s): int(t) for s, t in per.items()} for j, per in d["tokens"].items()},
            {str(k): float(v) for k, v in d.get("lost", {}).items()},
        )


def job_tokens(state: State) -> dict[int, dict[str, int]]:
    """job -> switch -> install token of each plan in the state (what a job's tree should hold)."""
    return {p.job_id: {sp.switch: sp.token for sp in p.switches} for p in state.plans()}


class Standby:
    """A controller whose sessions start as backup (`ctl` built with backup_ok=True) and which takes over when
    every live switch promotes it: open(), wait_primary(), take_over(state).

    A switch whose stream ends while the standby waits is dead (as controller.monitor has it): it is not waited
    for, and the takeover records it as failed (`Takeover.lost`) for the caller to move its jobs, whether or not
    the primary did before it died. `skip`: switches not to connect to (the state file's failed ones)."""

    def __init__(
        self, ctl: Controller, bound_s: float = DEFAULT_BOUND_S, repair: bool = False, skip: Iterable[str] = ()
    ) -> None:
        if not ctl.fabric.backup_ok:
            raise ValueError("a standby's controller must allow backup sessions (Controller(..., backup_ok=True))")
        self.ctl = ctl
        self.bound_s = bound_s
        self.repair = repair
        self.names = [s.name for s in ctl.topo.switches if s.name not in set(skip)]
        self._changed = threading.Condition()
        self._promoted: dict[str, float] = {}
        self._lost: dict[str, tuple[float, str]] = {}  # switch -> when and why its stream ended while waiting
        self._from_start: set[str] = set()
        self.backup_since: float | None = None

    def open(self) -> None:
        """A session to every switch (primary or backup, as arbitration says), watched for promotions."""
        fabric = self.ctl.fabric
        fabric.connect(self.names)
        for name in self.names:
            cl = fabric.client(name)
            cl.on_role_change = self._role
            cl.on_stream_lost = self._stream_lost
        now = time.monotonic()
        with self._changed:
            for name in self.names:
                # primary already: no controller above this one there (or promoted before its callback was set)
                if fabric.client(name).is_primary and name not in self._promoted:
                    self._promoted[name] = now
                    self._from_start.add(name)
            self.backup_since = now
        LOG.info(
            "standby (election id %d) on %d switches; primary's election id there: %s",
            fabric.election_id,
            len(self.names),
            self._other_primaries() or "none (primary already)",
        )

    def _role(self, switch: str, primary: bool) -> None:
        at = time.monotonic()
        with self._changed:
            if primary:
                self._promoted.setdefault(switch, at)
            else:  # demoted again: a controller with a higher election id came (back)
                self._promoted.pop(switch, None)
                self._from_start.discard(switch)
            self._changed.notify_all()

    def _stream_lost(self, switch: str, why: str) -> None:
        at = time.monotonic()
        LOG.warning("%s: stream ended while this controller is backup (%s): a dead switch", switch, why)
        with self._changed:
            self._lost[switch] = (at, why)
            self._promoted.pop(switch, None)
            self._changed.notify_all()

    def _live(self) -> set[str]:
        return set(self.names) - set(self._lost)

    @property
    def promoted(self) -> dict[str, float]:
        with self._changed:
            return dict(self._promoted)

    @property
    def lost(self) -> dict[str, float]:
        """switch -> when its stream ended while this controller waited (dead)."""
        with self._changed:
            return {name: at for name, (at, _) in self._lost.items()}

    def wait_primary(self, timeout: float | None = None, stop: threading.Event | None = None) -> bool:
        """Wait until the switches promote this controller (timeout: seconds for the first promotion, None: as
        long as it takes), then until every live switch has, within bound_s of the first. False when `stop` was
        set first; TakeoverError when the bound passed (or the timeout)."""
        if self.backup_since is None:
            raise TakeoverError("open() the standby's sessions first")
        start = time.monotonic()

        def wait(until: float | None, done: Any) -> bool:
            with self._changed:
                while not done():
                    if stop is not None and stop.is_set():
                        return False
                    left = _POLL_S if until is None else min(_POLL_S, until - time.monotonic())
                    if left <= 0:
                        return False
                    self._changed.wait(left)
                return True

        if not wait(None if timeout is None else start + timeout, lambda: bool(self._promoted)):
            if stop is not None and stop.is_set():
                return False
            raise TakeoverError(
                f"not promoted within {timeout:.0f} s: the primary (election id "
                f"{self._other_primaries() or '?'}) still holds its sessions"
            )
        with self._changed:
            first = min(self._promoted.values(), default=time.monotonic())
        every = wait(first + self.bound_s, lambda: set(self._promoted) >= self._live())
        with self._changed:
            if not every:
                if stop is not None and stop.is_set():
                    return False
                missing = sorted(self._live() - set(self._promoted))
                raise TakeoverError(
                    f"primary on {len(self._promoted)} of {len(self._live())} live switches {self.bound_s:g} s after "
                    f"the first promotion; {', '.join(missing)} still name election id "
                    f"{self._other_primaries(missing)} primary (a controller alive there, or a network cut): this "
                    "standby writes nothing"
                )
            spread = max(self._promoted.values()) - first
            lost = sorted(self._lost)
        LOG.warning(
            "standby (election id %d) primary on all %d live switches (promotions %.1f ms apart)%s",
            self.ctl.fabric.election_id,
            len(self.names) - len(lost),
            1e3 * spread,
            f"; dead: {', '.join(lost)}" if lost else "",
        )
        return True

    def _other_primaries(self, names: list[str] | None = None) -> str:
        fabric = self.ctl.fabric
        ids = {fabric.client(n).primary_election_id for n in (names or self.names)} - {None, fabric.election_id}
        return ", ".join(str(i) for i in sorted(i for i in ids if i is not None))

    def take_over(self, state: State) -> Takeover:
        """Once primary everywhere: adopt the primary's state (loaded from its file) and reconcile it with what
        the live switches hold (read back: jobs and install tokens); repair makes them match it. The switches
        that died while it waited are marked failed in the state (their jobs are the caller's to move)."""
        with self._changed:
            missing = sorted(self._live() - set(self._promoted))
            lost = dict(self._lost)
        if missing:
            raise TakeoverError(f"not primary on {', '.join(missing)}: wait_primary() first")
        assert self.backup_since is not None
        for name in lost:
            self.ctl.fabric.forget(name)
        state.failed |= set(lost)  # reconcile and repair skip them; fail_over moves their jobs
        self.ctl.adopt(state)
        t0 = time.monotonic()
        rec = self.ctl.reconcile(fix=self.repair)
        took = time.monotonic() - t0
        if not rec.clean:
            LOG.warning("the switches differed from the primary's state: %s", rec.to_dict())
        LOG.warning("reconciled %d job(s) in %.2f s", len(state.jobs), took)
        return Takeover(
            election_id=self.ctl.fabric.election_id,
            backup_since=self.backup_since,
            promoted=self.promoted,
            primary_from_start=tuple(sorted(self._from_start)),
            reconcile_s=took,
            reconciliation=rec.to_dict(),
            tokens=job_tokens(self.ctl.state),
            lost={name: at for name, (at, _) in lost.items()},
        )
