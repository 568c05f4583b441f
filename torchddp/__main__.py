"""`python -m torchddp rank --plan PLAN --rank R [--iface IFACE]`: one rank of a DDP training plan (torchddp.train)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m torchddp", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    rk = sub.add_parser("rank", help="run a plan's training runs as one rank")
    rk.add_argument("--plan", type=Path, required=True, help="the plan (JSON, torchddp.train.Plan)")
    rk.add_argument("--rank", type=int, required=True)
    rk.add_argument("--iface", default=None, help="the host's interface into the fabric (Gloo, in-network worker)")
    rk.add_argument("--threads", type=int, default=1, help="torch threads (default 1: one process per host)")
    rk.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    from torchddp.train import main_rank

    return main_rank(args.plan, args.rank, args.iface, args.threads)


if __name__ == "__main__":
    sys.exit(main())
