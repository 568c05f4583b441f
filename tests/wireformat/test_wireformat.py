"""The one definition of the aggregation header, and everything derived from it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from wireformat import AGG, WireFormatError, docs, p4gen
from wireformat.format import DEFINITION, _parse

ROOT = Path(__file__).resolve().parents[2]

# A contribution header written out by hand from the field table, byte by byte.
GOLDEN_FIELDS = dict(
    op=1,
    flags=1,
    elem_type=2,
    shift=3,
    job_id=0x1234,
    shadow=1,
    slot=0x0567,
    contributor=0x89AB,
    exponent=-2,
    epoch=7,
    offset=0xDEADBEEF,
    next_exponent=-3,
    checksum=0x01020304,
)
GOLDEN_BYTES = bytes.fromhex(
    "21"  # version 2 | op 1
    "01"  # flags RETRANSMIT
    "02"  # elem_type INT8
    "03"  # shift 3
    "1234"  # job_id
    "8567"  # shadow 1 | slot 0x0567
    "89ab"  # contributor
    "fe"  # exponent -2
    "07"  # epoch
    "deadbeef"  # offset
    "fd"  # next_exponent -3
    "01020304"  # checksum
)


def test_header_is_21_bytes_and_byte_aligned() -> None:
    assert AGG.header_bits == 168
    assert AGG.header_bytes == 21


def test_golden_bytes() -> None:
    assert AGG.pack_header(**GOLDEN_FIELDS) == GOLDEN_BYTES
    assert AGG.unpack_header(GOLDEN_BYTES) == {"version": 2, **GOLDEN_FIELDS}


def test_round_trip_extremes() -> None:
    for pick in ("min_value", "max_value"):
        values = {f.name: getattr(f, pick) for f in AGG.fields}
        assert AGG.unpack_header(AGG.pack_header(**values)) == values


@pytest.mark.parametrize("field,value", [("slot", 1 << 15), ("exponent", 128), ("exponent", -129), ("op", -1)])
def test_out_of_range_values_are_refused(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=field):
        AGG.pack_header(**{field: value})


def test_unknown_field_is_refused() -> None:
    with pytest.raises(KeyError, match="bogus"):
        AGG.pack_header(bogus=1)


def test_short_buffer_is_refused() -> None:
    with pytest.raises(ValueError, match="21 bytes"):
        AGG.unpack_header(b"\x21" * 20)


def test_frame_sizes() -> None:
    assert AGG.num_lanes == 256
    assert AGG.frame_bytes(AGG.elem_types["ELEM_INT32"]) == 14 + 20 + 8 + 21 + 256 * 4 == 1087
    assert AGG.frame_bytes(AGG.elem_types["ELEM_INT16"]) == 14 + 20 + 8 + 21 + 256 * 2
    assert AGG.frame_bytes(AGG.elem_types["ELEM_INT8"]) == 14 + 20 + 8 + 21 + 256
    assert AGG.frame_bytes(AGG.elem_types["ELEM_NONE"]) == 14 + 20 + 8 + 21  # an exponent round


def test_lanes_dominate_the_frames() -> None:
    """The packet-size choice (issue: MTU-sized packets): int32 frames >= 90% lanes, int8 >= 75%."""
    share = {
        name: AGG.num_lanes * AGG.lane_bytes(code) / AGG.frame_bytes(code)
        for name, code in AGG.elem_types.items()
        if name != "ELEM_NONE"
    }
    assert share["ELEM_INT32"] >= 0.90 and share["ELEM_INT8"] >= 0.75, share
    assert AGG.frame_bytes(AGG.elem_types["ELEM_INT32"]) <= 1514  # one Ethernet MTU


def test_definition_errors_name_the_problem() -> None:
    raw = tomllib.loads(DEFINITION.read_text())
    raw["field"] = raw["field"][:-3]  # drop offset, next_exponent and checksum: 96 bits, still whole bytes
    assert _parse(raw).header_bytes == 12
    raw["field"][0]["bits"] = 3
    with pytest.raises(WireFormatError, match="whole number of bytes"):
        _parse(raw)
    del raw["constants"]["NUM_LANES"]
    with pytest.raises(WireFormatError, match="NUM_LANES"):
        _parse(raw)


def test_generated_p4_is_up_to_date() -> None:
    assert p4gen.stale_files() == [], "run `python -m wireformat.p4gen` (make p4)"


def test_generated_p4_header_matches_definition() -> None:
    text = (ROOT / "p4" / "generated" / "agg_header.p4").read_text()
    body = text.split("header agg_h {", 1)[1].split("}", 1)[0]
    fields = re.findall(r"(bit|int)<(\d+)> (\w+);", body)
    assert [(name, int(bits), kind == "int") for kind, bits, name in fields] == [
        (f.name, f.bits, f.signed) for f in AGG.fields
    ]
    assert f"UDP_PORT_AGG = {AGG.udp_port};" in text


def test_design_packet_table_is_up_to_date() -> None:
    text = docs.DESIGN.read_text()
    assert docs.splice(text, docs.render()) == text, "run `python -m wireformat.docs`"


def test_checksum_is_the_lanes_sum_plus_a_salt_of_the_packets_place() -> None:
    salt = AGG.salt(offset=512, job_id=3, epoch=9)
    assert salt == 512 ^ (3 << 16) ^ (9 << 8) ^ AGG.checksum_salt
    assert AGG.checksum(-5, 512, 3, 9) == (salt - 5) % 2**32
    # linear: the sum of two packets' checksums is the checksum of their summed lanes, plus one more salt
    a, b = AGG.checksum(100, 512, 3, 9), AGG.checksum(-40, 512, 3, 9)
    assert (a + b) % 2**32 == (AGG.checksum(60, 512, 3, 9) + salt) % 2**32
    assert AGG.salt(768, 3, 9) != salt and AGG.salt(512, 3, 10) != salt  # another chunk, another all-reduce
