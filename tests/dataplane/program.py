"""Table entries for the data-plane cases: one switch playing root or inner node of a job."""

from __future__ import annotations

from dataclasses import dataclass

from tests.dataplane.backends import PORTS, Dut
from tests.dataplane.frames import INT32, host_ip, host_mac

JOB_CONFIG = "P4inaIngress.aggregation.job_config"
JOB_PORTS = "P4inaIngress.aggregation.job_ports"
HOST_PORT = "P4inaEgress.host_port"
ROOT, INNER = 1, 2


@dataclass(frozen=True)
class Job:
    job_id: int = 7
    job_index: int = 1
    children: tuple[int, ...] = (1, 2, 3)
    role: int = ROOT
    up_port: int = 0
    result_type: int = INT32
    shift: int = 0
    slot_base: int = 0
    slot_count: int = 8
    mcast_grp: int = 1
    token: int = 1
    up_type: int = INT32
    up_shift: int = 0
    in_shift: int = 0

    def child_index(self, port: int) -> int:
        return self.children.index(port)


def install_hosts(dut: Dut) -> None:
    for p in PORTS:
        dut.insert(
            HOST_PORT,
            {"egress_port": p},
            "set_host",
            {"mac": int.from_bytes(host_mac(p), "big"), "ip": int.from_bytes(host_ip(p), "big")},
        )


def install_job(dut: Dut, job: Job) -> None:
    dut.insert(
        JOB_CONFIG,
        {"job_id": job.job_id},
        "set_job",
        dict(
            job_index=job.job_index,
            role=job.role,
            fan_in=len(job.children),
            slot_base=job.slot_base,
            slot_count=job.slot_count,
            mcast_grp=job.mcast_grp,
            up_port=job.up_port,
            result_type=job.result_type,
            shift=job.shift,
            token=job.token,
            up_type=job.up_type,
            up_shift=job.up_shift,
            in_shift=job.in_shift,
        ),
    )
    for i, p in enumerate(job.children):
        dut.insert(JOB_PORTS, {"job_id": job.job_id, "ingress_port": p}, "from_child", {"child_index": i})
    if job.up_port:
        dut.insert(JOB_PORTS, {"job_id": job.job_id, "ingress_port": job.up_port}, "from_parent")
    dut.multicast(job.mcast_grp, [(p, i) for i, p in enumerate(job.children)])
