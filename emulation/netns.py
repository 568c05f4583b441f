"""Network namespaces and veth links for tests and benchmarks, removed on exit.

Every name starts with ``p4ina-`` plus a random tag, so parallel runs do not
collide and a crashed run's leftovers are recognisable.  Processes started
here are killed by PID on exit, never by name.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

from emulation.commands import NetnsError, sh
from emulation.impairments import add_random_loss

LOG = logging.getLogger(__name__)


class NetnsLab:
    """A set of namespaces (and the veths inside them) owned by one test or benchmark."""

    def __init__(self, tag: str | None = None) -> None:
        self.tag = tag or uuid.uuid4().hex[:6]
        self.namespaces: list[str] = []
        self.procs: list[subprocess.Popen[str]] = []

    def ns(self, short: str) -> str:
        """Create namespace p4ina-<tag>-<short> with its loopback up; returns the full name."""
        name = f"p4ina-{self.tag}-{short}"
        sh("ip", "netns", "add", name)
        self.namespaces.append(name)
        self.run(name, "ip", "link", "set", "lo", "up")
        return name

    def run(self, ns: str, *cmd: str) -> str:
        return sh("ip", "netns", "exec", ns, *cmd)

    def veth(self, ns_a: str, name_a: str, ns_b: str, name_b: str, *, mtu: int = 1500) -> None:
        """A veth pair straight into two namespaces (names only need be unique within each)."""
        sh(
            "ip",
            "link",
            "add",
            name_a,
            "netns",
            ns_a,
            "mtu",
            str(mtu),
            "type",
            "veth",
            "peer",
            "name",
            name_b,
            "netns",
            ns_b,
            "mtu",
            str(mtu),
        )
        for ns, name in ((ns_a, name_a), (ns_b, name_b)):
            self.run(ns, "ip", "link", "set", name, "up")
            # No IPv6 chatter (router solicitations, DAD) on links that only carry our traffic.
            self.run(ns, "sysctl", "-qw", f"net.ipv6.conf.{name}.disable_ipv6=1")

    def veth_to_root(self, root_end: str, ns: str, ns_end: str) -> None:
        """A veth pair with one end left in the root namespace, for a switch process running there.

        The root end gets no address and has IPv6 off, so the root namespace
        neither routes to the namespace nor sends anything on the link itself.
        """
        sh("ip", "link", "add", root_end, "type", "veth", "peer", "name", ns_end, "netns", ns)
        sh("sysctl", "-qw", f"net.ipv6.conf.{root_end}.disable_ipv6=1")
        sh("ip", "link", "set", root_end, "up")
        self.run(ns, "sysctl", "-qw", f"net.ipv6.conf.{ns_end}.disable_ipv6=1")
        self.run(ns, "ip", "link", "set", ns_end, "up")

    def packet_socket(self, ns: str, dev: str) -> socket.socket:
        """An AF_PACKET socket on `dev` inside `ns`, opened from a thread that entered it
        (sockets keep their namespace)."""
        box: list[socket.socket | BaseException] = []

        def body() -> None:
            try:
                enter(ns)
                sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))  # ETH_P_ALL
                sock.bind((dev, 0))
                box.append(sock)
            except BaseException as ex:  # noqa: BLE001 - not handled here: re-raised in the caller's thread
                box.append(ex)

        t = threading.Thread(target=body, name=f"setns-{ns}")
        t.start()
        t.join()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]

    def address(self, ns: str, dev: str, cidr: str) -> None:
        self.run(ns, "ip", "addr", "add", cidr, "dev", dev)

    def induce_loss(self, ns: str, dev: str, fraction: float) -> str:
        """Drop `fraction` of the packets leaving `dev`, at random; returns the method used ("netem" or "tc-bpf")."""
        return add_random_loss(lambda *cmd: self.run(ns, *cmd), dev, fraction, f"lsink{len(self.namespaces)}{dev}"[:15])

    def mac(self, ns: str, dev: str) -> str:
        return self.run(ns, "cat", f"/sys/class/net/{dev}/address").strip()

    def popen(self, ns: str, cmd: Sequence[str], **kw: object) -> subprocess.Popen[str]:
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *cmd], text=True, **kw)  # type: ignore[call-overload]
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
        for ns in reversed(self.namespaces):
            try:
                sh("ip", "netns", "del", ns)
            except NetnsError as ex:
                LOG.warning("cleanup: %s", ex)
        self.namespaces.clear()

    def __enter__(self) -> NetnsLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def enter(ns: str) -> None:
    """Move the calling thread into a namespace (Python 3.11 has no os.setns)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(Path("/var/run/netns") / ns, os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            raise NetnsError(f"setns({ns}): {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
