"""The entries a job plan puts on each switch (docs/DESIGN.md, tables job_config/job_ports, multicast).

Order matters for a job to appear atomically to traffic: the multicast group
and the port entries are written before job_config, which is what makes the
switch accept the job's packets; removal goes in the reverse order.
"""

from __future__ import annotations

from controller import names as N
from controller.entities import Entity, MulticastGroup, TableEntry
from controller.planner import JobPlan, SwitchPlan


def switch_entries(plan: JobPlan, sp: SwitchPlan) -> list[Entity]:
    job = plan.job_id
    out: list[Entity] = [MulticastGroup.make(sp.mcast_grp, [(c.port, c.index) for c in sp.children])]
    for c in sp.children:
        out.append(
            TableEntry.make(
                N.T_JOB_PORTS, {N.K_JOB_ID: job, N.K_INGRESS_PORT: c.port}, N.A_FROM_CHILD, {"child_index": c.index}
            )
        )
    if sp.up_port:
        out.append(TableEntry.make(N.T_JOB_PORTS, {N.K_JOB_ID: job, N.K_INGRESS_PORT: sp.up_port}, N.A_FROM_PARENT))
    out.append(
        TableEntry.make(
            N.T_JOB_CONFIG,
            {N.K_JOB_ID: job},
            N.A_SET_JOB,
            {
                "job_index": sp.job_index,
                "role": sp.role,
                "fan_in": sp.fan_in,
                "slot_base": sp.slot_base,
                "slot_count": sp.slot_count,
                "mcast_grp": sp.mcast_grp,
                "up_port": sp.up_port,
                "result_type": sp.result_type,
                "shift": sp.shift,
                "token": sp.token,
                "up_type": sp.up_type,
                "up_shift": sp.up_shift,
                "in_shift": sp.in_shift,
            },
        )
    )
    return out


def job_entries(plan: JobPlan) -> dict[str, list[Entity]]:
    """switch -> entries in write order."""
    return {sp.switch: switch_entries(plan, sp) for sp in plan.switches}
