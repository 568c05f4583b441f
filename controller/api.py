"""The controller as a Python object: one topology, one pipeline, one state, connections opened on use.

with Controller(fat_tree(4).with_grpc(addrs), p4info=P4INFO, device_config=BMV2_JSON) as ctl:
    ctl.push_pipeline(); ctl.install_routes()
    plan = ctl.install_job(7, ["h1", "h2", "h5"])
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable
from pathlib import Path

from controller import counters as C
from controller import installer as I
from controller.client import DEFAULT_TIMEOUT
from controller.fabric import Fabric
from controller.p4info import P4Schema
from controller.planner import DEFAULT_SLOTS, JobPlan, JobSpec
from controller.state import State, StateError
from controller.topology import Topology, TopologyError, link_key

LOG = logging.getLogger(__name__)


def program_dir() -> Path:
    """Where the compiled P4 program (p4ina.json, p4ina.p4info.txtpb, manifest.json) is.

    Its one committed copy is p4/build. An installed package carries it as the data package
    controller.program (setup.py maps that onto p4/build when the wheel is built); a source checkout, an
    editable install included, has no controller/program and reads p4/build itself.
    """
    here = Path(__file__).resolve().parent
    shipped = here / "program"
    return shipped if (shipped / "p4ina.json").is_file() else here.parent / "p4" / "build"


PROGRAM_DIR = program_dir()
DEFAULT_P4INFO = PROGRAM_DIR / "p4ina.p4info.txtpb"
DEFAULT_BMV2_JSON = PROGRAM_DIR / "p4ina.json"
PROGRAM_MANIFEST = PROGRAM_DIR / "manifest.json"


def p4_sources(root: Path) -> list[Path]:
    """The P4 sources of a checkout (root/p4, its build outputs excluded), in the manifest's order."""
    build = root / "p4" / "build"
    return sorted(p for p in (root / "p4").rglob("*.p4") if build not in p.parents)


