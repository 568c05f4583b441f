"""Writing plans to switches: pipeline, routes, jobs (all or nothing), removal, read-back verify.

A job is written switch by switch in parallel, in batches; if any write fails,
every update that took effect (per-update status of the failed batch included)
is deleted again, so a job is either fully installed or not at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from controller import names as N
from controller.client import ReadError, SwitchClient, SwitchError, WriteError, update
from controller.entities import Entity, MulticastGroup, TableEntry, decode_entity
from controller.fabric import Fabric, FabricError
from controller.jobentries import job_entries
from controller.p4info import P4InfoError, P4Schema, pipeline_cookie
from controller.planner import (
    DuplicateJobError,
    JobPlan,
    JobSpec,
    PlanError,
    SwitchPlan,
    SwitchUsage,
    next_token,
    plan_job,
)
from controller.registers import read_register_all, read_register_cells
from controller.routing import all_route_entries
from controller.state import State
from controller.topology import Topology, link_key
from p4proto import p4info_pb2, p4runtime_pb2

LOG = logging.getLogger(__name__)

BATCH = 500  # updates per Write RPC: large enough to amortise the RPC, far below gRPC's message limit


class InstallError(Exception):
    """A job or routes could not be installed; the message names switch, entry and reason."""


class RollbackError(InstallError):
    """Rolling back a failed install failed too: entries are left on switches (listed)."""


class RemoveError(InstallError):
    pass


@dataclass
class SyncResult:
    inserted: int = 0
    modified: int = 0
    deleted: int = 0

    def __add__(self, other: SyncResult) -> SyncResult:
        return SyncResult(self.inserted + other.inserted, self.modified + other.modified, self.deleted + other.deleted)


@dataclass
class Drift:
    """Differences between what should be on a switch and what is."""

    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    different: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.missing or self.unexpected or self.different)


class _PartialWrite(Exception):
    def __init__(self, done: list[Entity], error: WriteError, entity: Entity) -> None:
        super().__init__(str(error))
        self.done = done
        self.error = error
        self.entity = entity


# -- writing ------------------------------------------------------------------------------
def write_entities(
    client: SwitchClient,
    schema: P4Schema,
    kind: str,
    entities: Sequence[Entity],
    batch: int = BATCH,
    ignore: Iterable[str] = (),
) -> list[Entity]:
    """Write in batches; return the entities that took effect.

    Raises _PartialWrite with those that did when a batch fails for a reason not in `ignore`
    (e.g. NOT_FOUND on delete). When the switch does not report per-update status, every update
    of the failed batch counts as possibly done.
    """
    ignore = set(ignore)
    done: list[Entity] = []
    encoded = [e.encode(schema) for e in entities]
    for start in range(0, len(entities), batch):
        chunk = entities[start : start + batch]
        try:
            client.write([update(kind, m) for m in encoded[start : start + batch]], [str(e) for e in chunk])
            done.extend(chunk)
        except WriteError as ex:
            ok = ex.succeeded()
            bad = [s for s in ex.statuses if not s.ok]
            if ok is not None and bad and all(s.code_name in ignore for s in bad):
                done.extend(chunk[i] for i in ok)
                continue
            if ok is None and ex.code in ignore:
                continue
            done.extend(chunk if ok is None else [chunk[i] for i in ok])
            failed = chunk[bad[0].index] if bad else chunk[0]
            raise _PartialWrite(done, ex, failed) from ex
    return done


def read_entities(
    client: SwitchClient, schema: P4Schema, tables: Iterable[str], groups: Iterable[int] | None = None
) -> list[Entity]:
    """Read all entries of `tables`, and multicast groups (all, or those ids)."""
    req = [p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=schema.table(t).id)) for t in tables]
    out = [decode_entity(m, schema) for m in client.read(req)] if req else []
    if groups is None:
        wildcard = p4runtime_pb2.Entity(
            packet_replication_engine_entry=p4runtime_pb2.PacketReplicationEngineEntry(
                multicast_group_entry=p4runtime_pb2.MulticastGroupEntry()
            )
        )
        out += [decode_entity(m, schema) for m in client.read([wildcard])]
    else:
        for gid in groups:
            one = MulticastGroup(gid, ()).encode()
            try:
                out += [decode_entity(m, schema) for m in client.read([one])]
            except ReadError as ex:  # a missing group reads as NOT_FOUND on some targets
                if ex.code == "UNIMPLEMENTED":
                    raise
                LOG.debug("%s: multicast group %d not readable (absent): %s", client.name, gid, ex)
    return out


def sync(
    client: SwitchClient,
    schema: P4Schema,
    desired: Sequence[Entity],
    actual: Sequence[Entity],
    delete_extra: bool = True,
) -> SyncResult:
    """Make the switch hold `desired` (given what it holds, `actual`): insert, modify, delete."""
    have = {e.key: e for e in actual}
    want = {e.key: e for e in desired}
    inserts = [e for e in desired if e.key not in have]
    modifies = [e for e in desired if e.key in have and have[e.key] != e]
    deletes = [e for e in reversed(actual) if e.key not in want] if delete_extra else []
    try:
        write_entities(client, schema, "insert", inserts)
        write_entities(client, schema, "modify", modifies)
        write_entities(client, schema, "delete", deletes, ignore={"NOT_FOUND"})
    except _PartialWrite as ex:
        raise InstallError(f"switch {client.name}: {ex.entity}: {ex.error}") from ex.error
    return SyncResult(len(inserts), len(modifies), len(deletes))


def diff(desired: Sequence[Entity], actual: Sequence[Entity]) -> Drift:
    have = {e.key: e for e in actual}
    want = {e.key: e for e in desired}
    d = Drift()
    d.missing = [str(e) for k, e in want.items() if k not in have]
    d.unexpected = [str(e) for k, e in have.items() if k not in want]
    d.different = [f"{want[k]} (switch has {have[k]})" for k in want if k in have and have[k] != want[k]]
    return d


# -- pipeline ----------------------------------------------------------------------------
def load_pipeline(p4info_path: Path, device_config_path: Path) -> tuple[p4info_pb2.P4Info, bytes, int]:
    schema = P4Schema.load(p4info_path)
    try:
        config = Path(device_config_path).read_bytes()
    except OSError as ex:
        raise InstallError(f"cannot read the BMv2 JSON {device_config_path}: {ex.strerror}; run `make p4`") from ex
    return schema.p4info, config, pipeline_cookie(schema.p4info, config)


def push_pipeline(
    fabric: Fabric,
    p4info: p4info_pb2.P4Info,
    device_config: bytes,
    force: bool = False,
    switches: Iterable[str] | None = None,
) -> dict[str, str]:
    """Push where the switch's cookie differs (or always with force); switch -> 'pushed' | 'unchanged'."""
    cookie = pipeline_cookie(p4info, device_config)

    def one(name: str) -> str:
        cl = fabric.client(name)
        if not force:
            try:
                current = cl.get_pipeline()
            except SwitchError as ex:
                LOG.debug("%s: cannot read the pipeline cookie (%s); pushing", name, ex)
                current = None
            if current is not None and current.HasField("cookie") and current.cookie.cookie == cookie:
                return "unchanged"
        cl.set_pipeline(p4info, device_config, cookie)
        fabric.drop_memo([name])  # a new pipeline: empty tables and registers
        return "pushed"

    names = list(switches) if switches is not None else [s.name for s in fabric.topo.switches]
    fabric.connect(names)  # sessions first: a switch loading a program may answer new ones late
    return fabric.run_all("pipeline push", one, names)


