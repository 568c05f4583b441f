"""Text drawings of a topology and of a job's aggregation tree (for `p4ina topo show` / `job show`)."""

from __future__ import annotations

from controller import names as N
from controller.planner import JobPlan
from controller.topology import Topology


def _ports(topo: Topology, switch: str) -> str:
    return " ".join(f"{nb.port}:{nb.peer}" for nb in topo.neighbors(switch))


def draw_topology(topo: Topology) -> str:
    tiers: dict[str, int] = {}
    for s in topo.switches:
        tiers[s.role] = tiers.get(s.role, 0) + 1
    counts = ", ".join(f"{n} {role}" for role, n in tiers.items())
    params = " ".join(f"{k}={v}" for k, v in topo.params.items())
    lines = [
        f"{topo.kind} {params}: {len(topo.switches)} switches ({counts}), {len(topo.hosts)} hosts, "
        f"{len(topo.links)} switch links"
    ]
    width = max(len(s.name) for s in topo.switches) if topo.switches else 4
    podless = [s for s in topo.switches if s.pod is None]
    pods = sorted({s.pod for s in topo.switches if s.pod is not None})
    for tier in sorted({s.tier for s in podless}, reverse=True):
        row = [s for s in podless if s.tier == tier]
        lines.append(f"{row[0].role}: " + " ".join(s.name for s in row))
        for s in row:
            lines.append(
                f"  {s.name:<{width}}  dev {s.device_id:<3} ports {_ports(topo, s.name)}"
                + (f"  @{s.grpc_addr}" if s.grpc_addr else "")
            )
    # a pod's switches with their role spelled out (spine, aggregation), in one column
    role_width = max((len(s.role) for s in topo.switches if s.pod is not None), default=0)
    for pod in pods:
        members = sorted((s for s in topo.switches if s.pod == pod), key=lambda s: -s.tier)
        hosts = [h.name for s in members for h in topo.hosts_of(s.name)]
        span = f"{hosts[0]}..{hosts[-1]}" if hosts else "no hosts"
        lines.append(f"pod {pod} ({span})")
        for s in members:
            lines.append(
                f"  {s.role:<{role_width}} {s.name:<{width}}  dev {s.device_id:<3} ports {_ports(topo, s.name)}"
                + (f"  @{s.grpc_addr}" if s.grpc_addr else "")
            )
    return "\n".join(lines)


def draw_job(plan: JobPlan) -> str:
    spec = plan.spec
    head = (
        f"job {plan.job_id}: {len(spec.hosts)} hosts, {spec.up_lanes} up, {spec.down_lanes} results "
        f"(shift {spec.shift}), "
        f"{spec.slots} slots, root {plan.root}, {len(plan.switches)} switches"
    )
    nodes = {sp.switch: sp for sp in plan.switches}
    lines = [head]

    def label(name: str) -> str:
        sp = nodes[name]
        up = f" up {sp.up_port}" if sp.up_port else ""
        slots = f"{sp.slot_base}..{sp.slot_base + sp.slot_count - 1}"
        role = N.ROLE_NAMES[sp.role]
        return f"{name} {role}  idx {sp.job_index}  fan-in {sp.fan_in}  slots {slots}  grp {sp.mcast_grp}{up}"

    def walk(name: str, prefix: str) -> None:
        sp = nodes[name]
        for i, c in enumerate(sp.children):
            last = i == len(sp.children) - 1
            branch, cont = ("└─ ", "   ") if last else ("├─ ", "│  ")
            if c.node in nodes:
                lines.append(f"{prefix}{branch}port {c.port} (child {c.index}) → {label(c.node)}")
                walk(c.node, prefix + cont)
            else:
                lines.append(f"{prefix}{branch}port {c.port} (child {c.index}) → {c.node}")

    lines.append(label(plan.root))
    walk(plan.root, "")
    return "\n".join(lines)
