#!/usr/bin/env python3
"""Regenerate p4/generated/ and compile p4/p4ina.p4 with p4c into p4/build/.

The compiled BMv2 JSON and P4Info are committed so that nobody needs p4c to
run p4ina; p4/build/manifest.json records the hash of the sources they came
from, and a test fails when the sources change without a rebuild.

    python scripts/build_p4.py           # regenerate + compile (needs p4c-bm2-ss)
    python scripts/build_p4.py --check   # exit 1 when the committed outputs are stale
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller.api import p4_sources, p4_sources_sha256  # noqa: E402 - after the path insert
from wireformat import p4gen  # noqa: E402 - after the path insert: the script runs uninstalled

P4_DIR = ROOT / "p4"
MAIN = P4_DIR / "p4ina.p4"
BUILD = P4_DIR / "build"
JSON_OUT = BUILD / "p4ina.json"
P4INFO_OUT = BUILD / "p4ina.p4info.txtpb"
MANIFEST = BUILD / "manifest.json"
COMPILER = "p4c-bm2-ss"


def source_files() -> list[Path]:
    return p4_sources(ROOT)


def source_hash() -> str:
    """sha256 over every P4 source (path and content), in a stable order (the run-time check uses the same)."""
    return p4_sources_sha256(ROOT)


def compiler_version() -> str:
    out = subprocess.run([COMPILER, "--version"], capture_output=True, text=True, check=True)
    lines = (out.stdout + out.stderr).strip().splitlines()
    return " ".join(line.strip() for line in lines)  # e.g. "p4c-bm2-ss Version 1.2.4.8 (SHA: ...)"


def compile_to(out_dir: Path) -> tuple[Path, Path, str]:
    """Run p4c; returns (json, p4info, stderr). Paths are relative to the repo so outputs are reproducible."""
    json_path, p4info_path = out_dir / JSON_OUT.name, out_dir / P4INFO_OUT.name
    cmd = [
        COMPILER,
        "--arch",
        "v1model",
        "--std",
        "p4-16",
        "-o",
        str(json_path),
        "--p4runtime-files",
        str(p4info_path),
        MAIN.relative_to(ROOT).as_posix(),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"p4c failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
    return json_path, p4info_path, proc.stderr


def build() -> None:
    if not shutil.which(COMPILER):
        raise SystemExit(f"{COMPILER} is not on PATH: build the P4 toolchain first (see docs/toolchain.md)")
    p4gen.main([])
    BUILD.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        json_path, p4info_path, warnings = compile_to(Path(tmp))
        # p4c's JSON, re-serialized without its indentation: the same content in a fifth of the bytes (every
        # switch of an emulation receives it over P4Runtime at bring-up, and parses it)
        JSON_OUT.write_text(json.dumps(json.loads(json_path.read_text()), separators=(",", ":")) + "\n")
        shutil.copy(p4info_path, P4INFO_OUT)
    if warnings.strip():
        print(warnings, file=sys.stderr)
    manifest = {
        "sources_sha256": source_hash(),
        "sources": [p.relative_to(ROOT).as_posix() for p in source_files()],
        "compiler": compiler_version(),
        "outputs": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (JSON_OUT, P4INFO_OUT)},
    }
    MANIFEST.write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"compiled {MAIN.relative_to(ROOT)} -> {JSON_OUT.relative_to(ROOT)}, {P4INFO_OUT.relative_to(ROOT)}")


def problems() -> list[str]:
    """Why the committed outputs do not match the sources (empty when they do)."""
    out = [
        f"p4/generated/{name} differs from wireformat/agg_header.toml (run `make p4`)" for name in p4gen.stale_files()
    ]
    if not MANIFEST.exists():
        return out + ["p4/build/manifest.json is missing (run `make p4`)"]
    manifest = json.loads(MANIFEST.read_text())
    if manifest["sources_sha256"] != source_hash():
        out.append("P4 sources changed since p4/build/ was compiled (run `make p4`)")
    for name, digest in manifest["outputs"].items():
        path = BUILD / name
        if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            out.append(f"p4/build/{name} does not match the manifest (edited by hand?)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="report stale outputs instead of building")
    args = ap.parse_args(argv)
    if args.check:
        found = problems()
        for p in found:
            print(p)
        if not found:
            print("p4/generated and p4/build match their sources")
        return 1 if found else 0
    build()
    return 0


if __name__ == "__main__":
    sys.exit(main())
