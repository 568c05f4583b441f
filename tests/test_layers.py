"""The layering contracts of pyproject.toml ([tool.importlinter]) hold on this tree, and each one can fail.

The second half copies the contracts verbatim onto a throwaway tree of empty packages with the same names,
plants one upward import, and checks that exactly the contracts it breaks report it: a contract that
named a module wrongly, or a layer order that allowed the import, would pass there and fail this test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.common import REPO

CONFIG = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS = {c["id"]: c["name"] for c in CONFIG["contracts"]}


def lint_imports(root: Path) -> tuple[int, str]:
    """Run import-linter on the pyproject.toml in root, on the packages in root; (exit code, output)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(root),  # the packages under root, not the installed ones of the same names
        "COLUMNS": "1000",  # one line per contract, so the verdicts can be read
        "NO_COLOR": "1",
    }
    run = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"]
        + ["--no-cache", "--no-logo", "pyproject.toml"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return run.returncode, run.stdout + run.stderr


def verdicts(output: str) -> dict[str, str]:
    """Contract name -> KEPT or BROKEN, from lint-imports' summary lines."""
    found = {}
    for name in CONTRACTS.values():
        m = re.search(rf"^{re.escape(name)} (KEPT|BROKEN)(?: \(\d+ ignored imports?\))?\s*$", output, re.MULTILINE)
        assert m, f"no verdict for contract {name!r} in:\n{output}"
        found[name] = m.group(1)
    return found


def test_the_tree_keeps_its_layers() -> None:
    code, out = lint_imports(REPO)
    assert code == 0, out
    assert set(verdicts(out).values()) == {"KEPT"}, out


def _modules_named(contract: dict) -> set[str]:
    """Every module a contract names, with its containers applied."""
    names: set[str] = set()
    for layer in contract.get("layers", []):
        for part in re.split(r"[|:]", layer):
            name = part.strip().strip("()")
            containers = contract.get("containers") or [""]
            names.update(f"{c}.{name}" if c else name for c in containers)
    for key in ("modules", "source_modules", "forbidden_modules", "containers"):
        names.update(contract.get(key, []))
    return names


def _skeleton(root: Path) -> None:
    """Empty packages for every root package and every module the contracts name, and our config."""
    names = set(CONFIG["root_packages"])
    for contract in CONFIG["contracts"]:
        names |= _modules_named(contract)
    for name in names:
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            package = root.joinpath(*parts[:depth])
            package.mkdir(exist_ok=True)
            (package / "__init__.py").touch()
    # the imports a contract lets through, made real (lint-imports refuses an ignore that matches nothing)
    for contract in CONFIG["contracts"]:
        for rule in contract.get("ignore_imports", []):
            importer, imported = (part.strip() for part in rule.split("->"))
            module = root.joinpath(*importer.split(".")).with_suffix(".py")
            module.write_text(
                module.read_text() + f"import {imported}\n" if module.exists() else f"import {imported}\n"
            )
    (root / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text())


# (module that imports, module it imports, ids of the contracts that must report it)
UPWARD = [
    ("wireformat.x", "p4ina", {"stack", "no-upward-to-p4ina"}),
    ("emulation.x", "experiments", {"stack"}),
    ("simulation.x", "bench", {"stack"}),
    ("hosts.x", "controller", {"stack"}),  # siblings
    ("experiments.x", "simulation", {"stack"}),  # siblings
    ("softswitch.compiler.x", "softswitch.runtime", {"softswitch-inner"}),
    ("softswitch.runtime.x", "softswitch.p4runtime", {"softswitch-inner"}),
    ("experiments.train.x", "experiments.allreduce", {"experiments-inner"}),
    ("experiments.harness.x", "experiments.faults", {"experiments-inner"}),
    ("simulation.workload.step.x", "simulation.workload.simcosts", {"simulation-workload"}),  # siblings
    ("simulation.workload.costs.x", "simulation.workload.runs", {"simulation-workload"}),
    ("simulation.model.x", "simulation.workload", {"simulation-below-workload"}),
    ("p4proto.x", "controller", {"stack"}),  # the bindings sit below everything that uses them
    ("softswitch.x", "finsy", {"one-bindings"}),  # bindings other than through p4proto
    ("controller.client", "p4", {"one-bindings"}),
]


def test_an_empty_skeleton_keeps_every_contract(tmp_path: Path) -> None:
    """The baseline of the test below: without the planted import nothing is broken."""
    _skeleton(tmp_path)
    code, out = lint_imports(tmp_path)
    assert code == 0, out
    assert set(verdicts(out).values()) == {"KEPT"}, out


@pytest.mark.parametrize(("importer", "imported", "broken"), UPWARD, ids=[f"{a}->{b}" for a, b, _ in UPWARD])
def test_an_upward_import_breaks_its_contract(tmp_path: Path, importer: str, imported: str, broken: set[str]) -> None:
    _skeleton(tmp_path)
    module = tmp_path.joinpath(*importer.split(".")).with_suffix(".py")
    module.parent.mkdir(parents=True, exist_ok=True)
    (module.parent / "__init__.py").touch()
    module.write_text(f"import {imported}\n")
    code, out = lint_imports(tmp_path)
    assert code != 0, out
    got = {cid for cid, name in CONTRACTS.items() if verdicts(out)[name] == "BROKEN"}
    assert got == broken, out
    assert f"{importer} -> {imported}" in out, out
