"""Compile C into shared objects with the system compiler, cached by content hash, and load them safely.

The switch and the host agents run as root and load what they compile, so the cache must never hand
them a library someone else could have written:

* the cache directory ($P4INA_SOFTSWITCH_CACHE, else $XDG_CACHE_HOME/p4ina/softswitch-c, else
  ~/.cache/p4ina/softswitch-c) is created mode 0700 and used only if it is a real directory owned by
  the effective user with no group or other permissions; otherwise it is refused (a warning) and the
  library is compiled into a private temporary directory instead, uncached;
* each entry is KEY.c (the source), KEY.so and KEY.sha256 (the digest of KEY.so written when it was
  compiled), KEY being the SHA-256 of the compiler, its flags and the source. Before a cached library
  is used, every file must be a regular file of the effective user, not writable by group or others,
  the source must equal the one just generated, and the library's digest (read
  through the descriptor that is then loaded, /proc/self/fd/N, so the file checked is the file
  mapped) must match. Anything else is discarded and compiled again;
* concurrent compiles of one key (twenty switch processes loading one program) are serialised by an
  flock on KEY.lock: the first compiles, the others wait and load its result;
* the cache is bounded (CACHE_MAX_BYTES, CACHE_MAX_ENTRIES; $P4INA_SOFTSWITCH_CACHE_MB overrides the
  size): after each compile the least recently used entries go, except one another process holds the
  lock of (it is being compiled or loaded).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import hashlib
import logging
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

LOG = logging.getLogger(__name__)

CFLAGS = (
    "-std=c11",
    "-O2",
    "-fPIC",
    "-shared",
    "-fwrapv",
    "-fno-strict-aliasing",
    "-fvisibility=hidden",
    "-pthread",
    "-w",
)
COMPILE_TIMEOUT_S = 900.0  # p4ina.json takes about 2 s (its lanes are loops); the bound is for pathological programs
MAX_SOURCE_BYTES = 256 << 20
CACHE_MAX_BYTES = 512 << 20  # p4ina.json's entry is about 30 MB (source and library); a test program's 70 kB
CACHE_MAX_ENTRIES = 256
_ENTRY_SUFFIXES = (".so", ".c", ".sha256")


class CompilerMissingError(RuntimeError):
    """No C compiler (cc) on PATH."""


class CompileError(RuntimeError):
    """The compiler failed on generated code (a bug in the C emitter or runtime); the message quotes it."""


class CacheUnsafeError(RuntimeError):
    """The cache directory or one of its files is not the effective user's alone."""


@dataclass(frozen=True)
class Toolchain:
    cc: str
    version: str
    flags: tuple[str, ...] = CFLAGS


@functools.cache
def toolchain() -> Toolchain | None:
    """The system compiler (cc, else gcc), or None when there is none."""
    for name in ("cc", "gcc"):
        path = shutil.which(name)
        if path is None:
            continue
        try:
            done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, env=_env())
            machine = subprocess.run([path, "-dumpmachine"], capture_output=True, text=True, timeout=30, env=_env())
        except (OSError, subprocess.TimeoutExpired) as ex:
            LOG.warning("C compiler %s does not run: %s", path, ex)
            continue
        if done.returncode == 0:
            first = (done.stdout.splitlines() or [""])[0]
            native, cpu = _native(path)
            return Toolchain(path, f"{first} {machine.stdout.strip()}{cpu}", CFLAGS + native)
    return None


def _native(cc: str) -> tuple[tuple[str, ...], str]:
    """-march=native, and what it means on this CPU for the cache key (a library built for one CPU's vector
    instructions must never load on another's). The lane loops are what it is for: with the host's vector width
    the compiler vectorises them (64-bit lanes need more than x86-64's baseline SSE2). Off when
    P4INA_SOFTSWITCH_NATIVE=0, or when the compiler cannot say what the flag resolves to (then the baseline)."""
    if os.environ.get("P4INA_SOFTSWITCH_NATIVE", "1") == "0":
        return (), ""
    try:
        done = subprocess.run(
            [cc, "-march=native", "-Q", "--help=target"], capture_output=True, text=True, timeout=30, env=_env()
        )
    except (OSError, subprocess.TimeoutExpired):
        return (), ""
    if done.returncode != 0 or not done.stdout.strip():
        return (), ""
    return ("-march=native",), f" native:{hashlib.sha256(done.stdout.encode()).hexdigest()[:16]}"


