"""Every data-plane case runs on the embedded switch, and on BMv2 where it is installed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.dataplane.backends import Dut, open_dut


@pytest.fixture(params=["embedded", pytest.param("bmv2", marks=[pytest.mark.bmv2, pytest.mark.netns])])
def dut(request: pytest.FixtureRequest) -> Iterator[Dut]:
    with open_dut(request.param) as d:
        yield d
