"""The committed p4c outputs come from the committed P4 sources."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from controller import names

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("build_p4", ROOT / "scripts" / "build_p4.py")
build_p4 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_p4)


def test_compiled_outputs_match_the_sources() -> None:
    assert build_p4.problems() == []


def test_manifest_names_the_compiler_and_every_source() -> None:
    manifest = json.loads(build_p4.MANIFEST.read_text())
    assert "p4c" in manifest["compiler"].lower() or re.match(r"\d+\.\d+", manifest["compiler"])
    assert manifest["sources"] == [p.relative_to(ROOT).as_posix() for p in build_p4.source_files()]


def test_a_changed_source_is_detected(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "p4", tmp_path / "p4")
    monkeypatch.setattr(build_p4, "ROOT", tmp_path)
    monkeypatch.setattr(build_p4, "P4_DIR", tmp_path / "p4")
    monkeypatch.setattr(build_p4, "BUILD", tmp_path / "p4" / "build")
    monkeypatch.setattr(build_p4, "MANIFEST", tmp_path / "p4" / "build" / "manifest.json")
    assert build_p4.problems() == []
    forwarding = tmp_path / "p4" / "include" / "forwarding.p4"
    forwarding.write_text(forwarding.read_text().replace("size = 1024;", "size = 2048;"))
    assert any("sources changed" in p for p in build_p4.problems())


@pytest.mark.p4c
@pytest.mark.skipif(
    not os.environ.get("P4INA_RECOMPILE_TEST"),
    reason="recompiling p4ina.p4 takes about 3 minutes of p4c on 2 cores, more than the suite's budget "
    "allows: run with P4INA_RECOMPILE_TEST=1 (the source-hash checks above always run)",
)
def test_recompiling_reproduces_the_committed_outputs() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        json_path, p4info_path, warnings = build_p4.compile_to(Path(tmp))
        assert json.loads(json_path.read_text()) == json.loads(build_p4.JSON_OUT.read_text())
        assert p4info_path.read_text() == build_p4.P4INFO_OUT.read_text()


def _p4_consts() -> dict[str, int]:
    text = (ROOT / "p4" / "include" / "types.p4").read_text()
    consts = {m[0]: int(m[1], 0) for m in re.findall(r"const bit<\d+> (\w+) = (\w+);", text)}
    consts.update({m[0]: int(m[1]) for m in re.findall(r"#define (\w+) (\d+)\s", text)})
    return consts


def test_controller_constants_match_the_p4_program() -> None:
    p4 = _p4_consts()
    for name in ("MAX_JOBS", "NUM_SLOTS", "NUM_DROP_REASONS", "ROLE_ROOT", "ROLE_INNER"):
        assert getattr(names, name) == p4[name], name
    drops = {k: v for k, v in p4.items() if k.startswith("DROP_") and k not in ("DROP_NONE", "DROP_PORT")}
    assert {getattr(names, k) for k in drops if hasattr(names, k)} == set(drops.values())
    assert names.DROP_REASONS.keys() == set(drops.values()), "every drop reason has a name in controller/names.py"