# -- routes ------------------------------------------------------------------------------
def live_topology(fabric: Fabric, state: State | None) -> Topology:
    """The fabric without the switches and links the state lists as failed."""
    if state is None or not (state.failed or state.failed_links):
        return fabric.topo
    return fabric.topo.without(state.failed, state.failed_links)


def _planning_topology(fabric: Fabric, state: State) -> Topology:
    """What jobs are planned on: every switch (failed ones are the planner's `exclude`, which names them when
    they cut hosts off), without the links that are down."""
    return fabric.topo.without((), state.failed_links) if state.failed_links else fabric.topo


def install_routes(fabric: Fabric, state: State | None = None) -> dict[str, SyncResult]:
    """Make every (live) switch hold exactly the topology's routes, around failed switches (idempotent; extra
    route entries are deleted)."""
    schema = _schema(fabric)
    desired = all_route_entries(live_topology(fabric, state))
    for entries in desired.values():  # encoding errors before any write
        for e in entries:
            e.encode(schema)

    def one(name: str) -> SyncResult:
        cl = fabric.client(name)
        actual = read_entities(cl, schema, N.ROUTE_TABLES, groups=())
        # route_entries lists a group's ecmp members before the lpm entry that points at it
        return sync(cl, schema, desired[name], actual)

    out = fabric.run_all("routes install", one, desired)
    if state is not None:
        state.routes = True
    return out


