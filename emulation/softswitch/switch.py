"""The embedded switch: executes p4c's BMv2 JSON for v1model with simple_switch semantics.

`SoftSwitch` is the in-process API the P4Runtime server and the port I/O use (see
notes/SOFTSWITCH_API.md). A program is compiled once to Python (codegen.py: lowered to an IR of
numbers, then emitted); per packet the switch runs the generated parser, ingress, the replication
engine, egress and deparser. Generated code runs with only the builtins it needs.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from emulation.softswitch import codegen, compilecache, ir, program, pyemit
from emulation.softswitch.errors import (
    ConstDefaultActionError,
    InvalidEntryError,
    NoProgramError,
    SoftSwitchError,
    UnknownObjectError,
)
from emulation.softswitch.pre import ReplicationEngine
from emulation.softswitch.tables import Exact, KeySpec, Lpm, MatchKey, MatchTable, Range, Ternary

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

# JSON const entries use BMv2 priorities (lower value wins); the API uses P4Runtime's (higher wins).
CONST_PRIORITY_BASE = 1 << 24


@dataclass(frozen=True)
class ActionCall:
    name: str
    params: tuple[int, ...] = ()


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
class ActionInfo:
    name: str
    param_widths: tuple[int, ...]
    param_names: tuple[str, ...]


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


class ProgramAssertion(Exception):
    """An assert()/assume() in the P4 program failed (BMv2 aborts; we drop the packet).

    Generated code raises it with a number; `_Runtime.assertion_message` gives the text.
    """


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


def _no_action(F: list[int], P: tuple[int, ...]) -> None:
    """The default of a table whose JSON gives none."""


def _rand(lo: int, hi: int) -> int:
    return random.randint(lo, hi) if lo <= hi else lo


class _Runtime:
    """Everything built from one program: generated functions, tables, registers, counters."""

    def __init__(self, raw: bytes) -> None:
        comp = compilecache.compiled(raw)
        self.compiled = comp
        self.prog, self.source, self.lay, self.names = comp.prog, comp.source, comp.layout, comp.names
        module = comp.module
        self.module = module
        # the generated module's globals: per switch, since they hold its state; builtins restricted
        # to what generated code calls, so even a bug in an emitter cannot reach the rest of Python
        ns: dict[str, Any] = {"__builtins__": dict(pyemit.BUILTINS)}
        ns.update(comp.constants)
        ns.update(_shl=_shl, _shr=_shr, _div=_div, _mod=_mod, _rand=_rand, ProgramAssertion=ProgramAssertion)
        self.registers: dict[str, list[int]] = {}
        for i, (name, (size, _)) in enumerate(zip(self.names.registers, module.registers)):
            self.registers[name] = ns[f"R{i}"] = [0] * size
        self.counters: dict[str, tuple[list[int], list[int]]] = {}
        for i, (name, size) in enumerate(zip(self.names.counters, module.counters)):
            pk, by = [0] * size, [0] * size
            ns[f"CP{i}"], ns[f"CB{i}"] = pk, by
            self.counters[name] = (pk, by)
        self.table_defs: dict[str, program.TableDef] = {}
        self.table_index: dict[str, int] = {}
        self.tables: dict[str, MatchTable] = {}
        for i, t in enumerate(comp.table_defs):
            specs = []
            for k in t.keys:
                w, _ = self.lay.width(k.header, k.field)
                specs.append(KeySpec(k.name, k.match_type, w))
            mt = MatchTable(t.name, t.match_type, tuple(specs), t.max_size, immutable=bool(t.const_entries))
            ns[f"EX_{i}"] = mt.exact
            ns[f"LPM_{i}"] = mt.lpm
            ns[f"DEF_{i}"] = mt.default
            ns[f"SCAN_{i}"] = mt.scan_lookup
            self.tables[t.name] = mt
            self.table_defs[t.name] = t
            self.table_index[t.name] = i
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
        self.actions_by_id = {a.id: a for a in self.prog.actions}
        self.action_index = {aid: i for i, aid in enumerate(self.names.action_json_ids)}
        self.action_infos: dict[str, ActionInfo] = {}
        for a in self.prog.actions:
            self.action_infos.setdefault(
                a.name, ActionInfo(a.name, tuple(p.width for p in a.params), tuple(p.name for p in a.params))
            )
        self.std = {name: self.lay.std(name) for name in codegen.STANDARD_FIELDS}
        # clocks cost a system call per packet: set them only where the program can see them
        seen = comp.read_slots
        self.clock = {
            name: self.std[name] if self.std[name] in seen else None
            for name in ("ingress_global_timestamp", "egress_global_timestamp", "enq_timestamp", "deq_timedelta")
        }
        if self.clock["deq_timedelta"] is not None and self.std["enq_timestamp"] is not None:
            self.clock["enq_timestamp"] = self.std["enq_timestamp"]  # deq_timedelta is measured from it
        if self.std["egress_spec"] is None or self.std["ingress_port"] is None:
            raise program.UnsupportedProgramError("standard_metadata.egress_spec/ingress_port missing (v1model expected)")
        for t in self.table_defs.values():
            self._install_program_defaults(t)

    def assertion_message(self, ex: ProgramAssertion) -> str:
        k = ex.args[0] if ex.args else None
        if type(k) is int and 0 <= k < len(self.names.messages):
            return self.names.messages[k]
        return "assertion failed"

    # ---- table helpers -----------------------------------------------------------------------
    def action_id_for(self, t: program.TableDef, name: str) -> int:
        for i in t.action_ids:
            if self.actions_by_id[i].name == name:
                return i
        raise InvalidEntryError(
            f"action {name!r} is not an action of table {t.name!r} (has {self.table_action_names(t)})"
        )

    def table_action_names(self, t: program.TableDef) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.actions_by_id[i].name for i in t.action_ids))

    def check_params(self, action_id: int, params: tuple[int, ...]) -> tuple[int, ...]:
        a = self.actions_by_id[action_id]
        params = tuple(params)
        if len(params) != len(a.params):
            raise InvalidEntryError(f"action {a.name!r} takes {len(a.params)} parameters, got {len(params)}")
        for p, v in zip(a.params, params):
            if not isinstance(v, int) or v < 0 or v >> p.width:
                raise InvalidEntryError(f"action {a.name!r}: parameter {p.name!r} = {v!r} does not fit bit<{p.width}>")
        return params

    def _node(self, n: int) -> Any:
        return None if n == ir.ACCEPT else self.ns[f"n_{n}"]

    def result(self, t: program.TableDef, action_id: int, params: tuple[int, ...], hit: bool) -> tuple[Any, ...]:
        """The lookup result generated code reads: (action function, its data, the next node)."""
        ai = self.action_index[action_id]
        tab = self.module.tables[self.table_index[t.name]]
        if tab.hit_miss:
            nxt = tab.hit_next if hit else tab.miss_next
        else:
            nxt = dict(tab.next_by_action).get(ai, tab.base_next)
        return (self.ns[f"a_{ai}"], params, self._node(nxt))

    def install_program_default(self, t: program.TableDef) -> None:
        """The default entry the JSON gives, or (none given) no action and the miss branch."""
        mt = self.tables[t.name]
        if t.default_action_id is not None:
            try:
                self.check_params(t.default_action_id, t.default_action_data)
            except InvalidEntryError as ex:
                raise ValueError(f"table {t.name!r}: default action in the JSON is invalid: {ex}") from ex
            mt.default[0] = self.result(t, t.default_action_id, t.default_action_data, hit=False)
            mt.default_call = ActionCall(self.actions_by_id[t.default_action_id].name, t.default_action_data)
        else:
            mt.default[0] = (_no_action, (), self._miss_next(t))
            mt.default_call = ActionCall("NoAction", ())

    def _install_program_defaults(self, t: program.TableDef) -> None:
        self.install_program_default(t)
        mt = self.tables[t.name]
        specs = mt.keys
        for e in t.const_entries:
            key: list[MatchKey] = []
            for (kind, a, b), spec in zip(e.key, specs):
                # p4c writes const entries as the program spells them (value bits outside a ternary
                # mask or beyond an lpm prefix included); BMv2 masks them, and so does this switch
                # (entries written over P4Runtime must still be canonical)
                if kind == "ternary":
                    key.append(Ternary(a & b, b))
                elif kind == "lpm":
                    w = spec.width
                    key.append(Lpm(a & (((1 << b) - 1) << (w - b) if 0 < b <= w else 0), b))
                else:
                    key.append(Exact(a) if kind == "exact" else Range(a, b))
            prio = CONST_PRIORITY_BASE - e.priority if t.match_type in ("ternary", "range") else 0
            try:
                params = self.check_params(e.action_id, e.action_data)
                call = ActionCall(self.actions_by_id[e.action_id].name, params)
                mt.insert(tuple(key), prio, call, self.result(t, e.action_id, params, hit=True), const=True)
            except (SoftSwitchError, KeyError) as ex:
                raise ValueError(f"table {t.name!r}: const entry {e} is invalid: {ex}") from ex

    def _miss_next(self, t: program.TableDef) -> Any:
        tab = self.module.tables[self.table_index[t.name]]
        return self._node(tab.miss_next if tab.hit_miss else tab.base_next)

    # ---- packets -----------------------------------------------------------------------------
    def process(
        self, port: int, data: bytes, t0: float, mc: dict[int, tuple[tuple[int, int], ...]], queues: int = 1
    ) -> tuple[list[tuple[int, bytes]], int]:
        """One packet through the pipeline; returns the outputs and the number of drops.

        `queues` is simple_switch's number of priority queues per port: a packet whose priority
        selects a queue beyond them is dropped at enqueue, as simple_switch does.
        """
        std = self.std
        F = self.template.copy()
        n = len(data)
        lay = self.lay
        F[std["ingress_port"]] = port & 0x1FF
        if std["packet_length"] is not None:
            F[std["packet_length"]] = n & 0xFFFFFFFF
        F[lay.LEN] = n
        F[lay.INGLEN] = n
        ts = self.clock["ingress_global_timestamp"]
        if ts is not None:
            F[ts] = int((time.monotonic() - t0) * 1e6) & 0xFFFFFFFFFFFF
        off = self.parse(F, data)
        payload = data[off:]
        self.ingress(F)
        F[lay.EXIT] = 0
        mslot = std["mcast_grp"]
        mgid = F[mslot] if mslot is not None else 0
        out: list[tuple[int, bytes]] = []
        drops = 0
        itype = std["instance_type"]
        if mgid:
            replicas = mc.get(mgid, ())
            if not replicas:
                return out, 1
            if not self._enqueue(F, t0, queues):
                return out, len(replicas)
            if itype is not None:
                F[itype] = codegen.INSTANCE_REPLICATION
            rslot = std["egress_rid"]
            for eport, rid in replicas:
                G = F.copy()
                if rslot is not None:
                    G[rslot] = rid
                pkt = self._egress(G, eport, payload, t0)
                if pkt is None:
                    drops += 1
                else:
                    out.append((eport, pkt))
            return out, drops
        espec = F[std["egress_spec"]]
        if espec == codegen.DROP_PORT:
            return out, 1
        if itype is not None:
            F[itype] = codegen.INSTANCE_NORMAL
        if not self._enqueue(F, t0, queues):
            return out, 1
        pkt = self._egress(F, espec, payload, t0)
        if pkt is None:
            return out, 1
        out.append((espec, pkt))
        return out, 0

    def _enqueue(self, F: list[int], t0: float, queues: int) -> bool:
        """simple_switch's enqueue: the priority must name a queue; enq_timestamp is stamped."""
        prio = self.std["priority"]
        if prio is not None and F[prio] >= queues:
            return False
        enq = self.clock["enq_timestamp"]
        if enq is not None:
            F[enq] = int((time.monotonic() - t0) * 1e6) & 0xFFFFFFFF
        return True

    def _egress(self, F: list[int], port: int, payload: bytes, t0: float) -> bytes | None:
        std = self.std
        if std["egress_port"] is not None:
            F[std["egress_port"]] = port
        es = std["egress_spec"]
        F[es] = (codegen.DROP_PORT + 1) & 0x1FF
        if std["packet_length"] is not None:
            F[std["packet_length"]] = F[self.lay.LEN] & 0xFFFFFFFF
        ts, dq = self.clock["egress_global_timestamp"], self.clock["deq_timedelta"]
        if ts is not None or dq is not None:
            now = int((time.monotonic() - t0) * 1e6)
            if ts is not None:
                F[ts] = now & 0xFFFFFFFFFFFF
            if dq is not None:
                enq = std["enq_timestamp"]
                F[dq] = (now - (F[enq] if enq is not None else now)) & 0xFFFFFFFF
        self.egress(F)
        if F[es] == codegen.DROP_PORT:
            return None
        return self.deparse(F, payload)


