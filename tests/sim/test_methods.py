"""The system layer's rank structures, and each method planned on one fabric."""

from __future__ import annotations

import math

import pytest

from simulation import topologies as T
from simulation.methods import METHODS, MethodError, binary_tree, double_binary_tree, node_depths, plan_method, ring_pairs
from simulation.params import H100
from simulation.placement import place
from simulation.trees import plan_trees


@pytest.mark.parametrize("n", [2, 3, 7, 8, 31, 64, 100])
def test_double_binary_tree_inner_nodes_of_one_are_leaves_of_the_other(n):
    t1, t2 = double_binary_tree(n)
    for t in (t1, t2):
        assert sum(1 for p in t if p < 0) == 1
        assert max(node_depths(t)) <= math.ceil(math.log2(n)) + 1
    inner1 = {p for p in t1 if p >= 0}
    inner2 = {p for p in t2 if p >= 0}
    if n % 2 == 0 and n > 2:
        assert not (inner1 & inner2)
    assert max(node_depths(binary_tree(64))) == 6


def test_every_method_plans_on_a_rail_optimised_cluster():
    f = T.fat_tree3(256, H100, radix=16, rail=True)
    job = place(f, [256])[0]
    trees = {"inc": plan_trees(f, [job])}
    g = 8
    from simulation.placement import Job
    from simulation.methods import groups_of
    groups = groups_of(f, job.topology_order(f))
    trees["hier-inc"] = plan_trees(f, [Job(i, tuple(grp[i] for grp in groups)) for i in range(g)])
    tables: dict = {}
    for m in METHODS:
        if m == "adaptive":
            continue
        plan = plan_method(m, f, job, tables, trees)
        assert plan.phases and plan.n == 256
    assert len(tables["ring"].src) == 256 and ring_pairs([1, 2, 3]) == [(1, 2), (2, 3), (3, 1)]
    with pytest.raises(MethodError, match="power-of-two"):
        plan_method("rd", f, place(f, [248])[0], {}, trees)