# -- jobs --------------------------------------------------------------------------------
def install_job(fabric: Fabric, state: State, spec: JobSpec, timings: dict[str, float] | None = None) -> JobPlan:
    """Plan and write a job on every switch of its tree (avoiding failed switches), all or nothing; idempotent
    for the same spec. `timings` (if given) gets the seconds each phase took: plan, read_back, write."""
    schema = _schema(fabric)
    clock = _Phases(timings)
    old = state.jobs.get(spec.job_id)
    if old is not None:
        if old.spec != spec:
            raise DuplicateJobError(
                f"job {spec.job_id} is already installed with {_spec_text(old.spec)}; "
                "remove it first or pick another id"
            )
        _reconcile(fabric, schema, old)
        return old
    plan = _plan_around_the_switches(fabric, schema, state, spec, clock)
    entries = job_entries(plan)
    for ents in entries.values():
        for e in ents:
            e.encode(schema)

    def one(name: str) -> list[Entity]:
        # P4Runtime may apply the updates of one batch in any order: job_config, which makes the
        # switch accept the job's packets, goes in a batch of its own after everything it refers to
        cl, ents = fabric.client(name), entries[name]
        done = write_entities(cl, schema, "insert", ents[:-1])
        try:
            return done + write_entities(cl, schema, "insert", ents[-1:])
        except _PartialWrite as ex:
            raise _PartialWrite(done + ex.done, ex.error, ex.entity) from ex.error

    for sp in plan.switches:  # a new token per attempt, even one rolled back: its cells may have been used
        state.installs[sp.switch] = state.installs.get(sp.switch, 0) + 1
    results, errors = fabric.run(one, entries)
    clock.lap("write")
    if errors:
        written = dict(results)
        for name, ex in errors.items():
            if isinstance(ex, _PartialWrite):
                written[name] = ex.done
        _rollback(fabric, schema, plan, written)
        _remember_install(fabric, plan)  # its token may have reached cells while it was half installed
        name, ex = next(iter(errors.items()))
        if isinstance(ex, _PartialWrite):
            why = f"switch {name}: {ex.entity}: {_first_failure(ex.error)}"
        else:
            why = str(ex)
        others = f" (and {len(errors) - 1} other switch(es))" if len(errors) > 1 else ""
        raise InstallError(
            f"job {spec.job_id} not installed, {sum(map(len, written.values()))} written update(s) rolled back: "
            f"{why}{others}"
        ) from (ex.error if isinstance(ex, _PartialWrite) else ex)
    state.jobs[spec.job_id] = plan
    _remember_install(fabric, plan)
    LOG.info("job %d installed on %d switches (root %s)", spec.job_id, len(plan.switches), plan.root)
    return plan


# -- tokens ------------------------------------------------------------------------------


READ_BACK_ROUNDS = 4  # plans tried against what the switches hold before giving up (they keep changing)


class _Phases:
    """Seconds per phase into a caller's dict (nothing without one)."""

    def __init__(self, out: dict[str, float] | None) -> None:
        self.out, self.t = out, time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        if self.out is not None:
            self.out[name] = self.out.get(name, 0.0) + now - self.t
        self.t = now


def _plan_around_the_switches(
    fabric: Fabric,
    schema: P4Schema,
    state: State,
    spec: JobSpec,
    clock: _Phases | None = None,
    replacing: int | None = None,
) -> JobPlan:
    """Plan the job, then read back what the tree's switches hold: jobs this state does not know (another
    controller's, or a lost state file's) keep their job indexes, multicast groups and slot ranges, and tokens
    still held are not handed out again. A plan that clashes is made again around what was found.

    `replacing`: a job of the state being moved (a fail-over): planned as if it were gone, its entries on the
    switches still this state's own."""
    reserved: dict[str, SwitchUsage] = {}
    others = [p for p in state.plans() if p.job_id != replacing]
    for _ in range(READ_BACK_ROUNDS):
        plan = plan_job(
            _planning_topology(fabric, state), spec, others, state.installs, exclude=state.failed, reserved=reserved
        )
        if clock:
            clock.lap("plan")
        held = _holdings(fabric, schema, state, plan)
        if clock:
            clock.lap("read_back")
        dup = sorted(name for name, h in held.items() if spec.job_id in h.foreign.job_indexes.values())
        if dup:
            raise DuplicateJobError(
                f"job {spec.job_id} is already on {', '.join(dup)}, and this controller's state does not have it: "
                "another controller installed it (or this state file is older than the switches); `p4ina "
                "reconcile` lists such jobs: remove it where it was installed, or pick another id"
            )
        clash = sorted(name for name, h in held.items() if _clashes(plan.on(name), h.foreign))
        if clash:
            LOG.warning(
                "job %d: %s hold(s) another controller's job where the plan put it; planning around it",
                spec.job_id,
                ", ".join(clash),
            )
            for name, h in held.items():
                reserved[name] = h.foreign
            continue
        if _move_past_held_tokens(state, {name: h.tokens for name, h in held.items()}):
            # the same tree and slots (tokens do not steer the plan), with tokens the switches lack
            plan = plan_job(
                _planning_topology(fabric, state), spec, others, state.installs, exclude=state.failed, reserved=reserved
            )
        return plan
    raise InstallError(
        f"job {spec.job_id}: what the switches hold kept changing over {READ_BACK_ROUNDS} plans "
        "(is another controller installing jobs at the same time?); try again"
    )


