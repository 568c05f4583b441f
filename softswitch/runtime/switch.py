"""The embedded switch: executes p4c's BMv2 JSON for v1model with simple_switch semantics.

`SoftSwitch` is the in-process API the P4Runtime server and the port I/O use. A program is lowered
once to an IR of numbers (codegen.py) and emitted either as C (the C engine: cengine.py, compiled to
a shared object; packets from ports never enter Python) or as Python (the Python engine, here:
generated code runs with only the builtins it needs); per packet the switch runs the generated
parser, ingress, the replication engine, egress and deparser. Both engines share the control plane
(engine.py: tables, entry checks, lookup results).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from softswitch.compiler import codegen, compilecache, ir, program, pyemit
from softswitch.errors import (
    ConstDefaultActionError,
    InvalidEntryError,
    NoProgramError,
    UnknownObjectError,
)
from softswitch.runtime import heap
from softswitch.runtime.engine import ActionCall, ActionInfo, ProgramAssertion, ProgramRuntime
from softswitch.runtime.pre import ReplicationEngine
from softswitch.runtime.tables import Exact, Lpm, MatchKey, MatchTable, Range, Ternary

LOG = logging.getLogger(__name__)

__all__ = [
    "ActionCall",
    "ActionInfo",
    "Exact",
    "KeyFieldInfo",
    "Lpm",
    "MatchKey",
    "Range",
    "SoftSwitch",
    "TableEntry",
    "TableInfo",
    "Ternary",
]


@dataclass(frozen=True)
class TableEntry:
    key: tuple[MatchKey, ...]
    action: ActionCall
    priority: int = 0


@dataclass(frozen=True)
class KeyFieldInfo:
    name: str
    match_type: str
    bitwidth: int


@dataclass(frozen=True)
class TableInfo:
    name: str
    keys: tuple[KeyFieldInfo, ...]
    actions: tuple[str, ...]
    size: int
    const_default: bool


class ThrottledLog:
    """Logs one kind of per-packet event at most once per `interval` seconds; the others are counted.

    A packet stream that trips a bug or a failing assert() would otherwise log (and format a
    traceback) per packet, which costs more than the packets and buries everything else. The first
    record carries the traceback; later ones say how many were not logged since the previous one.
    """

    def __init__(self, log: logging.Logger, level: int, interval: float = 10.0) -> None:
        self.log, self.level, self.interval = log, level, interval
        self._next = 0.0
        self._suppressed = 0
        self._first = True

    def report(self, msg: str, *args: object, exc: BaseException | None = None) -> None:
        now = time.monotonic()
        if now < self._next:
            self._suppressed += 1
            return
        if self._suppressed:
            msg += " (%d more since the last report)"
            args = (*args, self._suppressed)
        self.log.log(self.level, msg, *args, exc_info=exc if self._first and exc is not None else None)
        self._first = False
        self._suppressed = 0
        self._next = now + self.interval


def _shl(a: int, b: int) -> int:
    # p4c masks every shift result to the destination width; cap absurd shift counts so a
    # packet cannot make us build a gigabyte integer.
    if b < 0:
        return a
    return a << b if b <= 4096 else 0


def _shr(a: int, b: int) -> int:
    return a >> b if b >= 0 else a


def _div(a: int, b: int) -> int:
    return a // b if b else 0


def _mod(a: int, b: int) -> int:
    return a % b if b else 0


def _no_action(slots: list[int], params: tuple[int, ...]) -> None:
    """The default of a table whose JSON gives none."""


def _rand(lo: int, hi: int) -> int:
    return random.randint(lo, hi) if lo <= hi else lo


class PyRuntime(ProgramRuntime):
    """The Python engine: the program's generated Python, its tables, registers and counters."""

    engine = "python"

    def __init__(self, comp: codegen.Compiled) -> None:
        super().__init__(comp)
        self.source = comp.source
        module = self.module
        # the generated module's globals: per switch, since they hold its state; builtins restricted
        # to what generated code calls, so even a bug in an emitter cannot reach the rest of Python
        ns: dict[str, Any] = {"__builtins__": dict(pyemit.BUILTINS)}
        ns.update(comp.constants)
        ns.update(_shl=_shl, _shr=_shr, _div=_div, _mod=_mod, _rand=_rand, ProgramAssertion=ProgramAssertion)
        self.registers: list[list[int]] = []
        for i, (size, _) in enumerate(module.registers):
            self.registers.append([0] * size)
            ns[f"R{i}"] = self.registers[-1]
        self.counters: list[tuple[list[int], list[int]]] = []
        for i, size in enumerate(module.counters):
            pk, by = [0] * size, [0] * size
            ns[f"CP{i}"], ns[f"CB{i}"] = pk, by
            self.counters.append((pk, by))
        for name, mt in self.tables.items():
            i = self.table_index[name]
            ns[f"EX_{i}"] = mt.exact
            ns[f"LPM_{i}"] = mt.lpm
            ns[f"DEF_{i}"] = mt.default
            ns[f"SCAN_{i}"] = mt.scan_lookup
        try:
            code = compile(self.source, "<softswitch-program>", "exec")
        except (SyntaxError, RecursionError, MemoryError) as ex:
            raise RuntimeError(f"internal error: generated code does not compile: {ex}") from ex
        exec(code, ns)  # noqa: S102 - emitted from the IR alone (ints and numbers), see pyemit.py
        self.ns = ns
        self.parse = ns["parse"]
        self.ingress = ns["run_ingress"]
        self.egress = ns["run_egress"]
        self.deparse = ns["deparse"]
        self.template = list(module.template)
        self.install_program_entries()

    def _node(self, n: int) -> Any:
        return None if n == ir.ACCEPT else self.ns[f"n_{n}"]

    def make_result(self, action: int, params: tuple[int, ...], next_node: int) -> tuple[Any, ...]:
        fn = _no_action if action < 0 else self.ns[f"a_{action}"]
        return (fn, params, self._node(next_node))

    # ---- registers and counters ------------------------------------------------------------------
    def register_read(self, reg: int, index: int) -> int:
        return self.registers[reg][index]

    def register_write(self, reg: int, index: int, value: int) -> None:
        self.registers[reg][index] = value

    def register_read_all(self, reg: int) -> list[int]:
        return list(self.registers[reg])

    def counter_read(self, counter: int, index: int) -> tuple[int, int]:
        pk, by = self.counters[counter]
        return pk[index], by[index]

    def counter_write(self, counter: int, index: int, packets: int, bytes_: int) -> None:
        pk, by = self.counters[counter]
        pk[index], by[index] = packets, bytes_

    def counter_read_all(self, counter: int) -> list[tuple[int, int]]:
        pk, by = self.counters[counter]
        return list(zip(pk, by))

    # ---- packets -----------------------------------------------------------------------------
    def process(
        self, port: int, data: bytes, t0: float, mc: dict[int, tuple[tuple[int, int], ...]], queues: int = 1
    ) -> tuple[list[tuple[int, bytes]], int]:
        """One packet through the pipeline; returns the outputs and the number of drops.

        `queues` is simple_switch's number of priority queues per port: a packet whose priority
        selects a queue beyond them is dropped at enqueue, as simple_switch does.
        """
        std = self.std
        slots = self.template.copy()
        n = len(data)
        lay = self.lay
        slots[std["ingress_port"]] = port & 0x1FF
        if std["packet_length"] is not None:
            slots[std["packet_length"]] = n & 0xFFFFFFFF
        slots[lay.LEN] = n
        slots[lay.INGLEN] = n
        ts = self.clock["ingress_global_timestamp"]
        if ts is not None:
            slots[ts] = int((time.monotonic() - t0) * 1e6) & 0xFFFFFFFFFFFF
        off = self.parse(slots, data)
        payload = data[off:]
        self.ingress(slots)
        slots[lay.EXIT] = 0
        mslot = std["mcast_grp"]
        mgid = slots[mslot] if mslot is not None else 0
        out: list[tuple[int, bytes]] = []
        drops = 0
        itype = std["instance_type"]
        if mgid:
            replicas = mc.get(mgid, ())
            if not replicas:
                return out, 1
            if not self._enqueue(slots, t0, queues):
                return out, len(replicas)
            if itype is not None:
                slots[itype] = codegen.INSTANCE_REPLICATION
            rslot = std["egress_rid"]
            for eport, rid in replicas:
                replica = slots.copy()
                if rslot is not None:
                    replica[rslot] = rid
                pkt = self._egress(replica, eport, payload, t0)
                if pkt is None:
                    drops += 1
                else:
                    out.append((eport, pkt))
            return out, drops
        espec = slots[std["egress_spec"]]
        if espec == codegen.DROP_PORT:
            return out, 1
        if itype is not None:
            slots[itype] = codegen.INSTANCE_NORMAL
        if not self._enqueue(slots, t0, queues):
            return out, 1
        pkt = self._egress(slots, espec, payload, t0)
        if pkt is None:
            return out, 1
        out.append((espec, pkt))
        return out, 0

    def _enqueue(self, slots: list[int], t0: float, queues: int) -> bool:
        """simple_switch's enqueue: the priority must name a queue; enq_timestamp is stamped."""
        prio = self.std["priority"]
        if prio is not None and slots[prio] >= queues:
            return False
        enq = self.clock["enq_timestamp"]
        if enq is not None:
            slots[enq] = int((time.monotonic() - t0) * 1e6) & 0xFFFFFFFF
        return True

    def _egress(self, slots: list[int], port: int, payload: bytes, t0: float) -> bytes | None:
        std = self.std
        if std["egress_port"] is not None:
            slots[std["egress_port"]] = port
        es = std["egress_spec"]
        slots[es] = (codegen.DROP_PORT + 1) & 0x1FF
        if std["packet_length"] is not None:
            slots[std["packet_length"]] = slots[self.lay.LEN] & 0xFFFFFFFF
        ts, dq = self.clock["egress_global_timestamp"], self.clock["deq_timedelta"]
        if ts is not None or dq is not None:
            now = int((time.monotonic() - t0) * 1e6)
            if ts is not None:
                slots[ts] = now & 0xFFFFFFFFFFFF
            if dq is not None:
                enq = std["enq_timestamp"]
                slots[dq] = (now - (slots[enq] if enq is not None else now)) & 0xFFFFFFFF
        self.egress(slots)
        if slots[es] == codegen.DROP_PORT:
            return None
        return self.deparse(slots, payload)