class SoftSwitch:
    """One embedded switch; thread-safe (one lock for packets and control-plane calls)."""

    def __init__(self, device_id: int = 0, name: str = "", priority_queues: int = 1, cpu_port: int | None = None) -> None:
        if not 1 <= priority_queues <= 8:
            raise ValueError(f"priority_queues must be 1..8 (v1model's priority is 3 bits), got {priority_queues}")
        if cpu_port is not None and not 0 < cpu_port < codegen.DROP_PORT:
            raise ValueError(f"the CPU port must be 1..{codegen.DROP_PORT - 1}, got {cpu_port}")
        self.device_id = device_id
        self.name = name or f"softswitch-{device_id}"
        self.priority_queues = priority_queues
        # the CPU port, as simple_switch_grpc's --cpu-port: packets sent to it go to `on_packet_in`
        # (the P4Runtime server's packet-in), and packet_out() injects packets on it
        self.cpu_port = cpu_port
        self.on_packet_in: Callable[[bytes], None] | None = None
        # sends a packet produced outside the port loop (a packet-out's outputs); set by PortIO
        self.transmit: Callable[[int, bytes], None] | None = None
        self._lock = threading.RLock()
        self._rt: _Runtime | None = None
        self._json: bytes | None = None
        self._pre = ReplicationEngine()
        self._t0 = time.monotonic()
        # errors: interpreter bugs; assertions: the program's assert()/assume() failed (BMv2 would abort)
        # packet_in / packet_out: packets to and from the controller through the CPU port
        self.stats: dict[str, int] = {
            "rx": 0, "tx": 0, "dropped": 0, "errors": 0, "assertions": 0, "packet_in": 0, "packet_out": 0,
        }
        self._packet_in_log = ThrottledLog(LOG, logging.ERROR)
        self._error_log = ThrottledLog(LOG, logging.ERROR)
        self._assert_log = ThrottledLog(LOG, logging.WARNING)

    # ---- program -----------------------------------------------------------------------------
    def load_program(self, bmv2_json: str | bytes) -> None:
        raw = bmv2_json.encode() if isinstance(bmv2_json, str) else bytes(bmv2_json)
        try:
            rt = _Runtime(raw)  # compile outside the lock: packets keep flowing on the old program
        except (KeyError, TypeError, IndexError, AttributeError) as ex:
            raise ValueError(f"malformed BMv2 JSON: {type(ex).__name__}: {ex}") from ex
        with self._lock:
            self._rt = rt
            self._json = raw
            self._pre.clear()
        LOG.info("%s: loaded program (%d tables, %d actions)", self.name, len(rt.tables), len(rt.action_infos))

    @property
    def program_loaded(self) -> bool:
        return self._rt is not None

    @property
    def program_json(self) -> bytes | None:
        return self._json

    @property
    def generated_source(self) -> str | None:
        """The Python the program was compiled to (for debugging)."""
        return self._rt.source if self._rt else None

    def _runtime(self) -> _Runtime:
        if self._rt is None:
            raise NoProgramError(f"{self.name}: no P4 program loaded")
        return self._rt

    def _table(self, name: str) -> tuple[_Runtime, program.TableDef, MatchTable]:
        rt = self._runtime()
        if name not in rt.tables:
            raise UnknownObjectError(f"no table {name!r} in the loaded program")
        return rt, rt.table_defs[name], rt.tables[name]

    # ---- introspection -----------------------------------------------------------------------
    def tables(self) -> dict[str, TableInfo]:
        with self._lock:
            rt = self._runtime()
            out = {}
            for name, t in rt.table_defs.items():
                keys = tuple(KeyFieldInfo(s.name, s.match_type, s.width) for s in rt.tables[name].keys)
                out[name] = TableInfo(name, keys, rt.table_action_names(t), t.max_size, t.default_const)
            return out

    def actions(self) -> dict[str, ActionInfo]:
        with self._lock:
            return dict(self._runtime().action_infos)

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
            mt.default[0] = rt.result(t, aid, params, hit=False)
            mt.default_call = ActionCall(action.name, params)

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
            return {name: len(pk) for name, (pk, _) in self._runtime().counters.items()}

    def _counter(self, name: str, index: int) -> tuple[list[int], list[int]]:
        rt = self._runtime()
        if name not in rt.counters:
            raise UnknownObjectError(f"no counter {name!r} in the loaded program")
        pk, by = rt.counters[name]
        if not isinstance(index, int) or not 0 <= index < len(pk):
            raise InvalidEntryError(f"counter {name!r}: index {index!r} outside 0..{len(pk) - 1}")
        return pk, by

    def counter_read(self, name: str, index: int) -> tuple[int, int]:
        with self._lock:
            pk, by = self._counter(name, index)
            return pk[index], by[index]

    def counter_write(self, name: str, index: int, packets: int, bytes_: int) -> None:
        with self._lock:
            pk, by = self._counter(name, index)
            for what, v in (("packets", packets), ("bytes", bytes_)):
                if not isinstance(v, int) or not 0 <= v < 1 << 64:
                    raise InvalidEntryError(f"counter {name!r}: {what} value {v!r} is not a 64-bit unsigned integer")
            pk[index], by[index] = packets, bytes_

    def registers(self) -> dict[str, tuple[int, int]]:
        with self._lock:
            rt = self._runtime()
            return {r.name: (r.size, r.width) for r in rt.prog.registers}

    def _register(self, name: str, index: int) -> tuple[list[int], int]:
        rt = self._runtime()
        if name not in rt.registers:
            raise UnknownObjectError(f"no register {name!r} in the loaded program")
        cells = rt.registers[name]
        if not isinstance(index, int) or not 0 <= index < len(cells):
            raise InvalidEntryError(f"register {name!r}: index {index!r} outside 0..{len(cells) - 1}")
        width = next(r.width for r in rt.prog.registers if r.name == name)
        return cells, width

    def register_read(self, name: str, index: int) -> int:
        with self._lock:
            cells, _ = self._register(name, index)
            return cells[index]

    def register_write(self, name: str, index: int, value: int) -> None:
        with self._lock:
            cells, width = self._register(name, index)
            if not isinstance(value, int) or value < 0 or value >> width:
                raise InvalidEntryError(f"register {name!r}: value {value!r} does not fit bit<{width}>")
            cells[index] = value

    # ---- multicast -----------------------------------------------------------------------------
    def mc_group_set(self, group_id: int, replicas: list[tuple[int, int]]) -> None:
        with self._lock:
            self._runtime()
            self._pre.set(group_id, replicas)

    def mc_group_delete(self, group_id: int) -> None:
        with self._lock:
            self._runtime()
            self._pre.delete(group_id)

    def mc_groups(self) -> dict[int, list[tuple[int, int]]]:
        with self._lock:
            self._runtime()
            return self._pre.snapshot()

    # ---- packets -------------------------------------------------------------------------------
    def process_packet(self, ingress_port: int, data: bytes) -> list[tuple[int, bytes]]:
        """One packet in, the packets out; never raises because of packet content."""
        with self._lock:
            stats = self.stats
            stats["rx"] += 1
            rt = self._rt
            if rt is None:
                stats["dropped"] += 1
                return []
            try:
                out, drops = rt.process(int(ingress_port), bytes(data), self._t0, self._pre.groups, self.priority_queues)
            except ProgramAssertion as ex:
                stats["assertions"] += 1
                stats["dropped"] += 1
                self._assert_log.report(
                    "%s: %s (a %d-byte packet from port %s; dropped)", self.name, rt.assertion_message(ex),
                    len(data), ingress_port,
                )
                return []
            except Exception as ex:  # noqa: BLE001 - one bad packet must not take the switch down
                stats["errors"] += 1
                stats["dropped"] += 1
                self._error_log.report(
                    "%s: internal error processing a %d-byte packet from port %s; dropped: %r",
                    self.name, len(data), ingress_port, ex, exc=ex,
                )
                return []
            stats["dropped"] += drops
            cpu = self.cpu_port
            if cpu is not None and out and any(p == cpu for p, _ in out):
                out = self._punt(out, cpu)
            stats["tx"] += len(out)
            return out

    def _punt(self, out: list[tuple[int, bytes]], cpu: int) -> list[tuple[int, bytes]]:
        """Hand the packets for the CPU port to the packet-in handler (BMv2's transmit to PI); keep the rest."""
        handler = self.on_packet_in
        for port, data in out:
            if port != cpu:
                continue
            self.stats["packet_in"] += 1
            if handler is None:
                continue
            try:
                handler(data)
            except Exception as ex:  # noqa: BLE001 - a failing controller connection must not stop the data plane
                self._packet_in_log.report("%s: packet-in failed: %r", self.name, ex, exc=ex)
        return [(p, d) for p, d in out if p != cpu]

    def packet_out(self, data: bytes) -> list[tuple[int, bytes]]:
        """A packet from the controller (its packet_out header already prepended) into ingress on the CPU port.

        The outputs are sent with `transmit` (the port loop's), and returned.
        """
        if self.cpu_port is None:
            raise NoProgramError(f"{self.name}: no CPU port (start with --cpu-port) for packet-out")
        with self._lock:
            self.stats["packet_out"] += 1
        out = self.process_packet(self.cpu_port, data)
        send = self.transmit
        if send is not None:
            for port, frame in out:
                send(port, frame)
        return out
