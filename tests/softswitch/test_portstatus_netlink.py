"""Reading the kernel's link events (softswitch.p4runtime.portstatus): a golden RTM_NEWLINK message as the kernel
sends it, and the oper-status names of the kernel's states (no root: the parser alone)."""

from __future__ import annotations

import struct

from softswitch.p4runtime.portstatus import (
    IFF_LOWER_UP,
    IFLA_OPERSTATE,
    RTM_DELLINK,
    RTM_NEWLINK,
    oper_name,
    parse_link_events,
)

IFLA_IFNAME = 3


def link_message(kind: int, index: int, flags: int, oper: int | None) -> bytes:
    attrs = b""
    name = b"p4ina0a-a1-2\0"
    attrs += struct.pack("=HH", 4 + len(name), IFLA_IFNAME) + name + b"\0" * (-(4 + len(name)) % 4)
    if oper is not None:
        attrs += struct.pack("=HHB", 5, IFLA_OPERSTATE, oper) + b"\0" * 3
    body = struct.pack("=BxHiII", 0, 1, index, flags, 0) + attrs
    return struct.pack("=IHHII", 16 + len(body), kind, 0, 0, 0) + body


def test_link_events_give_index_state_and_flags() -> None:
    data = link_message(RTM_NEWLINK, 7, 0x1003, 3) + link_message(RTM_NEWLINK, 9, 0x11043, 6)
    data += link_message(RTM_DELLINK, 4, 0, None) + struct.pack("=IHHII", 20, 24, 0, 0, 0) + b"\0" * 4  # a route
    assert list(parse_link_events(data)) == [(7, 3, 0x1003), (9, 6, 0x11043), (4, 1, 0)]


def test_kernel_states_in_openconfig_names() -> None:
    assert oper_name(6, 0) == "UP" and oper_name(2, 0) == "DOWN" and oper_name(3, 0) == "LOWER_LAYER_DOWN"
    # a driver without RFC 2863 states reports UNKNOWN: its carrier decides
    assert oper_name(0, IFF_LOWER_UP) == "UP" and oper_name(0, 0) == "DOWN"
