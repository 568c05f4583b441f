"""Table modifies while traffic flows through the port loop: every packet saw the old or the new entry, whole.

The tiny program's `dmac` table gets one entry whose action writes two fields from two parameters
(`src_addr` from a 48-bit one, `ether_type` from a 16-bit one). A thread rewrites that entry as fast
as it can, generation after generation, each generation with parameters derived from its number; a
second thread reads the packet counter all the while. Frames sent through a veth pair go through the
port loop (the C one on the C engine: the packet never enters Python) and come back. A frame that
saw a torn entry would carry one generation's source address with another's ether type. The test
fails if any frame does, if frames saw generations out of order (the loop is one thread), if the
traffic did not overlap the modifies, or if a counter read ever had bytes that do not match its
packets (every frame has one length).
"""

from __future__ import annotations

import copy
import json
import socket
import threading
import time
from typing import Any

import pytest

from softswitch import ActionCall, Lpm, SoftSwitch, TableEntry
from softswitch.runtime.ports import ETH_P_ALL, PACKET_OUTGOING, PortIO
from tests.softswitch import fake_switch
from tests.softswitch.test_ports import HOST_END, SWITCH_END, in_netns, veth_ns

FRAMES = 20_000
FRAME_LEN = 64
DST = 0x02_00_00_00_00_02
MARK = b"HAMR"


def two_field_program() -> str:
    """tiny, with set_src(mac, tag) writing ethernet.src_addr = mac and ethernet.ether_type = tag."""
    doc: dict[str, Any] = copy.deepcopy(fake_switch.TINY_JSON_DOC)
    act = next(a for a in doc["actions"] if a["name"] == "MyIngress.set_src")
    act["runtime_data"].append({"name": "tag", "bitwidth": 16})
    act["primitives"].append(
        {
            "op": "assign",
            "parameters": [
                {"type": "field", "value": ["ethernet", "ether_type"]},
                {"type": "runtime_data", "value": 1},
            ],
        }
    )
    return json.dumps(doc)


def params(gen: int) -> tuple[int, int]:
    """Generation -> (mac, tag): the tag is a function of the mac's low 24 bits,
    so halves of two entries never agree."""
    low = gen & 0xFFFFFF
    return 0x0A_00_00_00_00_00 | low, (low * 40503 + 0x1234) & 0xFFFF


def entry(gen: int) -> TableEntry:
    return TableEntry((Lpm(DST, 48),), ActionCall("MyIngress.set_src", params(gen)))


def frame(seq: int) -> bytes:
    eth = DST.to_bytes(6, "big") + bytes.fromhex("020000000001") + b"\x88\xb5"
    body = MARK + seq.to_bytes(4, "big")
    return eth + body + bytes(FRAME_LEN - len(eth) - len(body))


@pytest.mark.netns
def test_every_packet_sees_a_whole_entry_while_it_is_modified(veth_ns: str, engine: str) -> None:
    sw = SoftSwitch(name=f"hammer-{engine}", engine=engine)
    sw.load_program(two_field_program())
    assert sw.engine == engine
    sw.table_insert("MyIngress.dmac", entry(0))
    with in_netns(veth_ns):
        io = PortIO(sw, {1: SWITCH_END}, name="hammer")
        io.start()
        host = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        host.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        host.bind((HOST_END, ETH_P_ALL))
    assert io.mode == engine
    received: list[tuple[int, int, int]] = []  # (seq, mac, tag)
    bad_reads: list[tuple[int, int]] = []
    stop = threading.Event()
    modifies = 0

    def receive() -> None:
        host.settimeout(0.2)
        idle = 0
        while idle < 10:
            try:
                data, addr = host.recvfrom(2048)
            except TimeoutError:
                idle += 1 if stop.is_set() else 0
                continue
            if addr[2] == PACKET_OUTGOING or data[14:18] != MARK:
                continue
            received.append(
                (
                    int.from_bytes(data[18:22], "big"),
                    int.from_bytes(data[6:12], "big"),
                    int.from_bytes(data[12:14], "big"),
                )
            )

    def modify() -> None:
        nonlocal modifies
        while not stop.is_set():
            modifies += 1
            sw.table_modify("MyIngress.dmac", entry(modifies))

    def read_counters() -> None:
        while not stop.is_set():
            packets, nbytes = sw.counter_read("MyIngress.pkts", 1)  # the default set_port(1) counts each frame
            if nbytes != packets * FRAME_LEN:
                bad_reads.append((packets, nbytes))
            time.sleep(0.001)

    threads = [threading.Thread(target=f, daemon=True) for f in (receive, modify, read_counters)]
    try:
        for t in threads:
            t.start()
        for seq in range(FRAMES):
            host.send(frame(seq))
            if seq % 64 == 63:
                time.sleep(0.0005)  # let the switch keep up (a lost frame proves nothing either way)
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(timeout=30)
    finally:
        stop.set()
        io.stop()
        host.close()

    assert len(received) > FRAMES // 2, f"only {len(received)} of {FRAMES} frames came back"
    generations = []
    for seq, mac, tag in received:
        gen = mac & 0xFFFFFF
        assert (mac, tag) == params(gen), f"frame {seq} saw a torn entry: src {mac:012x} with ether_type {tag:04x}"
        generations.append((seq, gen))
    generations.sort()
    order = [g for _, g in generations]
    assert all(a <= b for a, b in zip(order, order[1:])), "frames saw generations out of order"
    assert len(set(order)) >= 20 and modifies >= 20, (
        f"the traffic did not overlap the modifies ({len(set(order))} generations seen, {modifies} modifies)"
    )
    assert not bad_reads, f"torn counter reads (packets, bytes): {bad_reads[:5]}"
    packets, nbytes = sw.counter_read("MyIngress.pkts", 1)
    assert packets >= len(received) and nbytes == packets * FRAME_LEN
