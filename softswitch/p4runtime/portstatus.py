"""The embedded switch's port status: each port's oper-status, published ON_CHANGE beside P4Runtime.

A switch ASIC's port reports its link state; a real switch publishes it over gNMI
(`/interfaces/interface/state/oper-status`, ON_CHANGE). Here the ports are Linux interfaces, so the kernel's
own link events are the source: one rtnetlink socket subscribed to RTMGRP_LINK tells this process the moment
an interface's operational state changes (a cable cut: the veth peer loses its carrier; a port taken down).
Nothing polls. The state is served on the P4Runtime server's own port (as Stratum serves P4Runtime and gNMI
on one port) by the JSON transport of wireformat.portstatus; a gNMI service can be added to the same server
and publish the same leaf.
"""

from __future__ import annotations

import logging
import queue
import socket
import struct
import threading
import time
from collections.abc import Iterator, Mapping
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


class PortStatusService:
    """Watches the switch's interfaces and serves their oper-status to subscribers (wireformat.portstatus)."""

    def __init__(self, device_id: int, ports: Mapping[int, str]) -> None:
        self.device_id = device_id
        self.ports = dict(ports)
        self._index = {socket.if_nametoindex(iface): port for port, iface in self.ports.items()}
        self._lock = threading.Lock()
        self._status: dict[int, PortStatus] = {p: self._read_sysfs(p) for p in self.ports}
        self._subscribers: list[queue.Queue[PortStatus | None]] = []
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def _read_sysfs(self, port: int) -> PortStatus:
        iface = self.ports[port]
        base = Path("/sys/class/net") / iface
        try:
            state = SYSFS_OPER.get((base / "operstate").read_text().strip(), 0)
            carrier = (base / "carrier").read_text().strip() == "1"
        except OSError:  # an interface that is down reads no carrier; one that is gone is not present
            state, carrier = (2, False) if base.exists() else (1, False)
        return self._status_of(port, oper_name(state, IFF_LOWER_UP if carrier else 0))

    def _status_of(self, port: int, oper: str) -> PortStatus:
        return PortStatus(self.device_id, port, self.ports[port], oper, time.time_ns())

    def start(self) -> PortStatusService:
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
                self._update(port, oper_name(state, flags))

    def _update(self, port: int, oper: str) -> None:
        with self._lock:
            if self._status[port].oper_status == oper:
                return  # ON_CHANGE: the kernel repeats a state on other changes (an address, a flag)
            st = self._status[port] = self._status_of(port, oper)
            subscribers = list(self._subscribers)
        LOG.info("port %d (%s) is %s", port, st.interface, oper)
        for q in subscribers:
            q.put(st)

    def status(self) -> dict[int, PortStatus]:
        with self._lock:
            return dict(self._status)

    def subscribe(self, _request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        """Every port's status, the sync marker, then every change, until the subscriber goes away."""
        q: queue.Queue[PortStatus | None] = queue.Queue()
        with self._lock:
            self._subscribers.append(q)
            current = [self._status[p] for p in sorted(self._status)]
        try:
            for st in current:
                yield st.encode()
            yield PortStatus(self.device_id, 0, "", "UP", time.time_ns(), sync=True).encode()
            while context.is_active() and not self._stop.is_set():
                try:
                    st = q.get(timeout=0.5)
                except queue.Empty:
                    continue
                if st is None:
                    return
                yield st.encode()
        finally:
            with self._lock:
                self._subscribers.remove(q)

    def handler(self) -> grpc.GenericRpcHandler:
        """The gRPC handler to add to the P4Runtime server (JSON bytes in and out: no protobuf)."""

        def raw(b: Any) -> Any:
            return b

        return grpc.method_handlers_generic_handler(
            SERVICE,
            {"Subscribe": grpc.unary_stream_rpc_method_handler(self.subscribe, raw, raw)},
        )

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            for q in self._subscribers:
                q.put(None)
        if self._sock is not None:
            self._sock.close()
        if self._thread is not None:
            self._thread.join(2)
