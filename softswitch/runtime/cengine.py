"""The C engine: the program's IR emitted as C (cemit.py), compiled and cached (cbuild.py), run through ctypes.

    ir.Module --cemit--> C text --+ c/rt_abi.h, c/rt_head.h (before), c/rt_body.c (after)
                                  +--cbuild (cc, content-hash cache)--> shared object --ctypes--> CRuntime

One shared object per program (shared by every switch of a process that loads it: it has no global
state); one `p4sw` instance (tables, registers, counters, groups, statistics, a lock) per switch.
Python keeps the control plane: entries are validated and stored by the MatchTables (engine.py) as
for the Python engine, and every change is mirrored to the C tables as one locked call. Packets
from the port loop (cio.py) never enter Python; packets handed in from Python (`process`) go through
the same C code.
"""

from __future__ import annotations

import ctypes
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from native import cbuild
from softswitch.compiler import cemit, codegen
from softswitch.compiler.once import SharedBuilds
from softswitch.runtime import engine
from softswitch.runtime.engine import ProgramRuntime

LOG = logging.getLogger(__name__)

C_DIR = Path(__file__).parent / "c"
STATS = ("rx", "tx", "dropped", "errors", "assertions", "packet_in")  # rt_head.h's RT_RX .. RT_PACKET_IN
_NSTATS = 7

u64p = ctypes.POINTER(ctypes.c_uint64)


class CEngineError(RuntimeError):
    """The C engine failed outside a packet (out of memory, a table the C side does not know)."""


class OutDesc(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint32), ("port", ctypes.c_int32)]


class Outs(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("cap", ctypes.c_uint64),
        ("used", ctypes.c_uint64),
        ("d", ctypes.POINTER(OutDesc)),
        ("n", ctypes.c_uint32),
        ("dcap", ctypes.c_uint32),
    ]


def runtime_source(program_c: str) -> str:
    """The whole translation unit: the runtime's head, the program, the runtime's body."""
    return "".join(
        (
            (C_DIR / "rt_abi.h").read_text(),
            (C_DIR / "rt_head.h").read_text(),
            program_c,
            (C_DIR / "rt_body.c").read_text(),
        )
    )