def _env() -> dict[str, str]:
    """A minimal environment for the compiler: nothing the caller's environment could steer it with."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C", "LC_ALL": "C"}


def cache_dir() -> Path:
    env = os.environ.get("P4INA_SOFTSWITCH_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base else Path.home() / ".cache"
    return root / "p4ina" / "softswitch-c"


def key_of(tc: Toolchain, source: str) -> str:
    h = hashlib.sha256()
    for part in (b"p4ina-c-engine-1", tc.version.encode(), " ".join(tc.flags).encode(), source.encode()):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# ownership and mode checks


def _check_owned(st: os.stat_result, what: str, directory: bool) -> None:
    kind = stat.S_ISDIR(st.st_mode) if directory else stat.S_ISREG(st.st_mode)
    if not kind:
        raise CacheUnsafeError(f"{what} is not a {'directory' if directory else 'regular file'}")
    if st.st_uid != os.geteuid():
        raise CacheUnsafeError(f"{what} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()})")
    if directory and st.st_mode & 0o077:
        raise CacheUnsafeError(f"{what} has mode {stat.S_IMODE(st.st_mode):o}; only its owner may use it (0700)")
    if not directory and st.st_mode & 0o022:
        raise CacheUnsafeError(f"{what} has mode {stat.S_IMODE(st.st_mode):o}; group or others may write it")


def checked_dir(path: Path) -> Path:
    """The cache directory, created 0700 if missing; CacheUnsafeError unless it is ours alone."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
    try:
        st = os.lstat(path)
    except OSError as ex:
        raise CacheUnsafeError(f"cache directory {path}: {ex.strerror}") from ex
    if stat.S_ISLNK(st.st_mode):
        raise CacheUnsafeError(f"cache directory {path} is a symbolic link")
    _check_owned(st, f"cache directory {path}", directory=True)
    return path


def _open_checked(path: Path) -> int:
    """A descriptor of a cache file that passed the owner and mode checks (OSError if absent)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        _check_owned(os.fstat(fd), f"cache file {path}", directory=False)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_fd(fd: int) -> bytes:
    chunks: list[bytes] = []
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        _check_owned(os.fstat(fd), f"lock file {path}", directory=False)
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


# ---------------------------------------------------------------------------------------------
# compile and load


def _write_private(path: Path, data: bytes) -> None:
    """Write a new file (mode 0600), replacing any old one atomically."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _compile(tc: Toolchain, src: Path, out: Path, what: str) -> None:
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            [tc.cc, *tc.flags, "-o", str(tmp), str(src)],
            capture_output=True,
            text=True,
            timeout=COMPILE_TIMEOUT_S,
            env=_env(),
            cwd=str(src.parent),
        )
    except subprocess.TimeoutExpired as ex:
        tmp.unlink(missing_ok=True)
        raise CompileError(f"{what}: the C compiler took longer than {COMPILE_TIMEOUT_S:.0f} s") from ex
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise CompileError(f"{what}: the C compiler failed ({done.returncode}): {done.stderr[-3000:]}")
    os.chmod(tmp, 0o700)
    os.replace(tmp, out)
    LOG.info("%s: compiled to C in %.1f s (%s)", what, time.monotonic() - t0, out.name)


def _dlopen(path: Path) -> ctypes.CDLL:
    """Load a library just checked. By its own path, not /proc/self/fd/N: glibc's dlopen matches objects
    already loaded by name first, and descriptor numbers are reused. The directory is the effective
    user's alone (checked), so nobody else can replace the file between the check and the load."""
    return ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_LOCAL)


def _load_cached(d: Path, key: str, source: bytes) -> ctypes.CDLL | None:
    """The cached library for `key`, or None when there is none that passes every check."""
    src_p, so_p, sum_p = d / f"{key}.c", d / f"{key}.so", d / f"{key}.sha256"
    fds: list[int] = []
    try:
        try:
            for p in (src_p, sum_p, so_p):
                fds.append(_open_checked(p))
        except FileNotFoundError:
            return None
        src_fd, sum_fd, so_fd = fds
        if _read_fd(src_fd) != source:
            LOG.warning("cached C source %s differs from the program's; discarded and compiled again", src_p)
            _discard(src_p, so_p, sum_p)
            return None
        digest = hashlib.sha256(_read_fd(so_fd)).hexdigest()
        if _read_fd(sum_fd).decode(errors="replace").strip() != digest:
            LOG.warning("cached library %s does not match its recorded digest; discarded and compiled again", so_p)
            _discard(src_p, so_p, sum_p)
            return None
        lib = _dlopen(so_p)
        # last used now: what the size bound keeps longest (atime is often not kept). The time is given in ns:
        # the kernel's own "now" is coarse (a scheduler tick), and an entry used right after another was
        # written could tie with it and be taken for the older one
        now = time.time_ns()
        os.utime(sum_fd, ns=(now, now))
        return lib
    except CacheUnsafeError as ex:
        LOG.warning("%s; the entry is discarded and compiled again", ex)
        _discard(src_p, so_p, sum_p)
        return None
    finally:
        for fd in fds:
            os.close(fd)


def _discard(*paths: Path) -> None:
    for p in paths:
        try:
            p.unlink()
        except FileNotFoundError:
            pass
        except OSError as ex:
            raise CacheUnsafeError(f"cannot remove the bad cache file {p}: {ex.strerror}") from ex


