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
def leak_check() -> Iterator[None]:
    """Fail the test if it leaves p4ina<tag>- interfaces or run records behind; remove them either way."""
    if os.geteuid() != 0:
        yield
        return
    before_ifaces = our_interfaces()
    before_records = {r.tag for r in cleanup.records()}
    try:
        yield
    finally:
        left_ifaces = our_interfaces() - before_ifaces
        left_records = [r for r in cleanup.records() if r.tag not in before_records]
        report = cleanup.CleanupReport()
        for rec in left_records:
            cleanup.clean_record(rec, report)
        if left_ifaces:
            cleanup.delete_interfaces({cleanup.IFACE_RE.match(n).group(1) for n in left_ifaces}, set(), report)  # type: ignore[union-attr]
    assert not left_ifaces, f"interfaces left behind: {sorted(left_ifaces)}"
    assert not left_records, f"run records left behind: {[r.tag for r in left_records]}"
