"""The C engine's compile cache: owner-only, checked before every use, compiled once for many processes.

The switch runs as root and loads what it compiles. The cache directory must be the effective user's
alone (0700), every cached file too, the cached source must be the one just generated and the library
must match the digest recorded when it was compiled; otherwise nothing cached is loaded (a tampered
library's constructor would run as root at dlopen). Twenty switch processes loading one program
compile it once (an flock per cache key).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from native import cbuild
from softswitch import SoftSwitch
from softswitch.compiler import cemit, compilecache
from softswitch.runtime import cengine
from tests.softswitch import fake_switch

pytestmark = pytest.mark.skipif(cbuild.toolchain() is None, reason="[cc] no C compiler (cc) on PATH")

ROOT = Path(__file__).resolve().parents[2]
FRAME = bytes.fromhex("0200000000020200000000010800") + bytes(50)


def unique_program(tag: int) -> str:
    """The tiny program with a register size no other test uses: a cache key of its own."""
    doc = copy.deepcopy(fake_switch.TINY_JSON_DOC)
    doc["register_arrays"][0]["size"] = 1000 + tag
    return json.dumps(doc)


def key_for(raw: str) -> str:
    comp = compilecache.compiled(raw.encode())
    source = cengine.runtime_source(cemit.emit(comp.module, cengine.options_for(comp)))
    tc = cbuild.toolchain()
    assert tc is not None
    return cbuild.key_of(tc, source)


def fresh(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    """A cache directory of the test's own, and no program remembered in memory."""
    monkeypatch.setenv("P4INA_SOFTSWITCH_CACHE", str(cache))
    monkeypatch.setattr(cengine, "_PROGRAMS", type(cengine._PROGRAMS)())


def load(raw: str) -> SoftSwitch:
    sw = SoftSwitch(engine="c")
    sw.load_program(raw)
    assert sw.engine == "c"
    assert sw.process_packet(1, FRAME) == [(1, FRAME)]
    return sw


def test_the_cache_is_created_owner_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    fresh(monkeypatch, cache)
    raw = unique_program(1)
    load(raw)
    st = os.stat(cache)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    key = key_for(raw)
    for suffix in (".c", ".so", ".sha256"):
        f = os.stat(cache / f"{key}{suffix}")
        assert f.st_uid == os.geteuid() and not f.st_mode & 0o077, suffix


