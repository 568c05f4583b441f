"""All-to-all in the phase model: the emulation's a2a-direct and a2a-hier (hosts/alltoall.py) as flows.

Same names, same semantics and wire format as the hosts layer: a job of n ranks, every rank holding S bytes
cut into n blocks, block d for rank d, moved over hosts.reliable's MTU-sized datagrams.

- a2a-direct: one pipelined phase of n(n-1) flows, every ordered pair at once, S/n each. On a server with
  an NVSwitch, the pairs inside it go over NVLink (the fabric routes them there).
- a2a-hier: one pipelined phase of two stages that run at once, chunk by chunk (as the hosts layer sends a
  phase-2 frame as soon as its phase-1 data is in): inside the group (the server over NVLink, or else the
  edge switch), every ordered pair, S/g each (the G blocks for the peer's rail); then along the rails,
  rank (a, j) to (b, j) for every other group b, S/G each (the g blocks of its group for that rank).

`phases` turns a method into those phases (simulation.methods.plan_method calls it); the rest of the model
(rates from SimGrid, the pipelined phase's timing on the busiest link, link loads) is the all-reduces'.
`link_loads` and `summarise_loads` say where the bytes go on a fabric (the busiest link, and per tier),
which is how docs/simulation.md answers whether Dragonfly+ suits all-to-all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hosts.methods import METHODS as EMULATED
from simulation.fabric import GPU_TIER, NVSWITCH_TIER, Fabric

A2A_METHODS = tuple(name for name, m in EMULATED.items() if m.alltoall)
# flow set -> the emulation's method whose UDP port it uses (the ECMP hash's salt; hosts.agent.HOST_METHOD_PORTS)
FLOWSET_METHOD = {"a2a-direct": "a2a-direct", "a2a-group": "a2a-hier", "a2a-rail": "a2a-hier"}
MAX_FLOWS = 1_100_000  # a flow per pair: about 1,000 GPUs for a2a-direct (routing and SimGrid take minutes beyond)


def rails(groups: Sequence[Sequence[int]]) -> list[list[int]]:
    """rails[j] = the j-th rank of every group (groups of unequal size leave some rails short)."""
    width = max(len(x) for x in groups)
    return [[grp[j] for grp in groups if len(grp) > j] for j in range(width)]


def phases(
    method: str,
    ranks: Sequence[int],
    groups: Sequence[Sequence[int]],
    nvlink: bool,
    add: Callable[[str, str, list[tuple[int, int]]], tuple[int, int]],
    phase: Callable[..., Any],
    error: type[Exception],
) -> list[Any]:
    """The phases of an all-to-all: `add(flowset, tag, pairs)` registers flows and returns their span,
    `phase(**fields)` makes a simulation.methods.Phase (passed in: this module sits below methods.py)."""
    n = len(ranks)
    groups_width = max((len(x) for x in groups), default=1)
    flows = n * (n - 1) if method == "a2a-direct" else n * (groups_width - 1 + len(groups) - 1)
    if flows > MAX_FLOWS:
        raise error(
            f"{method} on {n} GPUs is {flows:,} flows, more than the phase model takes ({MAX_FLOWS:,}); "
            "simulation.alltoall.load_table gives its link loads at that scale"
        )
    if method == "a2a-direct":
        pairs = [(a, b) for a in ranks for b in ranks if a != b]
        stage = ("a2a-direct", add("a2a-direct", "direct", pairs), 1.0 / n, 1, False, False)
        return [phase(kind="pipe", flowset="a2a-direct", flows=(0, 0), steps=0, share=1.0, stages=(stage,))]
    if method != "a2a-hier":
        raise error(f"unknown all-to-all {method!r}; choose from {', '.join(A2A_METHODS)}")
    sizes = sorted({len(x) for x in groups})
    if len(sizes) > 1:
        raise error(f"a2a-hier needs groups of one size (every rail a rank in every group), got sizes {sizes}")
    g, big = sizes[0], len(groups)
    stages = []
    if g > 1:
        inside = [(a, b) for grp in groups for a in grp for b in grp if a != b]
        stages.append(("a2a-group", add("a2a-group", "group", inside), 1.0 / g, 1, nvlink, False))
    if big > 1:
        along = [(a, b) for rail in rails(groups) for a in rail for b in rail if a != b]
        stages.append(("a2a-rail", add("a2a-rail", "rail", along), 1.0 / big, 1, False, False))
    return [phase(kind="pipe", flowset="a2a-hier", flows=(0, 0), steps=0, share=1.0, stages=tuple(stages))]


# -- timing ------------------------------------------------------------------------------------------------------
def a2a_phase_time(
    p: Any,
    stages: Sequence[Any],
    busiest_s: float,
    busiest_bytes: float,
    busiest_rate: float,
    cpu_s: float,
    first_phase: bool = False,
) -> float:
    """An all-to-all's one pipelined phase (simulation.model's `_pipe_time` gives the loads, as for hier).

    Every flow starts at once and no flow waits on another's steps (unlike a ring's stages): the bytes on the
    busiest link at its rate set the pace, and no flow ends before its own data passed at its max-min rate
    (a flow sharing a busier link than its neighbours'). A frame of a later stage (a2a-hier's rails) leaves as
    soon as its earlier stage's frame is in, so the pipeline fills with one frame per stage: each stage's
    per-step latency (software, path, switches) and a frame's serialization. `cpu_s`: the busiest host's (or
    the emulator's) per-packet work. On shaped links the busiest link's credit passes at once."""
    from simulation.methods import _burst_credit, _Cost

    if not stages or busiest_s <= 0:
        return 0.0
    fill = 0.0
    slowest = 0.0
    for st in stages:
        if st.data <= 0 or len(st.edges.rate) == 0:
            continue
        c = _Cost(p, st.edges, st.nvlink, st.reduce, 1)
        frame = min(float(p.mtu_payload), st.data)
        link = st.edges.link_rate if st.edges.link_rate is not None else c.rate  # a frame goes at the link's rate
        # on a shaped link with a full bucket a lone frame passes at once (as simulation.methods._Cost.first)
        serial = max(float(p.wire_bytes(frame)) - p.credit_bytes(p.host_frame), 0.0)
        fill += float((c.alpha + serial / link).max())
        slowest = max(slowest, float((np.asarray(p.wire_bytes(st.data, c.rate), dtype=np.float64) / c.rate).max()))
    credit = _burst_credit(p, busiest_bytes, busiest_rate) if first_phase else 0.0
    return max(busiest_s, slowest, cpu_s) - credit + fill


# -- where the bytes go ------------------------------------------------------------------------------------------
def link_kind(fabric: Fabric, link: int) -> str:
    """What a directed link joins: 'nvlink', 'nic' (GPU <-> first switch), 'global' (Dragonfly+: spines of two
    groups), or 'tier a-b' between switch tiers (0 = leaves)."""
    a, b = int(fabric.link_src[link]), int(fabric.link_dst[link])
    ta, tb = int(fabric.tiers[a]), int(fabric.tiers[b])
    if NVSWITCH_TIER in (ta, tb):
        return "nvlink"
    if GPU_TIER in (ta, tb):
        return "nic"
    if fabric.kind == "dragonfly+" and ta == tb == 1:
        return "global"
    lo, hi = sorted((ta, tb))
    return f"tier {lo}-{hi}"


def summarise_loads(fabric: Fabric, load: np.ndarray, per_gpu_bytes: float) -> dict[str, Any]:
    """Where the bytes of one collective went, in S (the bytes per GPU) at the NIC's rate: a link's load over
    its bandwidth, times the NIC's bandwidth, over S, i.e. how many times S the link carries as if it ran at NIC
    speed (a Dragonfly+ global link of two parallel cables counts half its bytes). `busiest_*` is the fabric's
    busiest link; `kinds` the max and the mean (over the links that carry anything) per kind of link."""
    kinds = np.array([link_kind(fabric, i) for i in range(len(load))])
    nic = float(fabric.link_bw[fabric.link(0, int(fabric.attach[0]))])
    busy = load / fabric.link_bw * nic / per_gpu_bytes
    k = int(np.argmax(busy))
    out: dict[str, Any] = {"busiest_kind": str(kinds[k]), "busiest": float(busy[k]), "kinds": {}}
    for kind in sorted(set(kinds.tolist())):
        allk = kinds == kind
        used = allk & (load > 0)
        out["kinds"][kind] = {
            "links": int(allk.sum()),
            "used": int(used.sum()),
            "max": float(busy[allk].max()),
            "mean_used": float(busy[used].mean()) if used.any() else 0.0,
        }
    return out


# -- link loads at scale, without a flow per pair -------------------------------------------------------------
def _nic_traffic(fabric: Fabric, ranks: Sequence[int], method: str, size: float) -> tuple[list[tuple[Any, ...]], Any]:
    """An all-to-all's traffic as (sources, destinations, bytes each) batches of GPU pairs, one batch per source
    GPU (n batches of up to n pairs, never n^2 at once), and its group layout (for a2a-hier)."""
    n = len(ranks)
    arr = np.asarray(ranks, dtype=np.int64)
    out: list[tuple[Any, ...]] = []
    if method == "a2a-direct":
        for a in ranks:
            dst = arr[arr != a]
            out.append((np.full(len(dst), a), dst, size / n))
        return out, None
    from simulation.methods import groups_of

    groups = groups_of(fabric, sorted(ranks, key=lambda x: int(fabric.topo_rank[x])))
    g, big = len(groups[0]), len(groups)
    for grp in groups:
        ga = np.asarray(grp, dtype=np.int64)
        for a in grp:
            dst = ga[ga != a]
            if len(dst):
                out.append((np.full(len(dst), a), dst, size / g))
    for rail in rails(groups):
        ra = np.asarray(rail, dtype=np.int64)
        for a in rail:
            dst = ra[ra != a]
            if len(dst):
                out.append((np.full(len(dst), a), dst, size / big))
    return out, groups


def fluid_loads(fabric: Fabric, ranks: Sequence[int], method: str, size: float) -> np.ndarray:
    """Bytes of data (no headers) on every directed link for one all-to-all of `size` bytes per rank, the switches
    spreading each leaf-to-leaf demand evenly over their equal-cost next hops (what a hash does on average over
    many flows, and D-mod-k does for uniform traffic): the flow-level model's link loads without its n(n-1) flows,
    for tens of thousands of GPUs. GPU pairs in one server cross its NVSwitch; on a rail-only fabric a pair on two
    rails crosses NVLink to the source server's GPU on the destination's rail first (its router's way)."""
    f = fabric
    load = np.zeros(len(f.link_bw))
    leaves = np.unique(f.attach)
    leaf_ix = np.full(f.n_nodes, -1, dtype=np.int64)
    leaf_ix[leaves] = np.arange(len(leaves))
    demand = np.zeros((len(leaves), len(leaves)))
    nic_up = np.array([f.link(g, int(f.attach[g])) for g in range(f.n_gpus)])
    nic_down = np.array([f.link(int(f.attach[g]), g) for g in range(f.n_gpus)])
    nvs = f.nvswitch[f.server]
    nv_up = np.array([f.link(g, int(nvs[g])) if nvs[g] >= 0 else -1 for g in range(f.n_gpus)])
    nv_down = np.array([f.link(int(nvs[g]), g) if nvs[g] >= 0 else -1 for g in range(f.n_gpus)])
    rail_only = f.kind == "rail-only"
    gpu_at = getattr(f.router, "gpu_at", None)
    batches, _groups = _nic_traffic(f, ranks, method, size)
    for src, dst, each in batches:
        inside = (f.server[src] == f.server[dst]) & (nvs[src] >= 0)
        np.add.at(load, nv_up[src[inside]], each)
        np.add.at(load, nv_down[dst[inside]], each)
        s, d = src[~inside], dst[~inside]
        if rail_only and gpu_at is not None:  # between rails: over NVLink to the GPU on the destination's rail
            cross = f.local[s] != f.local[d]
            mid = s.copy()
            mid[cross] = gpu_at[f.server[s[cross]], f.local[d[cross]]]
            np.add.at(load, nv_up[s[cross]], each)
            np.add.at(load, nv_down[mid[cross]], each)
            s = mid
        np.add.at(load, nic_up[s], each)
        np.add.at(load, nic_down[d], each)
        np.add.at(demand, (leaf_ix[f.attach[s]], leaf_ix[f.attach[d]]), each)
    # switch links, spread destination by destination over the shortest paths (layer by layer, vectorised)
    sw = (f.link_src >= f.n_gpus) & (f.link_dst >= f.n_gpus) & (f.tiers[f.link_src] >= 0) & (f.tiers[f.link_dst] >= 0)
    eid = np.nonzero(sw)[0]
    es, ed = f.link_src[eid], f.link_dst[eid]
    nbrs: dict[int, list[int]] = {}
    for x, y in zip(es.tolist(), ed.tolist()):
        nbrs.setdefault(y, []).append(x)  # reverse: who can send to y
    for yi, y in enumerate(leaves.tolist()):
        col = demand[:, yi].copy()
        col[yi] = 0.0
        if not col.any():
            continue
        dist = np.full(f.n_nodes, -1, dtype=np.int64)
        dist[y] = 0
        frontier = [y]
        while frontier:
            nxt = []
            for z in frontier:
                for x in nbrs.get(z, ()):
                    if dist[x] < 0:
                        dist[x] = dist[z] + 1
                        nxt.append(x)
            frontier = nxt
        flow = np.zeros(f.n_nodes)
        flow[leaves] = col
        down = (dist[es] >= 0) & (dist[ed] == dist[es] - 1)
        outdeg = np.bincount(es[down], minlength=f.n_nodes)
        for level in range(int(dist.max()), 0, -1):
            sel = down & (dist[es] == level)
            if not sel.any():
                continue
            share = flow[es[sel]] / outdeg[es[sel]]
            np.add.at(load, eid[sel], share)
            flow += np.bincount(ed[sel], weights=share, minlength=f.n_nodes)
    return load


def top_kind(kinds: Sequence[str]) -> str:
    """The fabric's top tier of switch links: Dragonfly+'s global links, else the highest 'tier a-b'."""
    if "global" in kinds:
        return "global"
    tiers = sorted(k for k in kinds if k.startswith("tier"))
    return tiers[-1] if tiers else "nic"


def load_table(
    topologies: Sequence[str],
    gpus: Sequence[int],
    placements: Sequence[str] = ("contiguous", "scattered"),
    preset: str = "h100",
    allreduce: Sequence[str] = ("ring-1nic", "hier-rail"),
    size: int = 1 << 30,
    job_gpus: int | None = None,
) -> list[dict[str, Any]]:
    """Link loads of the all-to-alls (fluid_loads) and of all-reduces (the flow-level model: a ring's few flows
    are where hashing matters) per topology, GPU count and placement, in S at the NIC's rate (summarise_loads).
    `contiguous`: one job on the whole cluster; `scattered`: a job of half the cluster on servers in a random
    order; `job_gpus`, when given, is the job's size in both (e.g. two Dragonfly+ groups' worth)."""
    from simulation.engine import Engine
    from simulation.model import Evaluation, Scenario

    engine = Engine()
    rows: list[dict[str, Any]] = []
    for topo in topologies:
        for n in gpus:
            for placement in placements:
                job = job_gpus or (n if placement == "contiguous" else n // 2)
                sc = Scenario(
                    topology=topo,
                    gpus=job,
                    cluster_gpus=n,
                    placement=placement,
                    preset=preset,
                    methods=tuple(allreduce) + A2A_METHODS,
                    sizes=(size,),
                )
                ev = Evaluation(sc, engine=engine)
                # the all-to-alls' n(n-1) flows are not built: their loads come from fluid_loads
                ev.scenario = Scenario(**{**sc.to_dict(), "methods": tuple(allreduce)})
                ev.build()
                ev.solve()
                ranks = ev.jobs[0].gpus
                loads = {m: fluid_loads(ev.fabric, ranks, m, size) for m in A2A_METHODS}
                for plan in ev.plans:
                    loads[plan.method] = ev.link_bytes(plan, size)
                for method, load in loads.items():
                    s = summarise_loads(ev.fabric, load, size)
                    top = top_kind(list(s["kinds"]))
                    row = {
                        "topology": topo.partition(":")[0],
                        "gpus": n,
                        "job": job,
                        "placement": placement,
                        "method": method,
                        "busiest_kind": s["busiest_kind"],
                        "busiest": s["busiest"],
                        "top": top,
                        "top_max": s["kinds"][top]["max"] if top in s["kinds"] else 0.0,
                        "top_mean": s["kinds"][top]["mean_used"] if top in s["kinds"] else 0.0,
                        "top_used": f"{s['kinds'][top]['used']}/{s['kinds'][top]['links']}"
                        if top in s["kinds"]
                        else "",
                        "nic_max": s["kinds"]["nic"]["max"],
                    }
                    rows.append(row)
    return rows
