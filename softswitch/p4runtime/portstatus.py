"""The embedded switch's port status: each port's oper-status, published ON_CHANGE beside P4Runtime.

A switch ASIC's port reports its link state; a real switch publishes it over gNMI
(`/interfaces/interface/state/oper-status`, ON_CHANGE). Here the ports are Linux interfaces, so the kernel's
own link events are the source: one rtnetlink socket subscribed to RTMGRP_LINK tells this process the moment
an interface's operational state changes (a cable cut: the veth peer loses its carrier; a port taken down).
Nothing polls. `PortStatusFeed` holds each port's current value and its subscribers; `NetlinkPortStatus` is
the feed of a running switch, one netlink socket however many subscribe. Two services on the P4Runtime
server's own port (as Stratum serves P4Runtime and gNMI on one port) read that one feed: gNMI
(softswitch.p4runtime.gnmi, what a real switch speaks) and the older JSON stream of wireformat.portstatus
(`JsonPortStatusService`).
"""

from __future__ import annotations

import logging
import queue
import socket
import struct
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from wireformat.portstatus import SERVICE, PortStatus

LOG = logging.getLogger(__name__)

RTMGRP_LINK = 1
RTM_NEWLINK, RTM_DELLINK = 16, 17
IFLA_OPERSTATE = 16
IFF_LOWER_UP = 0x10000
_NLMSG = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_IFINFO = struct.Struct("=BxHiII")  # ifinfomsg: family, type, index, flags, change
_RTA = struct.Struct("=HH")  # rtattr: len, type
# RFC 2863 operational states as the kernel numbers them (IF_OPER_*), in OpenConfig's names
KERNEL_OPER = {
    0: "UNKNOWN",
    1: "NOT_PRESENT",
    2: "DOWN",
    3: "LOWER_LAYER_DOWN",
    4: "TESTING",
    5: "DORMANT",
    6: "UP",
}
SYSFS_OPER = {"unknown": 0, "notpresent": 1, "down": 2, "lowerlayerdown": 3, "testing": 4, "dormant": 5, "up": 6}


def oper_name(kernel_state: int, flags: int) -> str:
    """OpenConfig's oper-status of a kernel state; a driver that reports UNKNOWN (no RFC 2863 support) is taken
    at its carrier flag, as the kernel's documentation says to (Documentation/networking/operstates.rst)."""
    if kernel_state == 0:
        return "UP" if flags & IFF_LOWER_UP else "DOWN"
    return KERNEL_OPER.get(kernel_state, "UNKNOWN")


def parse_link_events(data: bytes) -> Iterator[tuple[int, int | None, int]]:
    """(ifindex, kernel oper state or None, flags) of every RTM_NEWLINK / RTM_DELLINK in one netlink read."""
    at = 0
    while at + _NLMSG.size <= len(data):
        length, kind, _flags, _seq, _pid = _NLMSG.unpack_from(data, at)
        if length < _NLMSG.size:
            return
        if kind in (RTM_NEWLINK, RTM_DELLINK) and length >= _NLMSG.size + _IFINFO.size:
            _family, _type, index, flags, _change = _IFINFO.unpack_from(data, at + _NLMSG.size)
            oper: int | None = None
            a = at + _NLMSG.size + _IFINFO.size
            end = at + length
            while a + _RTA.size <= end:
                rlen, rtype = _RTA.unpack_from(data, a)
                if rlen < _RTA.size:
                    break
                if rtype == IFLA_OPERSTATE and rlen >= _RTA.size + 1:
                    oper = data[a + _RTA.size]
                a += (rlen + 3) & ~3
            yield index, (1 if kind == RTM_DELLINK else oper), flags
        at += (length + 3) & ~3


