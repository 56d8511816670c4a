"""The `matrix` verb: `matrix list FILE` (the cells of a matrix file) and `matrix watch FILE` (releases newer
than the matrix names, and the cells crossing them would add)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .expand import load


def add_parser(sub) -> None:
    actions = sub.add_parser("matrix", help="inspect matrix files").add_subparsers(dest="action", required=True)
    lst = actions.add_parser("list", help="list the cells of a matrix file")
    lst.add_argument("file", type=Path)
    lst.add_argument("--tags", nargs="+", default=None)
    lst.add_argument("--json", action="store_true")

    wt = actions.add_parser("watch", help="releases newer than a matrix names, and the cells crossing them would add")
    wt.add_argument("file", type=Path)
    wt.add_argument("--json", action="store_true")
    wt.add_argument("--write", type=Path, default=None, metavar="FILE", help="write those cells as a matrix file")
    wt.add_argument("--tags", nargs="+", default=None, help="cross only into the cells with any of these tags")


def cmd_matrix(args) -> int:
    if args.action == "watch":
        from harness.matrix.watch import main as watch

        return watch(args.file, args.json, args.write, args.tags)
    m = load(args.file)
    cells = m.select(tags=args.tags) if args.tags else m.cells
    if args.json:
        print(json.dumps([{"id": c.id, "axes": c.axes, "tags": list(c.tags), "checks": list(c.checks),
                           "requirements": c.requirements, "install": c.install_order()} for c in cells], indent=1))
    else:
        for c in cells:
            print(f"{c.id}  [{', '.join(c.tags)}]")
        print(f"{len(cells)} cells", file=sys.stderr)
    return 0
