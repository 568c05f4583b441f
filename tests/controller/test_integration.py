"""The controller against running switches over P4Runtime on loopback (no Mininet).

One body, two back ends: the embedded switch (always) and BMv2's simple_switch_grpc
(marker bmv2).  The switches start once per module with the pipeline pushed (loading
the program is the slow part); each test starts from switches wiped clean and a fresh
state file.
"""

from __future__ import annotations

import ipaddress
import json
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller import installer as I
from controller import names as N
from controller.api import DEFAULT_BMV2_JSON, DEFAULT_P4INFO, Controller
from controller.cli import main as cli_main
from controller.client import SwitchClient, WriteError, update
from controller.entities import TableEntry
from controller.fattree import fat_tree
from controller.installer import InstallError, read_entities
from controller.planner import DuplicateJobError, JobSpec, UnknownHostError, plan_job
from controller.state import State
from controller.topology import Topology
from emulation.localnet import bmv2_switches, embedded_switches
from p4proto import p4runtime_pb2
from wireformat import AGG

BACKENDS = ["embedded", pytest.param("bmv2", marks=pytest.mark.bmv2)]
TOPO_K = {"embedded": 4, "bmv2": 2}  # 20 embedded switches; 5 BMv2 processes on a 2-core machine
TIMEOUT = 120.0  # generous: a loaded machine makes RPCs slow, and no test here is about speed


@pytest.fixture(scope="module", params=BACKENDS)
def net(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Topology, dict]]:
    topo = fat_tree(TOPO_K[request.param])
    cm = (
        embedded_switches(topo) if request.param == "embedded" else bmv2_switches(topo, tmp_path_factory.mktemp("bmv2"))
    )
    with cm as (live, handles):
        with Controller(live, p4info=DEFAULT_P4INFO, device_config=DEFAULT_BMV2_JSON, timeout=TIMEOUT) as first:
            assert set(first.push_pipeline().values()) == {"pushed"}
        yield request.param, live, handles


@pytest.fixture
def ctl(net: tuple[str, Topology, dict], tmp_path: Path) -> Iterator[Controller]:
    _, topo, _ = net
    with Controller(
        topo,
        p4info=DEFAULT_P4INFO,
        device_config=DEFAULT_BMV2_JSON,
        state=State(tmp_path / "state.json"),
        timeout=TIMEOUT,
    ) as c:
        I.repair(c.fabric, State())  # an empty state: delete whatever an earlier test left
        yield c


def job_entries_on(ctl: Controller, switch: str, job_id: int) -> list:
    cl = ctl.fabric.client(switch)
    return [
        e for e in read_entities(cl, ctl.schema, N.JOB_TABLES, groups=()) if dict(e.match).get(N.K_JOB_ID) == job_id
    ]


def test_pipeline_push_is_skipped_when_unchanged(ctl: Controller) -> None:
    assert set(ctl.push_pipeline().values()) == {"unchanged"}
    assert set(ctl.push_pipeline(force=True, switches=["e1"]).values()) == {"pushed"}


def test_routes_install_verify_idempotent(ctl: Controller) -> None:
    first = ctl.install_routes()
    assert sum(r.inserted for r in first.values()) > 0
    assert all(d.clean for d in ctl.verify().values())
    again = ctl.install_routes()
    assert sum(r.inserted + r.modified + r.deleted for r in again.values()) == 0


def test_job_install_verify_counters_remove(ctl: Controller) -> None:
    topo = ctl.topo
    hosts = [h.name for h in topo.hosts]
    ctl.install_routes()
    plan = ctl.install_job(7, hosts, "int16")
    assert all(d.clean for d in ctl.verify().values())
    on_root = {str(e) for e in job_entries_on(ctl, plan.root, 7)}
    assert any(
        s.startswith("job_config[job_id=7] -> set_job(") and "role=1" in s and "result_type=1" in s for s in on_root
    )

    counters = ctl.counters(7)
    assert set(counters) == {sp.switch for sp in plan.switches}
    for sc in counters.values():
        assert set(sc.packets) == set(N.JOB_COUNTERS) and set(sc.drops) == set(N.DROP_REASONS.values())
        assert not any(sc.packets.values()) and not any(sc.drops.values())

    # re-install of the same job: no change; a different job under the same id: refused
    assert ctl.install_job(7, hosts, "int16") == plan
    with pytest.raises(DuplicateJobError, match="job 7 is already installed"):
        ctl.install_job(7, hosts[:2])

    ctl.remove_job(7)
    for sp in plan.switches:
        assert job_entries_on(ctl, sp.switch, 7) == []
    assert all(d.clean for d in ctl.verify().values())
    assert ctl.jobs() == []


