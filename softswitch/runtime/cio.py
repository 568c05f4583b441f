"""The C engine's port loop (c/cio.c) from Python: sockets in, statistics and punted frames out.

PortIO (ports.py) opens the AF_PACKET sockets and, while the switch's program runs on the C engine,
hands their descriptors to a CPortLoop: a C thread that receives, runs the program and sends without
ever entering Python. The library does not depend on the program, so one loop serves every program
loaded while it runs (`attach`).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from native import cbuild
from softswitch.compiler import cemit
from softswitch.runtime.delayline import PortDelays

LOG = logging.getLogger(__name__)

C_DIR = Path(__file__).parent / "c"


@functools.cache
def library() -> ctypes.CDLL:
    """The port loop's shared object (compiled once, cached like a program)."""
    source = (C_DIR / "rt_abi.h").read_text() + (C_DIR / "cio.c").read_text()
    lib = cbuild.load(source, "the C port loop")
    vp, c_int, u32, u64p = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint64)
    sigs: dict[str, tuple[Any, list[Any]]] = {
        "cio_abi": (c_int, []),
        "cio_new": (vp, [u32, c_int]),
        "cio_add_port": (c_int, [vp, c_int, c_int, c_int, ctypes.c_char_p]),
        "cio_set_delay": (c_int, [vp, c_int, ctypes.c_uint64, ctypes.c_uint64]),
        "cio_set_hold_cap": (c_int, [vp, u32]),
        "cio_attach": (None, [vp, vp, vp]),
        "cio_start": (c_int, [vp]),
        "cio_stop": (None, [vp]),
        "cio_free": (None, [vp]),
        "cio_port_stats": (c_int, [vp, c_int, u64p]),
        "cio_stats": (None, [vp, u64p]),
        "cio_send": (c_int, [vp, c_int, ctypes.c_char_p, u32]),
        "cio_punt_fd": (c_int, [vp]),
        "cio_punt_pop": (ctypes.c_int64, [vp, ctypes.c_char_p, u32]),
        "cio_thread_cpu_ns": (ctypes.c_int64, [vp]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    if lib.cio_abi() != cemit.ABI:
        raise cbuild.CompileError(f"port loop ABI {lib.cio_abi()} != emitter ABI {cemit.ABI}")
    return lib


class CPortLoop:
    """One C thread moving frames between the given sockets and an attached C program."""

    def __init__(
        self,
        ports: list[tuple[int, int, int, str]],
        max_frame: int,
        cpu_port: int | None,
        on_punt: Callable[[bytes], None] | None = None,
        name: str = "softswitch",
        delays: PortDelays | None = None,
        hold_cap: int | None = None,
    ) -> None:
        """ports: (switch port, socket descriptor, interface index, interface name); delays: the seconds each port
        holds the frames it receives (ingress) and sends (egress), held in C (a link's propagation delay), at
        most hold_cap frames a port and direction (65,536 unless given; more are dropped and counted)."""
        self.lib = library()
        self.name = name
        self.max_frame = max_frame
        self.io = self.lib.cio_new(max_frame, -1 if cpu_port is None else cpu_port)
        if not self.io:
            raise MemoryError("C port loop: cannot allocate its buffers")
        for port, fd, ifindex, iface in ports:
            if self.lib.cio_add_port(self.io, port, fd, ifindex, iface.encode()) != 0:
                self.lib.cio_free(self.io)
                raise ValueError(f"C port loop: cannot add port {port} ({iface})")
        delays = delays or PortDelays()
        for port in set(delays.ingress) | set(delays.egress):
            ns = [round(table.get(port, 0.0) * 1e9) for table in (delays.ingress, delays.egress)]
            if any(ns) and self.lib.cio_set_delay(self.io, port, ns[0], ns[1]) != 0:
                self.lib.cio_free(self.io)
                raise ValueError(f"C port loop: a delay for port {port}, which it does not have")
        if hold_cap is not None and self.lib.cio_set_hold_cap(self.io, hold_cap) != 0:
            self.lib.cio_free(self.io)
            raise ValueError(f"C port loop: hold_cap must be at least 1, got {hold_cap}")
        self.ports = [p for p, _, _, _ in ports]
        self._on_punt = on_punt
        self._punter: threading.Thread | None = None
        self._stopping = False
        self._closed = False

    def attach(self, entry: tuple[int, int] | None) -> None:
        """Run this program's batches from now on: (batch function, switch) from CRuntime.batch_entry."""
        fn, sw = entry if entry is not None else (None, None)
        self.lib.cio_attach(self.io, fn, sw)

    def start(self) -> None:
        rc = self.lib.cio_start(self.io)
        if rc != 0:
            raise OSError(-rc, f"C port loop did not start: {os.strerror(-rc) if rc < 0 else rc}")
        if self._on_punt is not None:
            self._punter = threading.Thread(target=self._punt_loop, name=f"{self.name}-punt", daemon=True)
            self._punter.start()

    def _punt_loop(self) -> None:
        """Frames the program sent to the CPU port, to the packet-in handler (a slow path, by design)."""
        fd = self.lib.cio_punt_fd(self.io)
        buf = ctypes.create_string_buffer(self.max_frame + 4096)
        while not self._stopping:
            try:
                os.read(fd, 8)
            except OSError:
                return
            while True:
                n = self.lib.cio_punt_pop(self.io, buf, len(buf))
                if n < 0:
                    break
                if self._on_punt is not None:
                    self._on_punt(buf.raw[:n])

    def stop(self) -> None:
        """Stop the thread (the sockets stay open: they are PortIO's)."""
        self._stopping = True
        self.lib.cio_stop(self.io)
        if self._punter is not None:
            self._punter.join(timeout=5)
            self._punter = None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.stop()
            self.lib.cio_free(self.io)

    def port_stats(self, port: int) -> tuple[int, int, int, int, bool]:
        """(rx, tx, tx_errors, oversized, active) of one port."""
        buf = (ctypes.c_uint64 * 5)()
        if self.lib.cio_port_stats(self.io, port, buf) != 0:
            return 0, 0, 0, 0, False
        return int(buf[0]), int(buf[1]), int(buf[2]), int(buf[3]), bool(buf[4])

    def stats(self) -> dict[str, int]:
        buf = (ctypes.c_uint64 * 6)()
        self.lib.cio_stats(self.io, buf)
        return dict(
            zip(("tx_no_port", "punt_dropped", "batches", "frames", "held", "held_dropped"), (int(x) for x in buf))
        )

    def send(self, port: int, frame: bytes) -> bool:
        return self.lib.cio_send(self.io, port, frame, len(frame)) == 0

    def thread_cpu_seconds(self) -> float | None:
        ns = self.lib.cio_thread_cpu_ns(self.io)
        return None if ns < 0 else ns / 1e9