class PortStatusFeed:
    """Each port's current oper-status and the queues of those listening for its changes (ON_CHANGE).

    What the port-status services serve; `set` publishes a change. A running switch's feed is
    NetlinkPortStatus (the kernel sets it); a test sets it by hand."""

    def __init__(self, device_id: int, ports: Mapping[int, str], initial: Mapping[int, str] | None = None) -> None:
        """ports: P4 port -> interface name; initial: P4 port -> oper-status (UNKNOWN where not given)."""
        self.device_id = device_id
        self.ports = dict(ports)
        self._lock = threading.Lock()
        given = initial or {}
        self._status: dict[int, PortStatus] = {p: self._status_of(p, given.get(p, "UNKNOWN")) for p in self.ports}
        self._listeners: list[queue.Queue[PortStatus | None]] = []
        self._stop = threading.Event()

    def _status_of(self, port: int, oper: str) -> PortStatus:
        return PortStatus(self.device_id, port, self.ports[port], oper, time.time_ns())

    def set(self, port: int, oper: str) -> None:
        """Port `port` is now `oper`: tell every listener, unless it already was (ON_CHANGE)."""
        with self._lock:
            if self._status[port].oper_status == oper:
                return  # the kernel repeats a state on other changes (an address, a flag)
            st = self._status[port] = self._status_of(port, oper)
            listeners = list(self._listeners)
        LOG.info("port %d (%s) is %s", port, st.interface, oper)
        for q in listeners:
            q.put(st)

    def status(self) -> dict[int, PortStatus]:
        with self._lock:
            return dict(self._status)

    @contextmanager
    def listen(self) -> Iterator[tuple[list[PortStatus], queue.Queue[PortStatus | None]]]:
        """Every port's current status (by port) and a queue of each change from then on; None on the queue
        ends it (the feed stopped, or the holder put it there). Taken under one lock: no change falls between."""
        q: queue.Queue[PortStatus | None] = queue.Queue()
        with self._lock:
            self._listeners.append(q)
            current = [self._status[p] for p in sorted(self._status)]
        if self._stop.is_set():
            q.put(None)
        try:
            yield current, q
        finally:
            with self._lock:
                self._listeners.remove(q)

    def stop(self) -> None:
        """End every listener's stream."""
        self._stop.set()
        with self._lock:
            for q in self._listeners:
                q.put(None)


class NetlinkPortStatus(PortStatusFeed):
    """The feed of a switch's Linux interfaces: read from sysfs at start, then set by the kernel's link events."""

    def __init__(self, device_id: int, ports: Mapping[int, str]) -> None:
        super().__init__(device_id, ports)
        self._index = {socket.if_nametoindex(iface): port for port, iface in self.ports.items()}
        self._status = {p: self._read_sysfs(p) for p in self.ports}
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def _read_sysfs(self, port: int) -> PortStatus:
        iface = self.ports[port]
        base = Path("/sys/class/net") / iface
        try:
            state = SYSFS_OPER.get((base / "operstate").read_text().strip(), 0)
            carrier = (base / "carrier").read_text().strip() == "1"
        except OSError:  # an interface that is down reads no carrier; one that is gone is not present
            state, carrier = (2, False) if base.exists() else (1, False)
        return self._status_of(port, oper_name(state, IFF_LOWER_UP if carrier else 0))

    def start(self) -> NetlinkPortStatus:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        sock.bind((0, RTMGRP_LINK))
        sock.settimeout(0.5)  # to notice stop()
        self._sock = sock
        with self._lock:  # what changed between the first read and the subscription
            self._status = {p: self._read_sysfs(p) for p in self.ports}
        self._thread = threading.Thread(target=self._watch, name="port-status", daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                if not self._stop.is_set():
                    LOG.exception("port status: the netlink socket failed; ports are no longer watched")
                return
            for index, state, flags in parse_link_events(data):
                port = self._index.get(index)
                if port is None or state is None:
                    continue
                self.set(port, oper_name(state, flags))

    def stop(self) -> None:
        super().stop()
        if self._sock is not None:
            self._sock.close()
        if self._thread is not None:
            self._thread.join(2)


class JsonPortStatusService:
    """The feed served as wireformat.portstatus's JSON stream (the transport before gNMI; controller.portstatus's
    JsonPortStatus reads it)."""

    def __init__(self, feed: PortStatusFeed) -> None:
        self.feed = feed

    def subscribe(self, _request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        """Every port's status, the sync marker, then every change, until the subscriber goes away."""
        with self.feed.listen() as (current, q):
            if not context.add_callback(lambda: q.put(None)):  # the subscriber left: stop waiting at once
                return
            for st in current:
                yield st.encode()
            yield PortStatus(self.feed.device_id, 0, "", "UP", time.time_ns(), sync=True).encode()
            while (st_or_end := q.get()) is not None:
                yield st_or_end.encode()

    def handler(self) -> grpc.GenericRpcHandler:
        """The gRPC handler to add to the P4Runtime server (JSON bytes in and out: no protobuf)."""

        def raw(b: Any) -> Any:
            return b

        return grpc.method_handlers_generic_handler(
            SERVICE,
            {"Subscribe": grpc.unary_stream_rpc_method_handler(self.subscribe, raw, raw)},
        )
