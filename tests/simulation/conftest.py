"""Fixtures for the simulation tests: SimGrid is needed by most; they skip, saying why, where it is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulation.calibrate import Calibration, fit
from simulation.engine import Engine, simgrid_available

DATA = Path(__file__).resolve().parent / "data"
needs_simgrid = pytest.mark.skipif(simgrid_available() is not None, reason=f"{simgrid_available()}")


@pytest.fixture(scope="session")
def engine() -> Engine:
    """One engine for the session: identical flow sets are solved once."""
    return Engine(2)


@pytest.fixture(scope="session")
def emulation_fit(engine: Engine) -> Calibration:
    """The model's costs fitted to the committed emulation runs (data/emulation-k4), once a session: the tests that
    predict other runs with them take a copy (simulation.calibrate.check writes its table into the object)."""
    return fit(DATA / "emulation-k4", engine=engine)