@dataclass
class Holdings:
    """What one switch holds, read back: install tokens in use, and jobs the state does not know."""

    tokens: set[int]
    foreign: SwitchUsage


def _clashes(sp: SwitchPlan, foreign: SwitchUsage) -> bool:
    if sp.job_index in foreign.job_indexes:
        return True
    return any(b < sp.slot_base + sp.slot_count and sp.slot_base < b + n for b, n, _ in foreign.ranges)


@dataclass
class ReadBack:
    """One switch as this session read it back (kept in Fabric.memo while the session is its primary): the
    jobs the state did not know, their entries' tokens, and per cell read the tokens it may hold (the one read,
    plus those of this session's installs over it since)."""

    foreign: SwitchUsage
    entry_tokens: set[int]
    cells: dict[int, set[int]] = field(default_factory=dict)


def _cells(sp: SwitchPlan) -> range:
    return range(sp.slot_base * N.CELLS_PER_SLOT, (sp.slot_base + sp.slot_count) * N.CELLS_PER_SLOT)


def _holdings(fabric: Fabric, schema: P4Schema, state: State, plan: JobPlan) -> dict[str, Holdings]:
    """What the plan's switches hold. Read over P4Runtime, or, for a switch this session read back before and has
    been the only writer of since (P4Runtime arbitration), from that read and this session's own installs: a
    fail-over then reads only the switches new to the session (a read is slow in Python protobuf:
    docs/controller.md)."""

    def one(name: str) -> Holdings:
        sp = plan.on(name)
        cells = _cells(sp)
        mine = {p.job_id: p.on(name) for p in state.jobs.values() if any(s.switch == name for s in p.switches)}
        memo = fabric.memo(name)
        rb: ReadBack | None = memo.get("read_back")
        if rb is not None and all(c in rb.cells for c in cells):
            held = set().union(*(rb.cells[c] for c in cells)) if len(cells) else set()
            return Holdings((held | rb.entry_tokens | {s.token for s in mine.values()}) - {0}, _copy_usage(rb.foreign))
        cl = fabric.client(name)
        entries = read_entities(cl, schema, [N.T_JOB_CONFIG], groups=())
        foreign = SwitchUsage()
        foreign_tokens: set[int] = set()
        for e in entries:
            if not (isinstance(e, TableEntry) and e.action == N.A_SET_JOB):
                continue
            found, params = e.exact(N.K_JOB_ID), dict(e.params)
            job = -1 if found is None else found
            if job in mine:
                continue
            foreign.job_indexes[int(params.get("job_index", 0))] = job
            foreign.ranges.append((int(params.get("slot_base", 0)), int(params.get("slot_count", 0)), job))
            foreign_tokens.add(int(params.get("token", 0)))
        try:  # a multicast group with no job_config (an install cut short elsewhere) still holds its job index
            groups = [e.group_id for e in read_entities(cl, schema, [], groups=None) if isinstance(e, MulticastGroup)]
        except ReadError as ex:  # a target that cannot read groups back (BMv2's PI, some versions)
            LOG.debug("%s: multicast groups not readable (%s)", name, ex)
            groups = []
        our_groups = {s.mcast_grp for s in mine.values()}
        for gid in groups:
            if gid not in our_groups and gid not in foreign.job_indexes:
                foreign.job_indexes[gid] = -1  # a group without a job
        try:
            values = read_register_cells(cl, schema, N.R_SLOT_TOKEN, cells)
        except (ReadError, LookupError, P4InfoError) as ex:  # BMv2's PI: UNIMPLEMENTED; nothing to remember
            LOG.debug("%s: cell tokens not readable (%s); checking its entries' tokens only", cl.name, ex)
            return Holdings(_entry_tokens(entries) - {0}, foreign)
        rb = memo.setdefault("read_back", ReadBack(SwitchUsage(), set()))
        rb.foreign, rb.entry_tokens = _copy_usage(foreign), foreign_tokens
        rb.cells.update({c: {t} for c, t in values.items()})
        return Holdings((_entry_tokens(entries) | set(values.values())) - {0}, foreign)

    return fabric.run_all("read back", one, [sp.switch for sp in plan.switches])


def _copy_usage(u: SwitchUsage) -> SwitchUsage:
    return SwitchUsage(dict(u.job_indexes), list(u.ranges))


def _remember_install(fabric: Fabric, plan: JobPlan) -> None:
    """The cells of a job just installed may from now on hold its token (those the session has read)."""
    for sp in plan.switches:
        rb: ReadBack | None = fabric.memo(sp.switch).get("read_back")
        if rb is not None:
            for c in _cells(sp):
                if c in rb.cells:
                    rb.cells[c].add(sp.token)


