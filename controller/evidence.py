"""Where a stalled job is stuck, from the switches' own slot registers: the evidence of a gray failure.

A switch that stays up but drops the job's packets, or a link with carrier up and 100% loss one way, announces
nothing (controller.monitor hears nothing) and answers every probe (P4Runtime, carrier). What it cannot hide is
the state of the rounds it holds up: in every stalled cell the child has done its part and the parent has not
seen it. Per cell, for a child switch c of a switch P:

- c has sent its partial sum up (SENT_UP) and P's cell does not hold c's bit under the same token and epoch:
  c's contribution never arrived at P (c's link up to P drops it, or P drops everything);
- c has sent up, P holds c's bit and is FINAL: P's result never arrived at c (P's link down to c drops it).

Over the stalled cells, a parent missing two or more of its child switches is a gray switch (two gray links into
one switch at once are far less likely, and avoiding the switch avoids them too); one missing child is that
link; its only child switch missing, the parent or that link (the parent is avoided). Anything else (two places
at once; none: a round held up at a host or its link) is not localised, and the stall stays what it was before.
One reading proves little: a loss burst leaves the same picture for a while. The caller compares two readings a
failure timeout apart (the runner: the first stall and the fail-over barrier), with the job's counters between
them (confirm); the same verdict twice, every worker retransmitting in between, is not random loss.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controller import names as N
from controller.counters import parse, request
from controller.fabric import Fabric
from controller.p4info import decode_int
from controller.planner import JobPlan, SwitchPlan
from controller.topology import link_key
from p4proto import p4runtime_pb2


@dataclass(frozen=True)
class Cell:
    """One aggregation cell's registers (p4/include/aggregation.p4)."""

    state: int
    bitmap: int
    epoch: int
    token: int

    @property
    def phase(self) -> int:
        return self.state & N.STATE_PHASE_MASK


