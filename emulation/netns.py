"""Network namespaces and veth pairs for tests and benchmarks, cleaned up whatever happens.

The root namespace never gets an address or route: switch-side veth ends that
stay there carry no address and have IPv6 off (so the kernel sends nothing on
them); host-side ends live in a namespace we create and delete.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import socket
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

LOG = logging.getLogger(__name__)
T = TypeVar("T")

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
PREFIX = "p4ina-"


class NetnsError(RuntimeError):
    """An `ip` command failed; the message carries its stderr."""


def run_ip(*args: str, netns: str | None = None) -> str:
    cmd = (["ip", "netns", "exec", netns] if netns else []) + list(args)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise NetnsError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()}")
    return proc.stdout


def unique(stem: str, length: int = 15) -> str:
    """A short unique interface/namespace name (Linux interface names are at most 15 chars)."""
    return (stem + uuid.uuid4().hex)[:length]


def in_netns(netns: str | None, fn: Callable[[], T]) -> T:
    """Run fn in a thread that has entered `netns` (sockets it opens stay in that namespace)."""
    if netns is None:
        return fn()
    result: list[T] = []
    error: list[BaseException] = []

    def body() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            with open(f"/run/netns/{netns}") as fh:
                if libc.setns(fh.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns into {netns} failed")
            result.append(fn())
        except BaseException as ex:  # re-raised in the caller's thread
            error.append(ex)

    t = threading.Thread(target=body, name=f"setns-{netns}")
    t.start()
    t.join()
    if error:
        raise error[0]
    return result[0]


def packet_socket(iface: str, netns: str | None = None) -> socket.socket:
    """An AF_PACKET socket bound to iface (in netns), receiving every frame."""

    def make() -> socket.socket:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((iface, 0))
        return s

    return in_netns(netns, make)


@dataclass
class Namespace:
    """A namespace with veth pairs whose one end may stay in the root namespace."""

    name: str = field(default_factory=lambda: unique(PREFIX, 24))
    links: list[str] = field(default_factory=list)  # root-side ends we created

    def create(self) -> Namespace:
        run_ip("ip", "netns", "add", self.name)
        run_ip("ip", "link", "set", "lo", "up", netns=self.name)
        return self

    def veth(self, root_end: str, ns_end: str) -> None:
        """A veth pair: root_end stays in the root namespace (no address, IPv6 off), ns_end goes inside."""
        run_ip("ip", "link", "add", root_end, "type", "veth", "peer", "name", ns_end)
        self.links.append(root_end)
        run_ip("ip", "link", "set", ns_end, "netns", self.name)
        for netns, iface in ((None, root_end), (self.name, ns_end)):
            quiet_link(iface, netns)
            run_ip("ip", "link", "set", iface, "up", netns=netns)

    def delete(self) -> None:
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)

    def __enter__(self) -> Namespace:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.delete()


def quiet_link(iface: str, netns: str | None = None) -> None:
    """Stop the kernel from sending anything on iface by itself (IPv6 DAD, router solicitations)."""
    path = f"/proc/sys/net/ipv6/conf/{iface}/disable_ipv6"

    def write() -> None:
        if os.path.exists(path):
            with open(path, "w") as fh:
                fh.write("1")

    in_netns(netns, write)


@contextlib.contextmanager
def namespace() -> Iterator[Namespace]:
    ns = Namespace()
    try:
        yield ns.create()
    finally:
        ns.delete()
