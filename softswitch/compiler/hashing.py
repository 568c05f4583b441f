"""BMv2's hash algorithms (src/bm_sim/calculations.cpp), bit-exact, over a byte string.

Each function maps the bytes of a calculation's input (fields bit-packed, padded with
zero bits to a whole byte) to the unsigned integer BMv2 produces before any modulo.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from softswitch.compiler.ir import HashAlgo

HashFn = Callable[[bytes], int]


def _crc_table(poly: int, width: int, reflected: bool) -> tuple[int, ...]:
    table = []
    top = 1 << (width - 1)
    mask = (1 << width) - 1
    for byte in range(256):
        if reflected:
            rpoly = int(f"{poly:0{width}b}"[::-1], 2)
            rem = byte
            for _ in range(8):
                rem = (rem >> 1) ^ rpoly if rem & 1 else rem >> 1
        else:
            rem = byte << (width - 8)
            for _ in range(8):
                rem = ((rem << 1) ^ poly) & mask if rem & top else (rem << 1) & mask
        table.append(rem)
    return tuple(table)


_CRC16_ARC = _crc_table(0x8005, 16, reflected=True)
_CRC16_CCITT = _crc_table(0x1021, 16, reflected=False)


def crc16(data: bytes) -> int:
    """BMv2 'crc16' (= crc16_custom's default): CRC-16/ARC, poly 0x8005 reflected, init 0."""
    crc = 0
    table = _CRC16_ARC
    for b in data:
        crc = (crc >> 8) ^ table[(crc ^ b) & 0xFF]
    return crc


def crc_ccitt(data: bytes) -> int:
    """BMv2 'crcCCITT': CRC-16/CCITT-FALSE, poly 0x1021, init 0xFFFF, not reflected."""
    crc = 0xFFFF
    table = _CRC16_CCITT
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ table[((crc >> 8) ^ b) & 0xFF]
    return crc


def crc32(data: bytes) -> int:
    """BMv2 'crc32' (= crc32_custom's default): the zlib/Ethernet CRC-32."""
    return zlib.crc32(data)


def csum16(data: bytes) -> int:
    """BMv2 'csum16'/'cksum16': the RFC 1071 Internet checksum (odd tail padded with a zero byte)."""
    if len(data) & 1:
        data = data + b"\x00"
    x = int.from_bytes(data, "big")
    # 2**16 == 1 (mod 0xFFFF), so the ones' complement sum of the 16-bit words is x mod 0xFFFF,
    # except that a nonzero sum is never 0 in ones' complement (it is 0xFFFF).
    s = x % 0xFFFF
    if s == 0 and x:
        s = 0xFFFF
    return (~s) & 0xFFFF


def xor16(data: bytes) -> int:
    """BMv2 'xor16': XOR of the big-endian 16-bit words, a short tail padded with zero bytes."""
    if len(data) & 1:
        data = data + b"\x00"
    acc = 0
    for i in range(0, len(data), 2):
        acc ^= (data[i] << 8) | data[i + 1]
    return acc


def identity(data: bytes) -> int:
    """BMv2 'identity': the first (up to) 8 bytes as a big-endian integer."""
    return int.from_bytes(data[:8], "big")


ALGORITHMS: dict[str, HashFn] = {
    "crc16": crc16,
    "crc16_custom": crc16,
    "crc32": crc32,
    "crc32_custom": crc32,
    "crcCCITT": crc_ccitt,
    "csum16": csum16,
    "cksum16": csum16,
    "xor16": xor16,
    "identity": identity,
}

# The IR names algorithms by enum (lower.py maps the JSON's names onto it).
BY_ALGO: dict[HashAlgo, HashFn] = {
    HashAlgo.CRC16: crc16,
    HashAlgo.CRC32: crc32,
    HashAlgo.CRC_CCITT: crc_ccitt,
    HashAlgo.CSUM16: csum16,
    HashAlgo.XOR16: xor16,
    HashAlgo.IDENTITY: identity,
}
