"""Every entry point refuses bad input with one line on stderr and exit status 2, before anything starts.

The catalogue of issue 33 (a topology file with a JSON syntax error, a tier that is a word, a top-level
list, a self-loop, a leaf without uplinks, a bad MAC, a binary file; leaf-spine:0x2x2, --k 3; BMv2 asked
for where it is not installed; sizes and host counts that cannot be) is fed to the verbs that build or drive
a fabric, as a user runs them (`python -m p4ina VERB ...`, in an empty folder), to the process-level verbs
(`switch`, `host`) and to the tools (`bench`, `clean`). Each must print one line, no traceback, exit 2, and
leave nothing behind: no files in the folder (no results or state), no p4ina interfaces or run records (the
leak_check fixture). None of these starts Mininet: that is the point, and why they are fast. The loader's
own catalogue is tests/controller/test_topology_validation.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from controller.leafspine import leaf_spine
from tests.common import REPO


def _topology(change: str) -> bytes:
    doc = json.loads(json.dumps(leaf_spine(2, 2, 2).to_dict()))
    if change == "tier":
        doc["switches"][1]["tier"] = "zero"
    elif change == "list":
        doc = [doc]
    elif change == "self-loop":
        doc["links"][1]["b"] = doc["links"][1]["a"]
    elif change == "no-uplink":  # l2's links go to l1 instead of the spines: connected, but no way up
        doc["links"] = [ln for ln in doc["links"] if ln["a"] != "l2"]
        doc["links"].append({"a": "l1", "a_port": 9, "b": "l2", "b_port": 9})
    elif change == "mac":
        doc["hosts"][1]["mac"] = "02:00:0a:00:00:0g"
    return json.dumps(doc).encode()


FILES = {
    "syntax.json": b'{"switches": [\n  {"name": "l1",, }\n]}',
    "binary.json": bytes(range(256)),
    **{f"{change}.json": _topology(change) for change in ("tier", "list", "self-loop", "no-uplink", "mac")},
}

HOST = ["--rank", "0", "--workers", "2", "--iface", "lo", "--job-id", "1", "--slot-count", "8"]

# (argv, what the one line must say); FILE stands for a file of FILES in the folder the command runs in
CASES = [
    (["emulate", "--topology", "syntax.json"], "syntax.json: line 2, column 17: not valid JSON"),
    (["emulate", "--k", "3"], "--k 3: want an even k"),
    (["emulate", "--topology", "leaf-spine:0x2x2"], "leaves must be 1..255, got 0"),
    (["emulate", "--topology", "leaf-spine:2x1x2", "--hosts", "2,8"], "--hosts 8: leaf-spine:2x1x2 has 4 hosts"),
    (["emulate", "--sizes", "0"], "size '0' has no unit"),
    (["emulate", "--sizes", "0B"], "0B"),
    (["emulate", "--switch", "bmv2"], "simple_switch_grpc is not on PATH: build BMv2 (docs/toolchain.md)"),
    (["train", "--topology", "tier.json"], 'switches[1].tier is "zero", a string'),
    (["faults", "--topology", "list.json"], "the top level is a list"),
    (["ddp", "--methods", "ring", "--ef", "ring"], "error feedback for ['ring']: only narrow methods"),
    (["ddp", "--methods", "ring", "--topology", "list.json"], "the top level is a list"),  # no int8: no error feedback
    (["ddp", "--models", "mlp"], "unknown model 'mlp': choose from cnn, lm"),
    (["ddp", "--hosts", "3"], "global batch 64 does not split evenly over 3 hosts"),
    (["faults", "--victim", "x9"], "--victim x9: not a switch of fat-tree:4"),
    (["serve", "--topology", "self-loop.json"], "links[1].b: the link joins switch l1 to itself"),
    (["serve", "--switch", "bmv2"], "simple_switch_grpc is not on PATH: build BMv2 (docs/toolchain.md)"),
    (["simulate", "--topology", "binary.json", "--no-validate"], "binary.json: not UTF-8 text"),
    (["simulate", "--topology", "fat-tree:3", "--no-validate"], "fat-tree:3"),
    (["topo", "show", "--topology", "tier.json"], 'switches[1].tier is "zero", a string'),
    (["job", "install", "--job", "7", "--hosts", "h1,h3", "--topology", "no-uplink.json"], "l2 (tier 0) has no uplink"),
    (["job", "install", "--job", "7", "--hosts", "h1,h3", "--topology", "mac.json"], "hosts[1].mac"),
    (["job", "list"], "no topology: pass --topology"),
    (["counters", "--switch", "e1"], "p4ina counters: error: unrecognized arguments: --switch e1"),
    (["allreduce", "--size", "3"], "size '3' has no unit"),
    (["simulate", "--topology", "clos:radix=16", "--gpus", "2048", "--no-validate"], "holds 1024 GPUs"),
    (["switch", "--no-p4", "-i", "1@p4inanosuch0"], "-i 1@p4inanosuch0: no such interface"),
    (["switch", "tier.json"], "tier.json: BMv2 JSON has no parser"),
    (["host", "inc", *HOST, "--size", "3"], "size '3' has no unit"),
    (["host", "ring", "--rank", "2", "--workers", "2", "--peers", "10.0.0.1,10.0.0.2"], "--rank 2: ranks of 2"),
    (["host", "inc", *HOST], "--coord is required with 2 workers"),
    (["bench", "nosuch"], "unknown benchmark(s) ['nosuch']"),
    (["clean", "--tag", "x"], "unrecognized arguments: --tag x"),
]


@pytest.fixture
def folder(tmp_path: Path, leak_check: None) -> Iterator[Path]:
    """An empty folder with the bad files; after the test it holds nothing else."""
    for name, content in FILES.items():
        (tmp_path / name).write_bytes(content)
    yield tmp_path
    left = sorted(p.name for p in tmp_path.iterdir() if p.name not in FILES)
    assert not left, f"left behind in the folder: {left}"


def p4ina(folder: Path, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's code, from a folder outside it
    return subprocess.run(
        [sys.executable, "-m", "p4ina", *args], cwd=folder, env=env, capture_output=True, text=True, timeout=60, **kw
    )


@pytest.mark.parametrize(("argv", "says"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_one_line_exit_2_and_nothing_left(argv: list[str], says: str, folder: Path) -> None:
    if "bmv2" in argv and shutil.which("simple_switch_grpc"):
        pytest.skip("BMv2 is installed here: nothing to refuse")
    done = p4ina(folder, *argv)
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2 and len(lines) == 1, f"exit {done.returncode}, stderr:\n{done.stderr}"
    assert lines[0].startswith("p4ina") and ": error: " in lines[0] and says in lines[0], lines[0]
    assert done.stdout == ""


def test_output_cut_short_by_its_reader_ends_quietly(tmp_path: Path) -> None:
    """`p4ina VERB --json | head`: the reader closes the pipe; exit 1, no BrokenPipeError, nothing on stderr."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = ["topo", "show", "--topology", "fat-tree:16", "--json", "--state", str(tmp_path / "s.json")]
    with subprocess.Popen(
        [sys.executable, "-m", "p4ina", *argv],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.read(100).startswith(b"{")  # 0.3 MB of JSON: far more than the pipe holds
        proc.stdout.close()
        err = proc.stderr.read().decode()
        status = proc.wait(timeout=60)
    assert status == 1 and err == "", err
