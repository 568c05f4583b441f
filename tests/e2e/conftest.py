"""End-to-end fixtures: every test checks that its network left nothing behind, also when it fails."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulation import cleanup

REPO = Path(__file__).resolve().parents[2]
BACKENDS = ["embedded", pytest.param("bmv2", marks=pytest.mark.bmv2)]


def our_interfaces() -> set[str]:
    return {n for n in cleanup.root_interfaces() if cleanup.IFACE_RE.match(n)}


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
        left_ifaces = {n for n in our_interfaces() - before_ifaces
                       if cleanup.IFACE_RE.match(n).group(1) not in foreign}  # type: ignore[union-attr]
        report = cleanup.CleanupReport()
        for rec in left_records:
            cleanup.clean_record(rec, report)
        if left_ifaces:
            cleanup.delete_interfaces({cleanup.IFACE_RE.match(n).group(1) for n in left_ifaces}, set(), report)  # type: ignore[union-attr]
    assert not left_ifaces, f"interfaces left behind: {sorted(left_ifaces)}"
    assert not left_records, f"run records left behind: {[r.tag for r in left_records]}"
