"""Duplication and reordering on a link without netem (emulation.netns.set_bpf_dup, set_reorder): numbered UDP
datagrams across a shaped veth arrive more than once and out of order, and tc's counters say how many."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest

from emulation.impairments import set_blackhole, set_bpf_dup, set_reorder, tc_counts
from emulation.netns import NetnsLab, enter
from emulation.shaping import Shaping

pytestmark = pytest.mark.netns

N_PACKETS = 600
PORT = 40123
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)  # Linux: a receive buffer above rmem_max (needs root)


@pytest.fixture
def lab() -> Iterator[NetnsLab]:
    with NetnsLab() as lab:
        yield lab


def link(lab: NetnsLab) -> tuple[str, str, Callable[..., str]]:
    a, b = lab.ns("a"), lab.ns("b")
    lab.veth(a, "eth0", b, "eth0")
    lab.address(a, "eth0", "10.78.0.1/24")
    lab.address(b, "eth0", "10.78.0.2/24")

    def run(*cmd: str) -> str:
        return lab.run(a, *cmd)

    # a static neighbour: no ARP request leaves a's eth0, so the datagrams are the only frames the filters see
    # (a copied ARP request is counted as duplicated but arrives as no datagram: CI once saw 35 copies, 34 extra)
    mac = lab.run(b, "cat", "/sys/class/net/eth0/address").strip()
    run("ip", "neigh", "replace", "10.78.0.2", "lladdr", mac, "dev", "eth0", "nud", "permanent")
    Shaping(10e6).apply(run, "eth0")
    run("tc", "qdisc", "add", "dev", "eth0", "clsact")
    return a, b, run


def send_numbered(lab: NetnsLab, a: str, b: str) -> list[int]:
    """N_PACKETS datagrams 0, 1, ... from a to b, sent back to back; the sequence numbers b received, in order."""
    got: list[int] = []
    ready = threading.Event()

    def receive() -> None:
        enter(b)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
            # room for every datagram and copy even if this thread is late (root): a full receive buffer drops a
            # copy the filter counted (seen once in CI: 27 received of 28 made)
            rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
            rx.bind(("10.78.0.2", PORT))
            rx.settimeout(2.0)
            ready.set()
            try:
                while True:
                    got.append(struct.unpack("!I", rx.recv(2048)[:4])[0])
            except TimeoutError:
                pass

    def send() -> None:
        enter(a)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            for i in range(N_PACKETS):
                tx.sendto(struct.pack("!I", i) + bytes(996), ("10.78.0.2", PORT))

    rx_thread = threading.Thread(target=receive)
    rx_thread.start()
    assert ready.wait(10)
    tx_thread = threading.Thread(target=send)
    tx_thread.start()
    tx_thread.join()
    rx_thread.join()
    return got


def inversions(seq: list[int]) -> int:
    """Datagrams that arrived after one with a higher number (first copies only)."""
    seen: set[int] = set()
    top, out = -1, 0
    for s in seq:
        if s in seen:
            continue
        seen.add(s)
        if s < top:
            out += 1
        top = max(top, s)
    return out


def test_duplication_and_reordering_on_a_shaped_link(lab: NetnsLab) -> None:
    a, b, run = link(lab)
    set_bpf_dup(run, "eth0", 0.05)
    assert set_reorder(run, "eth0", 0.05, 10e6, 1000, split=False)
    got = send_numbered(lab, a, b)
    counts = tc_counts(run, "eth0")
    assert set(got) == set(range(N_PACKETS)), "a datagram was lost"  # 600 x 1 kB fit the 1000-packet queues
    dups = len(got) - N_PACKETS
    assert dups > 0 and counts["duplicated"] > 0, (dups, counts)
    assert dups == counts["duplicated"]
    assert counts["held"] > 0 and inversions(got) > 0, (counts, inversions(got))


def test_off_again_leaves_the_link_in_order(lab: NetnsLab) -> None:
    a, b, run = link(lab)
    shaped = run("tc", "class", "show", "dev", "eth0"), run("tc", "qdisc", "show", "dev", "eth0")
    set_bpf_dup(run, "eth0", 0.2)
    assert set_reorder(run, "eth0", 0.2, 10e6, 1000, split=False)
    assert set_reorder(run, "eth0", 0.1, 10e6, 1000, split=True)  # a new fraction on the split link
    set_bpf_dup(run, "eth0", 0.0)
    assert not set_reorder(run, "eth0", 0.0, 10e6, 1000, split=True)
    # the link is back as emulation.shaping made it: one HTB class and its pfifo
    assert (run("tc", "class", "show", "dev", "eth0"), run("tc", "qdisc", "show", "dev", "eth0")) == shaped
    got = send_numbered(lab, a, b)
    assert got == list(range(N_PACKETS))
    assert tc_counts(run, "eth0") == {"duplicated": 0, "held": 0}


def test_bad_fractions_are_refused(lab: NetnsLab) -> None:
    _, _, run = link(lab)
    with pytest.raises(ValueError, match="duplication fraction"):
        set_bpf_dup(run, "eth0", 1.5)
    with pytest.raises(ValueError, match="reorder fraction"):
        set_reorder(run, "eth0", -0.1, 10e6, 1000, split=False)


def test_a_copy_mirred_could_not_send_is_not_counted_as_duplicated() -> None:
    """tc's action line counts every mirror attempt; the ones over mirred's nesting limit are overlimits and
    never reach the link (a 60% fraction, copies of copies, measured 769 attempts, 42 overlimits, 727 copies)."""
    from emulation.impairments import _sent_line

    show = (
        "\taction order 1: mirred (Egress Mirror to device eth0) pipe\n\tAction statistics:\n"
        "\tSent 801298 bytes 769 pkt (dropped 0, overlimits 42 requeues 0) \n\tbacklog 0b 0p requeues 0\n"
    )
    assert _sent_line(show) == (769, 42)
    assert _sent_line(" Sent 1382734 bytes 1327 pkt (dropped 0, overlimits 1326 requeues 0)") == (1327, 1326)
    assert _sent_line("") == (0, 0)
    assert tc_counts(lambda *cmd: show if "filter" in cmd else "", "eth0") == {"duplicated": 727, "held": 0}


def test_a_gray_link_end_drops_every_frame_one_way_with_its_carrier_up(lab: NetnsLab) -> None:
    """set_blackhole: every datagram leaving a (egress) or arriving at b (ingress) vanishes, the carriers stay up;
    off again, every one arrives."""
    a, b, run = link(lab)
    run("ip", "link", "add", "sink0", "type", "veth", "peer", "name", "sink0p")

    def run_b(*cmd: str) -> str:
        return lab.run(b, *cmd)

    run_b("tc", "qdisc", "add", "dev", "eth0", "clsact")
    run_b("ip", "link", "add", "sink1", "type", "veth", "peer", "name", "sink1p")
    set_blackhole(run, "eth0", "egress", True, "sink0")
    assert send_numbered(lab, a, b) == []
    assert lab.run(a, "cat", "/sys/class/net/eth0/carrier").strip() == "1"
    set_blackhole(run, "eth0", "egress", False, "sink0")
    set_blackhole(run_b, "eth0", "ingress", True, "sink1")
    assert send_numbered(lab, a, b) == []
    set_blackhole(run_b, "eth0", "ingress", False, "sink1")
    assert send_numbered(lab, a, b) == list(range(N_PACKETS))
    with pytest.raises(ValueError, match="ingress or egress"):
        set_blackhole(run, "eth0", "both", True, "sink0")
