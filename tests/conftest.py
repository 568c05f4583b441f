"""Test markers say what a test needs; tests whose needs are unmet skip with the reason."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from functools import cache

import pytest


@cache
def _netns_ok() -> str | None:
    """None when network namespaces work here, else why not."""
    if os.geteuid() != 0:
        return "needs root for network namespaces"
    if not shutil.which("ip"):
        return "iproute2 ('ip') is not installed"
    name = f"p4ina-probe-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


@cache
def _mininet_ok() -> str | None:
    why = _netns_ok()
    if why:
        return why
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        return "Mininet is not importable (apt-get install mininet)"
    return None


def _which(tool: str) -> str | None:
    return None if shutil.which(tool) else f"{tool} is not installed (build the P4 toolchain, see README)"


REQUIREMENTS = {
    "p4c": lambda: _which("p4c-bm2-ss"),
    "bmv2": lambda: _which("simple_switch_grpc"),
    "netns": _netns_ok,
    "mininet": _mininet_ok,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker, check in REQUIREMENTS.items():
            if item.get_closest_marker(marker):
                why = check()
                if why:
                    item.add_marker(pytest.mark.skip(reason=f"[{marker}] {why}"))
                    break
