"""The in-network worker's stream loop in C (hosts/c/inc_stream.c), loaded through native.cbuild.

Why: in the emulation the agents' Python per frame was the largest share of the CPU at the fastest points,
so those points measured the agents, not the links (docs/results-history.md). The C loop is the same state
machine as IncWorker._stream (the reference, and the path wherever the transport has no file descriptors,
e.g. the in-memory model switch); the differential tests run both on the same traffic and compare every
result and counter.

The C side gets every number the wire format decides (field positions, lane widths, codes) from
wireformat and hosts.packets here, so the header is defined once. `P4INA_INC_STREAM=python` turns it off
(for A/B measurements); without a C compiler the Python loop runs, logged once.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from native import cbuild

LOG = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("c") / "inc_stream.c"
ENV = "P4INA_INC_STREAM"

# The C file's parameter indices, in its order (enum P_*, then the four lane widths and the field layout).
INT_PARAMS = (
    "tx_fd",
    "rx_fd",
    "packet_mode",
    "chunks",
    "window",
    "slots",
    "lanes",
    "width",
    "frame_len",
    "exp_frame_len",
    "exponent_at",
    "checksum_at",
    "flag_at",
    "shadow_at",
    "shadow_bit",
    "lanes_at",
    "header_len",
    "flag_retransmit",
    "flag_overflow",
    "op_result",
    "elem_none",
    "job",
    "epoch",
    "result_type",
    "shift",
    "q_max",
    "lane_max",
    "exp_min",
    "exp_max",
    "speculate",
    "window_steps",
    "max_retries",
    "failure",
    "failure_timeouts",
    "early",
    "exp_sign",
    "has_srtt",
    "payload_at",
    "wake_fd",
)
N_WIDTHS = 4  # lane bytes by elem type code 0..3
FIELDS = (
    "op",
    "flags",
    "elem_type",
    "shift",
    "job_id",
    "shadow",
    "slot",
    "epoch",
    "offset",
    "exponent",
    "next_exponent",
    "checksum",
)
FLOAT_PARAMS = ("failure_s", "early_window", "rto", "srtt", "rttvar", "calm_until", "rto_min", "rto_max")
ARRAYS = (
    "frames",
    "exp_frames",
    "blocks",
    "maxabs",
    "proposals",
    "guess",
    "scales",
    "salts",
    "sums",
    "exps",
    "agreed",
    "got",
    "rounds",
)
COUNTERS = (
    "sent",
    "retrans",
    "fast",
    "received",
    "duplicates",
    "overflows",
    "bytes",
    "corrupt",
    "missed",
    "done",
    "expired_since",
    "alarms",
    "has_srtt",
)
TIMES = ("quantize_s", "agreed_at", "last_progress", "rto", "srtt", "rttvar", "calm_until")

# what ps_run returns (negative: -errno of a socket call)
DONE, STALL, RETRIES, ABOVE_PROPOSAL, LANE_OVERFLOW, MISMATCH, NOTICE = range(7)


@dataclass(frozen=True)
class Fds:
    """What the C loop needs of a transport: its sockets, and where a result's payload starts."""

    tx: int
    rx: int
    packet_mode: bool  # AF_PACKET: skip own transmissions and IPv4 options, the payload at payload_at
    payload_at: int = 0


