"""Aggregation trees: the controller's planner on its own topologies, the same rule at scale, re-planning."""

from __future__ import annotations

from collections import Counter

from controller.fattree import fat_tree
from simulation import topologies as T
from simulation.params import EMULATION, NDR
from simulation.placement import Job, place
from simulation.trees import assign_windows, plan_trees


def _shape(tree, fabric):
    return (
        int(fabric.tiers[tree.root]),
        tree.depth,
        len(tree.switches),
        tree.max_fan_in,
        Counter(int(fabric.tiers[s]) for s in tree.switches),
    )


def test_controller_topologies_use_the_controller_planner_and_the_structural_rule_agrees():
    for k, n in ((4, 16), (4, 8), (4, 4), (8, 128), (8, 20)):
        f = T.from_controller(fat_tree(k), EMULATION)
        jobs = place(f, [n])
        ctl = plan_trees(f, jobs)[0]
        own = plan_trees(f, jobs, use_controller=False)[0]
        assert ctl.planner == "controller" and own.planner == "structural"
        assert _shape(ctl, f) == _shape(own, f), (k, n)
        assert set(ctl.gpus) == set(range(n))


def test_later_jobs_avoid_the_roots_of_earlier_ones():
    f = T.fat_tree3(1024, NDR, radix=16)  # 16 pods of 64 GPUs; 8 cores in each of 8 groups
    for policy in ("contiguous", "scattered"):
        trees = plan_trees(f, place(f, [256] * 4, policy))
        assert len({t.root for t in trees}) == 4
        # and their spines too: no two trees share a leaf's uplink
        ups = [(c, p) for t in trees for c, p in t.parent.items() if f.tiers[c] == 0]
        assert len(ups) == len(set(ups)), policy


def test_a_failed_root_is_replanned_around_on_both_planners():
    for fabric in (T.from_controller(fat_tree(4), EMULATION), T.fat_tree3(512, NDR, radix=16)):
        jobs = place(fabric, [fabric.n_gpus])
        tree = plan_trees(fabric, jobs)[0]
        broken = fabric.fail(nodes=[tree.root])
        again = plan_trees(broken, jobs)[0]
        assert again.root != tree.root and again.depth == tree.depth
        assert all(broken.link_ok(c, p) for c, p in again.parent.items())


def test_switch_slots_are_shared_by_the_trees_that_meet_on_a_switch():
    f = T.fat_tree3(64, NDR, radix=8)
    jobs = [Job(0, tuple(range(0, 64, 2))), Job(1, tuple(range(1, 64, 2)))]  # interleaved: same leaves
    trees = plan_trees(f, jobs)
    assign_windows(trees, asked=512, switch_slots=600)
    assert [t.window for t in trees] == [300, 300]
    assign_windows(trees[:1], asked=512, switch_slots=600)
    assert trees[0].window == 512
