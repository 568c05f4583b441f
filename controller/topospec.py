"""Topology specifications as users write them: 'fat-tree:K', 'leaf-spine:LxSxH' or a topology JSON path.

One parser for every entry point (the p4ina CLI, the emulation, the simulation), so a specification means
the same fabric everywhere, and one check: a file is read and checked completely against the published
format (controller.toposchema, docs/topology.md) before anything is built or started. Every refusal is a
TopologyError of one line naming the specification or file, the field and the fix.
"""

from __future__ import annotations

from pathlib import Path

from controller.fattree import SUPPORTED_K, fat_tree
from controller.leafspine import leaf_spine
from controller.topology import Topology, TopologyError
from controller.toposchema import SPECS

BUILDERS = ("fat-tree", "leaf-spine")


def load_topology(spec: str, *, option: str = "--topology") -> Topology:
    """'fat-tree:K', 'leaf-spine:LxSxH' (leaves x spines x hosts per leaf) or a topology JSON path.

    `option` is how the user gave it, for the message (a file's message names the file instead)."""
    kind, sep, arg = spec.partition(":")
    where = f"{option} {spec!r}" if option else repr(spec)
    if sep and kind == "fat-tree":
        try:
            k = int(arg)
        except ValueError:
            raise TopologyError(
                f"{where}: K must be an integer; want fat-tree:K with K even, {SUPPORTED_K[0]}..{SUPPORTED_K[-1]} "
                "(e.g. fat-tree:4)"
            ) from None
        if k not in SUPPORTED_K:
            raise TopologyError(
                f"{where}: K is {k}; want an even K, {SUPPORTED_K[0]}..{SUPPORTED_K[-1]} (e.g. fat-tree:4)"
            )
        return fat_tree(k)
    if sep and kind == "leaf-spine":
        try:
            leaves, spines, hosts = (int(x) for x in arg.lower().split("x"))
        except ValueError:
            raise TopologyError(
                f"{where}: want leaf-spine:LxSxH, three integers (leaves, spines, hosts per leaf), "
                "e.g. leaf-spine:4x2x4"
            ) from None
        try:
            return leaf_spine(leaves, spines, hosts)
        except TopologyError as ex:
            raise TopologyError(f"{where}: {str(ex).removeprefix('leaf-spine: ')}; e.g. leaf-spine:4x2x4") from None
    path = Path(spec)
    if not path.exists() and sep and "/" not in spec and not spec.endswith(".json"):
        raise TopologyError(f"{where}: no such file, and {kind!r} is not a builder; want {SPECS}")
    return Topology.load(path)