def p4_sources_sha256(root: Path) -> str:
    """sha256 over every P4 source (path relative to root, and content): the manifest's `sources_sha256`."""
    h = hashlib.sha256()
    for path in p4_sources(root):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def program_staleness() -> str | None:
    """Why the compiled program may not be what the checkout's P4 sources say (None: it is, or no checkout).

    A program edited in p4/ but not recompiled would otherwise run, silently, as it was before the edit.
    """
    root = PROGRAM_DIR.parent.parent  # p4/build -> the checkout; an installed package has no p4/ sources
    if PROGRAM_DIR.name != "build" or not (root / "p4" / "p4ina.p4").is_file():
        return None
    try:
        recorded = json.loads(PROGRAM_MANIFEST.read_text())["sources_sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"{PROGRAM_MANIFEST} is missing or unreadable: the program's sources cannot be checked (`make p4`)"
    if recorded != p4_sources_sha256(root):
        return (
            "the P4 sources in p4/ changed since p4/build was compiled: this runs the old program "
            "(`make p4` recompiles it; needs p4c)"
        )
    return None


class Controller:
    def __init__(
        self,
        topo: Topology,
        *,
        p4info: Path | P4Schema | None = DEFAULT_P4INFO,
        device_config: Path | None = DEFAULT_BMV2_JSON,
        state: State | None = None,
        election_id: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
        backup_ok: bool = False,
    ) -> None:
        """backup_ok: sessions may open as backup, a higher election id's controller being primary (a standby:
        controller.standby); its writes are refused until the switches promote it."""
        self.topo = topo
        self.p4info_path = p4info if isinstance(p4info, Path) else None
        schema = (
            p4info
            if isinstance(p4info, P4Schema)
            else (P4Schema.load(p4info) if p4info is not None and Path(p4info).exists() else None)
        )
        self.device_config = device_config
        self.state = State()
        self.adopt(state if state is not None else State())
        self.fabric = Fabric(topo, schema, election_id=election_id, timeout=timeout, backup_ok=backup_ok)

    def adopt(self, state: State) -> None:
        """Make `state` this controller's (a standby adopts the primary's once the switches promote it)."""
        if state.failed_links:  # a state file for another fabric (or edited by hand): refused, by name
            try:
                self.topo.without((), state.failed_links)
            except TopologyError as ex:
                raise StateError(f"state file {state.path}: failed_links: {ex}") from ex
        self.state = state

    @property
    def schema(self) -> P4Schema:
        if self.fabric.schema is None:
            self.fabric.schema = self._schema_from_switch()
        return self.fabric.schema

    def _need_schema(self) -> None:
        """Resolve the P4Info (file, else the switch's) before any write or read."""
        _ = self.schema

    def _schema_from_switch(self) -> P4Schema:
        """The P4Info the switches run, when no local P4Info file is given."""
        first = self.topo.switches[0].name
        config = self.fabric.client(first).get_pipeline(with_p4info=True)
        if config is None or not config.p4info.tables:
            raise I.InstallError(
                f"no P4Info file ({self.p4info_path or 'none given'}) and switch {first} has no pipeline: "
                "run `make p4`, then `p4ina pipeline push`"
            )
        return P4Schema(config.p4info)

    def _save(self) -> None:
        self.state.save()

    # -- operations ------------------------------------------------------------------------
    def push_pipeline(self, force: bool = False, switches: Iterable[str] | None = None) -> dict[str, str]:
        if self.p4info_path is None or self.device_config is None:
            raise I.InstallError("pushing a pipeline needs a P4Info file and a BMv2 JSON (run `make p4`)")
        p4info, config, cookie = I.load_pipeline(self.p4info_path, self.device_config)
        self.fabric.schema = P4Schema(p4info)
        out = I.push_pipeline(self.fabric, p4info, config, force=force, switches=switches)
        self.state.pipeline_cookie = cookie
        self._save()
        return out

    def install_routes(self) -> dict[str, I.SyncResult]:
        self._need_schema()
        out = I.install_routes(self.fabric, self.state)
        self._save()
        return out

    def install_job(
        self,
        job_id: int,
        hosts: Iterable[str],
        down_lanes: str = "int32",
        *,
        up_lanes: str | None = None,
        shift: int | None = None,
        slots: int = DEFAULT_SLOTS,
    ) -> JobPlan:
        """Plan and install a job: down_lanes come back, up_lanes (default: the same) go up (JobSpec.make)."""
        spec = JobSpec.make(job_id, hosts, down_lanes, up_lanes=up_lanes, shift=shift, slots=slots)
        self._need_schema()
        try:
            return I.install_job(self.fabric, self.state, spec)
        finally:  # install counters advance even when the install is rolled back
            self._save()

    def unreachable(self, switches: Iterable[str] | None = None, timeout: float = 2.0, attempts: int = 2) -> set[str]:
        """Switches (all, or these) whose P4Runtime address refuses TCP connections: dead switch processes
        (Fabric.unreachable says why a busy one is alive, and what `attempts` rules out)."""
        names = list(switches) if switches is not None else [s.name for s in self.topo.switches]
        return self.fabric.unreachable(names, timeout, attempts=attempts)

    def fail_over(
        self,
        job_id: int,
        failed: Iterable[str],
        reroute: bool = True,
        timings: dict[str, float] | None = None,
        failed_links: Iterable[tuple[str, str]] = (),
    ) -> JobPlan:
        """Re-plan and re-install a job around failed switches and links that are down (installer.fail_over);
        routes avoid them too (unless reroute=False: then call install_routes() once the job runs again).
        `timings` gets seconds per phase (plan, read_back, write, save)."""
        self._need_schema()
        try:
            return I.fail_over(self.fabric, self.state, job_id, failed, reroute, timings, failed_links)
        finally:
            t0 = time.monotonic()
            self._save()
            if timings is not None:
                timings["save"] = time.monotonic() - t0

    def revive(self, switches: Iterable[str] = (), links: Iterable[tuple[str, str]] = ()) -> None:
        """Mark failed switches (restarted) and links (back up) live again; a restarted switch's session is opened
        anew. Then restore_pipelines() and install_routes() bring them back into use; jobs stay where they are."""
        names = set(switches)
        self.state.failed -= names
        self.state.failed_links -= {link_key(*ln) for ln in links}
        for name in names:
            self.fabric.forget(name)
        self.fabric.drop_memo(names)
        self._save()

    def remove_job(self, job_id: int) -> JobPlan:
        self._need_schema()
        plan = I.remove_job(self.fabric, self.state, job_id)
        self._save()
        return plan

    def jobs(self) -> list[JobPlan]:
        return self.state.plans()

    def job(self, job_id: int) -> JobPlan:
        try:
            return self.state.jobs[job_id]
        except KeyError:
            raise I.InstallError(
                f"job {job_id} is not installed (installed: {sorted(self.state.jobs) or 'none'})"
            ) from None

    def counters(self, job_id: int) -> dict[str, C.SwitchCounters]:
        self._need_schema()
        return C.read_job(self.fabric, self.job(job_id))

    def unattributed_drops(self) -> dict[str, C.SwitchCounters]:
        """Drops that belong to no job (job index 0: not IPv4, no route, unknown job...) on every switch."""
        self._need_schema()
        return self.fabric.run_all(
            "counters", lambda sw: C.read_switch(self.fabric, sw, 0), [s.name for s in self.topo.switches]
        )

    def verify(self) -> dict[str, I.Drift]:
        self._need_schema()
        return I.verify(self.fabric, self.state)

    def repair(self) -> dict[str, I.SyncResult]:
        """Make the switches hold what the state says; a switch that restarted (no pipeline) gets the
        pipeline pushed first, then everything the state has for it."""
        self._need_schema()
        self.restore_pipelines()
        return I.repair(self.fabric, self.state)

    def restore_pipelines(self) -> list[str]:
        """Push the pipeline to the live switches that run none (restarted with empty tables); their names."""
        names = [s.name for s in I.live_topology(self.fabric, self.state).switches]
        bare = [
            n
            for n, cfg in self.fabric.run_all(
                "pipeline check", lambda n: self.fabric.client(n).get_pipeline(), names
            ).items()
            if cfg is None
        ]
        if bare:
            LOG.warning("switch(es) %s run no pipeline (restarted?): pushing it", ", ".join(sorted(bare)))
            self.push_pipeline(force=True, switches=bare)
        return sorted(bare)

    def reconcile(self, fix: bool = False) -> I.Reconciliation:
        """A controller (re)started against running switches: compare what they hold with the state file
        (installer.reconcile; install counts move past every token the switches hold) and, with fix, make
        them match it (restarted switches get their pipeline and entries back, unknown jobs are deleted)."""
        self._need_schema()
        try:
            rec = I.reconcile(self.fabric, self.state)
            if fix and not rec.clean:
                rec.repaired = self.repair()
            return rec
        finally:  # the install counts learned from the switches are kept even if the repair failed
            self._save()

    def close(self) -> None:
        self.fabric.close()

    def __enter__(self) -> Controller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
