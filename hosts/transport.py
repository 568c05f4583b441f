"""How a worker's contributions leave and its results arrive on a real interface.

Contributions go out as whole pre-built Ethernet frames through one AF_PACKET
socket (they are addressed to the aggregation address, which the kernel has no
route for).  Results come back addressed to the host itself.  Two ways to take
them in (``recv_mode``):

- "packet" (default): an AF_PACKET socket on the interface with a classic BPF
  filter for UDP to UDP_PORT_AGG.  It does not depend on the host's IP stack
  accepting the result: the switch keeps the source address of the
  contribution that completed the cell, so a host receives results whose IPv4
  source is its own address, which Linux drops as a martian unless
  net.ipv4.conf.<if>.accept_local=1.
- "udp": an ordinary UDP socket bound to UDP_PORT_AGG on the host's address
  (needs accept_local=1 on the interface, see above).

In "packet" mode a UDP socket is bound as well, so the kernel never answers a
result with ICMP port unreachable.
"""

from __future__ import annotations

import fcntl
import logging
import select
import socket
import struct

from hosts.native_stream import Fds
from hosts.packets import Endpoint
from wireformat import AGG

LOG = logging.getLogger(__name__)

ETH_P_IP = 0x0800
SIOCGIFADDR = 0x8915
SIOCGIFHWADDR = 0x8927
SO_ATTACH_FILTER = 26
SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23
PACKET_OUTGOING = 4
RCVBUF_BYTES = 8 << 20
UDP_PAYLOAD_AT = 14 + 20 + 8  # results are built by the switch from our frames: IPv4 without options


def _udp_port_filter(port: int) -> list[tuple[int, int, int, int]]:
    """cBPF: IPv4, UDP, not a fragment, destination port `port` (header length from IHL)."""
    return [
        (0x28, 0, 0, 12),  # ldh [12]             ethertype
        (0x15, 0, 8, ETH_P_IP),  # jeq IPv4 else drop
        (0x30, 0, 0, 23),  # ldb [23]             IPv4 protocol
        (0x15, 0, 6, 17),  # jeq UDP else drop
        (0x28, 0, 0, 20),  # ldh [20]             flags + fragment offset
        (0x45, 4, 0, 0x1FFF),  # jset fragment -> drop
        (0xB1, 0, 0, 14),  # ldxb 4*([14]&0xf)    IPv4 header length
        (0x48, 0, 0, 16),  # ldh [x+16]           UDP destination port
        (0x15, 0, 1, port),  # jeq port else drop
        (0x06, 0, 0, 0xFFFF),  # accept
        (0x06, 0, 0, 0),  # drop
    ]


def attach_filter(sock: socket.socket, program: list[tuple[int, int, int, int]]) -> None:
    import ctypes

    code = b"".join(struct.pack("HBBI", *insn) for insn in program)
    buf = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("HL", len(program), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


class InterfaceError(OSError):
    """The worker's interface is missing or has no IPv4 address."""


def interface_endpoint(iface: str) -> Endpoint:
    """The MAC and first IPv4 address of an interface in this thread's network namespace.

    Asked of the kernel through a socket (ioctl), which belongs to the namespace it was opened in, not read
    from /sys/class/net: that shows the namespace of whoever mounted sysfs, so a process that entered a host's
    network namespace alone (`nsenter -t PID -n`, setns) would look in the root namespace's."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            socket.if_nametoindex(iface)  # opens its own socket: also in this thread's namespace
        except OSError as ex:
            raise InterfaceError(f"no interface {iface!r} in this network namespace") from ex
        name = struct.pack("256s", iface.encode()[:15])
        try:
            hw = fcntl.ioctl(s.fileno(), SIOCGIFHWADDR, name)
        except OSError as ex:
            raise InterfaceError(f"cannot read the MAC address of {iface!r}: {ex}") from ex
        try:
            req = fcntl.ioctl(s.fileno(), SIOCGIFADDR, name)
        except OSError as ex:
            raise InterfaceError(f"interface {iface!r} has no IPv4 address") from ex
    mac = ":".join(f"{b:02x}" for b in hw[18:24])  # struct ifreq: the name, then sa_family, then sa_data
    return Endpoint(mac=mac, ip=socket.inet_ntoa(req[20:24]))


class RawSocketTransport:
    """AF_PACKET for sending frames; results as UDP payloads, from AF_PACKET or a UDP socket."""

    def __init__(self, iface: str, ip: str, port: int = AGG.udp_port, recv_mode: str = "packet") -> None:
        if recv_mode not in ("packet", "udp"):
            raise ValueError(f"recv_mode must be 'packet' or 'udp', got {recv_mode!r}")
        self.iface = iface
        self.recv_mode = recv_mode
        self._sockets: list[socket.socket] = []
        try:
            self._tx = self._open(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: send only, never receives
            self._tx.bind((iface, 0))
            self._tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, RCVBUF_BYTES)
            self._udp = self._open(socket.AF_INET, socket.SOCK_DGRAM)
            self._udp.bind((ip, port))
            if recv_mode == "udp":
                self._udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
                self._rx, self._skip = self._udp, 0
            else:
                self._rx = self._open(socket.AF_PACKET, socket.SOCK_RAW, 0)
                attach_filter(self._rx, _udp_port_filter(port))
                try:
                    self._rx.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
                except OSError:
                    LOG.debug("PACKET_IGNORE_OUTGOING unavailable; outgoing frames are filtered by type")
                self._rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
                self._rx.bind((iface, ETH_P_IP))  # Python converts to network order
                self._skip = UDP_PAYLOAD_AT
        except OSError as ex:
            self.close()
            raise InterfaceError(f"cannot open sockets on {iface} ({ip}:{port}): {ex}") from ex
        self._rx.setblocking(False)
        self._poll = select.poll()
        self._poll.register(self._rx.fileno(), select.POLLIN)

    def _open(self, *args: int) -> socket.socket:
        sock = socket.socket(*args)
        self._sockets.append(sock)
        return sock

    def send(self, frame: bytes | memoryview) -> None:
        while True:
            try:
                self._tx.send(frame)
                return
            except BlockingIOError:  # full device queue: wait for room rather than drop
                select.select([], [self._tx], [], 0.01)
            except OSError as ex:
                if ex.errno == 105:  # ENOBUFS: the same, on veth
                    select.select([], [self._tx], [], 0.001)
                    continue
                raise

    def _take(self) -> bytes | None:
        """One result payload, or None when nothing is queued."""
        while True:
            try:
                data, addr = self._rx.recvfrom(4096)
            except BlockingIOError:
                return None
            if not self._skip:
                return data
            # AF_PACKET: skip our own transmissions and anything with IPv4 options.
            if addr[2] == PACKET_OUTGOING or len(data) < self._skip or data[14] != 0x45:
                continue
            return data[self._skip :]

    def recv(self, timeout: float) -> bytes | None:
        data = self._take()
        if data is not None:
            return data
        if not self._poll.poll(max(0, int(timeout * 1000 + 0.999))):
            return None
        return self._take()

    def native_fds(self) -> Fds:
        """The sockets for the worker's C stream loop (hosts.native_stream), which sends and takes in as above."""
        return Fds(tx=self._tx.fileno(), rx=self._rx.fileno(), packet_mode=bool(self._skip), payload_at=self._skip)

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()

    def __enter__(self) -> RawSocketTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
