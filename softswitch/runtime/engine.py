"""What both engines build from one compiled program: tables, action data checks, lookup results.

An engine runtime (switch.py's PyRuntime for the Python engine, cengine.CRuntime for the C engine)
is everything a SoftSwitch needs from one loaded program. The parts that do not depend on how
packets are executed live here, once: the MatchTables (entries, validation, the lookup structures
the Python engine reads and the C engine mirrors), the check of action parameters, and the result a
table entry gives a packet (the action, its data and the next control node), which each engine
represents in its own way (`make_result`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from softswitch.compiler import codegen, ir, program
from softswitch.errors import InvalidEntryError, SoftSwitchError
from softswitch.runtime.tables import Exact, KeySpec, Lpm, MatchKey, MatchTable, Range, Ternary

# JSON const entries use BMv2 priorities (lower value wins); the API uses P4Runtime's (higher wins).
CONST_PRIORITY_BASE = 1 << 24


@dataclass(frozen=True)
class ActionCall:
    name: str
    params: tuple[int, ...] = ()


@dataclass(frozen=True)
class ActionInfo:
    name: str
    param_widths: tuple[int, ...]
    param_names: tuple[str, ...]


class ProgramAssertion(Exception):
    """An assert()/assume() in the P4 program failed (BMv2 aborts; we drop the packet).

    Generated code raises it with a number; `ProgramRuntime.assertion_message` gives the text.
    """


CLOCKS = ("ingress_global_timestamp", "egress_global_timestamp", "enq_timestamp", "deq_timedelta")


class ProgramRuntime:
    """The engine-independent part of one loaded program; subclasses execute it."""

    engine = "abstract"

    def __init__(self, comp: codegen.Compiled) -> None:
        self.compiled = comp
        self.prog, self.lay, self.names, self.module = comp.prog, comp.layout, comp.names, comp.module
        self.source = ""  # the generated code (Python or C)
        self.table_defs: dict[str, program.TableDef] = {}
        self.table_index: dict[str, int] = {}
        self.tables: dict[str, MatchTable] = {}
        for i, t in enumerate(comp.table_defs):
            specs = []
            for k in t.keys:
                w, _ = self.lay.width(k.header, k.field)
                specs.append(KeySpec(k.name, k.match_type, w))
            self.tables[t.name] = MatchTable(
                t.name, t.match_type, tuple(specs), t.max_size, immutable=bool(t.const_entries)
            )
            self.table_defs[t.name] = t
            self.table_index[t.name] = i
        self.actions_by_id = {a.id: a for a in self.prog.actions}
        self.action_index = {aid: i for i, aid in enumerate(self.names.action_json_ids)}
        self.action_infos: dict[str, ActionInfo] = {}
        for a in self.prog.actions:
            self.action_infos.setdefault(
                a.name, ActionInfo(a.name, tuple(p.width for p in a.params), tuple(p.name for p in a.params))
            )
        self.std = {name: self.lay.std(name) for name in codegen.STANDARD_FIELDS}
        if self.std["egress_spec"] is None or self.std["ingress_port"] is None:
            raise program.UnsupportedProgramError(
                "standard_metadata.egress_spec/ingress_port missing (v1model expected)"
            )
        # clocks cost a system call per packet: set them only where the program can see them
        seen = comp.read_slots
        self.clock = {name: self.std[name] if self.std[name] in seen else None for name in CLOCKS}
        if self.clock["deq_timedelta"] is not None and self.std["enq_timestamp"] is not None:
            self.clock["enq_timestamp"] = self.std["enq_timestamp"]  # deq_timedelta is measured from it
        self.register_index = {name: i for i, name in enumerate(self.names.registers)}
        self.counter_index = {name: i for i, name in enumerate(self.names.counters)}

    # ---- what each engine provides -------------------------------------------------------------
    def make_result(self, action: int, params: tuple[int, ...], next_node: int) -> Any:
        """A lookup result: IR action number (-1: none), its data, the IR node after the table."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the engine holds outside Python (the C engine's switch)."""

    # ---- tables --------------------------------------------------------------------------------
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

    def result(self, t: program.TableDef, action_id: int, params: tuple[int, ...], hit: bool) -> Any:
        """The lookup result generated code reads for an entry (hit) or the default (miss)."""
        ai = self.action_index[action_id]
        tab = self.module.tables[self.table_index[t.name]]
        if tab.hit_miss:
            nxt = tab.hit_next if hit else tab.miss_next
        else:
            nxt = dict(tab.next_by_action).get(ai, tab.base_next)
        return self.make_result(ai, params, nxt)

    def miss_next(self, t: program.TableDef) -> int:
        tab = self.module.tables[self.table_index[t.name]]
        return tab.miss_next if tab.hit_miss else tab.base_next

    def install_program_default(self, t: program.TableDef) -> None:
        """The default entry the JSON gives, or (none given) no action and the miss branch."""
        mt = self.tables[t.name]
        if t.default_action_id is not None:
            try:
                self.check_params(t.default_action_id, t.default_action_data)
            except InvalidEntryError as ex:
                raise ValueError(f"table {t.name!r}: default action in the JSON is invalid: {ex}") from ex
            mt.set_default(
                self.result(t, t.default_action_id, t.default_action_data, hit=False),
                ActionCall(self.actions_by_id[t.default_action_id].name, t.default_action_data),
            )
        else:
            mt.set_default(self.make_result(-1, (), self.miss_next(t)), ActionCall("NoAction", ()))

    def install_program_entries(self) -> None:
        """Every table's default and const entries, as the JSON gives them."""
        for t in self.table_defs.values():
            self.install_program_default(t)
            self._install_const_entries(t)

    def _install_const_entries(self, t: program.TableDef) -> None:
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

    def assertion_message(self, k: Any) -> str:
        if type(k) is int and 0 <= k < len(self.names.messages):
            return self.names.messages[k]
        return "assertion failed"

    # ---- registers and counters (by IR number; SoftSwitch checks names and indexes) -------------
    def register_read(self, reg: int, index: int) -> int:
        raise NotImplementedError

    def register_write(self, reg: int, index: int, value: int) -> None:
        raise NotImplementedError

    def register_read_all(self, reg: int) -> list[int]:
        raise NotImplementedError

    def counter_read(self, counter: int, index: int) -> tuple[int, int]:
        raise NotImplementedError

    def counter_write(self, counter: int, index: int, packets: int, bytes_: int) -> None:
        raise NotImplementedError

    def counter_read_all(self, counter: int) -> list[tuple[int, int]]:
        raise NotImplementedError

    # ---- multicast (the Python engine reads SoftSwitch's groups directly) ----------------------
    def mc_set(self, group: int, replicas: tuple[tuple[int, int], ...]) -> None:
        pass

    def mc_delete(self, group: int) -> None:
        pass


__all__ = ["ActionCall", "ActionInfo", "CONST_PRIORITY_BASE", "ProgramAssertion", "ProgramRuntime", "ir"]
