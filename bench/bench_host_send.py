"""One worker's send rate: pre-built contribution frames through one AF_PACKET socket over a veth pair.

Also the receive side: how many result packets per second the worker's two
receive modes take in (a raw-socket blaster in the other namespace sends
faster than Python receives, so this is the receiver's ceiling).

The sender is the in-network worker's own transmit path (ContributionFrames +
RawSocketTransport.send) run in a namespace of its own; the other end of the
veth only counts what arrives (the frames are addressed to the aggregation
MAC, so its kernel drops them after counting).  Target: 100,000 packets/s.
Needs root (namespaces, raw sockets).
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time

import numpy as np

from bench.results import Figure, Figures
from wireformat import AGG

LOG = logging.getLogger(__name__)

PACKETS = 300_000
RECV_PACKETS = 200_000
CHUNKS = 4096  # frames built per "tensor" (1 Mi elements); the sender cycles through them


def send(iface: str, ip: str, packets: int) -> dict[str, float]:
    """Runs inside the sender's namespace."""
    from hosts.packets import ContributionFrames
    from hosts.transport import RawSocketTransport, interface_endpoint

    me = interface_endpoint(iface)
    lanes = np.random.default_rng(0).integers(-(2**20), 2**20, size=(CHUNKS, AGG.num_lanes))
    t0 = time.perf_counter()
    frames = ContributionFrames(me, np.full(CHUNKS, 10), job_id=1, rank=0, epoch=1, elem_type=0, slot_count=256)
    for k in range(CHUNKS):  # what the worker does per chunk once its exponent is agreed
        frames.fill(k, 10, lanes[k])
    build_s = time.perf_counter() - t0
    with RawSocketTransport(iface, ip) as tx:
        send_frame, frame = tx.send, frames.frame
        start = time.perf_counter()
        for k in range(packets):
            send_frame(frame(k % CHUNKS))
        elapsed = time.perf_counter() - start
    return {"pps": packets / elapsed, "elapsed_s": elapsed, "build_s": build_s, "frame_bytes": frames.frame_len}


def receive(iface: str, ip: str, mode: str) -> dict[str, float]:
    """Runs inside the receiver's namespace: take results until the line goes quiet."""
    from hosts.transport import RawSocketTransport

    with RawSocketTransport(iface, ip, recv_mode=mode) as rx:
        print("ready", flush=True)
        first = rx.recv(30.0)
        if first is None:
            return {"received": 0, "pps": 0.0}
        count, start, last = 1, time.perf_counter(), time.perf_counter()
        recv = rx.recv
        while recv(0.3) is not None:
            count += 1
        last = time.perf_counter() - 0.3
    return {"received": count, "pps": (count - 1) / max(last - start, 1e-9)}


def blast(iface: str, dst_mac: str, dst_ip: str, packets: int) -> None:
    """Runs inside the sender's namespace: result frames (int32) addressed to the receiver."""
    import socket

    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    from hosts.agg_layer import AggHeader
    from hosts.transport import interface_endpoint

    me = interface_endpoint(iface)
    frame = bytes(
        Ether(src=me.mac, dst=dst_mac)
        / IP(src=me.ip, dst=dst_ip, id=0)
        / UDP(sport=16711, dport=16711, chksum=0)
        / AggHeader(op=2, job_id=1, lanes=list(range(64)))
    )
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0) as s:
        s.bind((iface, 0))
        for _ in range(packets):
            s.send(frame)


def run(packets: int = PACKETS) -> Figures:
    from emulation.netns import NetnsLab

    with NetnsLab() as lab:
        a, b = lab.ns("snd"), lab.ns("rcv")
        lab.veth(a, "eth0", b, "eth0")
        lab.address(a, "eth0", "10.99.0.1/24")
        rx_path = "/sys/class/net/eth0/statistics/rx_packets"
        before = int(lab.run(b, "cat", rx_path))
        out = lab.run(a, sys.executable, "-m", "bench.bench_host_send", "--send", "eth0", "10.99.0.1", str(packets))
        result = json.loads(out.strip().splitlines()[-1])
        time.sleep(0.2)
        received = int(lab.run(b, "cat", rx_path)) - before
        lab.address(b, "eth0", "10.99.0.2/24")
        rx_rates = {}
        for mode in ("packet", "udp"):
            proc = lab.popen(
                b,
                [sys.executable, "-m", "bench.bench_host_send", "--receive", "eth0", "10.99.0.2", mode],
                stdout=subprocess.PIPE,
            )
            assert proc.stdout is not None
            proc.stdout.readline()  # "ready"
            lab.run(
                a,
                sys.executable,
                "-m",
                "bench.bench_host_send",
                "--blast",
                "eth0",
                lab.mac(b, "eth0"),
                "10.99.0.2",
                str(RECV_PACKETS),
            )
            rx_rates[mode] = json.loads(proc.communicate(timeout=60)[0].strip().splitlines()[-1])
    note = f"{packets} frames of {int(result['frame_bytes'])} B, one AF_PACKET socket, veth; target 100000"
    return {
        "host_send_pps": Figure(round(result["pps"]), "packets/s", note),
        "host_send_delivered_fraction": Figure(received / packets, "fraction", "frames counted at the veth peer"),
        "host_send_goodput": Figure(
            result["pps"] * AGG.num_lanes * 4 * 8 / 1e9, "Gbit/s", "int32 lane payload at that rate"
        ),
        "host_recv_pps_af_packet": Figure(
            round(rx_rates["packet"]["pps"]),
            "packets/s",
            f"results taken by the worker's AF_PACKET receive (default); "
            f"{rx_rates['packet']['received']}/{RECV_PACKETS} arrived",
        ),
        "host_recv_pps_udp_socket": Figure(
            round(rx_rates["udp"]["pps"]),
            "packets/s",
            f"results taken by a UDP socket (--recv-mode udp); {rx_rates['udp']['received']}/{RECV_PACKETS} arrived",
        ),
        "host_frames_build_rate": Figure(
            CHUNKS / result["build_s"], "frames/s", "numpy pre-building of all frames of a tensor"
        ),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--send", nargs=3, metavar=("IFACE", "IP", "PACKETS"), help="internal: run the sender here")
    ap.add_argument("--receive", nargs=3, metavar=("IFACE", "IP", "MODE"), help="internal: run a receiver here")
    ap.add_argument("--blast", nargs=4, metavar=("IFACE", "DST_MAC", "DST_IP", "PACKETS"), help="internal")
    args = ap.parse_args()
    if args.receive:
        print(json.dumps(receive(*args.receive)))
        return 0
    if args.blast:
        blast(*args.blast[:3], int(args.blast[3]))
        return 0
    if args.send:
        iface, ip, packets = args.send
        print(json.dumps(send(iface, ip, int(packets))))
        return 0
    logging.basicConfig(level=logging.INFO)
    for name, fig in run().items():
        print(f"{name}: {fig.value:,.3f} {fig.unit} ({fig.note})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
