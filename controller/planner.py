"""Aggregation tree planning: which switches aggregate a job, in what tree, with which slots.

A job's tree starts at the edge switches of its members (each aggregates its
local hosts) and goes up to the lowest tier from which one switch reaches all
member edges by down links; that switch is the root.  Among equal roots the
least loaded wins (fewest jobs on the tree's non-edge switches), so concurrent
jobs spread over aggregation and core switches; ties rotate with the job id.
Pure: the plan depends only on the topology, the job and the plans already made.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from controller import names as N
from controller.topology import Topology
from wireformat import fixedpoint as fxp
from wireformat.fixedpoint import LaneType

LOG = logging.getLogger(__name__)

# The root narrows a sum by the shift that gives n contributions exactly the headroom they
# need (wireformat.fixedpoint.default_shift: int8 lanes both ways of 16 hosts -> 4; int32
# contributions with int8 results -> 24); the host multiplies a result by 2^shift (the shift
# travels in every result header, too). Other shifts are refused when they lose bits.
DEFAULT_SLOTS = 128
MAX_JOB_ID = (1 << 16) - 1


class PlanError(ValueError):
    """A job cannot be planned; the message names the reason."""


class UnknownHostError(PlanError):
    pass


class DuplicateJobError(PlanError):
    pass


class JobDoesNotFitError(PlanError):
    pass


class HostsCutOffError(PlanError):
    """Hosts of the job hang off a failed edge switch, or off one whose links to the job's other edge switches
    are all down (`isolated`): no tree (and no ring) can reach them."""

    def __init__(self, job_id: int, cut: Mapping[str, Sequence[str]], isolated: Iterable[str] = ()) -> None:
        self.cut = {sw: tuple(hosts) for sw, hosts in cut.items()}
        alone = set(isolated)
        what = "; ".join(
            f"edge switch {sw} {'has no live path to the others' if sw in alone else 'is down'}, cutting off "
            f"{', '.join(hosts)}"
            for sw, hosts in self.cut.items()
        )
        super().__init__(f"job {job_id}: {what}")


def _components(topo: Topology, exclude: frozenset[str]) -> dict[str, int]:
    """switch -> the number of its connected piece of the live fabric (links of `topo`, no excluded switch)."""
    piece: dict[str, int] = {}
    pieces = 0
    for s in topo.switches:
        if s.name in exclude or s.name in piece:
            continue
        n, todo = pieces, [s.name]
        pieces += 1
        piece[s.name] = n
        while todo:
            for nb in topo.switch_neighbors(todo.pop()):
                if nb.peer not in exclude and nb.peer not in piece:
                    piece[nb.peer] = n
                    todo.append(nb.peer)
    return piece


@dataclass(frozen=True)
class JobSpec:
    job_id: int
    hosts: tuple[str, ...]
    up_lanes: LaneType = "int32"  # what hosts send (the switches widen it and sum in int32)
    down_lanes: LaneType = "int32"  # what comes back: the root narrows the sum to it (shifted right by `shift`)
    shift: int = 0
    slots: int = DEFAULT_SLOTS

    @classmethod
    def make(
        cls,
        job_id: int,
        hosts: Iterable[str],
        down_lanes: str = "int32",
        *,
        up_lanes: str | None = None,
        shift: int | None = None,
        slots: int = DEFAULT_SLOTS,
    ) -> JobSpec:
        """A checked job; hosts send the lanes that come back unless up_lanes says otherwise (narrow lanes both
        ways), the shift defaults to the one that gives the sum of this many hosts the headroom it needs."""
        try:
            down = fxp.lane_type(down_lanes)
            up = fxp.lane_type(up_lanes or down)
        except fxp.FixedPointConfigError as ex:
            raise PlanError(f"job {job_id}: {ex}") from ex
        hosts = tuple(hosts)
        if shift is None:
            shift = fxp.default_shift(max(1, len(hosts)), fxp.LANE_BITS[up], fxp.LANE_BITS[down])
        spec = cls(job_id, hosts, up_lanes=up, down_lanes=down, shift=shift, slots=slots)
        spec.validate()
        return spec

    def validate(self) -> None:
        if not 1 <= self.job_id <= MAX_JOB_ID:
            raise PlanError(f"job id must be 1..{MAX_JOB_ID}, got {self.job_id}")
        if not self.hosts:
            raise PlanError(f"job {self.job_id} has no hosts")
        if len(set(self.hosts)) != len(self.hosts):
            raise PlanError(f"job {self.job_id} lists a host twice")
        for lanes in (self.up_lanes, self.down_lanes):
            if lanes not in fxp.LANE_BITS:
                raise PlanError(f"job {self.job_id}: lanes must be one of {', '.join(fxp.LANE_TYPES)}, got {lanes!r}")
        if not 0 <= self.shift <= 31:
            raise PlanError(f"job {self.job_id}: shift must be 0..31, got {self.shift}")
        if self.down_lanes == "int32" and self.shift:
            raise PlanError(
                f"job {self.job_id}: shift {self.shift} needs int16 or int8 lanes down (int32 results are not shifted)"
            )
        if not 1 <= self.slots <= N.NUM_SLOTS:
            raise PlanError(f"job {self.job_id}: slots must be 1..{N.NUM_SLOTS}, got {self.slots}")
        try:  # the workers refuse the same configurations (hosts/inc_worker.py), with the same message
            fxp.check(len(self.hosts), self.up_bits, self.down_bits, self.shift)
            fxp.check_growth(len(self.hosts), self.up_bits, self.down_bits, self.shift)
        except fxp.FixedPointConfigError as ex:
            raise PlanError(f"job {self.job_id}: {ex}") from ex

    @property
    def up_bits(self) -> int:
        return fxp.LANE_BITS[self.up_lanes]

    @property
    def down_bits(self) -> int:
        return fxp.LANE_BITS[self.down_lanes]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["hosts"] = list(self.hosts)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobSpec:
        """The lane keys are required: a dict of the old vocabulary (a version 1 state file) is upgraded by
        controller.state first, not read as int32 lanes."""
        return cls.make(
            int(d["job_id"]),
            d["hosts"],
            d["down_lanes"],
            up_lanes=d["up_lanes"],
            shift=d.get("shift"),
            slots=int(d.get("slots", DEFAULT_SLOTS)),
        )


@dataclass(frozen=True)
class Child:
    port: int  # this switch's port facing the child
    index: int  # the child's bit in the slot bitmap (and the multicast rid)
    node: str  # host or switch name


@dataclass(frozen=True)
class SwitchPlan:
    switch: str
    role: int
    job_index: int
    slot_base: int
    slot_count: int
    mcast_grp: int
    up_port: int  # 0 at the root
    parent: str | None
    children: tuple[Child, ...]
    result_type: int
    shift: int
    token: int = 1  # 1..255, new at every install of a job on this switch (docs/DESIGN.md)
    up_type: int = N.ELEM_INT32  # lanes of the partial sums sent up (inner nodes)
    up_shift: int = 0  # their rounding right shift (inner nodes): the bits this level's additions gained
    in_shift: int = 0  # the shift the children's packets already carry

    @property
    def fan_in(self) -> int:
        return len(self.children)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["children"] = [asdict(c) for c in self.children]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SwitchPlan:
        kw = dict(d)
        kw["children"] = tuple(Child(**c) for c in d["children"])
        return cls(**kw)


@dataclass(frozen=True)
class JobPlan:
    spec: JobSpec
    root: str
    switches: tuple[SwitchPlan, ...]  # root first, then breadth-first
    error_lsb: float = 0.0  # bound on a decoded sum's error, in units of 2^-exponent (planner._shifts)
    q_limit: int = 0  # largest |lane| a host may contribute (0: as wireformat.fixedpoint.q_limit says)

    @property
    def job_id(self) -> int:
        return self.spec.job_id

    def on(self, switch: str) -> SwitchPlan:
        for sp in self.switches:
            if sp.switch == switch:
                return sp
        raise KeyError(f"job {self.job_id} has no tree node on switch {switch!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec.to_dict(),
            "root": self.root,
            "switches": [s.to_dict() for s in self.switches],
            "error_lsb": self.error_lsb,
            "q_limit": self.q_limit,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobPlan:
        return cls(
            JobSpec.from_dict(d["spec"]),
            d["root"],
            tuple(SwitchPlan.from_dict(s) for s in d["switches"]),
            float(d.get("error_lsb", 0.0)),
            int(d.get("q_limit", 0)),
        )


@dataclass
class SwitchUsage:
    """What the existing jobs use on one switch."""

    job_indexes: dict[int, int] = field(default_factory=dict)  # job_index -> job_id
    ranges: list[tuple[int, int, int]] = field(default_factory=list)  # (base, size, job_id)

    def free_job_index(self) -> int | None:
        for i in range(1, N.MAX_JOBS):
            if i not in self.job_indexes:
                return i
        return None

    def free_slot_base(self, size: int) -> int | None:
        """First fit: the lowest base where `size` slots are free."""
        base = 0
        for b, s, _ in sorted(self.ranges):
            if b - base >= size:
                return base
            base = max(base, b + s)
        return base if N.NUM_SLOTS - base >= size else None

    def largest_free(self) -> int:
        best, base = 0, 0
        for b, s, _ in sorted(self.ranges):
            best, base = max(best, b - base), max(base, b + s)
        return max(best, N.NUM_SLOTS - base)


def usage(plans: Iterable[JobPlan]) -> dict[str, SwitchUsage]:
    out: dict[str, SwitchUsage] = {}
    for plan in plans:
        for sp in plan.switches:
            u = out.setdefault(sp.switch, SwitchUsage())
            u.job_indexes[sp.job_index] = plan.job_id
            u.ranges.append((sp.slot_base, sp.slot_count, plan.job_id))
    return out


def _below(topo: Topology, targets: set[str], exclude: frozenset[str] = frozenset()) -> dict[str, frozenset[str]]:
    """switch -> the target edge switches it reaches by down links only (through no excluded switch)."""
    memo: dict[str, frozenset[str]] = {}
    for s in sorted(topo.switches, key=lambda s: s.tier):  # lower tiers first
        if s.name in exclude:
            memo[s.name] = frozenset()
            continue
        own = {s.name} & targets
        for nb in topo.switch_neighbors(s.name):
            if topo.switch(nb.peer).tier < s.tier:
                own |= memo[nb.peer]
        memo[s.name] = frozenset(own)
    return memo


def _tree(
    topo: Topology,
    root: str,
    members: Mapping[str, list[tuple[int, str]]],
    below: Mapping[str, frozenset[str]],
    load: Mapping[str, int],
    exclude: frozenset[str] = frozenset(),
) -> dict[str, tuple[str | None, int, list[tuple[int, str]]]]:
    """switch -> (parent, up port, [(child port, child node)]) for the tree rooted at `root`."""
    tree: dict[str, tuple[str | None, int, list[tuple[int, str]]]] = {}
    todo: list[tuple[str, str | None, int, frozenset[str]]] = [(root, None, 0, frozenset(members))]
    while todo:
        sw, parent, up_port, need = todo.pop(0)
        children: list[tuple[int, str]] = []
        if sw in need:  # an edge switch: its member hosts are its children
            children += members[sw]
        rest = set(need) - {sw}
        downs = [
            nb
            for nb in topo.switch_neighbors(sw)
            if topo.switch(nb.peer).tier < topo.switch(sw).tier and nb.peer not in exclude
        ]
        for nb in sorted(downs, key=lambda nb: (load.get(nb.peer, 0), nb.port)):
            take = below[nb.peer] & rest
            if take:
                rest -= take
                children.append((nb.port, nb.peer))
                todo.append((nb.peer, sw, nb.peer_port, frozenset(take)))
        if rest:
            raise PlanError(f"switch {sw} cannot reach edge switches {sorted(rest)} downwards")
        tree[sw] = (parent, up_port, sorted(children))
    return tree


def next_token(installs: int) -> int:
    """The token of a switch's next job install, given how many installs it has had: 1..255, cycling.

    Cells keep the token of the install that last used them; a different token makes a cell start
    afresh, so a new job never sees an earlier job's leftovers in its slot range (P4Runtime cannot
    clear registers).
    """
    return installs % 255 + 1


def plan_job(
    topo: Topology,
    spec: JobSpec,
    existing: Iterable[JobPlan] = (),
    installs: Mapping[str, int] | None = None,
    exclude: Iterable[str] = (),
    reserved: Mapping[str, SwitchUsage] | None = None,
) -> JobPlan:
    """Plan `spec` next to the `existing` plans, or raise a PlanError that says why not.

    `installs` counts the job installs each switch has had so far (for its token); `exclude` names failed
    switches the tree must avoid (HostsCutOffError when a member's own edge switch is one of them);
    `reserved`: job indexes (and so multicast groups) and slot ranges a switch holds for jobs the `existing`
    plans do not know (another controller's, read back from the switches), which the plan must not take.
    """
    exclude = frozenset(exclude)
    unknown_sw = sorted(exclude - {s.name for s in topo.switches})
    if unknown_sw:
        raise PlanError(f"job {spec.job_id}: cannot exclude unknown switch(es) {', '.join(unknown_sw)}")
    spec.validate()
    existing = list(existing)
    if any(p.job_id == spec.job_id for p in existing):
        raise DuplicateJobError(f"job {spec.job_id} is already installed; remove it first or pick another id")
    unknown = [h for h in spec.hosts if not topo.has_host(h)]
    if unknown:
        raise UnknownHostError(
            f"job {spec.job_id}: unknown host(s) {', '.join(unknown)} "
            f"(this {topo.kind} has {topo.hosts[0].name}..{topo.hosts[-1].name})"
            if topo.hosts
            else f"job {spec.job_id}: topology has no hosts"
        )
    members: dict[str, list[tuple[int, str]]] = {}
    for name in spec.hosts:
        h = topo.host(name)
        members.setdefault(h.switch, []).append((h.port, h.name))
    cut = {sw: [name for _port, name in hs] for sw, hs in sorted(members.items()) if sw in exclude}
    if cut:
        raise HostsCutOffError(spec.job_id, cut)
    piece = _components(topo, exclude)
    if len({piece[sw] for sw in members}) > 1:  # links down split the fabric: the smaller pieces are cut off
        hosts_in: dict[int, int] = {}
        for sw, hs in members.items():
            hosts_in[piece[sw]] = hosts_in.get(piece[sw], 0) + len(hs)
        main = max(sorted(hosts_in), key=lambda k: hosts_in[k])
        cut = {sw: [name for _port, name in hs] for sw, hs in sorted(members.items()) if piece[sw] != main}
        raise HostsCutOffError(spec.job_id, cut, isolated=cut)
    use = usage(existing)
    for name, r in (reserved or {}).items():
        u = use.setdefault(name, SwitchUsage())
        u.job_indexes.update({i: j for i, j in r.job_indexes.items() if i not in u.job_indexes})
        u.ranges.extend(r.ranges)
    load = {name: len(u.job_indexes) for name, u in use.items()}
    below = _below(topo, set(members), exclude)
    reasons: list[str] = []
    for tier in range(topo.max_tier + 1):
        candidates = [s.name for s in topo.by_tier(tier) if s.name not in exclude and below[s.name] >= set(members)]
        scored = []
        for pos, root in enumerate(candidates):
            try:
                tree = _tree(topo, root, members, below, load, exclude)
            except PlanError as ex:
                reasons.append(str(ex))
                continue
            why = _fit(tree, spec, use)
            if why:
                reasons.append(f"root {root}: {why}")
                continue
            upper = [load.get(s, 0) for s in tree if topo.switch(s).tier > 0]
            key = (max(upper, default=0), sum(upper), (pos - spec.job_id) % len(candidates))
            scored.append((key, root, tree))
        if scored:
            _, root, tree = min(scored, key=lambda t: t[0])
            return _assign(spec, root, tree, use, installs or {})
        if candidates:
            break  # the lowest tier that covers the members did not fit: say why
    detail = "; ".join(dict.fromkeys(reasons)) or "no switch reaches all member edge switches" + (
        f" without {', '.join(sorted(exclude))}" if exclude else ""
    )
    raise JobDoesNotFitError(f"job {spec.job_id} does not fit: {detail}")


def _fit(
    tree: Mapping[str, tuple[str | None, int, list[tuple[int, str]]]], spec: JobSpec, use: Mapping[str, SwitchUsage]
) -> str | None:
    for sw, (_, _, children) in tree.items():
        u = use.get(sw, SwitchUsage())
        if len(children) > N.MAX_FAN_IN:
            return f"switch {sw} would have fan-in {len(children)} > {N.MAX_FAN_IN}"
        if u.free_job_index() is None:
            return f"switch {sw} already carries {N.MAX_JOBS - 1} jobs"
        if u.free_slot_base(spec.slots) is None:
            return f"switch {sw} has {u.largest_free()} contiguous free slots, job needs {spec.slots}"
    return None


@dataclass(frozen=True)
class Shifts:
    """How a job's shift is spread over its tree, and what the hosts may send (wireformat.fixedpoint)."""

    per_switch: dict[str, tuple[int, int, int]]  # switch -> (up_type, up_shift, in_shift)
    q_limit: int  # largest |lane| a host may contribute
    error_lsb: float  # bound on a decoded sum's error, in units of 2^-exponent


def _shifts(spec: JobSpec, root: str, tree: Mapping[str, tuple[str | None, int, list[tuple[int, str]]]]) -> Shifts:
    """Narrow lanes stay narrow on every link: each level of switches shifts its partial sums right (rounding)
    by the bits its additions gained, and the root shifts the rest of the job's shift.

    Levels count up from the switches whose children are hosts, so the tree must be balanced (every host
    at the same depth: the planner's trees on fat-trees and leaf-spines are); all switches of one level
    shift alike, so their parent adds partials of one scale. A level's shift is the smallest that keeps
    its largest possible partial within the lanes, bounds computed switch by switch from its hosts; since
    rounding can add half a unit at each level, the hosts' limit q is lowered (by a unit or two) until the
    root's result fits the job's shift. A job without shift (int32 lanes), or an unbalanced tree, keeps its
    partial sums unshifted and as wide as fixedpoint.partial_bits says.
    """
    members = set(spec.hosts)
    n, c, r, shift = len(spec.hosts), spec.up_bits, spec.down_bits, spec.shift
    depth: dict[str, int] = {}
    for sw, (parent, _port, _children) in tree.items():  # breadth-first: a parent comes before its children
        depth[sw] = 0 if parent is None else depth[parent] + 1
    height = max(depth.values())
    leafy = {sw for sw, (_p, _u, ch) in tree.items() if any(node in members for _port, node in ch)}
    balanced = all(depth[sw] == height and all(node in members for _port, node in tree[sw][2]) for sw in leafy)
    q_full = fxp.q_limit(n, c, r, shift)
    if shift == 0 or c >= fxp.SUM_BITS or not balanced or height == 0:
        wide = fxp.BITS_ELEM[fxp.partial_bits(n, c, r, shift)]
        error = n / 2 + ((1 << shift) / 2 if shift else 0.0)  # the hosts' rounding and the root's
        return Shifts({sw: (wide if depth[sw] else N.ELEM_INT32, 0, 0) for sw in tree}, q_full, error)
    top_c, top_r = (1 << (c - 1)) - 1, (1 << (r - 1)) - 1

    def solve(q: int) -> tuple[dict[str, tuple[int, int, int]], float] | None:
        bound: dict[str, int] = {h: q for h in members}
        out: dict[str, tuple[int, int, int]] = {}
        cum, error = 0, n / 2
        for lvl in range(height, 0, -1):
            sums = {sw: sum(bound[node] for _port, node in tree[sw][2]) for sw in tree if depth[sw] == lvl}
            s = 0
            while max(fxp.round_shift(v, s) for v in sums.values()) > top_c:
                s += 1
            for sw, v in sums.items():
                bound[sw] = fxp.round_shift(v, s)
                out[sw] = (fxp.BITS_ELEM[c], s, cum)
            cum += s
            if s:
                error += len(sums) * (1 << cum) / 2
        left = shift - cum
        if left < 0 or fxp.round_shift(sum(bound[node] for _port, node in tree[root][2]), left) > top_r:
            return None
        out[root] = (N.ELEM_INT32, 0, cum)
        return out, error + ((1 << shift) / 2 if left else 0.0)

    q = q_full
    while q > q_full // 2:
        found = solve(q)
        if found is not None:
            return Shifts(found[0], q, found[1])
        q -= 1
    raise fxp.FixedPointConfigError(
        f"{n} workers: this tree's levels need more than the job's shift of {shift} to keep int{c} partial sums; "
        "raise the shift"
    )


def _assign(
    spec: JobSpec,
    root: str,
    tree: Mapping[str, tuple[str | None, int, list[tuple[int, str]]]],
    use: Mapping[str, SwitchUsage],
    installs: Mapping[str, int],
) -> JobPlan:
    try:
        shifts = _shifts(spec, root, tree)
    except fxp.FixedPointConfigError as ex:
        raise JobDoesNotFitError(f"job {spec.job_id} on root {root}: {ex}") from ex
    out = []
    for sw, (parent, up_port, children) in tree.items():  # insertion order: breadth-first from the root
        u = use.get(sw, SwitchUsage())
        job_index = u.free_job_index()
        base = u.free_slot_base(spec.slots)
        assert job_index is not None and base is not None  # checked by _fit
        out.append(
            SwitchPlan(
                switch=sw,
                role=N.ROLE_ROOT if parent is None else N.ROLE_INNER,
                job_index=job_index,
                slot_base=base,
                slot_count=spec.slots,
                mcast_grp=job_index,  # one group per job per switch: the job index is unique on the switch
                up_port=up_port,
                parent=parent,
                children=tuple(Child(port, i, node) for i, (port, node) in enumerate(children)),
                result_type=fxp.lane_elem(spec.down_lanes),
                shift=spec.shift,
                token=next_token(installs.get(sw, 0)),
                up_type=shifts.per_switch[sw][0],
                up_shift=shifts.per_switch[sw][1],
                in_shift=shifts.per_switch[sw][2],
            )
        )
    plan = JobPlan(spec, root, tuple(out), shifts.error_lsb, shifts.q_limit)
    LOG.debug("job %d: root %s, %d switches", spec.job_id, root, len(out))
    return plan