def _entry_tokens(entries: Sequence[Entity]) -> set[int]:
    """The tokens of the job_config entries among `entries`."""
    return {dict(e.params).get("token", 0) for e in entries if isinstance(e, TableEntry) and e.action == N.A_SET_JOB}


def tokens_in_use(cl: SwitchClient, schema: P4Schema, cells: range | None = None) -> set[int]:
    """The install tokens a switch holds: its job_config entries' and those its cells keep (all cells, or the
    ones in `cells`), read back from the slot_token register. A cell keeps the token of the install that last
    used it after that job is gone, so a new install with that token would take the cell's stale partial sum
    for its own: these are the tokens a new install there must not get. A target that cannot read registers
    (BMv2's PI: UNIMPLEMENTED) gives its entries' tokens only."""
    used = _entry_tokens(read_entities(cl, schema, [N.T_JOB_CONFIG], groups=()))
    try:
        # only the cells asked for where a range is given: an install's 64 cells cost a twentieth of all 1024
        # (the embedded switch answers each cell from Python)
        held = (
            read_register_all(cl, schema, N.R_SLOT_TOKEN)
            if cells is None
            else list(read_register_cells(cl, schema, N.R_SLOT_TOKEN, cells).values())
        )
    except (ReadError, LookupError, P4InfoError) as ex:
        LOG.debug("%s: cell tokens not readable (%s); checking its entries' tokens only", cl.name, ex)
        return used - {0}
    return (used | set(held)) - {0}


def safe_installs(switch: str, installs: int, used: set[int]) -> int:
    """The smallest install count >= `installs` whose next token (planner.next_token) is not in `used`."""
    for step in range(255):
        if next_token(installs + step) not in used:
            return installs + step
    raise InstallError(
        f"switch {switch}: all 255 install tokens are held by its entries or cells; remove jobs "
        "(or restart the switch) before installing another"
    )


def _move_past_held_tokens(state: State, used: dict[str, set[int]]) -> bool:
    """Move the state's install counts past the tokens a switch still holds in the plan's cells and entries,
    where the next token is taken (a state file lost or older than the switches); True when a count moved
    (the caller plans again, for the new tokens)."""
    moved = False
    for name, tokens in used.items():
        have = state.installs.get(name, 0)
        safe = safe_installs(name, have, tokens)
        if safe != have:
            LOG.warning(
                "%s: token %d is still held by the switch (a lost or older state file?); install count "
                "%d -> %d, token %d",
                name,
                next_token(have),
                have,
                safe,
                next_token(safe),
            )
            state.installs[name] = safe
            moved = True
    return moved


def _first_failure(err: WriteError) -> str:
    bad = [s for s in err.statuses if not s.ok]
    if bad:
        return f"{bad[0].code_name} {bad[0].message}".strip()
    return f"{err.code}"


def _rollback(fabric: Fabric, schema: P4Schema, plan: JobPlan, written: dict[str, list[Entity]]) -> None:
    def undo(name: str) -> int:
        ents = list(reversed(written.get(name, [])))
        cl = fabric.client(name)
        configs = [e for e in ents if isinstance(e, TableEntry) and e.table == N.T_JOB_CONFIG]
        write_entities(cl, schema, "delete", configs, ignore={"NOT_FOUND"})
        write_entities(cl, schema, "delete", [e for e in ents if e not in configs], ignore={"NOT_FOUND"})
        return len(ents)

    _, errors = fabric.run(undo, [n for n, ents in written.items() if ents])
    if errors:
        left = {n: [str(e) for e in written[n]] for n in errors}
        raise RollbackError(
            f"job {plan.job_id}: rollback failed on {sorted(errors)}; entries possibly left: {left}"
        ) from next(iter(errors.values()))


def _reconcile(fabric: Fabric, schema: P4Schema, plan: JobPlan) -> dict[str, SyncResult]:
    """Re-write whatever of an installed job is missing or different (idempotent re-install)."""
    entries = job_entries(plan)

    def one(name: str) -> SyncResult:
        cl, grp = fabric.client(name), plan.on(name).mcast_grp
        try:
            actual, groups_ok = read_entities(cl, schema, N.JOB_TABLES, groups=[grp]), True
        except ReadError as ex:
            if ex.code != "UNIMPLEMENTED":
                raise
            actual, groups_ok = read_entities(cl, schema, N.JOB_TABLES, groups=()), False
        actual = [e for e in actual if _belongs(e, plan.job_id, grp)]
        return sync(cl, schema, _comparable(entries[name], groups_ok), actual)

    res = fabric.run_all(f"job {plan.job_id} re-install", one, entries)
    changed = sum(r.inserted + r.modified + r.deleted for r in res.values())
    LOG.info("job %d already installed; %d update(s) to repair drift", plan.job_id, changed)
    return res


