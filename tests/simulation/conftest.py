"""Fixtures for the simulation tests: SimGrid is needed by most; they skip, saying why, where it is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulation.engine import Engine, simgrid_available

DATA = Path(__file__).resolve().parent / "data"
needs_simgrid = pytest.mark.skipif(simgrid_available() is not None, reason=f"{simgrid_available()}")


@pytest.fixture(scope="session")
def engine() -> Engine:
    """One engine for the session: identical flow sets are solved once."""
    return Engine(2)
