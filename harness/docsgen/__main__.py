"""`python -m harness.docsgen [--check]`: rewrite the docs' generated tables, or fail on a stale one (exit 1); either
way a figure written by hand outside docs/measured.md fails too (exit 1, each named by page and line)."""
from __future__ import annotations

import argparse
import sys

from harness.docsgen import handwritten, pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.docsgen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when a page is stale")
    args = parser.parse_args(argv)
    if args.check:
        found = [*pages.stale(), *handwritten.by_hand()]
    else:
        for page in pages.write():
            print(f"wrote {page.relative_to(pages.ROOT)}")
        found = handwritten.by_hand()
    for item in found:
        print(item, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