# the name the tests and earlier code know the Python engine's runtime by
_Runtime = PyRuntime


ENGINES = ("auto", "c", "python")
STAT_NAMES = ("rx", "tx", "dropped", "errors", "assertions", "packet_in", "packet_out")


class SoftSwitch:
    """One embedded switch; thread-safe (one lock for control-plane calls and packets handed in from Python).

    `engine` picks how packets are executed: "c" (the program compiled to C, loaded as a shared
    object; packets on ports never enter Python), "python" (the program compiled to Python), or
    "auto" (C where a compiler is present). A program the C engine cannot run (the log line says
    what, by name) runs on the Python engine.
    """

    def __init__(
        self,
        device_id: int = 0,
        name: str = "",
        priority_queues: int = 1,
        cpu_port: int | None = None,
        engine: str = "auto",
    ) -> None:
        if not 1 <= priority_queues <= 8:
            raise ValueError(f"priority_queues must be 1..8 (v1model's priority is 3 bits), got {priority_queues}")
        if cpu_port is not None and not 0 < cpu_port < codegen.DROP_PORT:
            raise ValueError(f"the CPU port must be 1..{codegen.DROP_PORT - 1}, got {cpu_port}")
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        self.device_id = device_id
        self.name = name or f"softswitch-{device_id}"
        self.priority_queues = priority_queues
        self.requested_engine = engine
        # the CPU port, as simple_switch_grpc's --cpu-port: packets sent to it go to `on_packet_in`
        # (the P4Runtime server's packet-in), and packet_out() injects packets on it
        self.cpu_port = cpu_port
        self.on_packet_in: Callable[[bytes], None] | None = None
        # sends a packet produced outside the port loop (a packet-out's outputs); set by PortIO
        self.transmit: Callable[[int, bytes], None] | None = None
        # called (without the lock) after a program was loaded: PortIO moves its loop to the new engine
        self.on_program_change: list[Callable[[], None]] = []
        self._lock = threading.RLock()
        self._rt: ProgramRuntime | None = None
        self._json: bytes | None = None
        self._pre = ReplicationEngine()
        self._t0 = time.monotonic()  # the packets' timestamps count from here (clock_origin)
        # errors: interpreter bugs; assertions: the program's assert()/assume() failed (BMv2 would abort)
        # packet_in / packet_out: packets to and from the controller through the CPU port
        # (the C engine counts its packets itself: `stats` adds its counts, and those of programs replaced)
        self._stats: dict[str, int] = dict.fromkeys(STAT_NAMES, 0)
        self._retired: dict[str, int] = dict.fromkeys(STAT_NAMES, 0)
        self._packet_in_log = ThrottledLog(LOG, logging.ERROR)
        self._error_log = ThrottledLog(LOG, logging.ERROR)
        self._assert_log = ThrottledLog(LOG, logging.WARNING)

    @property
    def stats(self) -> dict[str, int]:
        """Packets seen, sent and dropped, by either engine (a snapshot)."""
        out = dict(self._stats)
        rt = self._rt
        engine_stats = rt.packet_stats() if rt is not None and hasattr(rt, "packet_stats") else None
        for k in STAT_NAMES:
            out[k] += self._retired[k] + (engine_stats.get(k, 0) if engine_stats else 0)
        return out

    # ---- program -----------------------------------------------------------------------------
    def load_program(self, bmv2_json: str | bytes) -> None:
        raw = bmv2_json.encode() if isinstance(bmv2_json, str) else bytes(bmv2_json)
        try:
            rt = self._build_runtime(raw)  # compile outside the lock: packets keep flowing on the old program
        except (KeyError, TypeError, IndexError, AttributeError) as ex:
            raise ValueError(f"malformed BMv2 JSON: {type(ex).__name__}: {ex}") from ex
        with self._lock:
            old = self._rt
            self._rt = rt
            self._json = raw
            self._pre.clear()
        for listener in list(self.on_program_change):
            listener()
        if old is not None:
            self._retire(old)
        LOG.info(
            "%s: loaded program (%d tables, %d actions) on the %s engine",
            self.name,
            len(rt.tables),
            len(rt.action_infos),
            rt.engine,
        )

    def _build_runtime(self, raw: bytes) -> ProgramRuntime:
        with heap.paused():  # the collector would walk the growing program over and over (heap.py)
            return self._build_runtime_unpaused(raw)

    def _build_runtime_unpaused(self, raw: bytes) -> ProgramRuntime:
        comp = compilecache.compiled(raw)
        want = self.requested_engine
        if want == "auto":  # P4INA_SOFTSWITCH_ENGINE=c|python says what "auto" means (tests run the suite on either)
            want = os.environ.get("P4INA_SOFTSWITCH_ENGINE", "auto")
        if want != "python":
            from softswitch.runtime import cengine  # the C engine needs a compiler; imported on demand

            rt = cengine.runtime_or_none(comp, self, required=want == "c")
            if rt is not None:
                return rt
        return PyRuntime(comp)

    def _retire(self, old: ProgramRuntime) -> None:
        """Keep a replaced program's packet counts and release what its engine holds."""
        stats = old.packet_stats() if hasattr(old, "packet_stats") else None
        with self._lock:
            if stats:
                for k in STAT_NAMES:
                    self._retired[k] += stats.get(k, 0)
        old.close()

    @property
    def clock_origin(self) -> float:
        """time.monotonic() when the switch was made: its packets' timestamps count microseconds from it."""
        return self._t0

    @property
    def program_loaded(self) -> bool:
        return self._rt is not None

    @property
    def program_json(self) -> bytes | None:
        return self._json

    @property
    def engine(self) -> str | None:
        """The engine running the current program ("c" or "python"), None before a program is loaded."""
        rt = self._rt
        return rt.engine if rt is not None else None

    @property
    def generated_source(self) -> str | None:
        """The code the program was compiled to (Python or C, for debugging)."""
        return self._rt.source if self._rt else None

    def runtime(self) -> ProgramRuntime:
        """The loaded program's engine (its tables, registers, generated code); NoProgramError before a load.

        For benchmarks, cross-checks and tests that drive or inspect an engine directly: calls on it do not
        take the switch's lock."""
        if self._rt is None:
            raise NoProgramError(f"{self.name}: no P4 program loaded")
        return self._rt

    def _table(self, name: str) -> tuple[ProgramRuntime, program.TableDef, MatchTable]:
        rt = self.runtime()
        if name not in rt.tables:
            raise UnknownObjectError(f"no table {name!r} in the loaded program")
        return rt, rt.table_defs[name], rt.tables[name]

    # ---- introspection -----------------------------------------------------------------------
    def tables(self) -> dict[str, TableInfo]:
        with self._lock:
            rt = self.runtime()
            out = {}
            for name, t in rt.table_defs.items():
                keys = tuple(KeyFieldInfo(s.name, s.match_type, s.width) for s in rt.tables[name].keys)
                out[name] = TableInfo(name, keys, rt.table_action_names(t), t.max_size, t.default_const)
            return out

    def actions(self) -> dict[str, ActionInfo]:
        with self._lock:
            return dict(self.runtime().action_infos)

    # ---- table entries -----------------------------------------------------------------------
    def _checked_call(self, table: str, entry: TableEntry) -> tuple[Any, ActionCall, Any]:
        """The entry's table, its action call validated against the program, and the compiled hit result."""
        rt, t, mt = self._table(table)
        aid = rt.action_id_for(t, entry.action.name)
        params = rt.check_params(aid, entry.action.params)
        return mt, ActionCall(entry.action.name, params), rt.result(t, aid, params, hit=True)

    def table_insert(self, table: str, entry: TableEntry) -> None:
        with self._lock:
            mt, call, result = self._checked_call(table, entry)
            mt.insert(tuple(entry.key), entry.priority, call, result)

    def table_modify(self, table: str, entry: TableEntry) -> None:
        with self._lock:
            mt, call, result = self._checked_call(table, entry)
            mt.modify(tuple(entry.key), entry.priority, call, result)

    def table_delete(self, table: str, key: tuple[MatchKey, ...], priority: int = 0) -> None:
        with self._lock:
            _, _, mt = self._table(table)
            mt.delete(tuple(key), priority)

    def table_entries(self, table: str) -> list[TableEntry]:
        with self._lock:
            _, _, mt = self._table(table)
            return [TableEntry(key, call, prio) for key, prio, call, _ in mt.entries.values()]

    def table_clear(self, table: str) -> None:
        with self._lock:
            _, _, mt = self._table(table)
            mt.clear()

    def table_set_default(self, table: str, action: ActionCall) -> None:
        with self._lock:
            rt, t, mt = self._table(table)
            if t.default_const:
                raise ConstDefaultActionError(f"table {table!r}: the program declares its default action const")
            aid = rt.action_id_for(t, action.name)
            params = rt.check_params(aid, action.params)
            mt.set_default(rt.result(t, aid, params, hit=False), ActionCall(action.name, params))

    def table_get_default(self, table: str) -> ActionCall:
        with self._lock:
            _, _, mt = self._table(table)
            return mt.default_call

    def table_reset_default(self, table: str) -> None:
        with self._lock:
            rt, t, _ = self._table(table)
            rt.install_program_default(t)

    # ---- counters and registers ----------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        with self._lock:
            rt = self.runtime()
            return {name: size for name, size in zip(rt.names.counters, rt.module.counters)}

    def _counter(self, name: str, index: int | None) -> tuple[ProgramRuntime, int]:
        rt = self.runtime()
        k = rt.counter_index.get(name)
        if k is None:
            raise UnknownObjectError(f"no counter {name!r} in the loaded program")
        size = rt.module.counters[k]
        if index is not None and (not isinstance(index, int) or not 0 <= index < size):
            raise InvalidEntryError(f"counter {name!r}: index {index!r} outside 0..{size - 1}")
        return rt, k

    def counter_read(self, name: str, index: int) -> tuple[int, int]:
        with self._lock:
            rt, k = self._counter(name, index)
            return rt.counter_read(k, index)

    def counter_read_all(self, name: str) -> list[tuple[int, int]]:
        """Every cell of a counter, all read at one instant."""
        with self._lock:
            rt, k = self._counter(name, None)
            return rt.counter_read_all(k)

    def counter_write(self, name: str, index: int, packets: int, bytes_: int) -> None:
        with self._lock:
            rt, k = self._counter(name, index)
            for what, v in (("packets", packets), ("bytes", bytes_)):
                if not isinstance(v, int) or not 0 <= v < 1 << 64:
                    raise InvalidEntryError(f"counter {name!r}: {what} value {v!r} is not a 64-bit unsigned integer")
            rt.counter_write(k, index, packets, bytes_)

    def registers(self) -> dict[str, tuple[int, int]]:
        with self._lock:
            rt = self.runtime()
            return {r.name: (r.size, r.width) for r in rt.prog.registers}

    def _register(self, name: str, index: int | None) -> tuple[ProgramRuntime, int, int]:
        rt = self.runtime()
        k = rt.register_index.get(name)
        if k is None:
            raise UnknownObjectError(f"no register {name!r} in the loaded program")
        size, width = rt.module.registers[k]
        if index is not None and (not isinstance(index, int) or not 0 <= index < size):
            raise InvalidEntryError(f"register {name!r}: index {index!r} outside 0..{size - 1}")
        return rt, k, width

    def register_read(self, name: str, index: int) -> int:
        with self._lock:
            rt, k, _ = self._register(name, index)
            return rt.register_read(k, index)

    def register_read_all(self, name: str) -> list[int]:
        """Every cell of a register, all read at one instant."""
        with self._lock:
            rt, k, _ = self._register(name, None)
            return rt.register_read_all(k)

    def register_write(self, name: str, index: int, value: int) -> None:
        with self._lock:
            rt, k, width = self._register(name, index)
            if not isinstance(value, int) or value < 0 or value >> width:
                raise InvalidEntryError(f"register {name!r}: value {value!r} does not fit bit<{width}>")
            rt.register_write(k, index, value)

    # ---- multicast -----------------------------------------------------------------------------
    def mc_group_set(self, group_id: int, replicas: list[tuple[int, int]]) -> None:
        with self._lock:
            rt = self.runtime()
            self._pre.set(group_id, replicas)
            rt.mc_set(group_id, self._pre.groups[group_id])

    def mc_group_delete(self, group_id: int) -> None:
        with self._lock:
            rt = self.runtime()
            self._pre.delete(group_id)
            rt.mc_delete(group_id)

    def mc_groups(self) -> dict[int, list[tuple[int, int]]]:
        with self._lock:
            self.runtime()
            return self._pre.snapshot()

    # ---- packets -------------------------------------------------------------------------------
    def process_packet(self, ingress_port: int, data: bytes) -> list[tuple[int, bytes]]:
        """One packet in, the packets out; never raises because of packet content."""
        with self._lock:
            rt = self._rt
            if rt is None:
                self._stats["rx"] += 1
                self._stats["dropped"] += 1
                return []
            if rt.engine == "c":
                return self._process_c(rt, int(ingress_port), bytes(data))
            stats = self._stats
            stats["rx"] += 1
            try:
                out, drops = rt.process(
                    int(ingress_port), bytes(data), self._t0, self._pre.groups, self.priority_queues
                )
            except ProgramAssertion as ex:
                stats["assertions"] += 1
                stats["dropped"] += 1
                self._assert_log.report(
                    "%s: %s (a %d-byte packet from port %s; dropped)",
                    self.name,
                    rt.assertion_message(ex.args[0] if ex.args else None),
                    len(data),
                    ingress_port,
                )
                return []
            except Exception as ex:  # noqa: BLE001 - one bad packet must not take the switch down
                stats["errors"] += 1
                stats["dropped"] += 1
                self._error_log.report(
                    "%s: internal error processing a %d-byte packet from port %s; dropped: %r",
                    self.name,
                    len(data),
                    ingress_port,
                    ex,
                    exc=ex,
                )
                return []
            stats["dropped"] += drops
            cpu = self.cpu_port
            if cpu is not None and out and any(p == cpu for p, _ in out):
                out = self._punt(out, cpu)
            stats["tx"] += len(out)
            return out

    def _process_c(self, rt: Any, port: int, data: bytes) -> list[tuple[int, bytes]]:
        """The C engine counts the packet itself; here only what it reports is logged, and punts handed over."""
        out, status, msg = rt.process(port, data)
        if status == 1:
            self._assert_log.report(
                "%s: %s (a %d-byte packet from port %s; dropped)",
                self.name,
                rt.assertion_message(msg),
                len(data),
                port,
            )
        elif status:
            self._error_log.report(
                "%s: internal error in the C engine processing a %d-byte packet from port %s; dropped",
                self.name,
                len(data),
                port,
            )
        cpu = self.cpu_port
        if cpu is not None and out and any(p == cpu for p, _ in out):
            out = self._punt(out, cpu, count=False)
        return out

    def _punt(self, out: list[tuple[int, bytes]], cpu: int, count: bool = True) -> list[tuple[int, bytes]]:
        """Hand the packets for the CPU port to the packet-in handler (BMv2's transmit to PI); keep the rest."""
        handler = self.on_packet_in
        for port, data in out:
            if port != cpu:
                continue
            if count:
                self._stats["packet_in"] += 1
            if handler is None:
                continue
            self.deliver_packet_in(data)
        return [(p, d) for p, d in out if p != cpu]

    def deliver_packet_in(self, data: bytes) -> None:
        """A packet for the CPU port to the packet-in handler (also called by the C port loop's punt thread)."""
        handler = self.on_packet_in
        if handler is None:
            return
        try:
            handler(data)
        except Exception as ex:  # noqa: BLE001 - a failing controller connection must not stop the data plane
            self._packet_in_log.report("%s: packet-in failed: %r", self.name, ex, exc=ex)

    def packet_out(self, data: bytes) -> list[tuple[int, bytes]]:
        """A packet from the controller (its packet_out header already prepended) into ingress on the CPU port.

        The outputs are sent with `transmit` (the port loop's), and returned.
        """
        if self.cpu_port is None:
            raise NoProgramError(f"{self.name}: no CPU port (start with --cpu-port) for packet-out")
        with self._lock:
            self._stats["packet_out"] += 1
        out = self.process_packet(self.cpu_port, data)
        send = self.transmit
        if send is not None:
            for port, frame in out:
                send(port, frame)
        return out