def _belongs(e: Entity, job_id: int, mcast_grp: int) -> bool:
    if isinstance(e, MulticastGroup):
        return e.group_id == mcast_grp
    return dict(e.match).get(N.K_JOB_ID) == job_id


def remove_job(fabric: Fabric, state: State, job_id: int) -> JobPlan:
    """Delete exactly the job's entries and groups (absent ones are fine), then forget the job."""
    schema = _schema(fabric)
    plan = state.jobs.get(job_id)
    if plan is None:
        raise RemoveError(f"job {job_id} is not installed (installed: {sorted(state.jobs) or 'none'})")
    entries = job_entries(plan)

    def one(name: str) -> int:
        cl, ents = fabric.client(name), list(reversed(entries[name]))
        # job_config first and alone: the switch stops accepting the job before its ports and group go
        n = len(write_entities(cl, schema, "delete", ents[:1], ignore={"NOT_FOUND"}))
        return n + len(write_entities(cl, schema, "delete", ents[1:], ignore={"NOT_FOUND"}))

    _, errors = fabric.run(one, entries)
    if errors:
        raise RemoveError(
            f"job {job_id} only partly removed, it stays in the state; run `p4ina job remove --job {job_id}` "
            f"again: {FabricError('remove', errors)}"
        )
    del state.jobs[job_id]
    return plan


def fail_over(
    fabric: Fabric,
    state: State,
    job_id: int,
    failed: Iterable[str],
    reroute: bool = True,
    timings: dict[str, float] | None = None,
    failed_links: Iterable[tuple[str, str]] = (),
) -> JobPlan:
    """A switch of a job's tree died (or a link of it went down: `failed_links`, pairs of switch names): mark it
    failed, re-route around what failed and move the job to a tree without it (new tokens on every switch, so
    the cells the interrupted all-reduce used start afresh).

    The new tree is planned first; then each live switch goes from the old job's entries to the new one's in
    place (a switch in both trees usually needs one write, its job_config with the new token; a switch only in
    the old tree loses the job, one only in the new gains it), job_config last for traffic to see a whole job.
    All or nothing: if a write fails, the job is taken off every live switch and InstallError raised.

    Raises HostsCutOffError (a member's edge switch failed) or JobDoesNotFitError (no tree left) after the old
    job is gone; the caller falls back to the host ring then. `reroute=False` leaves the routes to the caller
    (aggregation packets do not use them, so a waiting job can go first and `install_routes` follow).
    `timings` gets seconds per phase: plan, read_back, write (and save, from the Controller).
    """
    old = state.jobs.get(job_id)
    if old is None:
        raise RemoveError(f"job {job_id} is not installed (installed: {sorted(state.jobs) or 'none'})")
    links = {link_key(*pair) for pair in failed_links}
    fabric.topo.without((), links)  # unknown links are refused by name before anything changes
    state.failed |= set(failed)
    state.failed_links |= links
    for name in state.failed:
        fabric.forget(name)
    schema = _schema(fabric)
    clock = _Phases(timings)
    live_old = [sp.switch for sp in old.switches if sp.switch not in state.failed]
    old_entries = job_entries(old)
    if state.routes and reroute:
        install_routes(fabric, state)
    try:
        plan = _plan_around_the_switches(fabric, schema, state, old.spec, clock, replacing=job_id)
    except PlanError:
        _take_off(fabric, schema, {n: old_entries[n] for n in live_old}, f"job {job_id}")
        del state.jobs[job_id]
        raise
    new_entries = job_entries(plan)
    for ents in new_entries.values():
        for e in ents:
            e.encode(schema)
    for sp in plan.switches:  # a new token per attempt (see install_job)
        state.installs[sp.switch] = state.installs.get(sp.switch, 0) + 1

    def one(name: str) -> None:
        cl, before, after = (
            fabric.client(name),
            old_entries.get(name, []) if name in live_old else [],
            new_entries.get(name, []),
        )
        have = {e.key: e for e in before}
        want = {e.key for e in after}
        body, config = after[:-1], after[-1:]  # job_config comes last in job_entries
        write_entities(cl, schema, "insert", [e for e in body if e.key not in have])
        write_entities(cl, schema, "modify", [e for e in body if e.key in have and have[e.key] != e])
        for e in config:
            if e.key not in have:
                write_entities(cl, schema, "insert", [e])
            elif have[e.key] != e:
                write_entities(cl, schema, "modify", [e])
        # what only the old job used, job_config first (the old job's order reversed)
        write_entities(cl, schema, "delete", [e for e in reversed(before) if e.key not in want], ignore={"NOT_FOUND"})

    _, errors = fabric.run(one, sorted(set(live_old) | set(new_entries)))
    clock.lap("write")
    _remember_install(fabric, plan)
    if errors:
        # whichever of the two jobs' entries a switch holds now (the missing ones are ignored)
        both = {n: old_entries.get(n, []) + new_entries.get(n, []) for n in set(live_old) | set(new_entries)}
        del state.jobs[job_id]
        _take_off(fabric, schema, both, f"job {job_id}")
        name, ex = next(iter(errors.items()))
        why = (
            f"switch {name}: {ex.entity}: {_first_failure(ex.error)}"
            if isinstance(ex, _PartialWrite)
            else f"switch {name}: {ex}"
        )
        raise InstallError(f"job {job_id} not moved to root {plan.root} (taken off every live switch): {why}") from ex
    state.jobs[job_id] = plan
    LOG.info(
        "job %d moved to root %s (%d switches) around %s",
        job_id,
        plan.root,
        len(plan.switches),
        sorted(state.failed) + ["-".join(pair) for pair in sorted(state.failed_links)],
    )
    return plan


