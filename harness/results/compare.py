"""Compare a run with a previous one: every (cell, check) is a new failure, fixed, still failing
or unchanged. New failures come first in the report; `--fail-on-new` turns them into exit 5."""
from __future__ import annotations

from dataclasses import dataclass

from .records import CellResult, Status

NEW, FIXED, STILL, UNCHANGED = "new failure", "fixed", "still failing", "unchanged"
ORDER = {NEW: 0, STILL: 1, FIXED: 2, UNCHANGED: 3}


@dataclass(frozen=True)
class Change:
    cell_id: str
    check: str
    kind: str
    before: str | None  # status in the previous run, None when the entry is new
    after: str


def _failing(status: Status) -> bool:
    return status.is_failure  # xfail is declared and expected: not a new failure


def compare(current: list[CellResult], previous: list[CellResult]) -> list[Change]:
    before = {(c.cell_id, k.check): k.status for c in previous for k in c.checks}
    changes = []
    for cell in current:
        for check in cell.checks:
            old = before.get((cell.cell_id, check.check))
            now_bad, was_bad = _failing(check.status) or check.flaky, old is not None and _failing(old)
            if now_bad and not was_bad:
                kind = NEW
            elif now_bad:
                kind = STILL
            elif was_bad:
                kind = FIXED
            else:
                kind = UNCHANGED
            changes.append(Change(cell.cell_id, check.check, kind, old.value if old else None, check.status.value))
    return sorted(changes, key=lambda c: (ORDER[c.kind], c.cell_id, c.check))


def new_failures(changes: list[Change]) -> list[Change]:
    return [c for c in changes if c.kind == NEW]
