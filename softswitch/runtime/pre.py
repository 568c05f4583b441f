"""Packet replication engine: simple_switch's multicast groups as (egress_port, rid) lists."""

from __future__ import annotations

from softswitch.errors import EntryNotFoundError, InvalidEntryError

MAX_PORT = 511
MAX_RID = 0xFFFF
MAX_GROUP = 0xFFFF


class ReplicationEngine:
    """Groups map a nonzero mcast_grp to the ordered replicas made when ingress sets it."""

    def __init__(self) -> None:
        self.groups: dict[int, tuple[tuple[int, int], ...]] = {}

    def set(self, group_id: int, replicas: list[tuple[int, int]]) -> None:
        if not isinstance(group_id, int) or not 1 <= group_id <= MAX_GROUP:
            raise InvalidEntryError(f"multicast group id {group_id!r} outside 1..{MAX_GROUP} (0 means 'no multicast')")
        clean = []
        for rep in replicas:
            try:
                port, rid = rep
            except (TypeError, ValueError) as ex:
                raise InvalidEntryError(
                    f"multicast group {group_id}: replica {rep!r} is not (egress_port, rid)"
                ) from ex
            if not isinstance(port, int) or not 0 <= port <= MAX_PORT:
                raise InvalidEntryError(f"multicast group {group_id}: egress port {port!r} outside 0..{MAX_PORT}")
            if not isinstance(rid, int) or not 0 <= rid <= MAX_RID:
                raise InvalidEntryError(f"multicast group {group_id}: replication id {rid!r} outside 0..{MAX_RID}")
            clean.append((port, rid))
        self.groups[group_id] = tuple(clean)

    def delete(self, group_id: int) -> None:
        if group_id not in self.groups:
            raise EntryNotFoundError(f"multicast group {group_id} does not exist")
        del self.groups[group_id]

    def snapshot(self) -> dict[int, list[tuple[int, int]]]:
        return {g: list(r) for g, r in self.groups.items()}

    def clear(self) -> None:
        self.groups.clear()
