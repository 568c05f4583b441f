"""`p4ina serve`'s folder per topology."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.state import Served, State, process_start


def test_serve_keeps_a_folder_per_topology_and_refuses_a_second_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One state per topology (a custom topology's serve used to find the last one's jobs in the shared state
    file, and its own first printed command failed); a topology served already is refused by name."""
    from emulation.serve import main, topology_name

    assert topology_name("leaf-spine:2x1x2") == "leaf-spine-2x1x2"
    assert topology_name("fat-tree:4") == "fat-tree-4"
    assert topology_name("/x/my topo.json") == "my-topo"
    assert topology_name("current.json") == "current-topology"  # never the link state/current
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "state" / "leaf-spine-2x1x2"
    me = Served(os.getpid(), process_start(os.getpid()) or 0, "leaf-spine:2x1x2", "2026-01-01T00:00:00")
    State(folder / "p4ina-state.json", topology="x.json", served=me).save()
    assert main(["--topology", "leaf-spine:2x1x2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"p4ina serve: error: leaf-spine:2x1x2 is already served from state/leaf-spine-2x1x2 by pid {os.getpid()}"
    )
    assert len(err.strip().splitlines()) == 1
