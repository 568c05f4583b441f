"""Typed P4Runtime entities (table entries, multicast groups) with encode/decode against a P4Schema.

Values are plain ints here; `encode` turns them into canonical bytes and ids,
`decode` reverses it, so entries read back from a switch compare equal to the
ones the controller meant to write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controller.p4info import ActionInfo, P4InfoError, P4Schema, decode_int, encode_int
from p4proto import p4runtime_pb2


@dataclass(frozen=True, order=True)
class Lpm:
    value: int
    prefix_len: int


MatchValue = int | Lpm


@dataclass(frozen=True)
class TableEntry:
    table: str
    match: tuple[tuple[str, MatchValue], ...]
    action: str
    params: tuple[tuple[str, int], ...] = ()

    @classmethod
    def make(
        cls, table: str, match: Mapping[str, MatchValue], action: str, params: Mapping[str, int] | None = None
    ) -> TableEntry:
        return cls(table, tuple(sorted(match.items())), action, tuple(sorted((params or {}).items())))

    def exact(self, name: str) -> int | None:
        """The value of the exact match field `name` (None: the entry does not match on it)."""
        for key, value in self.match:
            if key == name:
                if isinstance(value, Lpm):
                    raise TypeError(f"{self.table}: {name} is an LPM match, not an exact one")
                return value
        return None

    @property
    def key(self) -> tuple:
        """What identifies the entry on the switch (table and match)."""
        return ("table", self.table, self.match)

    def __str__(self) -> str:
        short = self.table.rsplit(".", 1)[-1]
        m = ", ".join(f"{k}={_fmt(v)}" for k, v in self.match)
        p = ", ".join(f"{k}={v}" for k, v in self.params)
        return f"{short}[{m}] -> {self.action}({p})"

    def encode(self, schema: P4Schema) -> p4runtime_pb2.Entity:
        table = schema.table(self.table)
        msg = p4runtime_pb2.TableEntry(table_id=table.id)
        try:
            names = {name for name, _ in self.match}
            missing = [f.name for f in table.match_fields if f.name not in names]
            if missing:
                raise P4InfoError(f"missing match field(s) {missing}")
            for name, value in self.match:
                info = table.field(name)
                fm = msg.match.add(field_id=info.id)
                if info.match_type == "exact":
                    if isinstance(value, Lpm):
                        raise P4InfoError(f"match field {name!r} is exact, got a prefix")
                    fm.exact.value = encode_int(value, info.bitwidth)
                elif info.match_type == "lpm":
                    lpm = value if isinstance(value, Lpm) else Lpm(value, info.bitwidth)
                    if not 0 < lpm.prefix_len <= info.bitwidth:
                        # prefix 0 is the default route: P4Runtime forbids it as an entry
                        raise P4InfoError(
                            f"match field {name!r}: prefix length {lpm.prefix_len} not in 1..{info.bitwidth}"
                        )
                    host_bits = info.bitwidth - lpm.prefix_len
                    fm.lpm.value = encode_int((lpm.value >> host_bits) << host_bits, info.bitwidth)
                    fm.lpm.prefix_len = lpm.prefix_len
                else:
                    raise P4InfoError(
                        f"match field {name!r} has match type {info.match_type}, which p4ina does not use"
                    )
            action = schema.action(table, self.action)
            msg.action.action.action_id = action.id
            given = {name for name, _ in self.params}
            missing = [p.name for p in action.params if p.name not in given]
            if missing:
                raise P4InfoError(f"action {self.action!r}: missing parameter(s) {missing}")
            for name, value in self.params:
                pinfo = action.param(name)
                msg.action.action.params.add(param_id=pinfo.id, value=encode_int(value, pinfo.bitwidth))
        except P4InfoError as ex:
            raise P4InfoError(f"{self}: {ex}") from ex
        return p4runtime_pb2.Entity(table_entry=msg)

    @classmethod
    def decode(cls, msg: p4runtime_pb2.TableEntry, schema: P4Schema) -> TableEntry:
        table = schema.table_by_id(msg.table_id)
        match: dict[str, MatchValue] = {}
        for fm in msg.match:
            info = table.field_by_id(fm.field_id)
            kind = fm.WhichOneof("field_match_type")
            if kind == "exact":
                match[info.name] = decode_int(fm.exact.value)
            elif kind == "lpm":
                match[info.name] = Lpm(decode_int(fm.lpm.value), fm.lpm.prefix_len)
            else:
                raise P4InfoError(f"table {table.name!r}: unexpected {kind} match on {info.name!r}")
        action = schema.action_by_id(msg.action.action.action_id)
        params = {_param_name(action, p.param_id): decode_int(p.value) for p in msg.action.action.params}
        return cls.make(table.name, match, action.name.rsplit(".", 1)[-1], params)


def _param_name(action: ActionInfo, pid: int) -> str:
    for p in action.params:
        if p.id == pid:
            return p.name
    raise P4InfoError(f"action {action.name!r} has no parameter id {pid}")


def _fmt(v: MatchValue) -> str:
    return f"{v.value:#x}/{v.prefix_len}" if isinstance(v, Lpm) else str(v)


@dataclass(frozen=True)
class MulticastGroup:
    group_id: int
    replicas: tuple[tuple[int, int], ...]  # (egress port, instance = rid), sorted

    @classmethod
    def make(cls, group_id: int, replicas: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> MulticastGroup:
        return cls(group_id, tuple(sorted(replicas)))

    @property
    def key(self) -> tuple:
        return ("mcast", self.group_id)

    def __str__(self) -> str:
        reps = ", ".join(f"port {p} rid {r}" for p, r in self.replicas)
        return f"multicast group {self.group_id} [{reps}]"

    def encode(self, schema: P4Schema | None = None) -> p4runtime_pb2.Entity:
        if not 0 < self.group_id < 1 << 16:
            raise P4InfoError(f"{self}: group id must be 1..65535")
        mg = p4runtime_pb2.MulticastGroupEntry(multicast_group_id=self.group_id)
        for port, rid in self.replicas:
            mg.replicas.add(egress_port=port, instance=rid)
        return p4runtime_pb2.Entity(
            packet_replication_engine_entry=p4runtime_pb2.PacketReplicationEngineEntry(multicast_group_entry=mg)
        )

    @classmethod
    def decode(cls, msg: p4runtime_pb2.MulticastGroupEntry) -> MulticastGroup:
        reps = []
        for r in msg.replicas:
            port = r.egress_port if r.egress_port or not r.port else decode_int(r.port)
            reps.append((port, r.instance))
        return cls.make(msg.multicast_group_id, reps)


Entity = TableEntry | MulticastGroup


def decode_entity(msg: p4runtime_pb2.Entity, schema: P4Schema) -> Entity:
    kind = msg.WhichOneof("entity")
    if kind == "table_entry":
        return TableEntry.decode(msg.table_entry, schema)
    if kind == "packet_replication_engine_entry" and msg.packet_replication_engine_entry.HasField(
        "multicast_group_entry"
    ):
        return MulticastGroup.decode(msg.packet_replication_engine_entry.multicast_group_entry)
    raise P4InfoError(f"cannot decode a {kind} entity")
