"""Compare a run with a previous one: every (cell, check) is a new failure, fixed, still failing,
unchanged, or one of the two install verdicts. New failures come first in the report; `--fail-on-new`
turns them into exit 5.

An install verdict (install_verdict.py) is not a check failing: a runner limit is never a new failure
(the same pins install on a runner that has what this one lacks), and pins that cannot be installed
together are a new failure only where the same cell installed and passed that check before (the resolver
now finds a conflict it did not find then); a cell that never installed keeps its install verdict as its kind.

A cell of the previous run whose result file in this run is there but cannot be used (truncated, unreadable, or
holding another cell's result: results/sources.py) does not vanish from the comparison: each of its previous
checks is compared with an unknown result (`after` = UNREADABLE), which counts as failing, so a check that did not
fail before is a new failure (and `--fail-on-new` exits 5).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .install_verdict import CONFLICT, LABELS, of_check
from .records import CellResult, CheckResult

NEW, FIXED, STILL, UNCHANGED = "new failure", "fixed", "still failing", "unchanged"
UNREADABLE = "unreadable"  # a Change's `after` where this run's result file could not be used
CANNOT_INSTALL, NOT_HERE = LABELS[CONFLICT], LABELS["runner"]
ORDER = {NEW: 0, STILL: 1, FIXED: 2, CANNOT_INSTALL: 3, NOT_HERE: 4, UNCHANGED: 5}


@dataclass(frozen=True)
class Change:
    cell_id: str
    check: str
    kind: str
    before: str | None  # status in the previous run, None when the entry is new
    after: str


def _failing(check: CheckResult) -> bool:
    return check.status.is_failure or check.flaky  # xfail is declared and expected: not a new failure


def _kind(check: CheckResult, old: CheckResult | None) -> str:
    install, old_install = of_check(check), of_check(old) if old is not None else None
    was_bad = old is not None and old_install is None and _failing(old)
    if install is not None:
        installed_and_passed = old is not None and old_install is None and not was_bad
        if install.kind == CONFLICT and installed_and_passed:
            return NEW
        return install.label
    now_bad = _failing(check)
    if now_bad:
        return STILL if was_bad else NEW
    return FIXED if was_bad else UNCHANGED


def compare(current: list[CellResult], previous: list[CellResult], unreadable: Iterable[str] = ()) -> list[Change]:
    """Every (cell, check) of `current` against `previous`, and every check of a previous cell whose result file
    in this run is `unreadable` (cell ids) against an unknown result."""
    before = {(c.cell_id, k.check): k for c in previous for k in c.checks}
    changes = []
    for cell in current:
        for check in cell.checks:
            old = before.get((cell.cell_id, check.check))
            changes.append(Change(cell.cell_id, check.check, _kind(check, old), old.status.value if old else None,
                                  check.status.value))
    lost = set(unreadable) - {cell.cell_id for cell in current}
    for cell in previous:
        if cell.cell_id in lost:
            for old in cell.checks:
                was_bad = of_check(old) is None and _failing(old)
                changes.append(Change(cell.cell_id, old.check, STILL if was_bad else NEW, old.status.value,
                                      UNREADABLE))
    return sorted(changes, key=lambda c: (ORDER[c.kind], c.cell_id, c.check))


def new_failures(changes: list[Change]) -> list[Change]:
    return [c for c in changes if c.kind == NEW]
