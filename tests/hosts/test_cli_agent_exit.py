"""The agent command's exit path: an agent told to quit prints its report and exits 0.

Every agent of every e2e run used to end with AttributeError here (the agent parser has no --json), so each
one exited 1 with a traceback in its log after its work was done."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hosts import cli


def test_agent_that_quits_prints_its_report_and_exits_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict[str, Any] = {}

    def fake_run_agent(args: Any) -> dict[str, Any]:
        seen["rank"] = args.rank
        return {"agent": args.rank, "steps": 3}

    monkeypatch.setattr(cli, "run_agent", fake_run_agent)
    rc = cli.main(["agent", "--rank", "2", "--workers", "4", "--coord", "unix:/nonexistent", "--iface", "lo"])
    assert rc == 0 and seen["rank"] == 2
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {"agent": 2, "steps": 3}
