"""``python -m kubeacc.synthetic PROFILE DIR`` writes a synthetic host; ``--list`` names them."""

from __future__ import annotations

import argparse
import sys

from kubeacc.synthetic import profiles


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kubeacc.synthetic", description="Write a synthetic host tree."
    )
    parser.add_argument("profile", nargs="?", choices=profiles.NAMES)
    parser.add_argument("dest", nargs="?", help="directory to write the host root into")
    parser.add_argument("--seed", help="identifier seed (default: the profile name)")
    parser.add_argument("--list", action="store_true", help="list the profiles and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name in profiles.NAMES:
            print(f"{name:18} {profiles.describe(name)}")
        return 0
    if not args.profile or not args.dest:
        parser.error("PROFILE and DIR are required (or --list)")
    root = profiles.build(args.profile, args.dest, seed=args.seed)
    print(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
