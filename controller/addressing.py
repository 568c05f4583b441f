"""Host addresses: IPv4 10.<a>.<b>.<n+2>, MAC 02:00 + the IPv4 bytes (locally administered).

Deriving the MAC from the IP means static ARP tables and the egress `host_port`
rewrite need no lookup table of their own.
"""

from __future__ import annotations

import ipaddress


def host_ip(a: int, b: int, n: int) -> str:
    """10.a.b.(n+2): .0 is the network, .1 reserved for a gateway nobody uses."""
    if not (0 <= a <= 254 and 0 <= b <= 255 and 0 <= n <= 252):
        raise ValueError(f"host address 10.{a}.{b}.{n + 2} out of range")
    return f"10.{a}.{b}.{n + 2}"


def mac_for_ip(ip: str) -> str:
    raw = ipaddress.IPv4Address(ip).packed
    return "02:00:" + ":".join(f"{b:02x}" for b in raw)


def ip_to_int(ip: str) -> int:
    return int(ipaddress.IPv4Address(ip))


def int_to_ip(value: int) -> str:
    return str(ipaddress.IPv4Address(value))


def mac_to_int(mac: str) -> int:
    parts = mac.split(":")
    if len(parts) != 6:
        raise ValueError(f"MAC {mac!r} does not have 6 octets")
    return int("".join(f"{int(p, 16):02x}" for p in parts), 16)


def int_to_mac(value: int) -> str:
    return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))