@dataclass(frozen=True)
class StallEvidence:
    """What the slot registers of a job's tree say about its stall."""

    switch: str | None = None  # a gray switch
    link: tuple[str, str] | None = None  # a gray link (link_key order) ...
    towards: str | None = None  # ... and the end its frames do not reach
    cells: int = 0  # stalled cells that point there
    why: str = ""  # one line: the verdict, or why there is none
    seen: tuple[str, ...] = field(default_factory=tuple)  # every place some stalled cell points at
    # per tree switch, the job's counters when read: (contributions + retransmissions received, retransmissions)
    counters: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def localised(self) -> bool:
        return self.switch is not None or self.link is not None

    @property
    def what(self) -> str:
        if self.switch is not None:
            return self.switch
        if self.link is not None:
            return "-".join(self.link)
        return ""

    def same_place(self, other: StallEvidence | None) -> bool:
        return other is not None and self.localised and (self.switch, self.link) == (other.switch, other.link)

    def to_dict(self) -> dict[str, Any]:
        return {
            "switch": self.switch,
            "link": list(self.link) if self.link else None,
            "towards": self.towards,
            "cells": self.cells,
            "why": self.why,
            "seen": list(self.seen),
            "counters": {k: list(v) for k, v in self.counters.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StallEvidence:
        link = d.get("link")
        if link is not None and len(link) != 2:
            raise ValueError(f"stall evidence: link {link!r} is not a pair of switches")
        return cls(
            switch=d.get("switch"),
            link=(str(link[0]), str(link[1])) if link else None,
            towards=d.get("towards"),
            cells=int(d.get("cells", 0)),
            why=str(d.get("why", "")),
            seen=tuple(d.get("seen", ())),
            counters={str(k): (int(v[0]), int(v[1])) for k, v in d.get("counters", {}).items()},
        )


def cell_index(sp: SwitchPlan, slot: int, v: int) -> int:
    """The register cell of the job's slot `slot`, shadow copy v, on the switch of `sp` (its own slot base)."""
    return (sp.slot_base + slot) * N.CELLS_PER_SLOT + v


def job_cells(plan: JobPlan) -> dict[str, list[int]]:
    """switch -> the register cells of the job's slots there."""
    return {sp.switch: [cell_index(sp, s, v) for s in range(sp.slot_count) for v in (0, 1)] for sp in plan.switches}


def localise(plan: JobPlan, cells: Mapping[str, Mapping[int, Cell]]) -> StallEvidence:
    """The verdict from every tree switch's cells (switch -> cell index -> Cell); pure, no switch needed."""
    by_name = {sp.switch: sp for sp in plan.switches}
    epoch = _newest([c.epoch for sp in plan.switches for c in cells.get(sp.switch, {}).values() if c.token == sp.token])
    up_missing: dict[str, dict[str, int]] = {}  # parent -> child switch -> stalled cells
    down_missing: dict[str, dict[str, int]] = {}
    for sp in plan.switches:
        if sp.parent is None or sp.parent not in by_name:
            continue
        parent = by_name[sp.parent]
        bit = next((c.index for c in parent.children if c.node == sp.switch), None)
        if bit is None:
            continue
        mine, theirs = cells.get(sp.switch, {}), cells.get(parent.switch, {})
        for s in range(sp.slot_count):
            for v in (0, 1):
                c, p = mine.get(cell_index(sp, s, v)), theirs.get(cell_index(parent, s, v))
                # the stalled all-reduce's rounds only: a cell left by an earlier epoch is history
                if c is None or p is None or c.token != sp.token or c.epoch != epoch or c.phase != N.STATE_SENT_UP:
                    continue
                arrived = p.token == parent.token and p.epoch == c.epoch and p.bitmap >> bit & 1
                if not arrived:
                    up_missing.setdefault(parent.switch, {}).setdefault(sp.switch, 0)
                    up_missing[parent.switch][sp.switch] += 1
                elif p.phase == N.STATE_FINAL:
                    down_missing.setdefault(parent.switch, {}).setdefault(sp.switch, 0)
                    down_missing[parent.switch][sp.switch] += 1
    places: list[tuple[str | None, tuple[str, str] | None, str | None, int, str]] = []
    for top, missing in up_missing.items():
        kids = [c.node for c in by_name[top].children if c.node in by_name]
        n = sum(missing.values())
        if len(missing) >= 2:  # two gray links into one switch at once is far less likely than the switch
            held = "none" if set(missing) == set(kids) else f"{len(missing)} of {len(kids)}"
            places.append((top, None, None, n, f"{top} holds {held} of its child switches' partial sums"))
        elif len(kids) == 1:  # one child switch: its link and the parent look alike; avoid both
            places.append((top, None, None, n, f"{top} or its link from {kids[0]}: its only child switch"))
        else:
            for child, k in missing.items():
                places.append((None, link_key(child, top), top, k, f"{child}'s partial sums never reach {top}"))
    for top, missing in down_missing.items():
        kids = [c.node for c in by_name[top].children if c.node in by_name]
        n = sum(missing.values())
        if len(kids) >= 2 and set(missing) == set(kids):
            places.append((top, None, None, n, f"{top}'s results reach none of its child switches"))
        else:
            for child, k in missing.items():
                places.append((None, link_key(child, top), child, k, f"{top}'s results never reach {child}"))
    seen = tuple(sorted({p[0] or "-".join(p[1] or ()) for p in places}))
    if not places:
        return StallEvidence(why="no stalled cell between two switches of the tree (held up at a host or its link)")
    if len(seen) > 1:
        return StallEvidence(why=f"stalled cells point at {len(seen)} places: {', '.join(seen)}", seen=seen)
    switch, link, towards, n, why = places[0]
    cells_total = sum(p[3] for p in places)
    return StallEvidence(
        switch=switch, link=link, towards=towards, cells=cells_total if switch else n, why=why, seen=seen
    )


def _newest(epochs: list[int]) -> int | None:
    """The newest of 8-bit epochs in serial order (docs/DESIGN.md: e is newer than f when (e - f) mod 256 is in
    1..127); the epoch of the all-reduce in progress."""
    best: int | None = None
    for e in set(epochs):
        if best is None or 0 < (e - best) % 256 < 128:
            best = e
    return best


def confirm(plan: JobPlan, first: StallEvidence, now: StallEvidence) -> StallEvidence | None:
    """The verdict of two readings a failure timeout apart, or None (no gray failure shown).

    Both must point at the same place. A link whose partial sums do not reach its parent P is told apart from
    P dropping everything by the counters in between: the other child switches of P kept sending up again
    (their retransmission counters grew: the workers retransmitted) and P received none of it (its counters did
    not move): P is the gray one. Cells alone cannot tell, when the other children's rounds had all arrived
    before the failure struck."""
    if not now.same_place(first):
        return None
    if now.link is None or now.towards is None or not (first.counters and now.counters):
        return now
    top = now.towards
    sp = plan.on(top)
    if sp.parent is not None and sp.parent in now.link:  # the results down to `top`: P is the other end
        return now
    others = [c.node for c in sp.children if c.node not in now.link and c.node in now.counters]

    def grew(sw: str, k: int) -> bool:
        return sw in first.counters and sw in now.counters and now.counters[sw][k] > first.counters[sw][k]

    if others and any(grew(c, 1) for c in others) and not grew(top, 0):
        child = next(x for x in now.link if x != top)
        return StallEvidence(
            switch=top,
            cells=now.cells,
            why=f"{top} received nothing while {', '.join(c for c in others if grew(c, 1))} sent up again "
            f"(its link from {child} looked cut: the other children's rounds had arrived before)",
            seen=now.seen,
            counters=now.counters,
        )
    return now


def read_state(fabric: Fabric, plan: JobPlan) -> tuple[dict[str, dict[int, Cell]], dict[str, tuple[int, int]]]:
    """Every tree switch's job cells and job counters over P4Runtime: one Read a switch (its registers' cells
    and its counters in one request), the switches in parallel. Register reads are the embedded switch's
    extension: BMv2's PI answers UNIMPLEMENTED (controller.registers)."""
    schema = fabric.schema
    if schema is None:
        raise ValueError("reading registers needs the P4Info")
    want = job_cells(plan)
    names = (N.R_SLOT_STATE, N.R_SLOT_BITMAP, N.R_SLOT_EPOCH, N.R_SLOT_TOKEN)
    ids = {schema.register(n).id: k for k, n in enumerate(names)}
    job_index = {sp.switch: sp.job_index for sp in plan.switches}

    def read(sw: str) -> tuple[dict[int, Cell], tuple[int, int]]:
        ents = []
        for rid in ids:
            for i in want[sw]:
                ent = p4runtime_pb2.Entity()
                ent.register_entry.register_id = rid
                ent.register_entry.index.index = i
                ents.append(ent)
        ents += request(schema, job_index[sw])
        got = list(fabric.client(sw).read(ents))
        regs: list[dict[int, int]] = [{} for _ in names]
        for e in got:
            if e.HasField("register_entry") and e.register_entry.register_id in ids:
                re = e.register_entry
                regs[ids[re.register_id]][re.index.index] = decode_int(re.data.bitstring)
        missing = [i for i in want[sw] if any(i not in r for r in regs)]
        if missing:
            raise LookupError(f"{sw} did not return the registers of cells {missing[:5]}")
        c = parse(sw, job_index[sw], schema, [e for e in got if e.HasField("counter_entry")]).packets
        received = c.get("contributions", 0) + c.get("retransmissions", 0)
        return {i: Cell(*(r[i] for r in regs)) for i in want[sw]}, (received, c.get("retransmissions", 0))

    per = fabric.run_all(f"slot registers of job {plan.job_id}", read, want)
    return {sw: v[0] for sw, v in per.items()}, {sw: v[1] for sw, v in per.items()}


def stall_evidence(fabric: Fabric, plan: JobPlan) -> StallEvidence:
    """localise() on the registers read now, with the job's counters of every tree switch (for confirm)."""
    cells, counters = read_state(fabric, plan)
    return dataclasses.replace(localise(plan, cells), counters=counters)
