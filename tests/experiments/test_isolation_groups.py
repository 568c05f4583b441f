"""The isolation phase's host sets (experiments.faults.isolation.groups): disjoint, spread over the pods."""

from __future__ import annotations

import pytest

from controller.topospec import load_topology
from experiments.faults.isolation import IsolationError, groups


def test_four_jobs_and_a_ring_on_the_k4_fat_tree() -> None:
    model = load_topology("fat-tree:4")
    jobs, ring = groups(model)
    assert ring == ("h4", "h8", "h12", "h16")
    assert [len(j) for j in jobs] == [3, 3, 3, 3]
    everyone = [h for j in jobs for h in j] + list(ring)
    assert len(everyone) == len(set(everyone)) == 16
    pod = {h.name: model.switch(h.switch).pod for h in model.hosts}
    for j in jobs:  # three pods each: every job's tree reaches the core
        assert len({pod[h] for h in j}) == 3, j
    edges = {h.name: h.switch for h in model.hosts}
    shared = [e for e in set(edges.values()) if sum(any(edges[h] == e for h in j) for j in jobs) > 1]
    assert shared, "no edge switch carries two jobs"


def test_too_few_hosts_are_refused_by_count() -> None:
    with pytest.raises(IsolationError, match="need 16 hosts; leaf-spine has 4"):
        groups(load_topology("leaf-spine:2x2x2"))
