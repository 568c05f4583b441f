"""Localising a stalled job from its tree's slot registers (controller.evidence), against a model of how the
program's cells end up when a switch or one direction of a link drops every frame."""

from __future__ import annotations

import random

import pytest

from controller import names as N
from controller.evidence import Cell, StallEvidence, confirm, localise
from controller.fattree import fat_tree
from controller.planner import JobPlan, JobSpec, plan_job
from controller.topology import link_key

K4 = fat_tree(4)
PLAN = plan_job(K4, JobSpec.make(3, [h.name for h in K4.hosts]))
EPOCH = 7


def stalled(
    plan: JobPlan,
    gray_switch: str | None = None,
    dropped: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
    lost: set[tuple[int, str, str]] = frozenset(),  # type: ignore[assignment]
) -> dict[str, dict[int, Cell]]:
    """Every cell of one all-reduce round as the program leaves it: hosts contribute, a switch with all its
    children's bits sends up (or, the root, completes), results go down. `dropped`: (from, to) hops losing
    every frame; `lost`: (slot, from, to) single frames lost; `gray_switch`: receives nothing."""
    by = {sp.switch: sp for sp in plan.switches}
    out: dict[str, dict[int, Cell]] = {sp.switch: {} for sp in plan.switches}

    def gone(slot: int, a: str, b: str) -> bool:
        return b == gray_switch or (a, b) in dropped or (slot, a, b) in lost

    order = list(reversed(plan.switches))  # leaves first
    for s in range(plan.switches[0].slot_count):
        bitmap: dict[str, int] = {}
        sent: set[str] = set()
        for sp in order:
            bits = 0
            for c in sp.children:
                from_host = c.node not in by
                if (from_host and sp.switch != gray_switch) or (
                    not from_host and c.node in sent and not gone(s, c.node, sp.switch)
                ):
                    bits |= 1 << c.index
            bitmap[sp.switch] = bits
            if bits == (1 << sp.fan_in) - 1 and sp.parent is not None:
                sent.add(sp.switch)
        final: set[str] = set()
        for sp in plan.switches:  # root first: results down
            full = bitmap[sp.switch] == (1 << sp.fan_in) - 1
            if sp.parent is None:
                if full:
                    final.add(sp.switch)
            elif sp.parent in final and not gone(s, sp.parent, sp.switch):
                final.add(sp.switch)
        for sp in plan.switches:
            phase = (
                N.STATE_FINAL if sp.switch in final else N.STATE_SENT_UP if sp.switch in sent else N.STATE_AGGREGATING
            )
            cell = (sp.slot_base + s) * N.CELLS_PER_SLOT
            out[sp.switch][cell] = Cell(phase, bitmap[sp.switch], EPOCH, sp.token)
            out[sp.switch][cell + 1] = Cell(N.STATE_FINAL, (1 << sp.fan_in) - 1, EPOCH - 1, sp.token)  # last round
    return out


def inner(plan: JobPlan) -> list[str]:
    return [sp.switch for sp in plan.switches if any(c.node in {x.switch for x in plan.switches} for c in sp.children)]


def test_a_healthy_round_points_nowhere() -> None:
    ev = localise(PLAN, stalled(PLAN))
    assert not ev.localised and ev.seen == ()


@pytest.mark.parametrize("victim", inner(PLAN))
def test_a_gray_switch_with_two_child_switches_is_named(victim: str) -> None:
    kids = [c.node for c in PLAN.on(victim).children if c.node in {sp.switch for sp in PLAN.switches}]
    ev = localise(PLAN, stalled(PLAN, gray_switch=victim))
    assert ev.switch == victim and ev.link is None, ev
    assert len(kids) >= 2 or "only child" in ev.why


@pytest.mark.parametrize(
    "hop",
    [(sp.switch, sp.parent) for sp in PLAN.switches if sp.parent]
    + [(sp.parent, sp.switch) for sp in PLAN.switches if sp.parent],
)
def test_one_direction_of_a_tree_link_is_named_with_its_direction(hop: tuple[str, str]) -> None:
    a, b = hop
    ev = localise(PLAN, stalled(PLAN, dropped={hop}))
    parent = a if PLAN.on(b).parent == a else b
    kids = [c.node for c in PLAN.on(parent).children if c.node in {sp.switch for sp in PLAN.switches}]
    if len(kids) == 1:  # the parent and its only child's link look alike: the parent is avoided
        assert ev.switch == parent
    else:
        assert ev.link == link_key(a, b) and ev.towards == b, ev
    assert ev.to_dict() == StallEvidence.from_dict(ev.to_dict()).to_dict()


