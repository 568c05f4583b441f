"""Installing a one-switch job on the embedded switch in-process, and dropping chosen packets (test helpers)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hosts.packets import HEADER_LEN, OP_CONTRIB, OP_RESULT, PREFIX_LEN
from wireformat import AGG

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "p4" / "build" / "p4ina.json"
JOB_ID, JOB_INDEX, MCAST_GRP, TOKEN = 7, 1, 1, 1
ROLE_ROOT = 1


class Processor(Protocol):
    def process_packet(self, ingress_port: int, data: bytes) -> list[tuple[int, bytes]]: ...


@dataclass
class DropChosen:
    """Between the ports and the switch: drops the first copy of chosen data packets (not exponent rounds).

    up: (ingress port, offset) of contributions; down: (egress port, offset) of results.
    """

    inner: Processor
    up: set[tuple[int, int]] = field(default_factory=set)
    down: set[tuple[int, int]] = field(default_factory=set)
    dropped: list[tuple[str, int, int]] = field(default_factory=list)

    @staticmethod
    def _agg(frame: bytes) -> dict[str, int] | None:
        if len(frame) < PREFIX_LEN + HEADER_LEN or frame[12:14] != b"\x08\x00" or frame[23] != 17:
            return None
        if int.from_bytes(frame[36:38], "big") != AGG.udp_port:
            return None
        h = AGG.unpack_header(frame[PREFIX_LEN:])
        return None if h["elem_type"] == AGG.elem_types["ELEM_NONE"] else h

    def process_packet(self, ingress_port: int, data: bytes) -> list[tuple[int, bytes]]:
        h = self._agg(data)
        if h and h["op"] == OP_CONTRIB and (ingress_port, h["offset"]) in self.up:
            self.up.discard((ingress_port, h["offset"]))
            self.dropped.append(("up", ingress_port, h["offset"]))
            return []
        out = []
        for port, frame in self.inner.process_packet(ingress_port, data):
            r = self._agg(frame)
            if r and r["op"] == OP_RESULT and (port, r["offset"]) in self.down:
                self.down.discard((port, r["offset"]))
                self.dropped.append(("down", port, r["offset"]))
                continue
            out.append((port, frame))
        return out


def _params(switch: Any, action: str, **values: int) -> tuple[int, ...]:
    """Action parameters in declaration order, by name (so a reordering in P4 cannot go unnoticed)."""
    info = switch.actions()[action]
    missing = set(info.param_names) ^ set(values)
    assert not missing, f"{action}: parameters {sorted(missing)} differ from {info.param_names}"
    return tuple(values[name] for name in info.param_names)


def program_one_switch_job(
    switch: Any, hosts: list[tuple[str, str]], slot_count: int, result_type: int, shift: int, token: int = TOKEN
) -> None:
    """What the controller installs for a job whose workers all hang off one (root) switch."""
    from softswitch.runtime.switch import ActionCall, Exact, TableEntry

    n = len(hosts)
    set_job = "P4inaIngress.aggregation.set_job"
    switch.table_insert(
        "P4inaIngress.aggregation.job_config",
        TableEntry(
            (Exact(JOB_ID),),
            ActionCall(
                set_job,
                _params(
                    switch,
                    set_job,
                    job_index=JOB_INDEX,
                    role=ROLE_ROOT,
                    fan_in=n,
                    slot_base=0,
                    slot_count=slot_count,
                    mcast_grp=MCAST_GRP,
                    up_port=0,
                    result_type=result_type,
                    shift=shift,
                    token=token,
                    up_type=0,
                    up_shift=0,
                    in_shift=0,
                ),
            ),
        ),
    )
    for r, (mac, ip) in enumerate(hosts):
        switch.table_insert(
            "P4inaIngress.aggregation.job_ports",
            TableEntry((Exact(JOB_ID), Exact(r + 1)), ActionCall("P4inaIngress.aggregation.from_child", (r,))),
        )
        switch.table_insert(
            "P4inaEgress.host_port",
            TableEntry(
                (Exact(r + 1),),
                ActionCall("P4inaEgress.set_host", (int(mac.replace(":", ""), 16), int(ipaddress.IPv4Address(ip)))),
            ),
        )
    switch.mc_group_set(MCAST_GRP, [(r + 1, r) for r in range(n)])


_loaded: dict[Path, Any] = {}
_installs = [0]


def real_switch(
    addrs: list[tuple[str, str]], slot_count: int, result_type: int = 0, shift: int = 0, program: Path | None = None
) -> Any:
    """A SoftSwitch running p4/build/p4ina.json with one job whose workers hang off ports 1..n.

    Loading the 20 MB program costs seconds of CPU, so one switch per process is
    reused: each call clears the tables, the multicast group and the job's
    counters and installs the job with a new token, which is how the design
    makes cells of an earlier install start afresh (P4Runtime cannot clear
    registers), so reuse exercises that path too.
    """
    from softswitch.runtime.switch import SoftSwitch

    path = program or PROGRAM
    switch = _loaded.get(path)
    if switch is None:
        switch = SoftSwitch(device_id=1, name="p4ina-test")
        switch.load_program(path.read_bytes())
        _loaded[path] = switch
    for table in ("P4inaIngress.aggregation.job_config", "P4inaIngress.aggregation.job_ports", "P4inaEgress.host_port"):
        switch.table_clear(table)
    if MCAST_GRP in switch.mc_groups():
        switch.mc_group_delete(MCAST_GRP)
    for name, size in switch.counters().items():
        for index in range(size):
            switch.counter_write(name, index, 0, 0)
    _installs[0] += 1
    program_one_switch_job(switch, addrs, slot_count, result_type, shift, token=_installs[0] % 255 + 1)
    return switch


def counter(switch: Any, name: str) -> int:
    return switch.counter_read(f"P4inaIngress.aggregation.{name}", JOB_INDEX)[0]
