"""Parser and checksum semantics of the embedded switch (simple_switch: errors go to ingress).

Program: tests/softswitch/programs/parse_csum.p4.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from softswitch import SoftSwitch

PROGRAMS = Path(__file__).parent / "programs"
REPORT = struct.Struct(">IBBB")
ETH, IPV4, UDP, TAIL = 1, 2, 4, 8


def load(name: str) -> SoftSwitch:
    sw = SoftSwitch(name=name)
    sw.load_program((PROGRAMS / f"{name}.json").read_bytes())
    return sw


def errors() -> dict[str, int]:
    """The program reports errors by name (P4 cannot cast an error to bits): see parse_csum.p4."""
    return {"NoError": 0, "PacketTooShort": 1, "BadIpVersion": 2}


def checksum(header: bytes) -> int:
    """RFC 1071, written independently of the switch's hashing module."""
    total = 0
    for i in range(0, len(header), 2):
        total += (header[i] << 8) | header[i + 1]
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4(ttl: int = 64, version: int = 4, proto: int = 17, good: bool = True) -> bytes:
    hdr = bytearray(
        struct.pack(">BBHHHBBH4s4s", (version << 4) | 5, 0, 28, 1, 0, ttl, proto, 0, b"\x0a\0\0\1", b"\x0a\0\0\2")
    )
    c = checksum(bytes(hdr))
    struct.pack_into(">H", hdr, 10, c if good else c ^ 0x5A5A)
    return bytes(hdr)


ETHERNET = bytes(6) + bytes.fromhex("020000000001") + b"\x08\x00"
UDPHDR = struct.pack(">HHHH", 1000, 2000, 8, 0)


def send(sw: SoftSwitch, pkt: bytes) -> tuple[dict[str, int], bytes]:
    out = sw.process_packet(1, pkt)
    assert len(out) == 1 and out[0][0] == 3
    data = out[0][1]
    err, cerr, valid, peek = REPORT.unpack_from(data)
    return {"err": err, "cksum": cerr, "valid": valid, "peek": peek}, data[REPORT.size :]


@pytest.fixture(scope="module")
def sw() -> SoftSwitch:
    return load("parse_csum")


def test_good_packet_ttl_decrement_and_checksum_update(sw: SoftSwitch) -> None:
    pkt = ETHERNET + ipv4(ttl=64) + UDPHDR + b"\x7ehello"
    rep, rest = send(sw, pkt)
    assert rep == {"err": 0, "cksum": 0, "valid": ETH | IPV4 | UDP | TAIL, "peek": 0x7E}
    ip = rest[14:34]
    assert ip[8] == 63
    assert checksum(ip) == 0  # the deparser's update_checksum made it valid again
    assert rest[34:] == UDPHDR + b"\x7ehello"


def test_bad_checksum_sets_checksum_error(sw: SoftSwitch) -> None:
    rep, rest = send(sw, ETHERNET + ipv4(good=False) + UDPHDR + b"\x00")
    assert rep["cksum"] == 1 and rep["err"] == 0
    assert checksum(rest[14:34]) == 0


def test_truncated_ethernet_leaves_everything_invalid(sw: SoftSwitch) -> None:
    pkt = ETHERNET[:10]
    rep, rest = send(sw, pkt)
    assert rep["err"] == errors()["PacketTooShort"]
    assert rep["valid"] == 0
    assert rest == pkt  # nothing was extracted, so everything is payload


def test_truncated_ipv4_keeps_ethernet(sw: SoftSwitch) -> None:
    pkt = ETHERNET + ipv4()[:12]
    rep, rest = send(sw, pkt)
    assert rep["err"] == errors()["PacketTooShort"]
    assert rep["valid"] == ETH
    assert rest == pkt


def test_custom_error_from_verify(sw: SoftSwitch) -> None:
    rep, _ = send(sw, ETHERNET + ipv4(version=6) + UDPHDR + b"\x00")
    assert rep["err"] == errors()["BadIpVersion"]
    assert rep["valid"] == ETH | IPV4  # the extract succeeded before verify failed


def test_lookahead_past_the_end_is_packet_too_short(sw: SoftSwitch) -> None:
    rep, rest = send(sw, ETHERNET + ipv4() + UDPHDR)
    assert rep["err"] == errors()["PacketTooShort"]
    assert rep["valid"] == ETH | IPV4 | UDP


def test_lookahead_select_without_match(sw: SoftSwitch) -> None:
    rep, rest = send(sw, ETHERNET + ipv4() + UDPHDR + b"\x01\x02")
    assert rep == {"err": 0, "cksum": 0, "valid": ETH | IPV4 | UDP, "peek": 1}
    assert rest.endswith(UDPHDR + b"\x01\x02")


@pytest.mark.parametrize("ether_type,tail", [(0x88AB, True), (0x8800, True), (0x8900, False), (0x0806, False)])
def test_masked_select(sw: SoftSwitch, ether_type: int, tail: bool) -> None:
    pkt = ETHERNET[:12] + struct.pack(">H", ether_type) + b"\x55rest"
    rep, rest = send(sw, pkt)
    assert rep["err"] == 0
    assert rep["valid"] == (ETH | TAIL if tail else ETH)
    assert rest == pkt


def test_non_ipv4_checksum_not_verified(sw: SoftSwitch) -> None:
    rep, _ = send(sw, ETHERNET[:12] + b"\x86\xdd" + bytes(40))
    assert rep["cksum"] == 0 and rep["valid"] == ETH


def test_verify_checksum_skips_an_invalid_target_as_bmv2_does() -> None:
    """Issue 14, item 6 said BMv2 verifies anyway; BMv2 1.15.5 skips (behavioral-model#377): so do we.

    Program: tests/softswitch/programs/csum_invalid.p4; its recorded BMv2 run is in tests/dataplane/recorded/.
    """
    sw = SoftSwitch()
    sw.load_program((PROGRAMS / "csum_invalid.json").read_bytes())
    assert sw.process_packet(0, bytes([0, 1, 2, 3])) == [(1, bytes([0, 0, 1, 2, 3]))]  # no checked_h: error 0
    wrong = bytes([0xFF, 1, 0, 0])
    assert sw.process_packet(0, wrong) == [(1, b"\x01" + wrong)]  # checked_h with a wrong checksum: error 1
    right = bytes([0xFF, 1]) + (~0xFF01 & 0xFFFF).to_bytes(2, "big")
    assert sw.process_packet(0, right) == [(1, b"\x00" + right)]