@functools.cache
def library() -> ctypes.CDLL | None:
    """The compiled loop, or None (logged once, with the reason) where the Python loop runs instead."""
    if os.environ.get(ENV, "c") == "python":
        LOG.info("%s=python: the in-network worker streams in Python", ENV)
        return None
    try:
        lib = cbuild.load(SOURCE.read_text(), "the in-network worker's stream loop")
    except cbuild.CompilerMissingError:
        LOG.warning("no C compiler (cc) on PATH: the in-network worker streams in Python (install gcc)")
        return None
    except (cbuild.CompileError, cbuild.CacheUnsafeError, OSError) as ex:
        LOG.error("the in-network worker's C loop failed to build (%s); it streams in Python", ex)
        return None
    i64p, f64p = ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_double)
    lib.ps_new.restype = ctypes.c_void_p
    lib.ps_new.argtypes = [i64p, ctypes.c_int64, f64p, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64]
    lib.ps_run.restype = ctypes.c_int
    lib.ps_run.argtypes = [ctypes.c_void_p, i64p]
    lib.ps_false_alarm.restype = ctypes.c_int64
    lib.ps_false_alarm.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.ps_stats.restype = None
    lib.ps_stats.argtypes = [ctypes.c_void_p, i64p, f64p]
    lib.ps_free.restype = None
    lib.ps_free.argtypes = [ctypes.c_void_p]
    lib.ps_counts.restype = None
    lib.ps_counts.argtypes = [i64p]
    counts = np.zeros(5, dtype=np.int64)
    lib.ps_counts(_i64(counts))
    want = (len(INT_PARAMS) + N_WIDTHS + 3 * len(FIELDS), len(FLOAT_PARAMS), len(ARRAYS), len(COUNTERS), len(TIMES))
    if tuple(counts.tolist()) != want:
        LOG.error(
            "the C stream loop's parameters %s do not match this loader's %s; it streams in Python",
            counts.tolist(),
            want,
        )
        return None
    return lib


def _i64(a: np.ndarray) -> Any:
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))


def _f64(a: np.ndarray) -> Any:
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_double))


class NativeStream:
    """One stream (one epoch of one all-reduce) in C; the arrays it writes stay owned (and referenced) here."""

    def __init__(
        self,
        lib: ctypes.CDLL,
        ints: dict[str, int],
        widths: list[int],
        layout: dict[str, tuple[int, int, int]],
        floats: dict[str, float],
        arrays: dict[str, np.ndarray | None],
    ) -> None:
        self._lib = lib
        ip = [int(ints[k]) for k in INT_PARAMS] + [int(w) for w in widths]
        for name in FIELDS:
            ip.extend(int(v) for v in layout[name])
        self._ip = np.asarray(ip, dtype=np.int64)
        self._dp = np.asarray([float(floats[k]) for k in FLOAT_PARAMS], dtype=np.float64)
        self._arrays: dict[str, np.ndarray | None] = {}
        for name in ARRAYS:  # each must be C-contiguous of the C side's type; made so here, and kept alive
            a = arrays[name]
            if a is None:
                self._arrays[name] = None
                continue
            if not a.flags.c_contiguous or not a.flags.writeable:
                raise ValueError(f"{name}: the C loop needs a writable C-contiguous array")
            self._arrays[name] = a
        ptrs = (ctypes.c_void_p * len(ARRAYS))(*[None if a is None else a.ctypes.data for a in self._arrays.values()])
        self._ptrs = ptrs
        self._info = np.zeros(4, dtype=np.int64)
        handle = lib.ps_new(_i64(self._ip), len(self._ip), _f64(self._dp), len(self._dp), ptrs, len(ARRAYS))
        if not handle:
            raise MemoryError("the C stream loop refused its parameters or could not allocate its state")
        self._handle: int | None = handle

    def run(self) -> tuple[int, list[int]]:
        """Run until done, a stall or an error: (code, info)."""
        code = self._lib.ps_run(self._handle, _i64(self._info))
        return int(code), self._info.tolist()

    def false_alarm(self, restart: bool = False) -> int:
        """Count a stall the tree's liveness explained (the alarms since the last result), or restart the timer."""
        return int(self._lib.ps_false_alarm(self._handle, 1 if restart else 0))

    def stats(self) -> tuple[dict[str, int], dict[str, float]]:
        c = np.zeros(len(COUNTERS), dtype=np.int64)
        t = np.zeros(len(TIMES), dtype=np.float64)
        self._lib.ps_stats(self._handle, _i64(c), _f64(t))
        return dict(zip(COUNTERS, c.tolist())), dict(zip(TIMES, t.tolist()))

    def close(self) -> None:
        if self._handle:
            self._lib.ps_free(self._handle)
            self._handle = None

    def __enter__(self) -> NativeStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
