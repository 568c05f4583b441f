"""The network layer: exact reductions of a flow set, and SimGrid's rates against a reference max-min solver."""

from __future__ import annotations

import random

import numpy as np

from simulation import topologies as T
from simulation.engine import Engine, FlowSet, Reduced, reduce_flowset, symmetric_classes
from simulation.params import NDR
from tests.simulation.conftest import needs_simgrid


def maxmin(paths: list[list[int]], caps: np.ndarray, bw: np.ndarray) -> np.ndarray:
    """Progressive filling: raise every unfrozen flow's rate together, freeze flows at a full link or their cap."""
    n = len(paths)
    rate = np.zeros(n)
    frozen = np.zeros(n, dtype=bool)
    left = bw.astype(float).copy()
    while not frozen.all():
        users: dict[int, int] = {}
        for i in np.nonzero(~frozen)[0]:
            for x in paths[i]:
                users[x] = users.get(x, 0) + 1
        share, link = min(((left[x] / c, x) for x, c in users.items()), default=(np.inf, None))
        free = np.nonzero(~frozen)[0]
        low = min(caps[i] for i in free)
        if low < share:
            pick = [i for i in free if caps[i] <= low * (1 + 1e-12)]
            value = low
        else:
            pick = [i for i in free if link in paths[i]]
            value = share
        for i in pick:
            rate[i], frozen[i] = value, True
            for x in paths[i]:
                left[x] -= value
    return rate


def _random_flows(seed: int, flows: int = 250):
    f = T.fat_tree3(128, NDR, radix=8, oversub=2)
    rng = random.Random(seed)
    pairs = [(rng.randrange(128), rng.randrange(128)) for _ in range(flows)]
    paths = [f.links_of(f.path(a, b)) for a, b in pairs if a != b]
    caps = np.array([rng.choice([np.inf, np.inf, 5e9, 20e9]) for _ in paths])
    return f, paths, caps


def _solve_reduced(red: Reduced) -> np.ndarray:
    rates = red.rates.copy()
    sub = [red.links[a:b].tolist() for a, b in zip(red.offsets[:-1], red.offsets[1:])]
    rates[red.todo] = maxmin(sub, red.caps, red.link_bw)
    return rates


def test_folding_single_flow_and_idle_links_into_caps_is_exact():
    for seed in range(3):
        f, paths, caps = _random_flows(seed)
        red = reduce_flowset(FlowSet("t", paths, caps), f.link_bw)
        assert len(red.todo) < len(paths)  # something was folded
        assert np.allclose(_solve_reduced(red), maxmin(paths, caps, f.link_bw), rtol=1e-12)


def test_identical_independent_components_form_one_class():
    # two servers' worth of the same pattern on disjoint links, plus one different component
    paths = [[0, 1], [1, 2], [0, 2], [10, 11], [11, 12], [10, 12], [20, 21], [20, 21]]
    bw = np.full(30, 10.0)
    bw[20] = 5.0
    red = reduce_flowset(FlowSet("t", paths, np.full(len(paths), np.inf)), bw)
    rep, is_rep = symmetric_classes(red)
    assert is_rep.sum() == 5  # the first triangle and the pair; the second triangle copies the first
    assert list(rep[3:6]) == [0, 1, 2]


@needs_simgrid
def test_simgrid_rates_are_max_min_fair(engine: Engine):
    for seed in (5, 6):
        f, paths, caps = _random_flows(seed, 300)
        fs = FlowSet("t", paths, caps)
        engine.solve(f, [fs])
        assert fs.rates is not None and fs.stats["simgrid_flows"] > 0
        assert np.allclose(fs.rates, maxmin(paths, caps, f.link_bw), rtol=1e-6)
