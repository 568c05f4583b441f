"""Compile a program once: generated source cached in this process and on disk.

An emulation starts one switch process per switch, all loading the same p4ina.json; the
common-subexpression pass is most of the ~2 s of CPU a load costs, so its output is kept
in `$P4INA_SOFTSWITCH_CACHE` (default `$XDG_CACHE_HOME/p4ina/softswitch`, `off` disables),
keyed by the JSON and the interpreter's own source. A cache hit still rebuilds everything
else (program model, layout, tables) by running the code generator without that pass,
which yields the same functions bar the rewritten action bodies, so nothing but text is
trusted from disk, and an unreadable or stale entry only costs a full compile.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

from emulation.softswitch import codegen, program

LOG = logging.getLogger(__name__)

_HERE = Path(__file__).parent
_SOURCES = ("codegen.py", "cse.py", "program.py", "hashing.py", "compilecache.py")
FINGERPRINT = hashlib.sha256(b"".join((_HERE / name).read_bytes() for name in _SOURCES)).hexdigest()[:16]

_MEMORY: OrderedDict[str, tuple[program.Program, codegen.Compiler, str]] = OrderedDict()
_LOCK = threading.Lock()
_KEEP = 4


def cache_dir() -> Path | None:
    setting = os.environ.get("P4INA_SOFTSWITCH_CACHE")
    if setting is not None:
        return None if setting.strip().lower() in ("", "0", "off", "no", "false") else Path(setting)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "p4ina" / "softswitch"


def compiled(raw: bytes) -> tuple[program.Program, codegen.Compiler, str]:
    """(program model, compiler state, generated source) for a BMv2 JSON document.

    Only immutable results are shared between switches: the model, the layout, the
    generated source and the read-only objects it refers to.
    """
    key = hashlib.sha256(raw + FINGERPRINT.encode()).hexdigest()
    with _LOCK:
        hit = _MEMORY.get(key)
        if hit is not None:
            _MEMORY.move_to_end(key)
            return hit
    prog = program.load(raw)
    result = _from_disk(key, prog) or _fresh(key, prog)
    with _LOCK:
        _MEMORY[key] = result
        while len(_MEMORY) > _KEEP:
            _MEMORY.popitem(last=False)
    return result


def _fresh(key: str, prog: program.Program) -> tuple[program.Program, codegen.Compiler, str]:
    comp = codegen.Compiler(prog)
    source = comp.compile()
    directory = cache_dir()
    if directory is not None:
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=directory, suffix=".tmp", delete=False) as f:
                f.write(source)
            os.replace(f.name, directory / f"{key}.py")
        except OSError as ex:
            LOG.debug("cannot cache generated program in %s: %s", directory, ex)
    return prog, comp, source


def _from_disk(key: str, prog: program.Program) -> tuple[program.Program, codegen.Compiler, str] | None:
    directory = cache_dir()
    if directory is None:
        return None
    path = directory / f"{key}.py"
    try:
        source = path.read_text()
        compile(source, str(path), "exec")
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    comp = codegen.Compiler(prog, eliminate_common=False)
    comp.compile()
    LOG.debug("generated program from cache %s", path)
    return prog, comp, source
