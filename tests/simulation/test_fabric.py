"""The network model without SimGrid: builders, routing, failures."""

from __future__ import annotations

import random

import numpy as np
import pytest

from controller.fattree import fat_tree
from simulation import topologies as T
from simulation.fabric import ClosRouter, DragonflyPlusRouter, FabricError, UnroutableError
from simulation.params import EMULATION, H100, NDR


def _check_path(f, path, src, dst):
    assert path[0] == src and path[-1] == dst
    assert all(f.has_link(a, b) for a, b in zip(path, path[1:])), path
    assert len(set(path)) == len(path), f"loop in {path}"


def test_controller_fat_tree_is_transcribed_with_its_names_and_links():
    topo = fat_tree(4)
    f = T.from_controller(topo, EMULATION)
    assert f.n_gpus == 16 and f.gpu_names == [h.name for h in topo.hosts]
    assert len(f.link_src) == 2 * (len(topo.hosts) + len(topo.links))
    assert isinstance(getattr(f.router, "fallback", f.router), ClosRouter)
    assert [f.name_of(x) for x in f.path(0, 1)] == ["h1", "e1", "h2"]
    p = f.path(0, 15)
    assert [f.name_of(x)[0] for x in p] == ["h", "e", "a", "c", "a", "e", "h"]  # up to a core, down to pod 3
    _check_path(f, p, 0, 15)


def test_a_3_tier_fat_tree_of_radix_64_holds_65536_gpus_and_no_more():
    f = T.fat_tree3(65536, NDR, radix=64)
    tiers = f.describe()["switches_per_tier"]
    assert f.n_gpus == 65536 and tiers == {0: 2048, 1: 2048, 2: 1024}
    rng = random.Random(1)
    for _ in range(200):
        a, b = rng.randrange(65536), rng.randrange(65536)
        if a != b:
            p = f.path(a, b)
            _check_path(f, p, a, b)
            assert len(p) <= 7  # at most leaf - spine - core - spine - leaf
    with pytest.raises(FabricError, match="radix\\^3/4"):
        T.fat_tree3(65537, NDR, radix=64)


def test_non_blocking_fat_tree_gives_every_gpu_a_distinct_core_path_for_a_shift_permutation():
    """D-mod-k: the flows of a shift permutation across pods never share a link (a non-blocking fabric)."""
    f = T.fat_tree3(1024, NDR, radix=16)  # 8 GPUs per leaf, 64 per pod, 16 pods
    used: set[int] = set()
    for a in range(1024):
        for lid in f.links_of(f.path(a, (a + 64) % 1024)):
            assert lid not in used
            used.add(lid)


def test_oversubscription_keeps_fewer_full_rate_leaf_uplinks():
    f = T.fat_tree3(256, NDR, radix=16, oversub=2)
    leaf = f.node("l0")
    ups = [i for i, (s, d) in enumerate(zip(f.link_src, f.link_dst)) if s == leaf and f.tiers[d] == 1]
    assert len(ups) == 4 and np.allclose(f.link_bw[ups], NDR.fabric_bw)  # 8 GPU ports, 4 up: 2:1
    assert f.describe()["switches_per_tier"] == {0: 32, 1: 16, 2: 32}


def test_rail_optimised_fat_tree_puts_gpu_i_of_every_server_on_rail_leaf_i():
    f = T.fat_tree3(512, H100, radix=16, rail=True)  # 8 GPUs a leaf, 8 servers a scalable unit
    leaf_of = {}
    for g in range(f.n_gpus):
        leaf_of.setdefault((int(f.server[g]) // 8, int(f.local[g])), set()).add(int(f.attach[g]))
    assert all(len(v) == 1 for v in leaf_of.values())  # one rail leaf per (unit, GPU index)
    srv = [g for g in range(f.n_gpus) if f.server[g] == 3]
    assert len({int(f.attach[g]) for g in srv}) == 8  # a server spreads over the 8 rails
    a, b = srv[0], srv[5]
    assert [f.tiers[x] for x in f.path(a, b)] == [-1, -2, -1]  # inside a server: NVLink
    assert sorted(int(f.topo_rank[g]) for g in srv) == list(range(24, 32))  # topology order: server by server


def test_dragonfly_plus_joins_every_group_pair_with_global_links():
    f = T.dragonfly_plus(2048, NDR, radix=16)  # 64 GPUs a group, 32 groups
    assert isinstance(f.router, DragonflyPlusRouter)
    assert f.params["groups"] == 32
    r = f.router
    assert all(r.gates[(a, b)] for a in range(32) for b in range(32) if a != b)
    p = f.path(0, 2047)
    assert [int(f.tiers[x]) for x in p] == [-1, 0, 1, 1, 0, -1]  # leaf, spine, global link, spine, leaf
    _check_path(f, p, 0, 2047)


def test_failures_are_routed_around_and_total_cuts_refused():
    f = T.fat_tree3(128, NDR, radix=8)
    p = f.path(0, 127)
    core = next(x for x in p if f.tiers[x] == 2)
    g = f.fail(nodes=[core])
    q = g.path(0, 127)
    assert core not in q
    _check_path(g, q, 0, 127)
    assert f.path(0, 127) == p  # the original fabric is unchanged
    leaf = int(f.attach[0])
    cut = f.fail(links=[(0, leaf)])
    with pytest.raises(UnroutableError):
        cut.path(0, 5)


def test_spec_strings_refuse_unknown_kinds_and_keys():
    with pytest.raises(FabricError, match="unknown topology"):
        T.build("torus:4", NDR, 64)
    with pytest.raises(FabricError, match="takes"):
        T.build("clos:ports=4", NDR, 64)
    with pytest.raises(FabricError, match="GPU count"):
        T.build("rail:radix=16", H100)
    assert T.build("clos:radix=8,oversub=2", NDR, 64).params["oversub"] == 2.0


def test_controller_topologies_are_routed_as_the_emulation_routes_them():
    """Every switch picks the ECMP member the P4 program's crc32 of the 5-tuple picks (controller.routing)."""
    import struct
    import zlib

    from controller.fattree import fat_tree
    from controller.routing import all_route_entries, lookup
    from simulation.params import EMULATION
    from simulation.topologies import from_controller

    topo = fat_tree(4)
    f = from_controller(topo, EMULATION)
    entries = all_route_entries(topo)
    port_to = {s.name: {nb.port: nb.peer for nb in topo.neighbors(s.name)} for s in topo.switches}
    for a, b, port in ((0, 15, 16713), (3, 9, 16715), (12, 1, 16712)):
        ha, hb = topo.hosts[a], topo.hosts[b]
        flow = zlib.crc32(
            struct.pack(
                "!4s4sBHH", bytes(map(int, ha.ip.split("."))), bytes(map(int, hb.ip.split("."))), 17, port, port
            )
        )
        hops, x = [], ha.switch
        while x != hb.name:
            hops.append(x)
            x = port_to[x][lookup(entries[x], hb.ip, flow)]
        assert [f.name_of(n) for n in f.path(a, b, port)[1:-1]] == hops
