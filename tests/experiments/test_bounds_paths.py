"""T_path of the host baselines (experiments.bounds): pure functions of the hops, checked by hand."""

from __future__ import annotations

import math

import pytest

from controller.topospec import load_topology
from experiments import bounds
from hosts.methods import METHODS
from hosts.ring import elements_per_packet

RATE = 1e6
DELAY = 0.001


def link(_elements_per_chunk: int) -> float:
    """One link of a dependent chain: its delay (HTB releases a lone frame at once; see experiments.bounds)."""
    return DELAY


def hier(elements: int, member_hops: list[int], ring_hops: list[int]) -> float:
    return bounds.hier_path(
        METHODS["hier"], elements=elements, member_hops=member_hops, ring_hops=ring_hops, delay_s=DELAY
    )


def test_hier_one_group_is_up_and_down() -> None:
    assert hier(100, [2], [0]) == pytest.approx(4 * link(100))


def test_hier_of_singletons_is_the_ring() -> None:
    hops = [2, 4, 6, 4]
    ring = bounds.ring_path(METHODS["ring"], elements=4000, hops=hops, delay_s=DELAY)
    assert hier(4000, [0, 0, 0, 0], hops) == pytest.approx(ring)


def test_hier_two_groups_by_hand() -> None:
    # two leaders 4 links apart, each with a member 2 links away: a chunk goes member -> leader (2),
    # around the 2-leader ring twice (4 + 4: summed after one hop, back after two), leader -> member (2)
    assert hier(1000, [2, 2], [4, 4]) == pytest.approx(12 * link(elements_per_packet("float32")))
    # uneven groups (only leader 0 has a member): the longest chain starts at that member and goes all
    # 2(L-1) = 4 hops round, from leader 0 to leader 1 (no member to hand down to)
    assert hier(10, [2, 0, 0], [4, 6, 4]) == pytest.approx((2 + 4 + 6 + 4 + 4) * link(3))


def test_hier_refuses_mismatched_groups() -> None:
    with pytest.raises(ValueError, match="leaders"):
        hier(10, [0], [2, 2])


def test_tree_is_twice_the_deeper_tree() -> None:
    got = bounds.tree_path(METHODS["tree"], elements=600, depths=[6, 4], delay_s=DELAY)
    assert got == pytest.approx(2 * 6 * link(300))  # each tree carries half: 300-element chunks


def test_tree_links_follow_the_paths() -> None:
    from hosts.tree import binary_tree

    t = binary_tree(6)  # parents (1, 3, 1, -, 5, 3): the deepest path 0 -> 1 -> 3 (or 4 -> 5 -> 3)
    assert bounds.tree_links(t, lambda a, b: 2) == 4
    assert bounds.tree_links(t, lambda a, b: 10 if {a, b} == {0, 1} else 1) == 11


def test_no_delay_no_path_bound() -> None:
    """Without link delay nothing but software is on a chain of single frames: no bound to compare with."""
    topo = load_topology("fat-tree:4")
    assert math.isnan(
        bounds.path_bound(METHODS["ring"], elements=100, rate_bps=RATE, delay_s=0.0, topo=topo, ring_order=["h1", "h2"])
    )


def test_inc_path_counts_the_exponent_round() -> None:
    from wireformat import AGG

    # 3 chunks in a 2-slot window: slot 0 has the exponent round and 2 data rounds, each up 3 links and down
    assert bounds.inc_path(
        METHODS["inc-int32"], elements=3 * AGG.num_lanes, height=3, slots=2, delay_s=DELAY
    ) == pytest.approx(3 * 6 * DELAY)
    # guessed exponents (hosts.inc_worker): no exponent round, one trip per data round
    assert bounds.inc_path(
        METHODS["inc-int32"], elements=2 * AGG.num_lanes, height=3, slots=2, delay_s=DELAY, exponent_rounds=False
    ) == pytest.approx(1 * 6 * DELAY)


def test_path_bound_on_a_fat_tree() -> None:
    topo = load_topology("fat-tree:4")
    order = ["h1", "h2", "h3", "h4"]  # e1: h1 h2, e2: h3 h4 (one pod: edge to edge is 4 links)
    kw = dict(elements=2000, rate_bps=RATE, delay_s=DELAY, topo=topo, ring_order=order)
    full = link(elements_per_packet("float32"))
    # hier: leaders h1 and h3, members 2 links away, leaders 4 apart
    assert bounds.path_bound(METHODS["hier"], **kw) == pytest.approx((2 + 4 + 4 + 2) * full)
    # tree: positions 0..3; tree 0 = 0->1, 2->1, 1->3; tree 1 (shifted) = 1->2, 3->2, 2->0
    # tree 0: deepest 0 -> 1 -> 3 = h1-h2 (2) + h2-h4 (4) = 6 links; tree 1: 1 -> 2 -> 0 = 4 + 4 = 8
    assert bounds.path_bound(METHODS["tree"], **kw) == pytest.approx(2 * 8 * full)
    # the ring for comparison: hops 2, 4, 2, 4, chains of 2(n-1) = 6 hops
    assert bounds.path_bound(METHODS["ring"], **kw) == pytest.approx(18 * full)


def test_tensor_copies_per_host_link() -> None:
    assert bounds.tensor_copies(METHODS["ring"], 4) == pytest.approx(1.5)
    assert bounds.tensor_copies(METHODS["tree"], 2) == pytest.approx(1.0)  # like the ring for two
    assert bounds.tensor_copies(METHODS["tree"], 16) == pytest.approx(2.0)
    assert bounds.tensor_copies(METHODS["hier"], 16, group_size=2) == pytest.approx(1 + 2 * 7 / 8)
    assert bounds.tensor_copies(METHODS["inc-int32"], 16) == 1.0
    assert bounds.wire_bytes_per_element(METHODS["hier"]) == bounds.wire_bytes_per_element(METHODS["ring"])
