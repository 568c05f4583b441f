"""The Scapy layer agrees with wireformat/agg_header.toml and with hand-written bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from hosts.agg_layer import AggHeader, SignedBitField
from hosts.packets import AGG_IP, AGG_MAC
from wireformat import AGG

ELEM = AGG.elem_types


def ipv4_checksum(header: bytes) -> int:
    """RFC 1071, written out here so the test does not trust Scapy's."""
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def test_one_scapy_field_per_toml_field_in_order() -> None:
    fields = AggHeader.fields_desc
    assert [f.name for f in fields] == [f.name for f in AGG.fields] + ["lanes"]
    for spec, field in zip(AGG.fields, fields):
        assert field.size == spec.bits, spec.name
        assert isinstance(field, SignedBitField) == spec.signed, spec.name


# Hand-derived: version 2 | op 1 -> 0x21; flags RETRANSMIT; elem int32; shift 0; job 0x0102;
# shadow 1 + slot 5 -> 0x8005; contributor 3; exponent -3 -> 0xfd; epoch 7; offset 320; next exponent -4 -> 0xfc;
# checksum 0xa1b2c3d4.
GOLDEN_HEADER = bytes.fromhex("21 01 00 00 0102 8005 0003 fd 07 00000140 fc a1b2c3d4")
GOLDEN_PREFIX = bytes.fromhex(
    "027034696e61 020000000001 0800"  # Ethernet: AGG_MAC <- host, IPv4
    "4500 0431 0000 0000 4011 61be 0a000001 0afffffe"  # IPv4: len 1073, id 0, TTL 64, UDP, checksum
    "4147 4147 041d 0000"  # UDP 16711 -> 16711, length 1053, checksum 0
)


def golden_packet() -> Ether:
    return (
        Ether(src="02:00:00:00:00:01", dst=AGG_MAC)
        / IP(src="10.0.0.1", dst=AGG_IP, id=0, ttl=64)
        / UDP(sport=AGG.udp_port, dport=AGG.udp_port, chksum=0)
        / AggHeader(
            flags="retransmit",
            job_id=0x0102,
            shadow=1,
            slot=5,
            contributor=3,
            exponent=-3,
            epoch=7,
            offset=320,
            next_exponent=-4,
            checksum=0xA1B2C3D4,
            lanes=[1, -1],
        )
    )


def test_golden_bytes_of_a_contribution() -> None:
    raw = bytes(golden_packet())
    lanes = struct.pack(">2i", 1, -1) + bytes(4 * (AGG.num_lanes - 2))
    assert raw == GOLDEN_PREFIX + GOLDEN_HEADER + lanes
    assert len(raw) == AGG.frame_bytes(ELEM["ELEM_INT32"]) == 1087
    assert ipv4_checksum(raw[14:34]) == 0


def test_golden_bytes_dissect_back() -> None:
    pkt = Ether(GOLDEN_PREFIX + GOLDEN_HEADER + struct.pack(">2i", 1, -1) + bytes(4 * (AGG.num_lanes - 2)))
    agg = pkt[AggHeader]
    assert (agg.version, agg.op, int(agg.flags), agg.job_id, agg.shadow, agg.slot) == (2, 1, 1, 0x0102, 1, 5)
    assert (agg.contributor, agg.exponent, agg.epoch, agg.offset, agg.next_exponent) == (3, -3, 7, 320, -4)
    assert agg.lanes[:3] == [1, -1, 0] and len(agg.lanes) == AGG.num_lanes
    assert "Agg CONTRIB job=258 slot=5/1 off=320" in pkt.summary()
    assert "retransmit" in pkt.summary()


def test_header_bytes_equal_wireformat_pack() -> None:
    values = dict(
        op=2,
        flags=3,
        elem_type=1,
        shift=9,
        job_id=65535,
        shadow=1,
        slot=32767,
        contributor=65535,
        exponent=-128,
        epoch=255,
        offset=2**32 - 1,
        next_exponent=127,
        checksum=2**32 - 1,
    )
    assert bytes(AggHeader(**values, lanes=[]))[: AGG.header_bytes] == AGG.pack_header(**values)


