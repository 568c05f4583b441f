"""Both engines of the embedded switch run the same tests.

A module with `pytestmark = pytest.mark.usefixtures("each_engine")` runs every test twice: with the
C engine (skipped, saying why, where there is no C compiler) and with the Python engine. The fixture
sets what SoftSwitch's default engine ("auto") means for the module (P4INA_SOFTSWITCH_ENGINE), so the
switches the tests and their module-scoped fixtures build follow it, and it fails a test whose switch
silently ran a program on another engine than the one asked for.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from native import cbuild
from softswitch.runtime import switch

ENGINES = ("c", "python")


def c_engine_missing() -> str | None:
    return None if cbuild.toolchain() is not None else "[cc] no C compiler (cc) on PATH: the C engine cannot be built"


@pytest.fixture(scope="module", params=ENGINES)
def each_engine(request: pytest.FixtureRequest) -> Iterator[str]:
    engine = request.param
    if engine == "c":
        why = c_engine_missing()
        if why:
            pytest.skip(why)
    original = switch.SoftSwitch._build_runtime

    def checked(self: switch.SoftSwitch, raw: bytes) -> object:
        rt = original(self, raw)
        if self.requested_engine == "auto" and rt.engine != engine:  # type: ignore[attr-defined]
            raise AssertionError(f"{self.name}: the program ran on the {rt.engine} engine, not the {engine} one")  # type: ignore[attr-defined]
        return rt

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("P4INA_SOFTSWITCH_ENGINE", engine)
        mp.setattr(switch.SoftSwitch, "_build_runtime", checked)
        yield engine


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """An engine to pass to SoftSwitch(engine=...) explicitly (function scope)."""
    if request.param == "c":
        why = c_engine_missing()
        if why:
            pytest.skip(why)
    return request.param
