"""The docs name only commands and files that exist: a stale `p4ina VERB`, path, module or link fails here.

Scanned: README.md, CHANGELOG.md, docs/*.md, every other README.md of the repository's folders and the
notebooks' markdown cells. Checked:
- `p4ina VERB` in inline or fenced code: VERB is one of p4ina.cli.VERBS;
- `python -m MODULE` in code: MODULE.py or MODULE/__main__.py exists;
- anywhere, a path under one of the repository's own top-level folders (`experiments/harness.py`, `tests/simulation/`,
  `bench/bench_*.py`): it exists (a glob matches something);
- in inline code, a dotted module of one of the packages (`experiments.faults.run`, `controller.planner._shifts`): every
  segment but a trailing function or class name is a module or package;
- a relative Markdown link: its target exists, relative to the file.
Paths of things made at run time (`results/...`, `state/...`, `/run/...`) are not checked, nor what is
struck through: a changelog names what is gone as ~~`emulation/runner.py`~~.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from p4ina.cli import VERBS

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "p4proto",
    "wireformat",
    "native",
    "controller",
    "hosts",
    "softswitch",
    "emulation",
    "experiments",
    "simulation",
    "bench",
    "p4ina",
    "tests",
)
CHECKED_ROOTS = {*PACKAGES, "p4", "docs", "notebooks", "scripts", ".ci"}

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
VERB = re.compile(r"(?<![\w.-])p4ina\s+([a-z][\w-]*)")
MODULE_RUN = re.compile(r"python3?\s+-m\s+([\w.]+)")
PATH = re.compile(r"^[\w.-]+(?:/[\w.*-]*)+$")
DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")
STRUCK = re.compile(r"~~.+?~~", re.S)


def documents() -> dict[str, tuple[Path, str]]:
    """name -> (the file's folder, its Markdown text)."""
    docs = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    docs += sorted(p for top in CHECKED_ROOTS for p in (ROOT / top).rglob("README.md"))
    out = {str(p.relative_to(ROOT)): (p.parent, p.read_text()) for p in docs if p.exists()}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        text = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        out[str(nb.relative_to(ROOT))] = (nb.parent, text)
    return out


def _module_exists(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file() or base.is_dir()


def _path_exists(path: str) -> bool:
    if "*" in path:
        return any(ROOT.glob(path.rstrip("/")))
    return (ROOT / path).exists()


def problems(text: str, folder: Path = ROOT) -> list[str]:
    """What `text` (Markdown) names that does not exist, one line each."""
    found: list[str] = []
    text = STRUCK.sub("", text)
    code = FENCE.findall(text)
    prose = FENCE.sub("", text)
    spans = SPAN.findall(prose)
    for snippet in code + spans:
        found += [f"p4ina {v}: no such verb" for v in VERB.findall(snippet) if v not in VERBS]
        for mod in MODULE_RUN.findall(snippet):
            base = ROOT.joinpath(*mod.split("."))
            if not (base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()):
                found.append(f"python -m {mod}: no such module")
    for token in re.split(r"[\s'\"`()\[\]|<>,;=]+", text):
        token = token.rstrip(".:")
        if PATH.match(token) and token.split("/", 1)[0] in CHECKED_ROOTS and not _path_exists(token):
            found.append(f"{token}: no such file or folder")
    for span in spans:
        if DOTTED.match(span) and span.split(".", 1)[0] in PACKAGES:
            parts = span.split(".")
            while parts and not parts[-1].islower():  # a class or constant: check the module it lives in
                parts.pop()
            if len(parts) > 1 and not (_module_exists(".".join(parts)) or _module_exists(".".join(parts[:-1]))):
                found.append(f"{span}: no such module")
    for target in LINK.findall(prose):
        if not re.match(r"^[a-z]+:", target) and not (folder / target).exists():
            found.append(f"{target}: link to nothing")
    return found


@pytest.mark.parametrize("name", sorted(documents()))
def test_what_the_docs_name_exists(name: str) -> None:
    folder, text = documents()[name]
    assert problems(text, folder) == [], f"{name} names what does not exist"


def test_a_stale_name_fails() -> None:
    """The check can fail: a made-up path, verb, module and link through the same function."""
    text = (
        "Run `p4ina frobnicate`, see `experiments/no_such_runner.py` and `tests/nowhere/`, "
        "`python -m emulation` and `emulation.softswitch.once`, or [this](docs/missing.md).\n"
        "```sh\np4ina emulate --preset bandwidth\np4ina teleport\n```\n"
    )
    assert problems(text) == [
        "p4ina teleport: no such verb",
        "p4ina frobnicate: no such verb",
        "python -m emulation: no such module",
        "experiments/no_such_runner.py: no such file or folder",
        "tests/nowhere/: no such file or folder",
        "docs/missing.md: no such file or folder",
        "emulation.softswitch.once: no such module",
        "docs/missing.md: link to nothing",
    ]
    assert problems("`experiments/harness.py`, `tests/simulation/`, `bench/bench_*.py`, `p4ina emulate`") == []
    assert problems("~~`python -m emulation`~~ is now `p4ina emulate`; ~~`hosts/netns.py`~~ moved") == []
