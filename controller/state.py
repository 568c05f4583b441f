"""What the controller installed, kept in a JSON file so a later invocation knows it.

The switches are the truth for entries (`verify` reads them back); the state
file is the truth for decisions (job plans: slot ranges, job indexes), which
cannot be recovered from the entries alone without guessing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.planner import JobPlan
from controller.topology import link_key

LOG = logging.getLogger(__name__)

DEFAULT_STATE = Path("state/p4ina-state.json")
# 2: a job's lanes as up_lanes / down_lanes ("int32" | "int16" | "int8"). Version 1 files still load (their jobs
# upgraded by upgrade_v1_job); a version 1 controller refuses version 2 files instead of misreading their lanes.
STATE_VERSION = 2
READABLE_VERSIONS = (1, 2)


class StateError(ValueError):
    pass


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

    def plans(self) -> list[JobPlan]:
        return [self.jobs[j] for j in sorted(self.jobs)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "topology": self.topology,
            "routes": self.routes,
            "pipeline_cookie": self.pipeline_cookie,
            "jobs": {str(j): p.to_dict() for j, p in sorted(self.jobs.items())},
            "installs": dict(sorted(self.installs.items())),
            "failed": sorted(self.failed),
            "failed_links": [list(pair) for pair in sorted(self.failed_links)],
        }

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
def locked(path: Path) -> Iterator[State]:
    """Load the state under an exclusive lock (two CLI runs must not plan the same slots); save it on the way out.

    Saved also when the command failed: the state changes only for what took effect (a job is
    added after it is fully installed, removed after it is fully removed), and install counters
    must advance even for an install that was rolled back.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = State.load(path)
        try:
            yield state
        finally:
            state.save()
