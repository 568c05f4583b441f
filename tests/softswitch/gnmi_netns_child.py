"""Run inside a network namespace by test_gnmi_netlink: the switch's real rtnetlink feed served over gNMI on the
namespace's loopback, two controller-side subscribers, the peer's carrier dropped and restored; what each
subscriber saw is printed as one JSON object (the test asserts on it)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import threading
from pathlib import Path

from controller.portstatus import GnmiPortStatus
from softswitch.p4runtime.gnmi import GnmiService
from softswitch.p4runtime.portstatus import NetlinkPortStatus
from softswitch.p4runtime.server import P4RuntimeServer
from wireformat.portstatus import PortStatus

WAIT_S = 30.0  # a bound on waiting, not a measurement


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--iface", required=True)
    ap.add_argument("--peer", required=True)
    args = ap.parse_args()
    before = route_sockets()
    feed = NetlinkPortStatus(1, {args.port: args.iface}).start()
    server = P4RuntimeServer({}, "127.0.0.1:0", extra_handlers=[GnmiService(feed).handler()])
    server.start()
    seen: dict[str, list[PortStatus]] = {"a": [], "b": []}
    ends: list[str] = []
    cond = threading.Condition()

    def on_status(switch: str, st: PortStatus) -> None:
        with cond:
            seen[switch].append(st)
            cond.notify_all()

    def on_end(switch: str, _why: str) -> None:
        with cond:
            ends.append(switch)
            cond.notify_all()

    def wait(n: int) -> bool:
        with cond:
            return cond.wait_for(lambda: all(len(v) >= n for v in seen.values()), WAIT_S)

    subs = [GnmiPortStatus().subscribe(name, server.address, on_status, on_end) for name in seen]
    steps = [wait(1)]
    subprocess.run(["ip", "link", "set", args.peer, "down"], check=True)
    steps.append(wait(2))
    subprocess.run(["ip", "link", "set", args.peer, "up"], check=True)
    steps.append(wait(3))
    sockets = route_sockets() - before  # with two subscribers
    subs[1].cancel()
    feed.stop()  # the switch stops: the subscriber left is told
    with cond:
        cond.wait_for(lambda: bool(ends), WAIT_S)
    subs[0].cancel()
    server.stop(0)
    report = {
        "steps": steps,
        "seen": {k: [(s.port, s.interface, s.oper_status, s.timestamp_ns) for s in v] for k, v in seen.items()},
        "ends": ends,
        "netlink_sockets": sockets,
    }
    print(json.dumps(report))


def route_sockets() -> int:
    """How many NETLINK_ROUTE sockets this process holds (its socket fds' inodes in /proc/self/net/netlink)."""
    fds = Path("/proc/self/fd")
    mine = set()
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    rows = Path("/proc/self/net/netlink").read_text().splitlines()[1:]
    return sum(1 for r in rows if r.split()[1] == "0" and r.split()[-1] in mine)  # protocol 0: NETLINK_ROUTE


if __name__ == "__main__":
    main()
