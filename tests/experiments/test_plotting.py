"""experiments.plotting.pyplot keeps a notebook's inline back end, under either name IPython gives it."""

from __future__ import annotations

import matplotlib
import pytest

from experiments.plotting import pyplot


@pytest.mark.parametrize(
    ("backend", "switched"),
    [
        ("inline", False),  # IPython 9
        ("module://matplotlib_inline.backend_inline", False),  # IPython 7
        ("agg", False),
        ("TkAgg", True),  # a display back end: headless runs draw with Agg
    ],
)
def test_pyplot_keeps_an_inline_backend_and_leaves_others_for_agg(
    monkeypatch: pytest.MonkeyPatch, backend: str, switched: bool
) -> None:
    used: list[str] = []
    monkeypatch.setattr(matplotlib, "get_backend", lambda: backend)
    monkeypatch.setattr(matplotlib, "use", used.append)
    pyplot()
    assert used == (["Agg"] if switched else [])
