"""Rows from the CPU pre-flight (harness/preflight/store.py): a cell that no runner has run yet is shown with
its install verdict and lock, marked as coming from the pre-flight; a runner's result for the cell replaces it.

The report reads the pre-flight's files as plain cell results; it does not import the pre-flight.
"""
from __future__ import annotations

from pathlib import Path

from harness.results.records import CellResult, load_cell

FOLDER = "preflight"  # DIR/preflight/cells/<cell-id>.json, as harness/preflight/store.py writes them
MAX_BYTES = 1024 * 1024


def from_preflight(cell: CellResult) -> bool:
    """A result the pre-flight wrote: an install verdict, no check run."""
    return bool(cell.environment.get("preflight"))


def awaiting(report_dir: Path, have: set[str], problems: list[str]) -> list[CellResult]:
    """The pre-flight results of DIR for cells not in `have` (the cells a runner has results for); an unreadable
    file becomes a line in `problems`."""
    folder = Path(report_dir) / FOLDER / "cells"
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        if path.name.startswith(".") or path.stem in have:
            continue
        try:
            if path.stat().st_size > MAX_BYTES:
                raise ValueError(f"too large ({path.stat().st_size} bytes)")
            cell = load_cell(path)
        except (OSError, ValueError) as exc:
            problems.append(f"{FOLDER}/cells/{path.name}: not a readable pre-flight result ({exc})"[:300])
            continue
        if from_preflight(cell) and cell.cell_id not in have:
            found.append(cell)
    return found
