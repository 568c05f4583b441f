"""Pre-built frames are byte for byte what Scapy builds from the layer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from hosts.agg_layer import AggHeader
from hosts.packets import AGG_IP, AGG_MAC, ContributionFrames, Endpoint, ResultDecoder, frame_prefix, pack_headers
from wireformat import AGG

ME = Endpoint("02:00:00:00:00:07", "10.0.1.7")


def scapy_frame(elem: int, **fields: object) -> bytes:
    return bytes(
        Ether(src=ME.mac, dst=AGG_MAC)
        / IP(src=ME.ip, dst=AGG_IP, id=0, ttl=64)
        / UDP(sport=AGG.udp_port, dport=AGG.udp_port, chksum=0)
        / AggHeader(elem_type=elem, **fields)
    )


LANE_ELEMS = sorted(code for name, code in AGG.elem_types.items() if name != "ELEM_NONE")
NONE = AGG.elem_types["ELEM_NONE"]


@pytest.mark.parametrize("elem", LANE_ELEMS)
def test_every_row_equals_scapy(elem: int) -> None:
    """Exponent rounds, then chunk k in slot k % 3, round 1 + k // 3, proposing the exponent of chunk k + 3."""
    bits = AGG.lane_bytes(elem) * 8
    rng = np.random.default_rng(elem)
    lanes = rng.integers(-(2 ** (bits - 1)), 2 ** (bits - 1), size=(7, AGG.num_lanes))
    proposals = rng.integers(-128, 128, size=7)
    frames = ContributionFrames(ME, proposals, job_id=12, rank=3, epoch=200, elem_type=elem, slot_count=3)
    assert len(frames) == 7 and frames.n_slots == 3
    common = dict(job_id=12, contributor=3, epoch=200)
    for s in range(3):
        salt = AGG.salt(s * AGG.num_lanes, 12, 200)  # an exponent round's checksum: no lanes, the salt alone
        expect = scapy_frame(
            NONE, slot=s, shadow=0, offset=s * AGG.num_lanes, next_exponent=int(proposals[s]), checksum=salt, **common
        )
        assert bytes(frames.exponent_frame(s)) == expect, s
        assert frames.exponent_retransmission(s) == scapy_frame(
            NONE,
            flags="retransmit",
            slot=s,
            shadow=0,
            offset=s * AGG.num_lanes,
            next_exponent=int(proposals[s]),
            checksum=salt,
            **common,
        )
    for k in range(7):
        frames.fill(k, -7 + k, lanes[k])
        nxt = int(proposals[k + 3]) if k + 3 < 7 else AGG.field("next_exponent").max_value
        checksum = AGG.checksum(int(lanes[k].sum()), k * AGG.num_lanes, 12, 200)
        fields = dict(
            exponent=-7 + k,
            slot=k % 3,
            shadow=(1 + k // 3) % 2,
            offset=k * AGG.num_lanes,
            next_exponent=nxt,
            checksum=checksum,
            lanes=[int(v) for v in lanes[k]],
            **common,
        )
        assert bytes(frames.frame(k)) == scapy_frame(elem, **fields), k
        assert frames.retransmission(k) == scapy_frame(elem, flags="retransmit", **fields)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_pack_headers_equals_wireformat(data: st.DataObject) -> None:
    values = {f.name: data.draw(st.integers(f.min_value, f.max_value), label=f.name) for f in AGG.fields}
    assert pack_headers(1, **values)[0].tobytes() == AGG.pack_header(**values)
    decoded = ResultDecoder().header(AGG.pack_header(**values))
    assert decoded == {k: values[k] for k in decoded}


def test_pack_headers_refuses_out_of_range() -> None:
    with pytest.raises(ValueError, match="slot out of range"):
        pack_headers(2, slot=np.array([0, 2**15]))
    with pytest.raises(KeyError, match="nope"):
        pack_headers(1, nope=1)


def test_result_lanes_decode_by_width() -> None:
    dec = ResultDecoder()
    for elem, fmt in ((0, ">i4"), (1, ">i2"), (2, "i1")):
        lanes = np.arange(AGG.num_lanes) % 128 - 64
        payload = AGG.pack_header(elem_type=elem) + lanes.astype(fmt).tobytes()
        assert dec.lanes(payload, elem).tolist() == lanes.tolist()
        with pytest.raises(ValueError, match="needs"):
            dec.lanes(payload[:-1], elem)


@pytest.mark.parametrize("elem", sorted(AGG.elem_types.values()))
def test_prefix_equals_scapy(elem: int) -> None:
    assert frame_prefix(ME, elem) == scapy_frame(elem)[:42]


def test_prefix_refuses_bad_addresses() -> None:
    with pytest.raises(ValueError, match="bad"):
        frame_prefix(Endpoint("02:00:00:00:00", "10.0.0.1"), 0)
    with pytest.raises(ValueError, match="bad"):
        frame_prefix(Endpoint("02:00:00:00:00:01", "10.0.0.300"), 0)
