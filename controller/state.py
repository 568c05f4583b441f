"""What the controller installed, kept in a JSON file so a later invocation knows it.

The switches are the truth for entries (`verify` reads them back); the state
file is the truth for decisions (job plans: slot ranges, job indexes), which
cannot be recovered from the entries alone without guessing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.planner import JobPlan
from controller.topology import link_key

LOG = logging.getLogger(__name__)

STATE_ROOT = Path("state")
STATE_NAME = "p4ina-state.json"
# the state of a fabric `p4ina serve` did not start (switches of emulation.localnet, or real ones)
DEFAULT_STATE = STATE_ROOT / STATE_NAME
# `p4ina serve` keeps one folder per topology, state/<topology>/, and points this link at the one it serves
CURRENT = STATE_ROOT / "current"
# 2: a job's lanes as up_lanes / down_lanes ("int32" | "int16" | "int8"). Version 1 files still load (their jobs
# upgraded by upgrade_v1_job); a version 1 controller refuses version 2 files instead of misreading their lanes.
STATE_VERSION = 2
READABLE_VERSIONS = (1, 2)


class StateError(ValueError):
    pass


def default_state() -> Path:
    """The state the verbs use unless told: the served network's (state/current/, which `p4ina serve` points at
    the folder of the topology it serves), else state/p4ina-state.json."""
    current = CURRENT / STATE_NAME
    return current if current.exists() else DEFAULT_STATE


def process_start(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (the start time), which tells a process from a later one reusing its PID."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text.rsplit(")", 1)[1].split()[19])


@dataclass(frozen=True)
class Served:
    """The `p4ina serve` process whose switches this state describes: when it is gone, so are they."""

    pid: int
    start: int  # process_start(pid) when it wrote this
    topology: str  # as serve was given it (fat-tree:4, a JSON path)
    since: str  # when the network came up (ISO time)
    record: str = ""  # serve's record of the network (its host processes, interfaces): emulation.served
    stopped: str | None = None  # when it stopped (ISO time), as it said, or as a verb found its process gone
    killed: bool = False  # a verb found its process gone (it could not say it stopped)

    @property
    def alive(self) -> bool:
        return self.stopped is None and process_start(self.pid) == self.start

    def down(self) -> str:
        """One line: which network is gone, and what to do."""
        if self.stopped is None or self.killed:
            when = f"its process {self.pid} is gone" + (f", found {self.stopped}" if self.stopped else "")
        else:
            when = f"stopped {self.stopped}"
        return (
            f"the network `p4ina serve --topology {self.topology}` started {self.since} is down ({when}): "
            f"start it again with `sudo p4ina serve --topology {self.topology}`, or pass --state for other switches"
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Served:
        return cls(
            int(d["pid"]),
            int(d["start"]),
            str(d["topology"]),
            str(d["since"]),
            str(d.get("record", "")),
            None if d.get("stopped") is None else str(d["stopped"]),
            bool(d.get("killed", False)),
        )


def upgrade_v1_job(plan: dict[str, Any]) -> dict[str, Any]:
    """A job plan of a version 1 state file in today's vocabulary: its spec's result lanes were `quantize`
    ("none" for int32), the lanes hosts send `contrib` (absent in the oldest files: the result's), and the
    result's elem_type code `result_type` (derived from the lanes, dropped)."""
    spec = {k: v for k, v in plan["spec"].items() if k not in ("quantize", "contrib", "result_type")}
    quantize = plan["spec"].get("quantize", "none")
    spec["down_lanes"] = "int32" if quantize == "none" else quantize
    spec["up_lanes"] = plan["spec"].get("contrib") or spec["down_lanes"]
    return {**plan, "spec": spec}


@dataclass
class State:
    path: Path | None = None
    topology: str | None = None  # how the topology was given (path or builder spec), for later invocations
    routes: bool = False
    pipeline_cookie: int | None = None
    jobs: dict[int, JobPlan] = field(default_factory=dict)
    installs: dict[str, int] = field(default_factory=dict)  # switch -> job installs so far (tokens)
    failed: set[str] = field(default_factory=set)  # switches found dead: plans and routes avoid them
    failed_links: set[tuple[str, str]] = field(default_factory=set)  # switch-to-switch links found down (sorted pairs)
    served: Served | None = None  # the served network these switches belong to (None: not a served network)
    # job -> the epoch of the next all-reduce on its install (`p4ina allreduce` reserves its calls' epochs here, so
    # agents started again on the same install start past the epochs its cells hold)
    epochs: dict[int, int] = field(default_factory=dict)

    def plans(self) -> list[JobPlan]:
        return [self.jobs[j] for j in sorted(self.jobs)]

    def serve_anew(self, topology: str, served: Served) -> None:
        """A network just started for this state (`p4ina serve`): its switches hold nothing yet."""
        fresh = State(self.path, topology=topology, served=served)
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(fresh, f.name))

    def network_gone(self, stopped: str, killed: bool = False) -> list[int]:
        """The served network stopped (at `stopped`, ISO time; killed: found gone): its switches took the jobs,
        routes and pipeline with them. Forgets those and marks the network stopped; returns the jobs it held."""
        gone = sorted(self.jobs)
        self.jobs.clear()
        self.epochs.clear()
        self.routes = False
        self.pipeline_cookie = None
        self.failed.clear()
        self.failed_links.clear()
        if self.served is not None and self.served.stopped is None:
            self.served = dataclasses.replace(self.served, stopped=stopped, killed=killed)
        return gone

    def to_dict(self) -> dict[str, Any]:
        out = {
            "version": STATE_VERSION,
            "topology": self.topology,
            "routes": self.routes,
            "pipeline_cookie": self.pipeline_cookie,
            "jobs": {str(j): p.to_dict() for j, p in sorted(self.jobs.items())},
            "installs": dict(sorted(self.installs.items())),
            "failed": sorted(self.failed),
            "failed_links": [list(pair) for pair in sorted(self.failed_links)],
        }
        if self.served is not None:
            out["served"] = self.served.to_dict()
        if self.epochs:
            out["epochs"] = {str(j): e for j, e in sorted(self.epochs.items())}
        return out

    @classmethod
    def load(cls, path: Path) -> State:
        path = Path(path)
        if not path.exists():
            return cls(path)
        try:
            data = json.loads(path.read_text())
            version = data.get("version")
            if version not in READABLE_VERSIONS:
                raise StateError(
                    f"state file {path} has version {version}, this controller reads "
                    f"{', '.join(map(str, READABLE_VERSIONS))} and writes {STATE_VERSION}"
                )
            raw = data.get("jobs", {})
            if version == 1:
                raw = {j: upgrade_v1_job(p) for j, p in raw.items()}
            jobs = {int(j): JobPlan.from_dict(p) for j, p in raw.items()}
            installs = {str(k): int(v) for k, v in data.get("installs", {}).items()}
            links = set()
            for pair in data.get("failed_links", []):
                if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(n, str) for n in pair)):
                    raise ValueError(f"failed_links entry {pair!r} is not a pair of switch names")
                links.add(link_key(*pair))
            served = Served.from_dict(data["served"]) if data.get("served") is not None else None
            epochs = {int(j): int(e) % 256 for j, e in data.get("epochs", {}).items()}
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as ex:
            if isinstance(ex, StateError):
                raise
            raise StateError(
                f"state file {path} is unreadable ({ex}); move it away and run `p4ina verify` to compare with "
                "the switches"
            ) from ex
        return cls(
            path,
            data.get("topology"),
            bool(data.get("routes")),
            data.get("pipeline_cookie"),
            jobs,
            installs,
            {str(s) for s in data.get("failed", [])},
            links,
            served,
            epochs,
        )

    def save(self) -> None:
        """Atomic: a crash leaves the old or the new file, never half of one."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        os.replace(tmp, self.path)


@contextlib.contextmanager
def locked(path: Path, timeout: float | None = None) -> Iterator[State]:
    """Load the state under an exclusive lock (two CLI runs must not plan the same slots); save it on the way out.

    Saved also when the command failed: the state changes only for what took effect (a job is
    added after it is fully installed, removed after it is fully removed), and install counters
    must advance even for an install that was rolled back.

    timeout: seconds to wait for the lock (None: as long as it takes), then StateError. The lock is the kernel's
    (flock): a process that dies holding it, a killed controller, releases it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        if timeout is None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise StateError(
                            f"state file {path} is still locked by another p4ina process after {timeout:.0f} s "
                            "(a controller serving it, or a verb running on it)"
                        ) from None
                    time.sleep(0.02)
        state = State.load(path)
        try:
            yield state
        finally:
            state.save()
