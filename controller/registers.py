"""Register cells over P4Runtime: read, write, flip a bit (fault injection), by name.

P4Runtime's register entities are the embedded switch's extension: BMv2's PI
answers UNIMPLEMENTED for them (p4lang/PI issue 376), so nothing in normal
operation needs them. They serve the faults experiment (bit flips in a
switch's SRAM, to show the end-to-end checksum catches them) and reading the
install tokens back from the switches after a lost state file.
"""

from __future__ import annotations

from collections.abc import Iterable

from controller.client import SwitchClient
from controller.p4info import P4Schema, decode_int, encode_int
from p4proto import p4runtime_pb2


def read_register(client: SwitchClient, schema: P4Schema, name: str, index: int) -> int:
    info = schema.register(name)
    ent = p4runtime_pb2.Entity()
    ent.register_entry.register_id = info.id
    ent.register_entry.index.index = index
    for got in client.read([ent]):
        return decode_int(got.register_entry.data.bitstring)
    raise LookupError(f"register {name}[{index}] not returned by {client.name}")


def write_register(client: SwitchClient, schema: P4Schema, name: str, index: int, value: int) -> None:
    info = schema.register(name)
    ent = p4runtime_pb2.Entity()
    ent.register_entry.register_id = info.id
    ent.register_entry.index.index = index
    ent.register_entry.data.bitstring = encode_int(value, info.bitwidth)
    client.write([p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY, entity=ent)])


def flip_bit(client: SwitchClient, schema: P4Schema, name: str, index: int, bit: int) -> tuple[int, int]:
    """Flip one bit of a register cell (a single-event upset in the switch's memory); (before, after)."""
    info = schema.register(name)
    if not 0 <= bit < info.bitwidth:
        raise ValueError(f"register {name} is {info.bitwidth} bits wide; bit {bit} does not exist")
    before = read_register(client, schema, name, index)
    after = before ^ (1 << bit)
    write_register(client, schema, name, index, after)
    return before, after


def read_register_all(client: SwitchClient, schema: P4Schema, name: str) -> list[int]:
    """Every cell of a register in one Read (an entry without an index: the whole array), in index order."""
    info = schema.register(name)
    ent = p4runtime_pb2.Entity()
    ent.register_entry.register_id = info.id
    cells: dict[int, int] = {}
    for got in client.read([ent]):
        cells[got.register_entry.index.index] = decode_int(got.register_entry.data.bitstring)
    if len(cells) != info.size:
        raise LookupError(f"register {name}: {client.name} returned {len(cells)} of {info.size} cells")
    return [cells[i] for i in range(info.size)]


def read_register_cells(client: SwitchClient, schema: P4Schema, name: str, indices: Iterable[int]) -> dict[int, int]:
    """Some cells of a register in one Read (an entry per index): index -> value."""
    info = schema.register(name)
    want = list(indices)
    ents = []
    for i in want:
        ent = p4runtime_pb2.Entity()
        ent.register_entry.register_id = info.id
        ent.register_entry.index.index = i
        ents.append(ent)
    cells = (
        {got.register_entry.index.index: decode_int(got.register_entry.data.bitstring) for got in client.read(ents)}
        if ents
        else {}
    )
    missing = [i for i in want if i not in cells]
    if missing:
        raise LookupError(f"register {name}: {client.name} did not return cells {missing[:5]}")
    return cells
