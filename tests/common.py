"""What tests of several layers share: the repository, the switch back ends, our interfaces."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from emulation import cleanup

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ["embedded", pytest.param("bmv2", marks=pytest.mark.bmv2)]


def our_interfaces() -> set[str]:
    return {n for n in cleanup.root_interfaces() if cleanup.IFACE_RE.match(n)}
