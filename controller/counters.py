"""Per-job counters read from every switch of a job's tree (indirect counters of docs/DESIGN.md)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from controller import names as N
from controller.fabric import Fabric
from controller.p4info import P4Schema
from controller.planner import JobPlan
from p4proto import p4runtime_pb2

LOG = logging.getLogger(__name__)


@dataclass
class SwitchCounters:
    switch: str
    job_index: int
    packets: dict[str, int] = field(default_factory=dict)  # short counter name -> packets
    bytes: dict[str, int] = field(default_factory=dict)
    drops: dict[str, int] = field(default_factory=dict)  # reason name -> packets

    def to_dict(self) -> dict[str, Any]:
        return {
            "switch": self.switch,
            "job_index": self.job_index,
            "packets": self.packets,
            "bytes": self.bytes,
            "drops": self.drops,
        }


def request(schema: P4Schema, job_index: int) -> list[p4runtime_pb2.Entity]:
    ents = []
    for name in N.JOB_COUNTERS.values():
        ents.append(
            p4runtime_pb2.Entity(
                counter_entry=p4runtime_pb2.CounterEntry(
                    counter_id=schema.counter(name).id, index=p4runtime_pb2.Index(index=job_index)
                )
            )
        )
    drops = schema.counter(N.C_DROPS).id
    for reason in N.DROP_REASONS:
        ents.append(
            p4runtime_pb2.Entity(
                counter_entry=p4runtime_pb2.CounterEntry(
                    counter_id=drops, index=p4runtime_pb2.Index(index=N.drop_index(job_index, reason))
                )
            )
        )
    return ents


def parse(switch: str, job_index: int, schema: P4Schema, entities: list[p4runtime_pb2.Entity]) -> SwitchCounters:
    out = SwitchCounters(switch, job_index)
    short = {schema.counter(p4name).id: name for name, p4name in N.JOB_COUNTERS.items()}
    drops = schema.counter(N.C_DROPS).id
    for e in entities:
        ce = e.counter_entry
        if ce.counter_id == drops:
            reason = ce.index.index - job_index * N.NUM_DROP_REASONS
            if reason in N.DROP_REASONS:
                out.drops[N.DROP_REASONS[reason]] = ce.data.packet_count
        elif ce.counter_id in short and ce.index.index == job_index:
            out.packets[short[ce.counter_id]] = ce.data.packet_count
            out.bytes[short[ce.counter_id]] = ce.data.byte_count
    return out


def read_switch(fabric: Fabric, switch: str, job_index: int) -> SwitchCounters:
    """One Read RPC: the job counters and the job's drop reasons at `job_index` (0 = drops of no job)."""
    schema = fabric.schema
    if schema is None:
        raise ValueError("reading counters needs the P4Info")
    return parse(switch, job_index, schema, list(fabric.client(switch).read(request(schema, job_index))))


def read_job(fabric: Fabric, plan: JobPlan) -> dict[str, SwitchCounters]:
    """switch -> its counters for the job, for every switch of the job's tree (in parallel)."""
    index = {sp.switch: sp.job_index for sp in plan.switches}
    return fabric.run_all(f"counters of job {plan.job_id}", lambda sw: read_switch(fabric, sw, index[sw]), index)


def totals(per_switch: dict[str, SwitchCounters]) -> dict[str, int]:
    out: dict[str, int] = {}
    for sc in per_switch.values():
        for k, v in sc.packets.items():
            out[k] = out.get(k, 0) + v
        for k, v in sc.drops.items():
            out[f"drops.{k}"] = out.get(f"drops.{k}", 0) + v
    return out