def _take_off(fabric: Fabric, schema: P4Schema, entries: dict[str, list[Entity]], what: str) -> None:
    """Delete these entries (job_config first: each list in write order), whatever is already gone."""

    def one(name: str) -> None:
        ents = list(reversed(entries[name]))
        cl = fabric.client(name)
        configs = [e for e in ents if isinstance(e, TableEntry) and e.table == N.T_JOB_CONFIG]
        write_entities(cl, schema, "delete", configs, ignore={"NOT_FOUND"})
        write_entities(cl, schema, "delete", [e for e in ents if e not in configs], ignore={"NOT_FOUND"})

    _, errors = fabric.run(one, [n for n, e in entries.items() if e])
    if errors:
        raise RemoveError(f"{what}: could not take it off the live switches: {FabricError('remove', errors)}")


# -- verify ------------------------------------------------------------------------------
def expected_entries(fabric: Fabric, state: State) -> dict[str, list[Entity]]:
    """What each live switch should hold (failed switches are left out: nothing can be read from them)."""
    topo = live_topology(fabric, state)
    out: dict[str, list[Entity]] = {s.name: [] for s in topo.switches}
    if state.routes:
        for name, routes in all_route_entries(topo).items():
            out[name] += routes
    for plan in state.plans():
        for name, ents in job_entries(plan).items():
            out[name] += ents
    return out


NO_PIPELINE = "pipeline (the switch runs none: restarted with empty tables?)"


def verify(fabric: Fabric, state: State, switches: Iterable[str] | None = None) -> dict[str, Drift]:
    """Read every switch back and compare with what the state says should be there. A switch that runs no
    pipeline (it restarted) has everything missing, its pipeline first."""
    schema = _schema(fabric)
    want = expected_entries(fabric, state)
    names = list(switches) if switches is not None else list(want)

    def one(name: str) -> Drift:
        cl = fabric.client(name)
        if cl.get_pipeline() is None:
            return Drift(missing=[NO_PIPELINE] + [str(e) for e in want[name]])
        actual, groups_ok = _read_switch(cl, schema, want[name])
        return diff(_comparable(want[name], groups_ok), actual)

    return fabric.run_all("verify", one, names)


def _read_switch(cl: SwitchClient, schema: P4Schema, want: Sequence[Entity]) -> tuple[list[Entity], bool]:
    """Everything p4ina writes on a switch (its five tables, its multicast groups); and whether groups were readable."""
    try:
        return read_entities(cl, schema, N.JOB_TABLES + N.ROUTE_TABLES), True
    except ReadError:  # a target that cannot read all groups at once: read the expected ones
        LOG.debug("%s: wildcard multicast read refused; reading expected groups one by one", cl.name)
    groups = [e.group_id for e in want if isinstance(e, MulticastGroup)]
    try:
        return read_entities(cl, schema, N.JOB_TABLES + N.ROUTE_TABLES, groups=groups), True
    except ReadError as ex:
        if ex.code != "UNIMPLEMENTED":
            raise
        LOG.warning("%s cannot read multicast groups back; they are not verified", cl.name)
        return read_entities(cl, schema, N.JOB_TABLES + N.ROUTE_TABLES, groups=()), False


def _comparable(want: Sequence[Entity], groups_readable: bool) -> list[Entity]:
    return list(want) if groups_readable else [e for e in want if not isinstance(e, MulticastGroup)]


