"""Rows a runner run of the matrix did not write, read as plain cell results from three folders of DIR:

    DIR/cpu-side/cells/*.json    the CPU pre-flight on a cell's exact wheels (harness/preflight/cpuside.py): the
                                 checks that need no accelerator, run on CPU, the others awaiting a runner; shown
                                 instead of the cell's install verdict, and replaced by a runner result
    DIR/preflight/cells/*.json   the CPU pre-flight (harness/preflight/store.py): a cell no runner has run yet is
                                 shown with its install verdict and lock, marked as such; a runner result replaces it
    DIR/evidence/cells/*.json    an offline run on an air-gapped box (`run --here --out DIR/evidence`): its own
                                 cells, shown beside the matrix's with the box's GPU, driver, torch and date
"""
from __future__ import annotations

from pathlib import Path

from harness.results import cpu_side
from harness.results.records import CellResult, load_cell

FOLDER = "preflight"  # DIR/preflight/cells/<cell-id>.json, as harness/preflight/store.py writes them
EVIDENCE = "evidence"
MAX_BYTES = 1024 * 1024


def from_preflight(cell: CellResult) -> bool:
    """A result the pre-flight wrote: an install verdict, no check run."""
    return bool(cell.environment.get("preflight"))


def ran_cpu_side(cell: CellResult) -> bool:
    """A result the CPU pre-flight on the exact wheels wrote."""
    return from_preflight(cell) and cell.environment.get(cpu_side.KEY) is True


def added(report_dir: Path, have: set[str], problems: list[str]) -> list[CellResult]:
    """The offline evidence, then the CPU-side results, then the install verdicts of DIR, each for cells not in
    `have` (the cells a runner has results for) nor in a folder read before it."""
    found: list[CellResult] = []
    for folder_name, wanted in ((EVIDENCE, lambda cell: not from_preflight(cell)), (cpu_side.FOLDER, ran_cpu_side),
                                (FOLDER, from_preflight)):
        more = _read(report_dir, folder_name, have, problems, wanted)
        have = have | {cell.cell_id for cell in more}
        found += more
    return found


def _read(report_dir: Path, folder_name: str, have: set[str], problems: list[str], wanted) -> list[CellResult]:
    """The cell results of DIR/<folder_name>/cells that `wanted` accepts; an unreadable file is a problem line."""
    folder = Path(report_dir) / folder_name / "cells"
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        if path.name.startswith(".") or path.stem in have:
            continue
        try:
            if path.stat().st_size > MAX_BYTES:
                raise ValueError(f"too large ({path.stat().st_size} bytes)")
            cell = load_cell(path)
        except (OSError, ValueError) as exc:
            problems.append(f"{folder_name}/cells/{path.name}: not a readable cell result ({exc})"[:300])
            continue
        if wanted(cell) and cell.cell_id not in have:
            found.append(cell)
    return found