def load(source: str, what: str) -> ctypes.CDLL:
    """The library compiled from `source` (from the cache when a valid entry exists)."""
    tc = toolchain()
    if tc is None:
        raise CompilerMissingError("no C compiler (cc) on PATH")
    data = source.encode()
    if len(data) > MAX_SOURCE_BYTES:
        raise CompileError(f"{what}: {len(data)} bytes of C is more than the {MAX_SOURCE_BYTES} this switch compiles")
    key = key_of(tc, source)
    try:
        d = checked_dir(cache_dir())
    except (CacheUnsafeError, OSError) as ex:
        LOG.warning("C engine cache refused (%s); compiling into a private temporary directory, uncached", ex)
        return _load_uncached(tc, data, what)
    with _locked(d / f"{key}.lock"):
        lib = _load_cached(d, key, data)
        if lib is not None:
            LOG.debug("%s: C library from the cache (%s)", what, key[:16])
            return lib
        _write_private(d / f"{key}.c", data)
        _compile(tc, d / f"{key}.c", d / f"{key}.so", what)
        fd = _open_checked(d / f"{key}.so")
        try:
            _write_private(d / f"{key}.sha256", (hashlib.sha256(_read_fd(fd)).hexdigest() + "\n").encode())
        finally:
            os.close(fd)
        lib = _load_cached(d, key, data)
        if lib is None:
            raise CacheUnsafeError(f"{what}: the library just compiled in {d} did not pass its own checks")
    prune(d, keep=key)
    return lib


def _max_bytes() -> int:
    mb = os.environ.get("P4INA_SOFTSWITCH_CACHE_MB")
    if mb is None:
        return CACHE_MAX_BYTES
    try:
        value = int(mb)
    except ValueError:
        value = -1
    if value < 0:
        LOG.warning("P4INA_SOFTSWITCH_CACHE_MB=%r is not a size in MB; using %d MB", mb, CACHE_MAX_BYTES >> 20)
        return CACHE_MAX_BYTES
    return value << 20


def prune(d: Path, keep: str | None = None, max_bytes: int | None = None, max_entries: int | None = None) -> list[str]:
    """Delete the least recently used entries until the cache is within its bounds; the keys removed.

    `keep` (the entry just compiled) and entries whose lock another process holds are never removed. Lock
    files stay (an empty file each): removing one that a process waits on would let a second compile begin.
    """
    max_bytes = _max_bytes() if max_bytes is None else max_bytes
    max_entries = CACHE_MAX_ENTRIES if max_entries is None else max_entries
    entries: list[tuple[int, str, int]] = []  # (last used in ns, key, bytes)
    for so in d.glob("*.so"):
        key = so.stem
        try:
            size = sum((d / f"{key}{suf}").stat().st_size for suf in _ENTRY_SUFFIXES if (d / f"{key}{suf}").exists())
            used = (d / f"{key}.sha256").stat().st_mtime_ns if (d / f"{key}.sha256").exists() else so.stat().st_mtime_ns
        except OSError:
            continue
        entries.append((used, key, size))
    total = sum(e[2] for e in entries)
    removed: list[str] = []
    for _used, key, size in sorted(entries):  # least recently used first
        if total <= max_bytes and len(entries) - len(removed) <= max_entries:
            break
        if key == keep:
            continue
        try:
            fd = os.open(d / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # in use by another process
            _discard(*(d / f"{key}{suf}" for suf in _ENTRY_SUFFIXES))
        except CacheUnsafeError as ex:
            LOG.warning("cache bound: %s", ex)
            continue
        finally:
            os.close(fd)
        total -= size
        removed.append(key)
    if removed:
        LOG.info(
            "C engine cache %s: removed %d least recently used entr%s (now %.1f MB)",
            d,
            len(removed),
            "y" if len(removed) == 1 else "ies",
            total / 1e6,
        )
    return removed


def _load_uncached(tc: Toolchain, data: bytes, what: str) -> ctypes.CDLL:
    with tempfile.TemporaryDirectory(prefix="p4ina-c-") as tmp:  # mkdtemp: mode 0700
        d = Path(tmp)
        (d / "prog.c").write_bytes(data)
        _compile(tc, d / "prog.c", d / "prog.so", what)
        return _dlopen(d / "prog.so")  # a fresh directory: no name loaded before


def remove_stale(older_than_s: float = 30 * 86400.0) -> int:
    """Delete cache entries not used for a while (the cache otherwise grows with every program pushed)."""
    try:
        d = checked_dir(cache_dir())
    except (CacheUnsafeError, OSError):
        return 0
    now, removed = time.time(), 0
    for p in d.glob("*.so"):
        try:
            if now - p.stat().st_atime > older_than_s:
                for q in (p, p.with_suffix(".c"), p.with_suffix(".sha256"), p.with_suffix(".lock")):
                    q.unlink(missing_ok=True)
                removed += 1
        except OSError as ex:
            if ex.errno != errno.ENOENT:
                LOG.debug("cannot remove %s: %s", p, ex)
    return removed
