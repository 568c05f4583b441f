"""Compiled programs are shared in memory only: nothing generated is ever read back from disk and run.

The switch runs as root (AF_PACKET) and used to execute generated source it read back from a
predictable path under the user's cache directory: whoever could write there could run code as
root. Compiling is now fast enough (a fraction of a second for p4ina.json) that the disk cache was
removed; these tests plant tampered files wherever a cache could be looked up.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from softswitch import SoftSwitch
from softswitch.compiler import compilecache

PROGRAMS = Path(__file__).parent / "programs"
IN = b"\x05\x07\x01\x02\x00\x00\x00\x00\x00\x09pl"


def fresh_switch(raw: bytes) -> SoftSwitch:
    compilecache._MEMORY.clear()  # as a new switch process would start
    sw = SoftSwitch(engine="python")  # the Python engine writes nothing (the C engine's cache: test_cengine_cache.py)
    sw.load_program(raw)
    return sw


def test_a_compiled_program_is_shared_between_switches() -> None:
    raw = (PROGRAMS / "arith.json").read_bytes()
    first = fresh_switch(raw)
    second = SoftSwitch(engine="python")
    second.load_program(raw)
    assert second.generated_source == first.generated_source
    assert second.process_packet(1, IN) == first.process_packet(1, IN)
    assert second.register_read("ArithIngress.acc", 2) == first.register_read("ArithIngress.acc", 2)  # own state


def test_a_tampered_cache_file_is_never_executed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache, xdg = tmp_path / "cache", tmp_path / "xdg"
    monkeypatch.setenv("P4INA_SOFTSWITCH_CACHE", str(cache))
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    raw = (PROGRAMS / "arith.json").read_bytes()
    good = fresh_switch(raw)
    marker = tmp_path / "pwned"
    evil = f"__import__('pathlib').Path({str(marker)!r}).touch()\n" + (good.generated_source or "")
    key = hashlib.sha256(raw + compilecache.FINGERPRINT.encode()).hexdigest()
    for d in (cache, xdg / "p4ina" / "softswitch"):
        d.mkdir(parents=True, exist_ok=True)
        for f in {*d.rglob("*.py"), d / f"{key}.py"}:
            f.write_text(evil)  # what another user who can write there would do
    again = fresh_switch(raw)
    assert not marker.exists(), "the switch executed a file from its cache directory"
    assert again.generated_source == good.generated_source
    assert again.process_packet(1, IN) == good.process_packet(1, IN)
    assert not marker.exists()


def test_nothing_generated_is_written_to_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("P4INA_SOFTSWITCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    fresh_switch((PROGRAMS / "arith.json").read_bytes())
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
