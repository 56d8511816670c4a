"""The first bad release, found without being asked: after a watch run (the cells `matrix watch --write`
made, run beside the matrix), every check that a new release turns from pass (in the cell it was crossed
from) to anything but a pass (fail, affected, crash, error, timeout, or a declared known failure) is bisected
between the release the matrix names (the last good) and the new one. A check that did not run (skipped, or its
cell could not be set up or installed) gives no verdict, so there is nothing of the check to bisect.

    python -m harness.rerun.first_bad --watch WATCH.json --matrix matrices/cpu.toml --base reports/cpu \
        --new reports/cpu-watch
    python -m harness.rerun.first_bad --matrix matrices/cpu.toml --base previous/cpu --new reports/cpu

WATCH.json is `matrix watch --json`'s output. Without it, the cells whose `newest` moved to a new release
since the previous night (same cell id, another resolved release) are compared instead. Each finding (first
bad release, last good, every release tried with its verdict, the failing message) goes to
NEW/first-bad.json, which the report puts at its top.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from packaging.version import Version

from harness.errors import HarnessError, InputError
from harness.matrix import Cell, Matrix
from harness.matrix import axes as ax
from harness.matrix.index import PackageIndex
from harness.results.records import CellResult, CheckResult, Status, did_not_run, load_cell, write_json_atomic

from .bisect import run_bisect

FILE = "first-bad.json"


@dataclass
class Turn:
    """A check that passed in `origin` and does not pass in `cell`, which differs by one release."""

    axis: str
    distribution: str
    good: str
    bad: str
    check: str
    origin: str
    cell: str
    status: str
    message: str


def turned(earlier: CheckResult | None, outcome: CheckResult) -> bool:
    """A pass that no longer passes, whatever it became (see the module docstring)."""
    return earlier is not None and earlier.status is Status.PASS and outcome.status is not Status.PASS \
        and not did_not_run(outcome)


def _result(directory: Path, cell_id: str) -> CellResult | None:
    try:
        return load_cell(directory / "cells" / f"{cell_id}.json")
    except (OSError, ValueError):
        return None


def turns(watch: dict, base: Path, new: Path) -> list[Turn]:
    """The turns, one per origin cell, check and package: the newest release that turned it (one bisection
    covers the older ones)."""
    found: dict[tuple[str, str, str], Turn] = {}
    for release in watch.get("releases", []):
        for crossing in release.get("cells", []):
            if crossing.get("conflict"):
                continue
            before, after = _result(base, crossing["origin"]), _result(new, crossing["id"])
            if before is None or after is None:
                continue
            for outcome in after.checks:
                if not turned(before.check(outcome.check), outcome):
                    continue
                key = (crossing["origin"], outcome.check, release["distribution"])
                if key not in found or Version(found[key].bad) < Version(release["version"]):
                    found[key] = Turn(release["axis"], release["distribution"], release["named"], release["version"],
                                      outcome.check, crossing["origin"], crossing["id"], outcome.status.value,
                                      outcome.message[:500])
    return list(found.values())


def turns_of_newest(previous: Path, current: Path) -> list[Turn]:
    """Turns in the cells whose `newest` moved to a new release since the previous run (same cell id)."""
    found = []
    for path in sorted((current / "cells").glob("*.json")):
        now, before = _result(current, path.stem), _result(previous, path.stem)
        if now is None or before is None:
            continue
        then = {r.get("axis"): r for r in before.environment.get("resolved") or [] if isinstance(r, dict)}
        for moved in now.environment.get("resolved") or []:
            old = then.get(moved.get("axis"))
            if not isinstance(moved, dict) or old is None or old.get("version") == moved.get("version"):
                continue
            for outcome in now.checks:
                if turned(before.check(outcome.check), outcome):
                    found.append(Turn(moved["axis"], ax.PACKAGE_AXES[moved["axis"]], old["version"],
                                      moved["version"], outcome.check, now.cell_id, now.cell_id,
                                      outcome.status.value, outcome.message[:500]))
    return found


def first_bad(turn: Turn, m: Matrix, run_one: Callable[[Cell], CellResult], index: PackageIndex | None = None) -> dict:
    """Bisect one turn on its origin cell; the finding as recorded in first-bad.json."""
    result = run_bisect(m, turn.distribution, turn.good, turn.bad, turn.check, None, turn.origin, run_one, index)
    evidence = {v: result.verdicts[v] for v in sorted(result.verdicts, key=Version)}
    finding = {**asdict(turn), "first_bad": str(result.first_changed or ""), "last_good": str(result.last_same or ""),
               "evidence": evidence, "cells": result.cells}
    if result.first_changed is None:  # the ends agree when run again: the turn did not reproduce
        finding["text"] = f"{turn.distribution} {turn.bad}: {turn.check} {turn.status} in {turn.cell} did not " \
                          f"reproduce on a rerun ({', '.join(f'{v}: {s}' for v, s in evidence.items())})"
    else:
        finding["text"] = (f"{turn.distribution} {result.first_changed} is the first bad release for {turn.check} "
                           f"(last good {result.last_same}; {turn.cell}: {turn.status}: {turn.message}); evidence: "
                           + ", ".join(f"{v}: {s}" for v, s in evidence.items()))
    return finding


def record(new: Path, findings: list[dict], today: dt.date | None = None) -> Path:
    """NEW/first-bad.json with the findings; none: no file (an earlier one is removed), so that its presence
    alone says a release broke something (the nightly puts those reports first)."""
    path = new / FILE
    if not findings:
        path.unlink(missing_ok=True)
        return path
    write_json_atomic(path, {"date": (today or dt.date.today()).isoformat(), "findings": findings})
    return path


def main(argv: list[str] | None = None) -> int:
    from harness.execution.cell import RunOptions, run_cell
    from harness.matrix import load
    from harness.matrix.newest import resolve_cells

    parser = argparse.ArgumentParser(prog="python -m harness.rerun.first_bad", description=__doc__.splitlines()[0])
    parser.add_argument("--watch", type=Path, default=None, help="`matrix watch --json` output")
    parser.add_argument("--matrix", type=Path, required=True)
    parser.add_argument("--base", type=Path, required=True,
                        help="with --watch: the matrix's results (the last good); without: the previous night's")
    parser.add_argument("--new", type=Path, required=True,
                        help="with --watch: the new releases' results; without: tonight's results of the matrix")
    parser.add_argument("--env-root", type=Path, default=Path(".harness/envs"))
    args = parser.parse_args(argv)
    watch = None
    if args.watch is not None:
        try:
            watch = json.loads(args.watch.read_text(encoding="utf-8"))
            if not isinstance(watch, dict) or not isinstance(watch.get("releases"), list):
                raise ValueError("no releases list")
        except (OSError, ValueError) as exc:
            print(f"error: {args.watch}: not `matrix watch --json` output ({exc})", file=sys.stderr)
            return InputError.exit_code
    try:
        m, findings = load(args.matrix), []
        found = turns(watch, args.base, args.new) if watch is not None else turns_of_newest(args.base, args.new)
        for turn in found:
            out = args.new / "bisect" / f"{turn.distribution}-{turn.good}-{turn.bad}-{turn.check}"
            opts = RunOptions(out_dir=out, env_root=args.env_root, checks=(turn.check,))
            findings.append(first_bad(turn, m, lambda cell, o=opts: run_cell(resolve_cells(m, [cell])[0], m, o)))
            print(findings[-1]["text"], file=sys.stderr)
        print(record(args.new, findings))
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
