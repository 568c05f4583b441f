"""Plain IPv4 routing, which the ring baseline's traffic takes."""

from __future__ import annotations

import struct

from controller.entities import Lpm
from tests.dataplane.backends import Dut
from tests.dataplane.frames import host_mac, ipv4_checksum, udp_frame

LPM = "P4inaIngress.forwarding.ipv4_lpm"
ECMP = "P4inaIngress.forwarding.ecmp_members"
DROPS = "P4inaIngress.drops"
NO_ROUTE, BAD_CHECKSUM, TTL_EXPIRED, NOT_IPV4 = 7, 6, 8, 9


def ip(text: str) -> int:
    return int.from_bytes(bytes(int(x) for x in text.split(".")), "big")


def to(dst: str, sport: int = 5000, ttl: int = 64, bad_checksum: bool = False) -> bytes:
    return udp_frame(
        1,
        host_mac(9),
        ip(dst).to_bytes(4, "big"),
        b"x" * 30,
        sport=sport,
        dport=6000,
        ttl=ttl,
        bad_checksum=bad_checksum,
    )


def test_longest_prefix_wins_and_ttl_drops_by_one(dut: Dut) -> None:
    dut.insert(LPM, {"dst_addr": Lpm(ip("10.0.0.0"), 24)}, "forward", {"port": 4})
    dut.insert(LPM, {"dst_addr": Lpm(ip("10.0.0.3"), 32)}, "forward", {"port": 3})
    dut.send(1, to("10.0.0.3"))
    dut.send(1, to("10.0.0.77"))
    got = dut.receive(2)
    assert sorted(p for p, _ in got) == [3, 4]
    for _, frame in got:
        iph = frame[14:34]
        assert iph[8] == 63 and ipv4_checksum(iph) == 0


def test_ecmp_spreads_flows_and_keeps_each_on_one_port(dut: Dut) -> None:
    dut.insert(LPM, {"dst_addr": Lpm(ip("10.1.0.0"), 16)}, "ecmp", {"group": 1, "size": 2})
    dut.insert(ECMP, {"group": 1, "index": 0}, "forward", {"port": 4})
    dut.insert(ECMP, {"group": 1, "index": 1}, "forward", {"port": 5})
    chosen: dict[int, int] = {}
    for sport in range(5000, 5032):
        for _ in range(2):
            dut.send(1, to("10.1.2.3", sport=sport))
            got = dut.receive(1)
            assert len(got) == 1
            port = got[0][0]
            assert chosen.setdefault(sport, port) == port, "a flow must keep its path"
    assert set(chosen.values()) == {4, 5}, "32 flows over 2 members use both"


def test_unroutable_expired_corrupt_and_non_ip_are_dropped_and_counted(dut: Dut) -> None:
    dut.insert(LPM, {"dst_addr": Lpm(ip("10.0.0.0"), 8)}, "forward", {"port": 2})
    dut.send(1, to("192.0.2.1"))
    dut.send(1, to("10.0.0.2", ttl=1))
    dut.send(1, to("10.0.0.2", bad_checksum=True))
    arp = host_mac(9) + host_mac(1) + b"\x08\x06" + struct.pack(">HHBBH", 1, 0x0800, 6, 4, 1) + bytes(20)
    dut.send(1, arp)
    assert dut.receive(0) == []
    for reason in (NO_ROUTE, TTL_EXPIRED, BAD_CHECKSUM, NOT_IPV4):
        assert dut.counter(DROPS, reason)[0] == 1, f"drop reason {reason}"
