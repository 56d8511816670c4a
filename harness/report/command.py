"""`python -m harness report DIR`: write the report of a results directory into it, or print one format.

Both go through the one pipeline (pipeline.build_from_dir): `--format F` prints the Report the written files
hold, its last known good and first bad releases included, and writes nothing into DIR. `--previous OLD_DIR`
compares with an earlier run (`--fail-on-new`: exit 5 on a new failure). `--baseline FILE` compares every
(cell, check) status with a committed baseline (exit 6 on a difference) and `--write-baseline FILE` writes
one (history.py).

Imported with the command line, so the report's own modules are imported only when the verb runs.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.errors import BaselineChanged, InputError, NewFailures
from harness.results.compare import new_failures
from harness.results.sources import load_results

FORMAT_CHOICES = ("md", "html", "json", "junit", "support")


def add_parser(sub) -> None:
    rep = sub.add_parser("report", help="render the support table of a results directory")
    rep.add_argument("dir", type=Path)
    rep.add_argument("--format", choices=FORMAT_CHOICES, default=None,
                     help="print one format to stdout instead of writing every format into DIR")
    rep.add_argument("--previous", type=Path, default=None, metavar="OLD_DIR",
                     help="compare with a previous results directory (e.g. a downloaded CI artifact)")
    rep.add_argument("--fail-on-new", action="store_true", help="exit 5 when there are new failures")
    rep.add_argument("--baseline", type=Path, default=None, metavar="FILE",
                     help="exit 6 when a (cell, check) status differs from this committed baseline")
    rep.add_argument("--write-baseline", type=Path, default=None, metavar="FILE",
                     help="write DIR's (cell, check) statuses as the baseline FILE")
    rep.add_argument("--matrices", type=Path, default=None, metavar="MATRICES_DIR",
                     help="where the cells' matrix files are, for their [[standing]] rules (default: this "
                          "checkout's matrices/)")


def cmd_report(args) -> int:
    from .json_files import to_json
    from .pipeline import MATRICES, build_from_dir, render, render_report

    if args.fail_on_new and args.previous is None:
        raise InputError("--fail-on-new needs --previous OLD_DIR")
    if args.matrices is not None and not args.matrices.is_dir():
        raise InputError(f"--matrices: {args.matrices} is not a directory")
    matrices = args.matrices or MATRICES
    expected = _read_baseline(args)  # a bad baseline is bad input (exit 2), said before anything is written
    if args.format is None:
        paths, changes = render_report(args.dir, previous=args.previous, matrices=matrices)
        for path in paths:
            print(f"wrote {path}", file=sys.stderr)
    else:
        report, changes = build_from_dir(args.dir, previous=args.previous, save_history=False, matrices=matrices)
        print(json.dumps(to_json(report), indent=1) if args.format == "json" else render(report, args.format),
              end="" if args.format != "json" else "\n")
    if changes and all(change.before is None for change in changes):
        print(f"--previous {args.previous}: shares no (cell, check) with {args.dir}; nothing was compared",
              file=sys.stderr)
    _baseline(args, expected)
    fresh = new_failures(changes or [])
    if fresh:
        print(f"{len(fresh)} new failures: " + ", ".join(f"{c.cell_id} {c.check}" for c in fresh[:10]), file=sys.stderr)
        if args.fail_on_new:
            raise NewFailures(f"{len(fresh)} new failures against {args.previous}")
    return 0


def _read_baseline(args) -> dict | None:
    if args.baseline is None:
        return None
    from .history import read_baseline

    return read_baseline(args.baseline, {cell.matrix for cell in load_results(args.dir)[0]})


def _baseline(args, expected: dict | None) -> None:
    """--write-baseline, then --baseline: exit 6 naming every (cell, check) that differs."""
    if args.baseline is None and args.write_baseline is None:
        return
    from .history import differences, write_baseline

    cells, _ = load_results(args.dir)
    if args.write_baseline is not None:
        write_baseline(args.write_baseline, cells, f"python -m harness report {args.dir} --write-baseline "
                                                   f"{args.write_baseline}")
        print(f"wrote {args.write_baseline}", file=sys.stderr)
    if args.baseline is not None:
        found = differences(expected, cells)
        for difference in found:
            print(f"baseline: {difference}", file=sys.stderr)
        if found:
            raise BaselineChanged(f"{len(found)} verdicts differ from {args.baseline}: " + "; ".join(
                map(str, found[:5])) + (" ..." if len(found) > 5 else "") + "; if intended, rewrite it with "
                f"--write-baseline {args.baseline} and commit it")
