"""Compile a program once per process: the switches of one process share the compiled program.

Nothing is cached on disk. The switch runs as root and executes what it compiles, so generated
code read back from a cache directory would run whatever another user managed to write there.
A cache keyed by the JSON and the compiler's own source is kept in memory only, for several
switches in one process (tests, `emulation.localnet`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

from softswitch.compiler import codegen, program
from softswitch.compiler.once import SharedBuilds

LOG = logging.getLogger(__name__)

_HERE = Path(__file__).parent
_SOURCES = (
    "codegen.py",
    "lower.py",
    "ir.py",
    "cse.py",
    "pyemit.py",
    "program.py",
    "hashing.py",
    "compilecache.py",
    "once.py",
)
FINGERPRINT = hashlib.sha256(b"".join((_HERE / name).read_bytes() for name in _SOURCES)).hexdigest()[:16]

_MEMORY: SharedBuilds[codegen.Compiled] = SharedBuilds(keep=4)


def compiled(raw: bytes) -> codegen.Compiled:
    """The compiled program for a BMv2 JSON document.

    Only immutable results are shared between switches: the model, the IR, the generated source
    and the read-only objects it refers to; every switch builds its own state around them. Switches
    that ask at the same time wait for one compile (once.py).
    """
    key = hashlib.sha256(raw + FINGERPRINT.encode()).hexdigest()

    def build() -> codegen.Compiled:
        t0 = time.perf_counter()
        comp = codegen.compile_program(program.load(raw))
        LOG.debug("compiled program %s in %.2f s", key[:12], time.perf_counter() - t0)
        return comp

    return _MEMORY.get(key, build)