def repair(fabric: Fabric, state: State, switches: Iterable[str] | None = None) -> dict[str, SyncResult]:
    """Make the switches hold exactly what the state says (insert missing, fix different, delete unexpected)."""
    schema = _schema(fabric)
    want = expected_entries(fabric, state)
    names = list(switches) if switches is not None else list(want)

    def one(name: str) -> SyncResult:
        cl = fabric.client(name)
        actual, groups_ok = _read_switch(cl, schema, want[name])
        if not groups_ok:
            LOG.warning("%s: multicast groups not readable; repair leaves them as they are", name)
        return sync(cl, schema, _comparable(want[name], groups_ok), actual)

    fabric.drop_memo(names)  # it deletes what the state does not know: read the switches again next time
    return fabric.run_all("repair", one, names)


# -- reconcile ---------------------------------------------------------------------------
@dataclass
class Reconciliation:
    """What a controller starting against running switches found, compared with its state file."""

    ok: list[int] = field(default_factory=list)  # the state's jobs, fully on their switches
    drifted: dict[int, list[str]] = field(default_factory=dict)  # the state's jobs -> switches missing or differing
    unknown: dict[int, list[str]] = field(default_factory=dict)  # job ids on switches the state does not have
    no_pipeline: list[str] = field(default_factory=list)  # switches running no pipeline (restarted)
    tokens: dict[str, list[int]] = field(default_factory=dict)  # switch -> [install count before, after]
    repaired: dict[str, SyncResult] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return not (self.drifted or self.unknown or self.no_pipeline)

    def to_dict(self) -> dict[str, object]:
        return {
            "clean": self.clean,
            "ok": self.ok,
            "drifted": {str(k): v for k, v in self.drifted.items()},
            "unknown": {str(k): v for k, v in self.unknown.items()},
            "no_pipeline": self.no_pipeline,
            "tokens": self.tokens,
            "repaired": {n: vars(r) for n, r in self.repaired.items()},
        }


def reconcile(fabric: Fabric, state: State) -> Reconciliation:
    """Read back what every live switch holds (jobs, tokens) and compare with the state: which of its jobs are
    fully installed, which drifted, which jobs the switches hold that it does not know, which switches
    restarted (no pipeline). The state's install counts move past every token a switch still holds (entries
    and cells), so a lost or older state file cannot hand out a token in use. Writes nothing to the switches:
    `repair` makes them match the state."""
    schema = _schema(fabric)
    live = [s.name for s in live_topology(fabric, state).switches]
    want = {plan.job_id: job_entries(plan) for plan in state.plans()}

    def one(name: str) -> tuple[list[Entity], set[int]] | None:
        cl = fabric.client(name)
        if cl.get_pipeline() is None:
            return None
        return read_entities(cl, schema, N.JOB_TABLES, groups=()), tokens_in_use(cl, schema)

    seen = fabric.run_all("reconcile", one, live)
    out = Reconciliation()
    for name in live:
        got = seen[name]
        if got is None:
            out.no_pipeline.append(name)
            continue
        entries, tokens = got
        have = state.installs.get(name, 0)
        safe = safe_installs(name, have, tokens)
        if safe != have:
            state.installs[name] = safe
            out.tokens[name] = [have, safe]
        held = {e.exact(N.K_JOB_ID) for e in entries if isinstance(e, TableEntry)}
        for job in sorted(j for j in held if j is not None):  # every job table is keyed by job_id
            if job not in want:
                out.unknown.setdefault(job, []).append(name)
    for job, per_switch in want.items():
        bad = []
        for name, ents in per_switch.items():
            got = seen.get(name)
            if got is None:
                bad.append(name)
                continue
            mine: list[Entity] = [e for e in got[0] if isinstance(e, TableEntry) and e.exact(N.K_JOB_ID) == job]
            if not diff([e for e in ents if isinstance(e, TableEntry)], mine).clean:
                bad.append(name)
        if bad:
            out.drifted[job] = sorted(bad)
        else:
            out.ok.append(job)
    return out


def _schema(fabric: Fabric) -> P4Schema:
    if fabric.schema is None:
        raise InstallError("no P4Info: pass --p4info (p4/build/p4ina.p4info.txtpb) or push a pipeline first")
    return fabric.schema


def _spec_text(spec: JobSpec) -> str:
    return (
        f"hosts {','.join(spec.hosts)}, {spec.up_lanes} up, {spec.down_lanes} down, shift {spec.shift}, "
        f"{spec.slots} slots"
    )


__all__ = [
    "Reconciliation",
    "reconcile",
    "tokens_in_use",
    "safe_installs",
    "InstallError",
    "RollbackError",
    "RemoveError",
    "SyncResult",
    "Drift",
    "TableEntry",
    "install_job",
    "install_routes",
    "remove_job",
    "verify",
    "repair",
    "push_pipeline",
    "load_pipeline",
    "write_entities",
    "read_entities",
    "sync",
    "diff",
    "expected_entries",
]