@settings(max_examples=200, deadline=None)
@given(
    elem=st.sampled_from(sorted(ELEM.values())),
    data=st.data(),
)
def test_round_trip(elem: int, data: st.DataObject) -> None:
    values = {
        f.name: data.draw(st.integers(f.min_value, f.max_value), label=f.name)
        for f in AGG.fields
        if f.name not in ("version", "elem_type")
    }
    width = AGG.lane_bytes(elem) * 8
    count = AGG.num_lanes if width else 0  # ELEM_NONE (an exponent round) has no lanes
    lanes = data.draw(
        st.lists(
            st.integers(-(2 ** (width - 1)), 2 ** (width - 1) - 1) if width else st.just(0),
            min_size=count,
            max_size=count,
        )
    )
    pkt = AggHeader(elem_type=elem, lanes=lanes, **values)
    raw = bytes(pkt)
    assert len(raw) == AGG.payload_bytes(elem)
    assert raw[: AGG.header_bytes] == AGG.pack_header(elem_type=elem, **values)
    back = AggHeader(raw)
    assert back.lanes == lanes
    assert AGG.unpack_header(raw) == {f.name: int(back.getfieldval(f.name)) for f in AGG.fields}


@pytest.mark.parametrize(
    ("elem", "fmt"),
    [("ELEM_INT32", f">{AGG.num_lanes}i"), ("ELEM_INT16", f">{AGG.num_lanes}h"), ("ELEM_INT8", f">{AGG.num_lanes}b")],
)
def test_dissects_switch_results_of_each_width(elem: str, fmt: str) -> None:
    code = ELEM[elem]
    header = AGG.pack_header(
        op=AGG.ops["OP_RESULT"],
        elem_type=code,
        shift=4,
        job_id=9,
        slot=2,
        exponent=20,
        flags=AGG.flags["FLAG_OVERFLOW"],
    )
    lanes = [(-1) ** i * (i % 128) for i in range(AGG.num_lanes)]
    payload = header + struct.pack(fmt, *lanes)
    frame = bytes(
        Ether(dst="02:00:00:00:00:01")
        / IP(src=AGG_IP, dst="10.0.0.1")
        / UDP(sport=AGG.udp_port, dport=AGG.udp_port, chksum=0)
        / Raw(payload)
    )
    agg = Ether(frame)[AggHeader]
    assert agg.lanes == lanes
    assert agg.op == AGG.ops["OP_RESULT"] and agg.shift == 4
    assert len(frame) == AGG.frame_bytes(code)
    summary = agg.summary()
    assert "RESULT" in summary and ">>4" in summary and "overflow" in summary


def test_bound_to_the_aggregation_port_either_way() -> None:
    payload = bytes(AggHeader(job_id=4))
    assert UDP(bytes(UDP(sport=1234, dport=AGG.udp_port) / payload)).haslayer(AggHeader)
    assert UDP(bytes(UDP(sport=AGG.udp_port, dport=1234) / payload)).haslayer(AggHeader)
    assert not UDP(bytes(UDP(sport=1234, dport=4321) / payload)).haslayer(AggHeader)


def test_short_lanes_are_padded_and_bad_lanes_refused() -> None:
    assert AggHeader(bytes(AggHeader(lanes=[5]))).lanes == [5] + [0] * (AGG.num_lanes - 1)
    with pytest.raises(ValueError, match="does not fit"):
        bytes(AggHeader(elem_type=ELEM["ELEM_INT8"], lanes=[128]))
    with pytest.raises(ValueError, match="lanes given"):
        bytes(AggHeader(lanes=[0] * (AGG.num_lanes + 1)))


def test_exponent_round_has_no_lanes() -> None:
    raw = bytes(AggHeader(elem_type=ELEM["ELEM_NONE"], next_exponent=-5))
    assert len(raw) == AGG.header_bytes == AGG.payload_bytes(ELEM["ELEM_NONE"])
    back = AggHeader(raw)
    assert back.lanes == [] and back.next_exponent == -5 and "none" in back.summary()
    with pytest.raises(ValueError, match="ELEM_NONE"):
        bytes(AggHeader(elem_type=ELEM["ELEM_NONE"], lanes=[1]))


def test_truncated_or_unknown_payload_still_dissects() -> None:
    raw = bytes(AggHeader(lanes=[7] * AGG.num_lanes))
    short = AggHeader(raw[: AGG.header_bytes + 10])
    assert short.lanes == [7, 7]  # two whole int32 lanes, the rest left as payload
    unknown = AggHeader(AGG.pack_header(elem_type=9) + b"\x01\x02")
    assert unknown.lanes == [] and bytes(unknown.payload) == b"\x01\x02"
