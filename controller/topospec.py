"""Topology specifications as users write them: 'fat-tree:K', 'leaf-spine:LxSxH' or a topology JSON path.

One parser for every entry point (the p4ina CLI, the emulation, the simulation), so a
specification means the same fabric everywhere.
"""

from __future__ import annotations

from pathlib import Path

from controller.fattree import fat_tree
from controller.leafspine import leaf_spine
from controller.topology import Topology, TopologyError


def load_topology(spec: str) -> Topology:
    """'fat-tree:K', 'leaf-spine:LxSxH' (leaves x spines x hosts per leaf) or a topology JSON path."""
    kind, sep, arg = spec.partition(":")
    if sep and kind == "fat-tree":
        try:
            return fat_tree(int(arg))
        except ValueError as ex:
            raise TopologyError(f"--topology {spec!r}: {ex}") from ex
    if sep and kind == "leaf-spine":
        try:
            leaves, spines, hosts = (int(x) for x in arg.split("x"))
        except ValueError as ex:
            raise TopologyError(
                f"--topology {spec!r}: want leaf-spine:LEAVESxSPINESxHOSTS, e.g. leaf-spine:4x2x4"
            ) from ex
        return leaf_spine(leaves, spines, hosts)
    return Topology.load(Path(spec))
