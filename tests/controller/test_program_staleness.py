"""A P4 program edited but not recompiled is named, not run silently (and the committed one is current)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from controller import api
from tests.common import REPO


def test_the_committed_program_matches_its_sources() -> None:
    assert api.program_staleness() is None


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the checkout's p4/ folder, which the controller takes as its program."""
    shutil.copytree(REPO / "p4", tmp_path / "p4")
    monkeypatch.setattr(api, "PROGRAM_DIR", tmp_path / "p4" / "build")
    monkeypatch.setattr(api, "PROGRAM_MANIFEST", tmp_path / "p4" / "build" / "manifest.json")
    return tmp_path


def test_an_edited_source_makes_the_program_stale(checkout: Path) -> None:
    assert api.program_staleness() is None
    src = checkout / "p4" / "include" / "forwarding.p4"
    src.write_text(src.read_text() + "\n// an edit\n")
    why = api.program_staleness()
    assert why is not None and "changed since p4/build was compiled" in why and "make p4" in why


def test_a_new_source_file_makes_it_stale_too(checkout: Path) -> None:
    (checkout / "p4" / "include" / "extra.p4").write_text("// new\n")
    assert api.program_staleness() is not None


def test_a_missing_manifest_is_named(checkout: Path) -> None:
    (checkout / "p4" / "build" / "manifest.json").unlink()
    assert "manifest.json is missing" in (api.program_staleness() or "")


def test_an_installed_program_has_no_sources_to_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = tmp_path / "controller" / "program"
    shipped.mkdir(parents=True)
    (shipped / "manifest.json").write_text(json.dumps({"sources_sha256": "x"}))
    monkeypatch.setattr(api, "PROGRAM_DIR", shipped)
    monkeypatch.setattr(api, "PROGRAM_MANIFEST", shipped / "manifest.json")
    assert api.program_staleness() is None
