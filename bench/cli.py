"""`p4ina bench [NAME ...]` (make bench): run benchmarks (NAME = module suffix, e.g. softswitch)."""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from pathlib import Path

from bench.results import RESULTS, Figures, merge, table

LOG = logging.getLogger("bench")


def available() -> list[str]:
    here = Path(__file__).parent
    return sorted(m.name[len("bench_") :] for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("bench_"))


def main(argv: list[str] | None = None, prog: str = "p4ina bench") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__)
    ap.add_argument("names", nargs="*", help=f"benchmarks to run (default all: {', '.join(available())})")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    names = args.names or available()
    unknown = set(names) - set(available())
    if unknown:
        ap.error(f"unknown benchmark(s) {sorted(unknown)}; have {available()}")
    figures: Figures = {}
    failed = []
    for name in names:
        LOG.info("running benchmark %s", name)
        try:
            figures.update(importlib.import_module(f"bench.bench_{name}").run())
        except Exception:  # one broken benchmark must not hide the others' figures
            LOG.exception("benchmark %s failed", name)
            failed.append(name)
    print(table(figures))
    merge(figures)
    print(f"\nwritten to {RESULTS}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
