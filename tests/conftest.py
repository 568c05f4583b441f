"""Test markers say what a test needs; tests whose needs are unmet skip with the reason."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from emulation import cleanup
from tests.common import our_interfaces


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
        import mininet.net
    except ImportError:
        return "Mininet is not importable (apt-get install mininet)"
    return None


def _which(tool: str) -> str | None:
    return None if shutil.which(tool) else f"{tool} is not installed (build the P4 toolchain: docs/toolchain.md)"


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


@pytest.fixture
def leak_check(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fail the test if it leaves p4ina<tag>- interfaces or run records behind; remove them either way.

    Only what this test session made is ours to remove: records whose run folder lies under the session's
    temporary directory (every test runs its network there), and interfaces not named by another run's live
    record (an emulation someone else is running on this machine keeps its processes and links)."""
    if os.geteuid() != 0:
        yield
        return
    base = tmp_path_factory.getbasetemp().resolve()

    def ours(rec: cleanup.RunRecord) -> bool:
        return bool(rec.run_dir) and Path(rec.run_dir).resolve().is_relative_to(base)

    before_ifaces = our_interfaces()
    before_records = {r.tag for r in cleanup.records()}
    try:
        yield
    finally:
        records = cleanup.records()
        left_records = [r for r in records if r.tag not in before_records and ours(r)]
        foreign = {r.tag for r in records if not ours(r)}
        left_ifaces = {n for n in our_interfaces() - before_ifaces if cleanup.IFACE_RE.match(n).group(1) not in foreign}  # type: ignore[union-attr]
        report = cleanup.CleanupReport()
        for rec in left_records:
            cleanup.clean_record(rec, report)
        if left_ifaces:
            cleanup.delete_interfaces({cleanup.IFACE_RE.match(n).group(1) for n in left_ifaces}, set(), report)  # type: ignore[union-attr]
    assert not left_ifaces, f"interfaces left behind: {sorted(left_ifaces)}"
    assert not left_records, f"run records left behind: {[r.tag for r in left_records]}"