def test_a_gray_edge_switch_is_not_localised_from_the_switches() -> None:
    edge = next(
        sp.switch for sp in PLAN.switches if all(c.node not in {x.switch for x in PLAN.switches} for c in sp.children)
    )
    ev = localise(PLAN, stalled(PLAN, gray_switch=edge))
    assert not ev.localised


def test_losses_in_two_places_are_not_localised() -> None:
    hops = [(sp.switch, sp.parent) for sp in PLAN.switches if sp.parent]
    rng = random.Random(1)
    a, b = rng.sample(hops, 2)
    ev = localise(PLAN, stalled(PLAN, lost={(0, *a), (1, *b)}))
    assert not ev.localised and len(ev.seen) == 2, ev


def test_one_lost_frame_looks_like_a_gray_link_which_is_why_one_reading_is_not_enough() -> None:
    sp = next(x for x in PLAN.switches if x.parent == PLAN.root)
    ev = localise(PLAN, stalled(PLAN, lost={(3, sp.switch, PLAN.root)}))
    assert ev.link == link_key(sp.switch, PLAN.root) and ev.cells == 1


def test_cells_of_another_install_or_an_older_epoch_are_history() -> None:
    hop = next((sp.switch, sp.parent) for sp in PLAN.switches if sp.parent == PLAN.root)
    cells = stalled(PLAN, dropped={hop})
    other_token = {
        sw: {i: Cell(c.state, c.bitmap, c.epoch, (c.token % 255) + 1) for i, c in m.items()} for sw, m in cells.items()
    }
    assert not localise(PLAN, other_token).localised
    # the same picture one epoch back, the newest epoch complete everywhere: nothing is stalled now
    older = {
        sw: {i: Cell(c.state, c.bitmap, (c.epoch - 2) % 256, c.token) for i, c in m.items()} for sw, m in cells.items()
    }
    for sp in PLAN.switches:
        older[sp.switch][(sp.slot_base + 0) * N.CELLS_PER_SLOT + 1] = Cell(
            N.STATE_FINAL, (1 << sp.fan_in) - 1, EPOCH + 1, sp.token
        )
    assert not localise(PLAN, older).localised


def test_two_readings_tell_a_gray_parent_from_its_childs_link_by_the_counters_in_between() -> None:
    # the root's other child switches' rounds had all arrived before the failure: the cells point at one link
    sp = next(x for x in PLAN.switches if x.parent == PLAN.root)
    others = [c.node for c in PLAN.on(PLAN.root).children if c.node != sp.switch]
    first = localise(PLAN, stalled(PLAN, dropped={(sp.switch, PLAN.root)}))
    assert first.link == link_key(sp.switch, PLAN.root)
    before = {sw.switch: (100, 10) for sw in PLAN.switches}

    def later(root_received: int) -> StallEvidence:
        counters = dict(before)
        counters.update({o: (100, 14) for o in others})  # they sent up again
        counters[PLAN.root] = (root_received, 10)
        return StallEvidence.from_dict({**first.to_dict(), "counters": {k: list(v) for k, v in counters.items()}})

    was = StallEvidence.from_dict({**first.to_dict(), "counters": {k: list(v) for k, v in before.items()}})
    deaf = confirm(PLAN, was, later(100))
    assert deaf is not None and deaf.switch == PLAN.root and deaf.link is None, deaf
    heard = confirm(PLAN, was, later(104))  # the root got the others' resends: only the link is cut
    assert heard is not None and heard.link == first.link and heard.switch is None
    # one reading pointing elsewhere: no verdict
    other = localise(PLAN, stalled(PLAN, dropped={(others[0], PLAN.root)}))
    assert confirm(PLAN, was, other) is None
    assert confirm(PLAN, StallEvidence(why="nothing"), StallEvidence(why="nothing")) is None


def test_a_parent_missing_some_of_its_children_is_the_parent() -> None:
    # the root stopped receiving after one child's rounds had all arrived: three of four missing
    kids = [c.node for c in PLAN.on(PLAN.root).children]
    ev = localise(PLAN, stalled(PLAN, dropped={(k, PLAN.root) for k in kids[1:]}))
    assert ev.switch == PLAN.root and f"{len(kids) - 1} of {len(kids)}" in ev.why, ev
