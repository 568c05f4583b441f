"""The committed test programs' JSON and P4Info are what p4c-bm2-ss makes of their .p4 today.

Recompile after editing a program in tests/softswitch/programs/:
    cd tests/softswitch/programs && p4c-bm2-ss --arch v1model -o X.json --p4runtime-files X.p4info.txtpb X.p4
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent / "programs"
NAMES = sorted(p.stem for p in PROGRAMS.glob("*.p4"))


def test_every_program_is_committed_compiled() -> None:
    assert NAMES
    for name in NAMES:
        assert (PROGRAMS / f"{name}.json").exists(), f"{name}.json missing: compile {name}.p4"
        assert (PROGRAMS / f"{name}.p4info.txtpb").exists(), f"{name}.p4info.txtpb missing: compile {name}.p4"


@pytest.mark.p4c
@pytest.mark.parametrize("name", NAMES)
def test_committed_outputs_are_current(name: str, tmp_path: Path) -> None:
    out_json, out_info = tmp_path / f"{name}.json", tmp_path / f"{name}.p4info.txtpb"
    # run from the programs folder so source paths inside the JSON match the committed ones
    subprocess.run(
        ["p4c-bm2-ss", "--arch", "v1model", "-o", str(out_json), "--p4runtime-files", str(out_info), f"{name}.p4"],
        cwd=PROGRAMS,
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert out_json.read_bytes() == (PROGRAMS / f"{name}.json").read_bytes(), (
        f"recompile {name}.p4 (see module docstring)"
    )
    assert out_info.read_bytes() == (PROGRAMS / f"{name}.p4info.txtpb").read_bytes()
