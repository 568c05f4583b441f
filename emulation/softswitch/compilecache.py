"""Compile a program once per process: the switches of one process share the compiled program.

Nothing is cached on disk. The switch runs as root and executes what it compiles, so generated
code read back from a cache directory (as an earlier version did, from a predictable path under
the user's cache directory) would run whatever another user managed to write there. A cache
keyed by the JSON and the interpreter's own source is kept in memory only, for several switches
in one process (tests, `emulation.serve`).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from pathlib import Path

from emulation.softswitch import codegen, program

LOG = logging.getLogger(__name__)

_HERE = Path(__file__).parent
_SOURCES = ("codegen.py", "lower.py", "ir.py", "cse.py", "pyemit.py", "program.py", "hashing.py", "compilecache.py")
FINGERPRINT = hashlib.sha256(b"".join((_HERE / name).read_bytes() for name in _SOURCES)).hexdigest()[:16]

_MEMORY: OrderedDict[str, codegen.Compiled] = OrderedDict()
_LOCK = threading.Lock()
_KEEP = 4


def compiled(raw: bytes) -> codegen.Compiled:
    """The compiled program for a BMv2 JSON document.

    Only immutable results are shared between switches: the model, the IR, the generated source
    and the read-only objects it refers to; every switch builds its own state around them.
    """
    key = hashlib.sha256(raw + FINGERPRINT.encode()).hexdigest()
    with _LOCK:
        hit = _MEMORY.get(key)
        if hit is not None:
            _MEMORY.move_to_end(key)
            return hit
    result = codegen.compile_program(program.load(raw))
    with _LOCK:
        _MEMORY[key] = result
        while len(_MEMORY) > _KEEP:
            _MEMORY.popitem(last=False)
    return result
