"""`python -m harness.docsgen [--check]`: rewrite the docs' generated tables, or fail on a stale one (exit 1)."""
from __future__ import annotations

import argparse
import sys

from harness.docsgen import pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.docsgen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a page is stale")
    args = parser.parse_args(argv)
    if args.check:
        found = pages.stale()
        for item in found:
            print(item, file=sys.stderr)
        return 1 if found else 0
    for page in pages.write():
        print(f"wrote {page.relative_to(pages.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
