"""Connections to all switches of a topology, opened on first use and driven in parallel."""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from controller.client import DEFAULT_TIMEOUT, SwitchClient, SwitchError
from controller.p4info import P4Schema
from controller.topology import Topology

LOG = logging.getLogger(__name__)
T = TypeVar("T")


class FabricError(Exception):
    """One or more switches failed; `errors` maps switch name to its exception."""

    def __init__(self, what: str, errors: dict[str, Exception]) -> None:
        self.errors = errors
        first = "; ".join(str(e) for e in list(errors.values())[:3])
        more = f" (and {len(errors) - 3} more switches)" if len(errors) > 3 else ""
        super().__init__(f"{what} failed on {len(errors)} switch(es): {first}{more}")


class Fabric:
    def __init__(
        self,
        topo: Topology,
        schema: P4Schema | None,
        election_id: int = 1,
        timeout: float = DEFAULT_TIMEOUT,
        workers: int = 32,
        backup_ok: bool = False,
    ) -> None:
        self.topo = topo
        self.backup_ok = backup_ok  # sessions may open as backup (a standby controller: controller.standby)
        self.schema = schema
        self.election_id = election_id
        self.timeout = timeout
        self.workers = workers
        self._clients: dict[str, SwitchClient] = {}
        self._lock = threading.Lock()
        self._connecting: dict[str, threading.Lock] = {}
        self._memo: dict[str, tuple[SwitchClient, dict[str, Any]]] = {}

    def client(self, name: str) -> SwitchClient:
        with self._lock:
            if name in self._clients:
                return self._clients[name]
            guard = self._connecting.setdefault(name, threading.Lock())
        with guard:
            with self._lock:
                if name in self._clients:
                    return self._clients[name]
            sw = self.topo.switch(name)
            if not sw.grpc_addr:
                raise SwitchError(
                    name,
                    "the topology gives no P4Runtime address (grpc_addr) for this switch; use the topology JSON "
                    "written by the emulation runner",
                )
            cl = SwitchClient(name, sw.grpc_addr, sw.device_id, self.election_id, self.timeout, self.backup_ok)
            cl.connect()
            with self._lock:
                self._clients[name] = cl
            return cl

    def forget(self, name: str) -> None:
        """Close and drop a switch's session (a dead switch: its broken channel is not reused)."""
        with self._lock:
            cl = self._clients.pop(name, None)
            self._memo.pop(name, None)
        if cl is not None:
            cl.close()

    def memo(self, name: str) -> dict[str, Any]:
        """What this session learnt about a switch and may reuse (the installer's read-back): valid while the
        session is the switch's primary, its only writer under P4Runtime arbitration, so that nothing there
        changes but what this session writes. A new session, a lost primary, a backup session (another controller
        writes) or drop_memo() start it empty."""
        cl = self.client(name)
        with self._lock:
            have = self._memo.get(name)
            if have is None or have[0] is not cl or cl.primary_lost or not cl.is_primary:
                have = self._memo[name] = (cl, {})
            return have[1]

    def drop_memo(self, names: Iterable[str] | None = None) -> None:
        """Forget what was learnt about these switches (all by default): after writes that bypass the memo's
        bookkeeping (a pipeline push, a repair)."""
        with self._lock:
            for name in list(self._memo) if names is None else list(names):
                self._memo.pop(name, None)

    def unreachable(
        self, switches: Iterable[str], timeout: float = 2.0, attempts: int = 2, retry_s: float = 0.02
    ) -> set[str]:
        """The switches whose P4Runtime server is gone: a TCP connection to its address is refused on `attempts`
        tries in a row, `retry_s` apart (no address: not probed, not dead).

        A refused connection means no process listens: a busy or stopped one still completes the handshake,
        which the kernel does for it, so the answer does not wait on the switch's own scheduling. (Asking each
        switch over P4Runtime would wait on the slowest switch process's reply.) A connection still pending
        after `timeout` is a slow switch: alive. The second try rules out a server caught between its socket
        and its listen()."""
        names = list(switches)
        addrs = {n: a for n in names if (a := self.topo.switch(n).grpc_addr)}  # no address: not probed
        suspects = list(addrs)
        t0 = time.monotonic()
        for attempt in range(attempts):
            if not suspects:
                break
            if attempt:
                time.sleep(retry_s)
            suspects = sorted(refused({n: addrs[n] for n in suspects}, timeout))
        LOG.debug(
            "liveness probe of %d switch(es): %s refused (%.1f ms)",
            len(names),
            suspects or "none",
            1e3 * (time.monotonic() - t0),
        )
        return set(suspects)

    def connect(self, switches: Iterable[str] | None = None) -> None:
        """Open every session now, in parallel (before a long operation keeps the switches busy)."""
        names = list(switches) if switches is not None else [s.name for s in self.topo.switches]
        self.run_all("connect", self.client, names)

    def run(self, fn: Callable[[str], T], switches: Iterable[str]) -> tuple[dict[str, T], dict[str, Exception]]:
        """fn(switch) on every switch in parallel; results and exceptions, both by switch."""
        names = list(switches)
        results: dict[str, T] = {}
        errors: dict[str, Exception] = {}
        if not names:
            return results, errors
        with ThreadPoolExecutor(max_workers=min(self.workers, len(names)), thread_name_prefix="fabric") as pool:
            futures = {name: pool.submit(fn, name) for name in names}
            for name, fut in futures.items():
                try:
                    results[name] = fut.result()
                # any failure of one switch's call, collected per switch: the caller decides (rollback, report)
                except Exception as ex:  # noqa: BLE001
                    errors[name] = ex
        return results, errors

    def run_all(self, what: str, fn: Callable[[str], T], switches: Iterable[str]) -> dict[str, T]:
        results, errors = self.run(fn, switches)
        if errors:
            raise FabricError(what, errors)
        return results

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for cl in clients:
            cl.close()

    def __enter__(self) -> Fabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _endpoint(name: str, address: str) -> tuple[str, int]:
    """host and port of a gRPC target "host:port" or "[v6]:port" (the topology's grpc_addr)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise SwitchError(name, f"P4Runtime address {address!r} is not host:port")
    return host.strip("[]"), int(port)


def refused(addresses: dict[str, str], timeout: float) -> set[str]:
    """The names whose TCP connection attempt fails (refused, or no route), all attempted at once; a connection
    still pending after `timeout` counts as accepted (a listener too busy to take it)."""
    out: set[str] = set()
    pending: dict[socket.socket, str] = {}
    sel = selectors.DefaultSelector()
    try:
        for name, address in addresses.items():
            host, port = _endpoint(name, address)
            try:
                family, kind, proto, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
            except socket.gaierror:
                out.add(name)
                continue
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            err = sock.connect_ex(sockaddr)
            if err in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
                pending[sock] = name
                sel.register(sock, selectors.EVENT_WRITE)
                continue
            sock.close()
            if err != 0:
                out.add(name)
        deadline = time.monotonic() + timeout
        while pending and (left := deadline - time.monotonic()) > 0:
            for key, _ in sel.select(left):
                fileobj = key.fileobj
                assert isinstance(fileobj, socket.socket)  # only sockets are registered
                sock = fileobj
                sel.unregister(sock)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                    out.add(pending[sock])
                del pending[sock]
                sock.close()
    finally:
        for sock in pending:
            sock.close()
        sel.close()
    return out
