"""v1model hash() on the embedded switch against independent reference implementations.

Program: tests/softswitch/programs/hash.p4.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from softswitch import SoftSwitch
from softswitch.compiler import hashing

PROGRAMS = Path(__file__).parent / "programs"
H = struct.Struct(">IHBBIHHHIHHI")


def load(name: str) -> SoftSwitch:
    sw = SoftSwitch(name=name)
    sw.load_program((PROGRAMS / f"{name}.json").read_bytes())
    return sw


def crc16_arc_bitwise(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0xA001 if crc & 1 else crc >> 1
    return crc


def csum16_ref(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f">{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def xor16_ref(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    out = 0
    for (w,) in struct.iter_unpack(">H", data):
        out ^= w
    return out


def test_reference_vectors() -> None:
    check = b"123456789"
    assert hashing.crc16(check) == 0xBB3D  # CRC-16/ARC check value
    assert hashing.crc32(check) == 0xCBF43926
    assert hashing.crc_ccitt(check) == 0x29B1  # CRC-16/CCITT-FALSE
    assert hashing.csum16(bytes.fromhex("4500007300004000401100000a0000010a000002")) == csum16_ref(
        bytes.fromhex("4500007300004000401100000a0000010a000002")
    )
    assert hashing.csum16(b"") == 0xFFFF
    assert hashing.identity(b"\x01\x02\x03") == 0x010203


@pytest.fixture(scope="module")
def sw() -> SoftSwitch:
    return load("hash")


@settings(max_examples=100, deadline=None)
@given(x=st.integers(0, 0xFFFFFFFF), y=st.integers(0, 0xFFFF), z=st.integers(0, 0xFF), n=st.integers(0, 0xFF))
def test_hash_outputs(sw: SoftSwitch, x: int, y: int, z: int, n: int) -> None:
    out = sw.process_packet(0, H.pack(x, y, z, n, 0, 0, 0, 0, 0, 0, 0, 0))
    assert len(out) == 1 and out[0][0] == 4
    (_, _, _, _, crc32_out, crc16_out, csum16_out, xor16_out, identity_out, mod_out, crc16c_out, crc32c_out) = H.unpack(
        out[0][1]
    )
    data = struct.pack(">IHB", x, y, z)
    assert crc32_out == zlib.crc32(data)
    assert crc16_out == crc16_arc_bitwise(data)
    assert csum16_out == csum16_ref(data)
    assert xor16_out == xor16_ref(data)
    assert identity_out == (n << 16) | y  # n1, n2 (4 bits each) and y: 24 bits, bit-packed
    assert mod_out == zlib.crc32(struct.pack(">I", x)) % 7 + 5
    assert crc16c_out == crc16_arc_bitwise(bytes([z]))
    assert crc32c_out == zlib.crc32(struct.pack(">BH", z, y))
    assert sw.stats["errors"] == 0