def test_two_jobs_then_remove_one_keeps_the_other(ctl: Controller) -> None:
    hosts = [h.name for h in ctl.topo.hosts]
    a = ctl.install_job(1, hosts)
    b = ctl.install_job(2, hosts[: len(hosts) // 2 + 1])
    ctl.remove_job(1)
    assert all(d.clean for d in ctl.verify().values())
    for sp in b.switches:
        assert len(job_entries_on(ctl, sp.switch, 2)) == 1 + sp.fan_in + (1 if sp.up_port else 0)
    for sp in a.switches:
        assert job_entries_on(ctl, sp.switch, 1) == []


def test_drift_is_detected_and_repaired(ctl: Controller) -> None:
    plan = ctl.install_job(3, [h.name for h in ctl.topo.hosts])
    edge = plan.switches[-1].switch
    victim = [e for e in job_entries_on(ctl, edge, 3) if e.table == N.T_JOB_PORTS][0]
    cl = ctl.fabric.client(edge)
    cl.write([update("delete", victim.encode(ctl.schema))])
    stray = TableEntry.make(
        N.T_JOB_CONFIG,
        {N.K_JOB_ID: 999},
        N.A_SET_JOB,
        dict(
            job_index=9,
            role=1,
            fan_in=1,
            slot_base=0,
            slot_count=1,
            mcast_grp=9,
            up_port=0,
            result_type=0,
            shift=0,
            token=1,
            up_type=0,
            up_shift=0,
            in_shift=0,
        ),
    )
    cl.write([update("insert", stray.encode(ctl.schema))])
    drift = ctl.verify()
    assert drift[edge].missing == [str(victim)] and drift[edge].unexpected == [str(stray)]
    assert all(d.clean for name, d in drift.items() if name != edge)
    ctl.repair()
    assert all(d.clean for d in ctl.verify().values())


def test_rollback_when_a_switch_refuses(ctl: Controller) -> None:
    """A conflicting entry on one switch of the tree makes its write fail; nothing else of the job stays."""
    hosts = [h.name for h in ctl.topo.hosts]
    plan = plan_job(ctl.topo, JobSpec.make(42, hosts), ctl.state.plans())
    blocker = plan.switches[len(plan.switches) // 2].switch
    conflict = TableEntry.make(
        N.T_JOB_PORTS, {N.K_JOB_ID: 42, N.K_INGRESS_PORT: plan.on(blocker).children[-1].port}, N.A_FROM_PARENT
    )

    ctl.fabric.client(blocker).write([update("insert", conflict.encode(ctl.schema))])
    with pytest.raises(InstallError, match=rf"job 42 not installed.*switch {blocker}: job_ports\[.*ALREADY_EXISTS"):
        ctl.install_job(42, hosts)
    assert 42 not in ctl.state.jobs
    for sp in plan.switches:
        left = job_entries_on(ctl, sp.switch, 42)
        assert left == ([conflict] if sp.switch == blocker else []), sp.switch
    groups = read_entities(ctl.fabric.client(plan.root), ctl.schema, (), groups=[plan.on(plan.root).mcast_grp])
    assert groups == []
    # once the conflict is gone, the same job installs
    ctl.fabric.client(blocker).write([update("delete", conflict.encode(ctl.schema))])
    ctl.install_job(42, hosts)
    assert all(d.clean for d in ctl.verify().values())


def test_rollback_when_a_write_fails_without_details(ctl: Controller, monkeypatch: pytest.MonkeyPatch) -> None:
    """An injected failure (no per-update status) on the root's job_config: the whole batch counts as suspect."""
    hosts = [h.name for h in ctl.topo.hosts]
    plan = plan_job(ctl.topo, JobSpec.make(43, hosts), ctl.state.plans())
    real = SwitchClient.write

    def flaky(self: SwitchClient, updates, labels=None):
        inserting = updates and updates[0].type == p4runtime_pb2.Update.INSERT
        if self.name == plan.root and inserting and any("job_config" in lab for lab in (labels or ())):
            real(self, updates, labels)  # the switch takes it, then the "network" loses the answer
            raise WriteError(self.name, "UNAVAILABLE", "injected", [], list(labels or ()))
        return real(self, updates, labels)

    monkeypatch.setattr(SwitchClient, "write", flaky)
    with pytest.raises(InstallError, match=f"switch {plan.root}: .*UNAVAILABLE"):
        ctl.install_job(43, hosts)
    monkeypatch.setattr(SwitchClient, "write", real)
    for sp in plan.switches:
        assert job_entries_on(ctl, sp.switch, 43) == [], sp.switch
    assert all(d.clean for d in ctl.verify().values())


def test_refusals_write_nothing(ctl: Controller) -> None:
    with pytest.raises(UnknownHostError, match="h999"):
        ctl.install_job(5, ["h1", "h999"])
    assert all(d.clean for d in ctl.verify().values())


def _contribution(src_ip: str, job_id: int, slot: int, value: int) -> bytes:
    """Ethernet/IPv4/UDP/agg/NUM_LANES int32 lanes from src to the aggregation address (docs/DESIGN.md)."""
    checksum = AGG.checksum(value * AGG.num_lanes, slot * AGG.num_lanes, job_id, 1)  # the lane checksum (DESIGN)
    payload = AGG.pack_header(
        op=AGG.ops["OP_CONTRIB"],
        elem_type=AGG.elem_types["ELEM_INT32"],
        job_id=job_id,
        slot=slot,
        offset=slot * AGG.num_lanes,
        epoch=1,
        checksum=checksum,
    ) + struct.pack(f">{AGG.num_lanes}i", *([value] * AGG.num_lanes))
    udp = struct.pack(">HHHH", AGG.udp_port, AGG.udp_port, 8 + len(payload), 0) + payload
    ip = bytearray(
        struct.pack(
            ">BBHHHBBH4s4s",
            0x45,
            0,
            20 + len(udp),
            0,
            0,
            64,
            17,
            0,
            ipaddress.IPv4Address(src_ip).packed,
            ipaddress.IPv4Address("10.255.255.254").packed,
        )
    )
    words = sum(struct.unpack(">10H", bytes(ip)))
    while words >> 16:
        words = (words & 0xFFFF) + (words >> 16)
    ip[10:12] = struct.pack(">H", ~words & 0xFFFF)
    eth = bytes.fromhex("027034696e61") + bytes.fromhex("02000a000002") + b"\x08\x00"
    return eth + bytes(ip) + udp


@pytest.mark.parametrize("net", ["embedded"], indirect=True)  # packets go in through the embedded switch's API
def test_counters_count_traffic(net: tuple[str, Topology, dict], ctl: Controller) -> None:
    _, topo, handles = net
    plan = ctl.install_job(11, ["h1", "h2", "h3"])
    e1, h1, h2 = handles["e1"].switch, topo.host("h1"), topo.host("h2")
    before = ctl.counters(11)["e1"].packets  # counters live as long as the switch: compare differences
    drops_before = ctl.unattributed_drops()["e1"].drops["unknown_job"]
    assert e1.process_packet(h1.port, _contribution(h1.ip, 11, 0, 5)) == []  # 1 of 2 on e1: held
    assert e1.process_packet(h1.port, _contribution(h1.ip, 11, 0, 5)) == []  # a retransmission: counted, dropped
    out = e1.process_packet(h2.port, _contribution(h2.ip, 11, 0, 7))  # completes e1's cell: partial sum goes up
    assert [port for port, _ in out] == [plan.on("e1").up_port]
    e1.process_packet(h1.port, _contribution(h1.ip, 999, 0, 1))  # unknown job: dropped, counted under job 0
    after = ctl.counters(11)["e1"].packets
    delta = {k: after[k] - before[k] for k in ("contributions", "retransmissions", "completions")}
    assert delta == {"contributions": 2, "retransmissions": 1, "completions": 1}
    assert ctl.unattributed_drops()["e1"].drops["unknown_job"] == drops_before + 1


def test_cli_end_to_end(
    net: tuple[str, Topology, dict], ctl: Controller, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, topo, _ = net
    topo_file = tmp_path / "topo.json"
    topo.save(topo_file)
    # a second controller: a higher election id makes it primary (the fixture's stays as backup)
    st = ["--state", str(tmp_path / "cli-state.json"), "--election-id", "2", "--timeout", str(TIMEOUT)]

    err = []

    def run(*argv: str) -> tuple[int, str]:
        code = cli_main(list(argv))
        cap = capsys.readouterr()
        err.append(cap.err)
        return code, cap.out

    assert run("pipeline", "push", "--topology", str(topo_file), *st)[0] == 0
    code, out = run("routes", "install", *st, "--json")  # the topology is remembered in the state
    assert code == 0 and json.loads(out)["seconds"] >= 0
    code, out = run("job", "install", "--job", "21", "--hosts", "h1,h2", "--lanes", "int8", *st, "--json")
    spec = json.loads(out)["spec"]
    assert code == 0 and spec["shift"] == 1  # int8 lanes both ways, 2 hosts: 1 bit of headroom
    assert (spec["up_lanes"], spec["down_lanes"]) == ("int8", "int8")
    code, out = run("job", "list", *st, "--json")
    assert [j["job_id"] for j in json.loads(out)] == [21]
    code, out = run("job", "show", "--job", "21", *st, "--json")
    tree = {sp["switch"] for sp in json.loads(out)["switches"]}
    assert code == 0 and "e1" in tree
    code, out = run("counters", *st, "--json")
    assert code == 0 and set(json.loads(out)["jobs"]["21"]) == tree
    assert run("verify", *st)[0] == 0
    assert run("job", "install", "--job", "21", "--hosts", "h1,h9", *st)[0] == 1
    assert "already installed" in err[-1]
    assert run("job", "remove", "--job", "21", *st)[0] == 0
    code, out = run("verify", *st, "--json")
    assert code == 0 and json.loads(out)["clean"]
