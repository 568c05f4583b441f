"""The compiled-program cache gives the same generated code, and a bad entry only costs a recompile."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulation.softswitch import SoftSwitch, compilecache

PROGRAMS = Path(__file__).parent / "programs"
IN = b"\x05\x07\x01\x02\x00\x00\x00\x00\x00\x09pl"


def fresh_switch() -> SoftSwitch:
    compilecache._MEMORY.clear()  # force the disk path
    sw = SoftSwitch()
    sw.load_program((PROGRAMS / "arith.json").read_bytes())
    return sw


def test_disk_cache_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("P4INA_SOFTSWITCH_CACHE", str(tmp_path))
    first = fresh_switch()
    entries = list(tmp_path.glob("*.py"))
    assert len(entries) == 1
    second = fresh_switch()
    assert second.generated_source == first.generated_source
    assert second.process_packet(1, IN) == first.process_packet(1, IN)


def test_corrupt_entry_is_recompiled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("P4INA_SOFTSWITCH_CACHE", str(tmp_path))
    good = fresh_switch()
    (entry,) = tmp_path.glob("*.py")
    entry.write_text("def broken(:\n")
    again = fresh_switch()
    assert again.generated_source == good.generated_source
    assert again.process_packet(1, IN) == good.process_packet(1, IN)


def test_cache_can_be_switched_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("P4INA_SOFTSWITCH_CACHE", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    fresh_switch()
    assert compilecache.cache_dir() is None
    assert not list(tmp_path.rglob("*.py"))
