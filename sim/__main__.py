"""python -m sim [--lifetimes N] [--seed S] [--variant NAME]: a campaign of the simulation; exits
1 on a violated invariant, printing the seed that replays it."""

from __future__ import annotations

import argparse
import sys

from . import campaign, variants
from .checks import Violation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim", description=__doc__)
    parser.add_argument("--lifetimes", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-seed", type=int, default=campaign.LIFETIMES_PER_SEED)
    parser.add_argument("--variant", choices=sorted(variants.VARIANTS), default=None)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    progress = None if args.quiet else sys.stderr
    try:
        with variants.applied(args.variant):
            summary = campaign.run(args.lifetimes, args.seed, args.per_seed, progress)
    except Violation as violation:
        print(f"\nINVARIANT VIOLATED: {violation}", file=sys.stderr)
        return 1
    print(summary.text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
