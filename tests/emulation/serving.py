"""A network `p4ina serve` keeps up, driven as a new user drives it: from its own folder, verbs without flags.

Every command runs in the test's folder (so state/ is the test's, never the checkout's) with the checkout
first on the import path.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.common import REPO


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


@dataclass
class Done:
    code: int
    out: str
    err: str
    seconds: float

    def json(self) -> Any:
        return json.loads(self.out)


def p4ina(cwd: Path, *args: str, timeout: float = 300) -> Done:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "p4ina", *args], cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout
    )
    return Done(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t0)


def ok(cwd: Path, *args: str) -> Any:
    """A verb that must succeed; its --json output."""
    done = p4ina(cwd, *args, "--json")
    assert done.code == 0, f"p4ina {' '.join(args)} failed:\n{done.err}\n{done.out}"
    return done.json()


@dataclass
class Served:
    cwd: Path
    proc: subprocess.Popen[str]
    banner: str  # what serve printed once the network was up

    def stop(self, sig: int = signal.SIGTERM) -> tuple[str, str]:
        """Stop serve (by its PID) and wait for its teardown; its output."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            out, err = self.proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        return self.banner + out, err


@contextmanager
def served(cwd: Path, *args: str) -> Iterator[Served]:
    """`p4ina serve ARGS` in cwd, up; stopped on the way out whatever happened."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "p4ina", "serve", *args],
        cwd=cwd,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    net = Served(cwd, proc, "")
    try:
        deadline = time.monotonic() + 240
        assert proc.stdout is not None
        while "Ctrl-C stops the network." not in net.banner:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(
                    f"p4ina serve exited early ({proc.wait()}):\n{proc.stderr.read() if proc.stderr else ''}"
                )
            net.banner += line
            assert time.monotonic() < deadline, "the network did not come up in 240 s"
        yield net
    finally:
        net.stop()
