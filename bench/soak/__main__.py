"""``python -m bench.soak [--profile ci|long] [--seed N] [--pair] [--dir DIR] [--json]``: one soak
run (``bench.soak``); exit 0 when every end check held, 1 otherwise."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from pathlib import Path

from bench.soak.faults import PROFILES
from bench.soak.report import describe
from bench.soak.run import soak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--pair", action="store_true",
                        help="a SYNC_MASTER + slave pair instead of one SYNC_FLUSH broker")
    parser.add_argument("--dir", type=Path, help="where the run's files go (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(message)s")
    root = args.dir or Path(tempfile.mkdtemp(prefix="postbox-soak-"))
    result = soak(args.profile, args.seed, root, pair=args.pair)
    print(json.dumps(result, indent=2, default=str) if args.json else describe(result))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
