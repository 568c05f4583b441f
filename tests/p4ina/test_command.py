"""The one command: every verb is listed, reaches its owner's parser, and bad verbs get one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from p4ina import cli
from tests.common import REPO


def p4ina(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "p4ina", *args], capture_output=True, text=True, timeout=120, cwd=REPO)


def test_help_lists_every_verb() -> None:
    done = p4ina("--help")
    assert done.returncode == 0, done.stderr
    for name in cli.VERBS:
        assert f"\n  {name} " in done.stdout, f"{name} missing from p4ina --help"


def test_no_verb_prints_the_usage_and_fails() -> None:
    done = p4ina()
    assert done.returncode == 2 and "usage: p4ina VERB" in done.stderr


@pytest.mark.parametrize("verb", sorted(cli.VERBS))
def test_every_verb_has_its_own_help(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    """In-process (one interpreter for all verbs): each owner's parser answers --help as `p4ina VERB`."""
    with pytest.raises(SystemExit) as ex:
        cli.main([verb, "--help"])
    assert ex.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: p4ina {verb}"), out[:200]


def test_an_unknown_verb_is_one_line_naming_the_verbs() -> None:
    done = p4ina("emulation")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown verb 'emulation'" in lines[0] and "emulate" in lines[0]


def test_version_is_the_installed_one() -> None:
    from importlib import metadata

    done = p4ina("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"p4ina {metadata.version('p4ina')}"


def test_experiment_verbs_do_not_share_defaults() -> None:
    """Each experiment's defaults are its own (the old single parser guessed faults' slots from the sweep's)."""
    from experiments.allreduce.cli import build_parser as emulate
    from experiments.faults.cli import build_parser as faults
    from experiments.faults.cli import config_from_args
    from experiments.faults.run import FaultsConfig

    assert emulate().parse_args([]).slots == 128
    f = faults().parse_args([])
    assert (f.slots, f.bw, config_from_args(f).size, f.reps) == (
        FaultsConfig.slots,
        FaultsConfig.bw_mbps,
        FaultsConfig.size,
        FaultsConfig.reps,
    )
    assert faults().parse_args(["--slots", "128"]).slots == 128  # asked for, not mistaken for a default


def test_bench_refuses_an_unknown_benchmark_by_name() -> None:
    done = p4ina("bench", "nosuch")
    assert done.returncode == 2 and "unknown benchmark(s) ['nosuch']" in done.stderr