def test_a_cache_directory_others_may_use_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "shared"
    cache.mkdir(mode=0o755)
    os.chmod(cache, 0o777)
    fresh(monkeypatch, cache)
    with caplog.at_level(logging.WARNING, logger="softswitch"):
        load(unique_program(2))  # still the C engine: compiled privately, uncached
    assert any("cache refused" in r.getMessage() and "mode 777" in r.getMessage() for r in caplog.records)
    assert list(cache.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the directory to another user")
def test_a_cache_directory_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "theirs"
    cache.mkdir(mode=0o700)
    os.chown(cache, 65534, 65534)
    fresh(monkeypatch, cache)
    with caplog.at_level(logging.WARNING, logger="softswitch"):
        load(unique_program(3))
    assert any("cache refused" in r.getMessage() and "owned by uid 65534" in r.getMessage() for r in caplog.records)
    assert list(cache.iterdir()) == []


def evil_library(tmp_path: Path, marker: Path) -> Path:
    """A shared object whose constructor would create `marker` if it were ever loaded."""
    src = tmp_path / "evil.c"
    src.write_text(
        textwrap.dedent(f"""
        #include <stdio.h>
        __attribute__((constructor)) static void evil(void) {{
            FILE *f = fopen("{marker}", "w");
            if (f) fclose(f);
        }}
        int p4sw_abi(void) {{ return {cemit.ABI}; }}
    """)
    )
    out = tmp_path / "evil.so"
    tc = cbuild.toolchain()
    assert tc is not None
    subprocess.run([tc.cc, "-shared", "-fPIC", "-o", str(out), str(src)], check=True, capture_output=True)
    return out


def load_in_a_new_process(cache: Path, raw: str) -> subprocess.CompletedProcess[str]:
    """A new switch process loading the program (this process has the good library mapped already)."""
    code = textwrap.dedent("""
        import logging, sys
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        from softswitch import SoftSwitch
        sw = SoftSwitch(engine="c")
        sw.load_program(sys.stdin.read())
        frame = bytes.fromhex("020000000002" "020000000001" "0800") + bytes(50)
        assert sw.engine == "c" and sw.process_packet(1, frame) == [(1, frame)]
        print("ok")
    """)
    env = dict(os.environ, P4INA_SOFTSWITCH_CACHE=str(cache), PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-c", code], input=raw, capture_output=True, text=True, env=env, timeout=300, cwd=str(ROOT)
    )


def test_a_tampered_library_is_never_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    fresh(monkeypatch, cache)
    raw = unique_program(4)
    load(raw)
    key = key_for(raw)
    marker = tmp_path / "pwned"
    os.replace(evil_library(tmp_path, marker), cache / f"{key}.so")  # what someone who could write there would do
    done = load_in_a_new_process(cache, raw)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
    assert not marker.exists(), "the tampered library was loaded"
    assert "does not match its recorded digest" in done.stderr


def test_a_tampered_source_is_never_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Library, digest and source all rewritten consistently: the source is not the one this switch generates."""
    cache = tmp_path / "cache"
    fresh(monkeypatch, cache)
    raw = unique_program(5)
    load(raw)
    key = key_for(raw)
    marker = tmp_path / "pwned"
    so = cache / f"{key}.so"
    os.replace(evil_library(tmp_path, marker), so)
    import hashlib

    (cache / f"{key}.sha256").write_text(hashlib.sha256(so.read_bytes()).hexdigest() + "\n")
    src = cache / f"{key}.c"
    src.write_text(src.read_text() + "\n/* changed */\n")
    done = load_in_a_new_process(cache, raw)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
    assert not marker.exists(), "a library was loaded for a source that is not the program's"
    assert "differs from the program's" in done.stderr


def test_a_cache_file_others_may_write_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    fresh(monkeypatch, cache)
    raw = unique_program(6)
    load(raw)
    key = key_for(raw)
    so = cache / f"{key}.so"
    os.chmod(so, 0o777)
    done = load_in_a_new_process(cache, raw)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "group or others may write it" in done.stderr and "compiled to C" in done.stderr
    assert not os.stat(so).st_mode & 0o022


def test_many_processes_loading_one_program_compile_it_once(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    raw = unique_program(7)
    code = textwrap.dedent("""
        import logging, sys
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        from softswitch import SoftSwitch
        sw = SoftSwitch(engine="c")
        sw.load_program(sys.stdin.read())
        print(sw.engine)
    """)
    env = dict(os.environ, P4INA_SOFTSWITCH_CACHE=str(cache), PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=str(ROOT),
        )
        for _ in range(6)
    ]
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(raw)
        p.stdin.close()
    outs = [(p.stdout.read(), p.stderr.read(), p.wait(timeout=300)) for p in procs]  # type: ignore[union-attr]
    assert all(rc == 0 and out.strip() == "c" for out, _, rc in outs), outs
    compiles = sum(err.count("compiled to C") for _, err, _ in outs)
    assert compiles == 1, [err[-500:] for _, err, _ in outs]


def test_the_cache_keeps_within_its_bound_least_recently_used_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fcntl

    cache = tmp_path / "cache"
    fresh(monkeypatch, cache)
    monkeypatch.setattr(cbuild, "CACHE_MAX_ENTRIES", 2)
    a, b, c, d = (unique_program(900 + i) for i in range(4))
    load(a)
    load(b)
    assert len(list(cache.glob("*.so"))) == 2
    fresh(monkeypatch, cache)  # forget the programs in memory: the next load of a comes from the cache...
    load(a)  # ...and makes it the most recently used
    load(c)  # three entries, two allowed: b, used longest ago, goes
    keys = {p.stem for p in cache.glob("*.so")}
    assert keys == {key_for(a), key_for(c)}
    assert not (cache / f"{key_for(b)}.c").exists() and not (cache / f"{key_for(b)}.sha256").exists()
    # an entry another process holds the lock of (compiling or loading it) is never removed
    fd = os.open(cache / f"{key_for(a)}.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        removed = cbuild.prune(cache, keep=None, max_entries=0, max_bytes=0)
        assert key_for(a) not in removed and key_for(c) in removed
    finally:
        os.close(fd)
    assert {p.stem for p in cache.glob("*.so")} == {key_for(a)}
    assert cbuild.prune(cache, keep=key_for(a), max_bytes=0, max_entries=0) == []  # nor the one just compiled
    monkeypatch.setenv("P4INA_SOFTSWITCH_CACHE_MB", "0")
    load(d)  # a size bound of 0 keeps just the entry just compiled
    assert {p.stem for p in cache.glob("*.so")} == {key_for(d)}
