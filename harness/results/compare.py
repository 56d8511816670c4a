"""Compare a run with a previous one: every (cell, check) is a new failure, fixed, still failing,
unchanged, or one of the two install verdicts. New failures come first in the report; `--fail-on-new`
turns them into exit 5.

An install verdict (install_verdict.py) is not a check failing: a runner limit is never a new failure
(the same pins install on a runner that has what this one lacks), and pins that cannot be installed
together are a new failure only where the same cell installed and passed that check before (the resolver
now finds a conflict it did not find then); a cell that never installed keeps its install verdict as its kind.
"""
from __future__ import annotations

from dataclasses import dataclass

from .install_verdict import CONFLICT, LABELS, of_check
from .records import CellResult, CheckResult

NEW, FIXED, STILL, UNCHANGED = "new failure", "fixed", "still failing", "unchanged"
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


def compare(current: list[CellResult], previous: list[CellResult]) -> list[Change]:
    before = {(c.cell_id, k.check): k for c in previous for k in c.checks}
    changes = []
    for cell in current:
        for check in cell.checks:
            old = before.get((cell.cell_id, check.check))
            changes.append(Change(cell.cell_id, check.check, _kind(check, old), old.status.value if old else None,
                                  check.status.value))
    return sorted(changes, key=lambda c: (ORDER[c.kind], c.cell_id, c.check))


def new_failures(changes: list[Change]) -> list[Change]:
    return [c for c in changes if c.kind == NEW]
