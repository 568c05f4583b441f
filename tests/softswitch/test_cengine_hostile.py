"""The C engine is immune to hostile JSON by construction: no text from the program reaches the C compiler.

The names of test_hostile_json.py, and names aimed at C (closing a comment or a string, a newline
followed by a preprocessor line or a constructor function that would create a marker file, a
backslash that splices lines, trigraphs), replace every name of the test programs. Each program is
loaded with the C engine required: it runs on the C engine (a name is data, never a reason to fall
back), the generated C contains none of the hostile text, the marker never appears (neither at
compile time, load time nor when packets run), and every packet gives what the Python engine gives.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from native import cbuild
from softswitch import SoftSwitch, SoftSwitchError
from tests.softswitch.test_hostile_json import (
    PACKETS,
    STRUCTURAL,
    TARGETS,
    every_name,
    hostile_names,
    program_doc,
    rename,
)

pytestmark = pytest.mark.skipif(cbuild.toolchain() is None, reason="[cc] no C compiler (cc) on PATH")


def c_hostile_names(marker: Path) -> Iterator[tuple[str, str]]:
    """(label, name) pairs; each would create `marker` if it reached the C source as text."""
    call = f'system("touch {marker}")'
    ctor = f"__attribute__((constructor)) static void pwn(void) {{ {call}; }}"
    yield "close-comment", f"x */ {ctor} /* y"
    yield "close-string", f'x"); {call}; ("'
    yield "newline-ctor", f"x\n{ctor}\n"
    yield "preprocessor", f'x\n#include "{marker}"\n#define p4sw_new {call}\n'
    yield "line-splice", f"x\\\n{ctor}\n// \\"
    yield "trigraph", f"x??/\n{ctor}"
    yield "pragma", 'x\n_Pragma("GCC poison p4sw_new")\n'
    yield "asm", f'x; __asm__("call system"); {call};'
    yield from hostile_names(marker)


def c_cases(marker: Path) -> Iterator[tuple[str, bytes]]:
    for prog, targets in TARGETS.items():
        base = program_doc(prog)
        for label, hostile in c_hostile_names(marker):
            for target in targets[:2]:
                yield f"{prog}:{target}:{label}", json.dumps(rename(base, target, hostile)).encode()
            doc = base
            for i, target in enumerate(sorted(every_name(base) - STRUCTURAL, key=len, reverse=True)):
                doc = rename(doc, target, f"{hostile}{i}")
            yield f"{prog}:all:{label}", json.dumps(doc).encode()


FORBIDDEN = ('system("', "pwn(", "_Pragma", "__asm__", '#include "/', "poison")


def test_hostile_names_never_reach_the_c_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("P4INA_SOFTSWITCH_CACHE", str(tmp_path / "cache"))
    marker = tmp_path / "pwned"
    on_c = refused = 0
    for label, raw in c_cases(marker):
        sw, ref = SoftSwitch(name="hostile-c", engine="c"), SoftSwitch(name="hostile-py", engine="python")
        try:
            ref.load_program(raw)
        except (SoftSwitchError, ValueError) as ex:
            assert str(ex), f"{label}: a refusal must say why"
            with pytest.raises((SoftSwitchError, ValueError)):
                sw.load_program(raw)
            refused += 1
            continue
        finally:
            assert not marker.exists(), f"{label}: loading the JSON ran code from it"
        sw.load_program(raw)
        assert not marker.exists(), f"{label}: compiling or loading the C ran code from the JSON"
        assert sw.engine == "c", f"{label}: a name made the program fall back to the Python engine"
        source = sw.generated_source or ""
        for bad in FORBIDDEN + (str(marker),):
            assert bad not in source, f"{label}: {bad!r} is in the generated C"
        for port in (0, 1, 2):
            for pkt in PACKETS:
                assert sw.process_packet(port, pkt) == ref.process_packet(port, pkt), label
        assert not marker.exists(), f"{label}: a packet ran code from the JSON"
        on_c += 1
    assert on_c > 50 and refused < on_c, (on_c, refused)
