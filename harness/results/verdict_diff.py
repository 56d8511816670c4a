"""Compare the verdicts of two results directories entry by entry: every cell, every check's status and
every sub-verdict's status. Two runs of the same cells that should agree (the old way and the new way of
running a matrix, a cold run and its warm rerun) are identical, or the differences are listed.

    python -m harness.results.verdict_diff DIR_A DIR_B     # exit 0 identical, 6 different, 2 or 4 bad input
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from harness.errors import BaselineChanged, HarnessError, InputError, ResultsError

from .records import CellResult, load_cell

ABSENT = "absent"


@dataclass(frozen=True)
class EntryDifference:
    cell_id: str
    check: str  # "" for the cell itself
    verdict: str  # "" for the check's own status
    first: str  # a status, "present" or "absent"
    second: str

    def __str__(self) -> str:
        where = " ".join(part for part in (self.cell_id, self.check, self.verdict) if part)
        return f"{where}: {self.first} -> {self.second}"


def read_cells(directory: Path | str) -> list[CellResult]:
    """Every cell result of DIR/cells/*.json; ResultsError naming the directory or file when unusable."""
    cells_dir = Path(directory) / "cells"
    paths = sorted(p for p in cells_dir.glob("*.json") if not p.name.startswith("."))  # skip atomic-write temps
    if not paths:
        raise ResultsError(f"{directory}: no cell results (expected {cells_dir}/*.json)")
    try:
        return [load_cell(path) for path in paths]
    except ValueError as exc:  # load_cell's message names the file
        raise ResultsError(str(exc)) from None


def entries(cells: list[CellResult]) -> dict[tuple[str, str, str], str]:
    """{(cell, check, sub-verdict): status}, with ("cell", "", "") -> "present" for each cell."""
    found: dict[tuple[str, str, str], str] = {}
    for cell in cells:
        found[(cell.cell_id, "", "")] = "present"
        for check in cell.checks:
            found[(cell.cell_id, check.check, "")] = check.status.value
            for verdict in check.verdicts:
                found[(cell.cell_id, check.check, verdict.name)] = verdict.status.value
    return found


def differences(first: list[CellResult], second: list[CellResult]) -> list[EntryDifference]:
    """Every entry whose status differs; a cell only one side has is one difference, not one per check."""
    a, b = entries(first), entries(second)
    one_sided = {key[0] for key in set(a) ^ set(b) if key[1:] == ("", "")}
    return [EntryDifference(*key, a.get(key, ABSENT), b.get(key, ABSENT))
            for key in sorted(set(a) | set(b))
            if a.get(key) != b.get(key) and (key[1:] == ("", "") or key[0] not in one_sided)]


def compare_dirs(first: Path | str, second: Path | str) -> list[EntryDifference]:
    return differences(read_cells(first), read_cells(second))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        if len(args) != 2:
            raise InputError("usage: python -m harness.results.verdict_diff DIR_A DIR_B")
        found = compare_dirs(*args)
        for difference in found:
            print(difference)
        if found:
            raise BaselineChanged(f"{len(found)} entries differ between {args[0]} and {args[1]}")
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(f"identical verdicts: {args[0]} and {args[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
