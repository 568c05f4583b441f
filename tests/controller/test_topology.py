"""Topology builders and the model: counts, stable ports, reachability, JSON round trip, validation."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest

from controller.fattree import fat_tree
from controller.leafspine import leaf_spine
from controller.routing import all_route_entries, lookup
from controller.topology import Host, Link, Switch, Topology, TopologyError, host_names


def walk(topo: Topology, entries: dict, src: str, dst: str, flow_hash: int) -> list[str]:
    """Follow the installed routes hop by hop from src's edge switch to dst; the switch path."""
    h_src, h_dst = topo.host(src), topo.host(dst)
    sw, path = h_src.switch, []
    for _ in range(10):
        path.append(sw)
        port = lookup(entries[sw], h_dst.ip, flow_hash)
        assert port is not None, f"{sw} has no route to {dst} ({h_dst.ip})"
        nb = {n.port: n for n in topo.neighbors(sw)}[port]
        if nb.is_host:
            assert nb.peer == dst, f"{sw} delivers {dst}'s packet to {nb.peer}"
            return path
        sw = nb.peer
    raise AssertionError(f"loop routing {src}->{dst}: {path}")


@pytest.mark.parametrize("k", [2, 4, 6, 8])
def test_fat_tree_counts(k: int) -> None:
    t = fat_tree(k)
    assert len(t.switches) == 5 * k * k // 4
    assert len(t.hosts) == k**3 // 4
    assert len(t.by_tier(2)) == (k // 2) ** 2
    assert len(t.links) == k**3 // 2  # k^3/4 edge-agg + k^3/4 agg-core
    for s in t.switches:
        assert t.num_ports(s.name) == k, s  # every port 1..k used, port 0 never
        assert [n.port for n in t.neighbors(s.name)] == list(range(1, k + 1))
    assert sorted(s.device_id for s in t.switches) == list(range(1, len(t.switches) + 1))


def test_fat_tree_k4_stable_ports() -> None:
    t = fat_tree(4)
    assert len(t.switches) == 20 and len(t.hosts) == 16

    def ports(sw: str) -> dict[int, str]:
        return {n.port: n.peer for n in t.neighbors(sw)}

    assert ports("e1") == {1: "h1", 2: "h2", 3: "a1", 4: "a2"}
    assert ports("e4") == {1: "h7", 2: "h8", 3: "a3", 4: "a4"}
    assert ports("a2") == {1: "e1", 2: "e2", 3: "c3", 4: "c4"}
    assert ports("c1") == {1: "a1", 2: "a3", 3: "a5", 4: "a7"}
    assert ports("c4") == {1: "a2", 2: "a4", 3: "a6", 4: "a8"}
    h = t.host("h6")
    assert (h.switch, h.port, h.ip, h.mac) == ("e3", 2, "10.1.0.3", "02:00:0a:01:00:03")
    assert fat_tree(4) == t  # a pure function: same input, same topology


def test_fat_tree_refuses_odd_k() -> None:
    with pytest.raises(TopologyError, match="even"):
        fat_tree(3)


@pytest.mark.parametrize(
    "topo", [fat_tree(4), fat_tree(2), leaf_spine(3, 2, 3)], ids=["fat-tree4", "fat-tree2", "leaf-spine"]
)
def test_every_host_pair_reachable(topo: Topology) -> None:
    entries = all_route_entries(topo)
    for a, b in itertools.permutations([h.name for h in topo.hosts], 2):
        for flow in range(3):  # different ECMP choices
            path = walk(topo, entries, a, b, flow)
            assert path[0] == topo.host(a).switch and path[-1] == topo.host(b).switch


def test_fat_tree_paths_are_shortest_and_use_ecmp() -> None:
    t = fat_tree(4)
    entries = all_route_entries(t)
    assert len(walk(t, entries, "h1", "h2", 0)) == 1  # same edge
    assert len(walk(t, entries, "h1", "h3", 0)) == 3  # same pod: e-a-e
    assert len(walk(t, entries, "h1", "h16", 0)) == 5  # across pods: e-a-c-a-e
    cores = {walk(t, entries, "h1", "h16", f)[2] for f in range(16)}
    assert len(cores) == 4, "flows between pods should spread over all cores"


def test_k8_route_entries_are_compressed() -> None:
    t = fat_tree(8)
    entries = all_route_entries(t)
    n = sum(len(v) for v in entries.values())
    assert n < len(t.switches) * len(t.hosts) // 4  # far fewer than one route per host per switch
    assert walk(t, entries, "h1", "h128", 5)[-1] == t.host("h128").switch


def test_json_round_trip(tmp_path) -> None:
    t = fat_tree(4).with_grpc({"e1": "127.0.0.1:50001"})
    t.save(tmp_path / "t.json")
    back = Topology.load(tmp_path / "t.json")
    assert back == t
    assert back.switch("e1").grpc_addr == "127.0.0.1:50001"
    assert back.switch("e2").grpc_addr is None
    ls = leaf_spine(2, 2, 2)
    assert Topology.from_dict(json.loads(json.dumps(ls.to_dict()))) == ls


def test_validation_names_the_problem(tmp_path) -> None:
    sw = (Switch("s1", 0, "edge", 1), Switch("s2", 0, "edge", 2))
    with pytest.raises(TopologyError, match="port 1 of 's1' is already used"):
        Topology("x", {}, sw, (Host("h1", "10.0.0.2", "02:00:0a:00:00:02", "s1", 1),), (Link("s1", 1, "s2", 1),))
    with pytest.raises(TopologyError, match="unknown switch 's9'"):
        Topology("x", {}, sw, (Host("h1", "10.0.0.2", "02:00:0a:00:00:02", "s9", 1),), ())
    with pytest.raises(TopologyError, match="share device id"):
        Topology("x", {}, (sw[0], replace(sw[1], device_id=1)), (), ())
    with pytest.raises(TopologyError, match="outside 1..511"):
        Topology("x", {}, sw, (), (Link("s1", 0, "s2", 1),))
    with pytest.raises(TopologyError, match="share IP"):
        Topology(
            "x",
            {},
            sw,
            (
                Host("h1", "10.0.0.2", "02:00:0a:00:00:02", "s1", 1),
                Host("h2", "10.0.0.2", "02:00:0a:00:00:03", "s2", 1),
            ),
            (),
        )
    bad = tmp_path / "bad.json"
    bad.write_text('{"switches": [{"name": "s1"}]}')
    with pytest.raises(TopologyError, match=r"bad.json: switches\[0\].tier: missing; want the switch's tier"):
        Topology.load(bad)
    bad.write_text("{not json")
    with pytest.raises(TopologyError, match="bad.json: line 1, column 2: not valid JSON"):
        Topology.load(bad)


def test_host_names_expands_ranges() -> None:
    t = fat_tree(4)
    assert host_names(t, "h1,h3") == ("h1", "h3")
    assert host_names(t, "h2-h5,h9") == ("h2", "h3", "h4", "h5", "h9")
    assert len(host_names(t, "all")) == 16
    with pytest.raises(TopologyError, match="listed twice"):
        host_names(t, "h1,h1-h2")
    with pytest.raises(TopologyError, match="unknown host"):
        host_names(t, "h1-h99")


def test_leaf_spine_ports() -> None:
    t = leaf_spine(4, 2, 3)
    assert len(t.switches) == 6 and len(t.hosts) == 12
    assert {n.port: n.peer for n in t.neighbors("l2")} == {1: "h4", 2: "h5", 3: "h6", 4: "s1", 5: "s2"}
    assert {n.port: n.peer for n in t.neighbors("s2")} == {1: "l1", 2: "l2", 3: "l3", 4: "l4"}