def _bind(lib: ctypes.CDLL) -> None:
    """Argument and result types of the library's exported functions (c/rt_body.c)."""
    vp, i32, u32, u64, i64, c_int = (
        ctypes.c_void_p,
        ctypes.c_int32,
        ctypes.c_uint32,
        ctypes.c_uint64,
        ctypes.c_int64,
        ctypes.c_int,
    )
    sigs: dict[str, tuple[Any, list[Any]]] = {
        "p4sw_abi": (c_int, []),
        "p4sw_state_size": (u64, []),
        "p4sw_new": (vp, []),
        "p4sw_free": (None, [vp]),
        "p4sw_config": (None, [vp, c_int, c_int, i64, u64]),
        "p4sw_table_init": (c_int, [vp, c_int, c_int, ctypes.POINTER(ctypes.c_uint8), c_int]),
        "p4sw_set_default": (c_int, [vp, c_int, i32, i32, u64p, u32]),
        "p4sw_exact_put": (c_int, [vp, c_int, u64p, i32, i32, u64p, u32]),
        "p4sw_exact_del": (c_int, [vp, c_int, u64p]),
        "p4sw_lpm_put": (c_int, [vp, c_int, c_int, u64p, i32, i32, u64p, u32]),
        "p4sw_lpm_del": (c_int, [vp, c_int, c_int, u64p]),
        "p4sw_scan_insert": (c_int, [vp, c_int, u32, u64p, u64p, i32, i32, u64p, u32]),
        "p4sw_scan_delete": (c_int, [vp, c_int, u32]),
        "p4sw_scan_set": (c_int, [vp, c_int, u32, i32, i32, u64p, u32]),
        "p4sw_table_clear": (c_int, [vp, c_int]),
        "p4sw_mc_set": (c_int, [vp, c_int, ctypes.POINTER(i32), ctypes.POINTER(u32), u32]),
        "p4sw_mc_del": (c_int, [vp, c_int]),
        "p4sw_reg_read": (c_int, [vp, c_int, u64, u64p]),
        "p4sw_reg_read_all": (c_int, [vp, c_int, u64p]),
        "p4sw_reg_write": (c_int, [vp, c_int, u64, u64]),
        "p4sw_counter_read": (c_int, [vp, c_int, u64, u64p]),
        "p4sw_counter_read_all": (c_int, [vp, c_int, u64p]),
        "p4sw_counter_write": (c_int, [vp, c_int, u64, u64, u64]),
        "p4sw_stats": (None, [vp, u64p]),
        "p4sw_process": (
            c_int,
            [vp, c_int, ctypes.c_char_p, u32, ctypes.POINTER(c_int), ctypes.POINTER(ctypes.POINTER(Outs))],
        ),
        "p4sw_run": (u64, [vp, ctypes.c_char_p, u64p, ctypes.POINTER(u32), ctypes.POINTER(i32), u32, u32, u64p]),
        "p4sw_batch_fn": (vp, []),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


@dataclass(frozen=True)
class CProgram:
    """A program's shared object (one per program and process)."""

    lib: ctypes.CDLL
    source: str
    state_bytes: int


# targets whose C ABI aligns every struct member to its size, as cemit._slot_offsets assumes (`cc -dumpmachine`)
LANE_LOOP_TARGETS = ("x86_64-", "aarch64-")
_PROGRAMS: SharedBuilds[tuple[codegen.Compiled, CProgram | cemit.CUnsupported]] = SharedBuilds(keep=8)
_NO_COMPILER_LOGGED = False


def options_for(comp: codegen.Compiled) -> cemit.Options:
    """Which clocks the program can see (they cost a system call per packet)."""
    std = dict(zip(codegen.STANDARD_FIELDS, comp.module.std))
    seen = comp.read_slots

    def reads(name: str) -> bool:
        s = std.get(name, -1)
        return s >= 0 and s in seen

    deq = reads("deq_timedelta")
    tc = cbuild.toolchain()
    return cemit.Options(
        ingress_clock=reads("ingress_global_timestamp"),
        egress_clock=reads("egress_global_timestamp"),
        enq_clock=reads("enq_timestamp") or (deq and std.get("enq_timestamp", -1) >= 0),
        deq_clock=deq,
        lane_loops=tc is not None and any(arch in tc.version for arch in LANE_LOOP_TARGETS),
    )


def program_for(comp: codegen.Compiled, what: str = "program") -> CProgram:
    """The program's shared object, emitted and compiled once per process (CUnsupported when it cannot be)."""

    def build() -> tuple[codegen.Compiled, CProgram | cemit.CUnsupported]:
        try:
            source = runtime_source(cemit.emit(comp.module, options_for(comp)))
        except cemit.CUnsupported as ex:
            return comp, ex  # remembered: the refusal is as much a property of the program as its library
        lib = cbuild.load(source, what)
        _bind(lib)
        if lib.p4sw_abi() != cemit.ABI:
            raise cbuild.CompileError(f"C runtime ABI {lib.p4sw_abi()} != emitter ABI {cemit.ABI}")
        return comp, CProgram(lib, source, int(lib.p4sw_state_size()))

    # keyed by identity (a Compiled is shared by compilecache); `valid` guards against a reused id()
    _, prog = _PROGRAMS.get(id(comp), build, valid=lambda hit: hit[0] is comp)
    if isinstance(prog, cemit.CUnsupported):
        raise prog
    return prog


def describe(ex: cemit.CUnsupported, comp: codegen.Compiled) -> str:
    """Where an unsupported construct is, by the program's own names (for the log line)."""
    names, i = comp.names, ex.index
    w = cemit.Where
    if ex.where is w.SLOT:
        for (hdr, fld), slot in comp.layout.slots.items():
            if slot == i:
                return f"field {hdr}.{fld}"
        return f"slot {i}"
    table = {
        w.ACTION: ("action", names.actions),
        w.NODE: ("control node", names.nodes),
        w.TABLE: ("table", names.tables),
        w.STATE: ("parser state", names.states),
        w.CALC: ("calculation", names.calcs),
        w.REGISTER: ("register", names.registers),
    }
    if ex.where in table:
        kind, seq = table[ex.where]
        return f"{kind} {seq[i]!r}" if 0 <= i < len(seq) else f"{kind} #{i}"
    return {w.DEPARSER: "the deparser", w.PARSER: "the parser"}.get(ex.where, "the program")


def default_engine() -> str:
    """ "c" where a C compiler is present, else "python"."""
    return "c" if cbuild.toolchain() is not None else "python"


def runtime_or_none(comp: codegen.Compiled, switch: Any, required: bool) -> CRuntime | None:
    """The program on the C engine, or None (logged, saying why) when it must run on the Python engine."""
    global _NO_COMPILER_LOGGED
    if cbuild.toolchain() is None:
        if required or not _NO_COMPILER_LOGGED:
            LOG.warning(
                "%s: no C compiler (cc) on PATH: the program runs on the Python engine (install gcc for the C engine)",
                switch.name,
            )
            _NO_COMPILER_LOGGED = True
        return None
    try:
        prog = program_for(comp, f"{switch.name}'s program")
    except cemit.CUnsupported as ex:
        LOG.warning(
            "%s: the C engine cannot run this program (%s in %s); it runs on the Python engine",
            switch.name,
            ex.what,
            describe(ex, comp),
        )
        return None
    except (cbuild.CompileError, cbuild.CacheUnsafeError, OSError) as ex:
        LOG.error("%s: the C engine failed to build this program (%s); it runs on the Python engine", switch.name, ex)
        return None
    return CRuntime(comp, prog, switch)


@dataclass(frozen=True)
class Prepared:
    """Frames in one buffer with their offsets, lengths and ingress ports (CRuntime.prepare)."""

    n: int
    blob: Any
    offsets: Any
    lengths: Any
    ports: Any


def _u64s(values: tuple[int, ...] | list[int]) -> Any:
    return (ctypes.c_uint64 * max(1, len(values)))(*values)


class _CTable:
    """A MatchTable's mirror on the C side: one locked C call per change (tables.TableMirror)."""

    def __init__(self, rt: CRuntime, index: int) -> None:
        self.rt, self.t = rt, index

    def _check(self, rc: int, what: str) -> None:
        if rc == -2:
            raise MemoryError(f"C engine: out of memory ({what})")
        if rc < 0:
            raise CEngineError(f"C engine: {what} failed ({rc}) on table {self.t}")

    def _call(self, fn: str, *args: Any) -> int:
        return getattr(self.rt.lib, fn)(self.rt.sw, self.t, *args)

    def exact_put(self, parts: tuple[int, ...], result: Any) -> None:
        a, params, nxt = result
        self._check(self._call("p4sw_exact_put", _u64s(parts), a, nxt, _u64s(params), len(params)), "insert")

    def exact_del(self, parts: tuple[int, ...]) -> None:
        self._check(self._call("p4sw_exact_del", _u64s(parts)), "delete")

    def lpm_put(self, plen: int, parts: tuple[int, ...], result: Any) -> None:
        a, params, nxt = result
        self._check(self._call("p4sw_lpm_put", plen, _u64s(parts), a, nxt, _u64s(params), len(params)), "insert")

    def lpm_del(self, plen: int, parts: tuple[int, ...]) -> None:
        self._check(self._call("p4sw_lpm_del", plen, _u64s(parts)), "delete")

    def scan_insert(self, at: int, row: tuple[tuple[int, int], ...], result: Any) -> None:
        a, params, nxt = result
        lo, hi = _u64s([x for x, _ in row]), _u64s([y for _, y in row])
        self._check(self._call("p4sw_scan_insert", at, lo, hi, a, nxt, _u64s(params), len(params)), "insert")

    def scan_delete(self, at: int) -> None:
        self._check(self._call("p4sw_scan_delete", at), "delete")

    def scan_set(self, at: int, result: Any) -> None:
        a, params, nxt = result
        self._check(self._call("p4sw_scan_set", at, a, nxt, _u64s(params), len(params)), "modify")

    def clear(self) -> None:
        self._check(self._call("p4sw_table_clear"), "clear")

    def set_default(self, result: Any) -> None:
        a, params, nxt = result
        self._check(self._call("p4sw_set_default", a, nxt, _u64s(params), len(params)), "default")


class CRuntime(ProgramRuntime):
    """One switch's instance of a program on the C engine."""

    engine = "c"

    def __init__(self, comp: codegen.Compiled, prog: CProgram, switch: Any) -> None:
        super().__init__(comp)
        self.cprog = prog
        self.lib = prog.lib
        self.source = prog.source
        self._closed = False
        self.sw = self.lib.p4sw_new()
        if not self.sw:
            raise MemoryError("C engine: cannot allocate the switch's state")
        cpu = switch.cpu_port if switch.cpu_port is not None else -1
        self.lib.p4sw_config(
            self.sw, switch.priority_queues, cpu, int(switch.clock_origin * 1e9), random.getrandbits(64) | 1
        )
        for name, mt in self.tables.items():
            i = self.table_index[name]
            kind = self.module.tables[i].kind
            if kind in (engine.ir.TableKind.EXACT, engine.ir.TableKind.LPM, engine.ir.TableKind.SCAN):
                flags = (ctypes.c_uint8 * max(1, len(mt.keys)))(*[1 if r else 0 for r in mt.range_flags])
                if self.lib.p4sw_table_init(self.sw, i, mt.lpm_width, flags, len(mt.keys)) != 0:
                    raise CEngineError(f"C engine: table {name!r} cannot be set up")
            mt.mirror = _CTable(self, i)
        self._msg = ctypes.c_int(0)
        self._outs = ctypes.POINTER(Outs)()
        self.install_program_entries()

    def make_result(self, action: int, params: tuple[int, ...], next_node: int) -> tuple[int, tuple[int, ...], int]:
        return (action, tuple(params), next_node)

    def close(self) -> None:
        if not self._closed and getattr(self, "sw", None):
            self._closed = True
            for mt in self.tables.values():
                mt.mirror = None
            self.lib.p4sw_free(self.sw)
            self.sw = None

    def __del__(self) -> None:  # a runtime dropped without close() (a verify's scratch switch)
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass

    # ---- packets -------------------------------------------------------------------------------
    def process(self, port: int, data: bytes) -> tuple[list[tuple[int, bytes]], int, int]:
        """One packet: (outputs, status 0/1 assertion/2 internal error, the assertion's message number)."""
        status = self.lib.p4sw_process(
            self.sw, port, data, len(data), ctypes.byref(self._msg), ctypes.byref(self._outs)
        )
        o = self._outs.contents
        out = []
        if o.n:
            base = o.buf
            for i in range(o.n):
                d = o.d[i]
                out.append((d.port, ctypes.string_at(base + d.off, d.len)))
        return out, status, self._msg.value

    def packet_stats(self) -> dict[str, int]:
        if self.sw is None:
            return {}
        buf = (ctypes.c_uint64 * _NSTATS)()
        self.lib.p4sw_stats(self.sw, buf)
        return dict(zip(STATS, buf[: len(STATS)]))

    def last_assertion(self) -> int:
        buf = (ctypes.c_uint64 * _NSTATS)()
        self.lib.p4sw_stats(self.sw, buf)
        return int(buf[_NSTATS - 1])

    @staticmethod
    def prepare(traffic: list[tuple[int, bytes]]) -> Prepared:
        """Traffic laid out for `run` (done once, outside what a benchmark times)."""
        blob = b"".join(d for _, d in traffic)
        offs, o = [], 0
        for _, d in traffic:
            offs.append(o)
            o += len(d)
        n = len(traffic)
        return Prepared(
            n,
            ctypes.create_string_buffer(blob, max(1, len(blob))),
            _u64s(offs),
            (ctypes.c_uint32 * max(1, n))(*[len(d) for _, d in traffic]),
            (ctypes.c_int32 * max(1, n))(*[p for p, _ in traffic]),
        )

    def run(self, traffic: Prepared, batch: int = 32) -> tuple[int, int]:
        """The benchmark's loop in C: every packet in batches as the port loop makes them, outputs counted
        and dropped (returns the outputs and their bytes)."""
        nbytes = ctypes.c_uint64(0)
        outs = self.lib.p4sw_run(
            self.sw,
            ctypes.cast(traffic.blob, ctypes.c_char_p),
            traffic.offsets,
            traffic.lengths,
            traffic.ports,
            traffic.n,
            batch,
            ctypes.byref(nbytes),
        )
        return int(outs), int(nbytes.value)

    def batch_entry(self) -> tuple[int, int]:
        """(address of the batch function, address of this switch) for the C port loop."""
        return int(self.lib.p4sw_batch_fn()), int(self.sw)

    # ---- registers and counters ----------------------------------------------------------------
    def _ok(self, rc: int, what: str) -> None:
        if rc != 0:
            raise CEngineError(f"C engine: {what} refused ({rc})")

    def register_read(self, reg: int, index: int) -> int:
        out = ctypes.c_uint64()
        self._ok(self.lib.p4sw_reg_read(self.sw, reg, index, ctypes.byref(out)), "register read")
        return int(out.value)

    def register_write(self, reg: int, index: int, value: int) -> None:
        self._ok(self.lib.p4sw_reg_write(self.sw, reg, index, value), "register write")

    def register_read_all(self, reg: int) -> list[int]:
        size = self.module.registers[reg][0]
        buf = (ctypes.c_uint64 * max(1, size))()
        self._ok(self.lib.p4sw_reg_read_all(self.sw, reg, buf), "register read")
        return list(buf[:size])

    def counter_read(self, counter: int, index: int) -> tuple[int, int]:
        buf = (ctypes.c_uint64 * 2)()
        self._ok(self.lib.p4sw_counter_read(self.sw, counter, index, buf), "counter read")
        return int(buf[0]), int(buf[1])

    def counter_write(self, counter: int, index: int, packets: int, bytes_: int) -> None:
        self._ok(self.lib.p4sw_counter_write(self.sw, counter, index, packets, bytes_), "counter write")

    def counter_read_all(self, counter: int) -> list[tuple[int, int]]:
        size = self.module.counters[counter]
        buf = (ctypes.c_uint64 * max(2, 2 * size))()
        self._ok(self.lib.p4sw_counter_read_all(self.sw, counter, buf), "counter read")
        return [(int(buf[2 * i]), int(buf[2 * i + 1])) for i in range(size)]

    # ---- multicast -----------------------------------------------------------------------------
    def mc_set(self, group: int, replicas: tuple[tuple[int, int], ...]) -> None:
        n = len(replicas)
        ports = (ctypes.c_int32 * max(1, n))(*[p for p, _ in replicas])
        rids = (ctypes.c_uint32 * max(1, n))(*[r for _, r in replicas])
        rc = self.lib.p4sw_mc_set(self.sw, group, ports, rids, n)
        if rc == -2:
            raise MemoryError("C engine: out of memory (multicast group)")
        self._ok(rc, "multicast group")

    def mc_delete(self, group: int) -> None:
        self.lib.p4sw_mc_del(self.sw, group)
