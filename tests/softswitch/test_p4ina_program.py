"""The embedded switch runs p4/build/p4ina.json: two children's contributions complete a cell and multicast.

Smoke level only (the full behaviour tests live with the P4 program); this checks that the
interpreter handles every construct the program uses.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from softswitch import ActionCall, Exact, Lpm, SoftSwitch, TableEntry
from wireformat import AGG

pytestmark = pytest.mark.usefixtures("each_engine")  # every case on the C and the Python engine

PROGRAM = Path(
    __import__("os").environ.get("P4INA_JSON", Path(__file__).resolve().parents[2] / "p4" / "build" / "p4ina.json")
)
C = AGG.constants()
CHILD_PORTS = (1, 2)
MACS = {1: 0x020000000001, 2: 0x020000000002, 3: 0x020000000003}
IPS = {1: 0x0A000101, 2: 0x0A000102, 3: 0x0A000201}
AGG_IP = 0x0AFFFFFE


def checksum(header: bytes) -> int:
    total = sum(struct.unpack(f">{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4(src: int, dst: int, payload: int) -> bytes:
    hdr = bytearray(struct.pack(">BBHHHBBHII", 0x45, 0, 20 + payload, 0, 0x4000, 64, 17, 0, src, dst))
    struct.pack_into(">H", hdr, 10, checksum(bytes(hdr)))
    return bytes(hdr)


def contribution(child: int, values: list[int], slot: int = 3) -> bytes:
    elem = C["ELEM_INT32"]
    lanes = AGG.lane_struct(elem).pack(*values)
    agg = AGG.pack_header(
        version=C["AGG_VERSION"],
        op=C["OP_CONTRIB"],
        flags=0,
        elem_type=elem,
        shift=0,
        job_id=1,
        shadow=0,
        slot=slot,
        contributor=child,
        exponent=0,
        epoch=1,
        offset=0,
        checksum=AGG.checksum(sum(values), 0, 1, 1),
    )
    udp = struct.pack(">HHHH", C["UDP_PORT_AGG"], C["UDP_PORT_AGG"], 8 + len(agg) + len(lanes), 0)
    port = CHILD_PORTS[child]
    eth = (0x027034696E61).to_bytes(6, "big") + MACS[port].to_bytes(6, "big") + b"\x08\x00"
    return eth + ipv4(IPS[port], AGG_IP, len(udp) + len(agg) + len(lanes)) + udp + agg + lanes


def action(sw: SoftSwitch, suffix: str) -> str:
    (name,) = [n for n in sw.actions() if n.endswith(suffix)]
    return name


def table(sw: SoftSwitch, suffix: str) -> str:
    (name,) = [n for n in sw.tables() if n.endswith(suffix)]
    return name


def configured_root() -> SoftSwitch:
    """The root of job 1 (fan-in 2, children on ports 1 and 2) with host routes, as in docs/DESIGN.md."""
    sw = SoftSwitch(name="p4ina-root")
    sw.load_program(PROGRAM.read_bytes())
    sw.table_insert(
        table(sw, "job_config"),
        TableEntry(
            (Exact(1),),
            ActionCall(action(sw, "set_job"), (1, 1, 2, 0, 16, 1, 0, C["ELEM_INT32"], 0, 1, C["ELEM_INT32"], 0, 0)),
        ),
    )
    for child, port in enumerate(CHILD_PORTS):
        sw.table_insert(
            table(sw, "job_ports"), TableEntry((Exact(1), Exact(port)), ActionCall(action(sw, "from_child"), (child,)))
        )
    sw.mc_group_set(1, [(port, child) for child, port in enumerate(CHILD_PORTS)])
    for port in MACS:
        sw.table_insert(
            table(sw, "host_port"),
            TableEntry((Exact(port),), ActionCall(action(sw, "set_host"), (MACS[port], IPS[port]))),
        )
        sw.table_insert(
            table(sw, "ipv4_lpm"), TableEntry((Lpm(IPS[port], 32),), ActionCall(action(sw, "forward"), (port,)))
        )
    return sw


@pytest.fixture
def root() -> SoftSwitch:
    return configured_root()


@pytest.fixture(scope="module")
def shared_root(each_engine: str) -> SoftSwitch:
    return configured_root()


def test_two_children_complete_a_cell_and_the_root_multicasts(root: SoftSwitch) -> None:
    a = [i - 32 for i in range(AGG.num_lanes)]
    b = [1000 * i for i in range(AGG.num_lanes)]
    assert root.process_packet(1, contribution(0, a)) == []
    out = root.process_packet(2, contribution(1, b))
    assert [p for p, _ in out] == [1, 2]
    hdr_off = 14 + 20 + 8
    for port, pkt in out:
        assert pkt[:6] == MACS[port].to_bytes(6, "big")
        assert checksum(pkt[14:34]) == 0
        assert struct.unpack_from(">I", pkt, 30)[0] == IPS[port]
        fields = AGG.unpack_header(pkt[hdr_off:])
        assert fields["op"] == C["OP_RESULT"]
        lanes = AGG.lane_struct(fields["elem_type"]).unpack_from(pkt, hdr_off + AGG.header_bytes)
        assert list(lanes) == [x + y for x, y in zip(a, b)]
    assert root.stats["errors"] == 0
    assert root.counter_read(counter(root, "completions"), 1)[0] == 1


def counter(sw: SoftSwitch, suffix: str) -> str:
    (name,) = [n for n in sw.counters() if n.endswith(suffix)]
    return name


def test_ipv4_forwarding(root: SoftSwitch) -> None:
    payload = bytes(32)
    udp = struct.pack(">HHHH", 5000, 6000, 8 + len(payload), 0)
    pkt = (
        MACS[3].to_bytes(6, "big") + MACS[1].to_bytes(6, "big") + b"\x08\x00" + ipv4(IPS[1], IPS[3], 40) + udp + payload
    )
    out = root.process_packet(1, pkt)
    assert [p for p, _ in out] == [3]
    fwd = out[0][1]
    assert fwd[22] == 63  # TTL decremented
    assert checksum(fwd[14:34]) == 0
    assert root.stats["errors"] == 0


@st.composite
def mutated_contributions(draw: st.DrawFn) -> tuple[int, bytes]:
    child = draw(st.integers(0, 1))
    values = draw(st.lists(st.integers(-(2**31), 2**31 - 1), min_size=AGG.num_lanes, max_size=AGG.num_lanes))
    data = bytearray(contribution(child, values, slot=draw(st.integers(0, 20))))
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.integers(0, 2))
        if kind == 0 and data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        elif kind == 1:
            data = data[: draw(st.integers(0, len(data)))]
        else:
            data += draw(st.binary(min_size=1, max_size=8))
    return draw(st.sampled_from([CHILD_PORTS[child], 3, 0])), bytes(data)


@settings(max_examples=200, deadline=None)
@given(packet=st.one_of(mutated_contributions(), st.tuples(st.integers(0, 511), st.binary(max_size=400))))
def test_random_and_mutated_packets_never_raise(shared_root: SoftSwitch, packet: tuple[int, bytes]) -> None:
    port, data = packet
    for eport, out in shared_root.process_packet(port, data):
        assert 0 <= eport < 511 and isinstance(out, bytes)
    assert shared_root.stats["errors"] == 0
