"""Every data-plane case runs on the embedded switch's two engines (C skipped where there is no C compiler),
and on BMv2 where it is installed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from native import cbuild
from tests.dataplane.backends import Dut, open_dut


@pytest.fixture(
    params=["embedded-c", "embedded-python", pytest.param("bmv2", marks=[pytest.mark.bmv2, pytest.mark.netns])]
)
def dut(request: pytest.FixtureRequest) -> Iterator[Dut]:
    if request.param == "embedded-c" and cbuild.toolchain() is None:
        pytest.skip("[cc] no C compiler (cc) on PATH: the C engine cannot be built")
    with open_dut(request.param) as d:
        yield d
