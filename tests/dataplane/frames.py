"""Frames for the data-plane tests, built with struct from the wire format alone.

Deliberately independent of hosts/ (the code under test elsewhere), so these
tests are an outside oracle for both the switch and the host agents.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from wireformat import AGG
from wireformat.format import ETH_LEN, IPV4_LEN, UDP_LEN

INT32, INT16, INT8, NONE = (AGG.elem_types[k] for k in ("ELEM_INT32", "ELEM_INT16", "ELEM_INT8", "ELEM_NONE"))
CONTRIB, RESULT = AGG.ops["OP_CONTRIB"], AGG.ops["OP_RESULT"]
RETRANSMIT, OVERFLOW = AGG.flags["FLAG_RETRANSMIT"], AGG.flags["FLAG_OVERFLOW"]
AGG_MAC = AGG.agg_mac.to_bytes(6, "big")
AGG_IP = AGG.agg_ip.to_bytes(4, "big")


def host_mac(port: int) -> bytes:
    return bytes([0x02, 0, 0, 0, 0, port])


def host_ip(port: int) -> bytes:
    return bytes([10, 0, 0, port])


def ipv4_checksum(header: bytes) -> int:
    total = sum(struct.unpack(f">{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4(src: bytes, dst: bytes, payload_len: int, proto: int = 17, ttl: int = 64, bad_checksum: bool = False) -> bytes:
    hdr = struct.pack(">BBHHHBBH4s4s", 0x45, 0, IPV4_LEN + payload_len, 0, 0, ttl, proto, 0, src, dst)
    csum = ipv4_checksum(hdr) ^ (0xFFFF if bad_checksum else 0)
    return hdr[:10] + struct.pack(">H", csum) + hdr[12:]


def udp_frame(
    src_port: int,
    dst_mac: bytes,
    dst_ip: bytes,
    payload: bytes,
    *,
    sport: int,
    dport: int,
    src_mac: bytes | None = None,
    src_ip: bytes | None = None,
    ttl: int = 64,
    bad_checksum: bool = False,
) -> bytes:
    udp = struct.pack(">HHHH", sport, dport, UDP_LEN + len(payload), 0) + payload
    eth = dst_mac + (src_mac or host_mac(src_port)) + b"\x08\x00"
    return eth + ipv4(src_ip or host_ip(src_port), dst_ip, len(udp), ttl=ttl, bad_checksum=bad_checksum) + udp


def checksum(lane_sum: int, offset: int, job: int, epoch: int) -> int:
    """The agg header's checksum, written out from its definition: (lanes' sum + salt) mod 2^32."""
    salt = offset ^ (job << 16) ^ (epoch << 8) ^ AGG.checksum_salt
    return (lane_sum + salt) % 2**32


def contribution(
    port: int,
    values: list[int],
    *,
    job: int = 7,
    slot: int = 0,
    shadow: int = 0,
    epoch: int = 1,
    elem_type: int = INT32,
    exponent: int = 0,
    flags: int = 0,
    offset: int = 0,
    op: int = CONTRIB,
    trailer: bytes = b"",
    **overrides: int,
) -> bytes:
    """A contribution as the host behind `port` sends it (to the aggregation address)."""
    if len(values) != AGG.num_lanes:
        values = (list(values) * AGG.num_lanes)[: AGG.num_lanes]
    lane_type = elem_type if elem_type in AGG.elem_types.values() else INT32  # an invalid type still needs lanes
    lanes = b"" if lane_type == NONE else AGG.lane_struct(lane_type).pack(*values)  # an exponent round has none
    lane_sum = 0 if lane_type == NONE else sum(values)
    fields = dict(
        op=op,
        flags=flags,
        elem_type=elem_type,
        job_id=job,
        shadow=shadow,
        slot=slot,
        contributor=port,
        exponent=exponent,
        epoch=epoch,
        offset=offset,
        checksum=checksum(lane_sum, offset, job, epoch),
    )  # right unless a test passes another
    fields.update(overrides)
    payload = AGG.pack_header(**fields) + lanes + trailer
    return udp_frame(port, AGG_MAC, AGG_IP, payload, sport=AGG.udp_port, dport=AGG.udp_port)


@dataclass(frozen=True)
class AggPacket:
    eth_dst: bytes
    eth_src: bytes
    ip_dst: bytes
    ip_src: bytes
    ip_total_len: int
    ip_checksum_ok: bool
    udp_len: int
    header: dict[str, int]
    lanes: list[int]


def parse(frame: bytes) -> AggPacket:
    """Dissect an aggregation frame; raises ValueError when it is not one."""
    if len(frame) < ETH_LEN + IPV4_LEN + UDP_LEN + AGG.header_bytes or frame[12:14] != b"\x08\x00":
        raise ValueError(f"not an aggregation frame ({len(frame)} bytes)")
    ip = frame[ETH_LEN : ETH_LEN + IPV4_LEN]
    udp = frame[ETH_LEN + IPV4_LEN : ETH_LEN + IPV4_LEN + UDP_LEN]
    sport, dport, ulen, _ = struct.unpack(">HHHH", udp)
    if dport != AGG.udp_port:
        raise ValueError(f"UDP port {dport} is not the aggregation port")
    body = frame[ETH_LEN + IPV4_LEN + UDP_LEN :]
    header = AGG.unpack_header(body)
    lanes = []
    if header["elem_type"] != NONE:
        lanes_struct = AGG.lane_struct(header["elem_type"])
        lanes = list(lanes_struct.unpack(body[AGG.header_bytes : AGG.header_bytes + lanes_struct.size]))
    return AggPacket(
        eth_dst=frame[:6],
        eth_src=frame[6:12],
        ip_dst=ip[16:20],
        ip_src=ip[12:16],
        ip_total_len=struct.unpack(">H", ip[2:4])[0],
        ip_checksum_ok=ipv4_checksum(ip) == 0,
        udp_len=ulen,
        header=header,
        lanes=lanes,
    )
