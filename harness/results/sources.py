"""Where a cell result comes from, and the one loader that reads a report directory's results of every source.

    DIR/cells/*.json            Source.RUNNER       a runner of the matrix
    DIR/evidence/cells/*.json   Source.OFFLINE_BOX  an air-gapped box's accelerator evidence run
                                                    (`run --here --out DIR/evidence`): its own cells, shown beside
                                                    the matrix's with the box's GPU, driver, torch and date
    DIR/cpu-side/cells/*.json   Source.CPU_SIDE     the CPU-side run on a cell's exact wheels
                                                    (harness/preflight/cpuside.py): the checks that need no
                                                    accelerator, run on CPU, the others awaiting a runner
    DIR/preflight/cells/*.json  Source.PREFLIGHT    the CPU pre-flight (harness/preflight/store.py): the cell's
                                                    install verdict and lock, no check run

A cell has one result: a runner's replaces every other, then the offline box's, the CPU-side run's and the
pre-flight's, in that order. `load_results` stamps each CellResult with its source (the one its file names,
else its folder's); an unreadable file is one problem line, never a crash. A file is read only as the result of
the cell it is named for: one that holds another cell's result (a stray copy, a renamed file) is a problem line
and is not used. A file that cannot be used leaves its cell without a result: no folder read after it stands in
for it (an older CPU-side or pre-flight result would pass for the runner's), and `Problems.unreadable` names the
cell, so that a comparison with a previous run can count it (results/compare.py). A result not a
runner's says where it comes from in one line, its environment's `origin` (files that name it `evidence`, as the
CPU-side results committed under reports/cuda/ do, are read the same).

The CPU-side run marks each check result it writes, and the report shows the mark's words after the entry:

    metrics["cpu_side"] = RAN       the check ran on CPU in the cell's own environment (device forced to cpu)
                          PART      only its part that needs no accelerator ran (patch-parity's target audit)
                          AWAITS    it needs an accelerator: not run, it awaits a runner
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .records import CellResult, Source, load_cell

FOLDERS = {Source.RUNNER: "cells", Source.OFFLINE_BOX: "evidence/cells", Source.CPU_SIDE: "cpu-side/cells",
           Source.PREFLIGHT: "preflight/cells"}
CPU_SIDE_FOLDER = "cpu-side"  # DIR/cpu-side: its cells/ and their logs and locks
CPU_SIDE_KEY = "cpu_side"
RAN, PART, AWAITS = "ran", "part", "awaits"
CPU_SIDE_LABELS = {RAN: "from CPU pre-flight", PART: "part from CPU pre-flight, the rest awaits a runner",
                   AWAITS: "awaits a runner"}
# A runner's cell file is a few KB, the others' smaller: a huge one is not read into memory.
MAX_BYTES = {Source.RUNNER: 32 * 1024 * 1024, Source.OFFLINE_BOX: 1024 * 1024, Source.CPU_SIDE: 1024 * 1024,
             Source.PREFLIGHT: 1024 * 1024}


ORIGIN_KEYS = ("origin", "evidence")  # the origin line's key, and the other name result files give it


def cpu_side_origin(metrics: dict) -> str | None:
    """The report's words for a check result's CPU-side mark; None for a result a runner (or nobody) made."""
    mark = metrics.get(CPU_SIDE_KEY) if isinstance(metrics, dict) else None
    return CPU_SIDE_LABELS.get(mark) if isinstance(mark, str) else None


def from_preflight(cell: CellResult) -> bool:
    """A result the pre-flight wrote (its install verdict, or the CPU-side run on its wheels)."""
    return bool(cell.environment.get("preflight"))


def ran_cpu_side(cell: CellResult) -> bool:
    """A result the CPU-side run on the exact wheels wrote."""
    return from_preflight(cell) and cell.environment.get(CPU_SIDE_KEY) is True


# What each folder holds, in the order they are read; a cell's first readable result is its result.
WANTED: dict[Source, Callable[[CellResult], bool]] = {
    Source.RUNNER: lambda cell: True, Source.OFFLINE_BOX: lambda cell: not from_preflight(cell),
    Source.CPU_SIDE: ran_cpu_side, Source.PREFLIGHT: from_preflight}


class Problems(list):
    """The problem lines of a load (a list of str), and `unreadable`: cell id (its file's name) -> the line, for
    each cell whose result file was there but could not be used."""

    def __init__(self) -> None:
        super().__init__()
        self.unreadable: dict[str, str] = {}

    def unusable(self, cell_id: str, line: str) -> None:
        self.append(line)
        self.unreadable[cell_id] = line


def load_results(report_dir: Path | str) -> tuple[list[CellResult], Problems]:
    """Every readable cell result of DIR, stamped with its source, and one line per file that could not be used."""
    report_dir = Path(report_dir)
    cells: list[CellResult] = []
    problems = Problems()
    have: set[str] = set()  # the cells whose result is decided: read, or unusable in a folder read before
    for source, wanted in WANTED.items():
        found = _read(report_dir, source, wanted, have, problems)
        have |= {cell.cell_id for cell in found} | set(problems.unreadable)
        cells += found
    if not cells and not (report_dir / FOLDERS[Source.RUNNER]).is_dir():
        missing = Problems()
        missing.append(f"{FOLDERS[Source.RUNNER]}/: no such directory in {report_dir.name or report_dir}")
        return [], missing
    return cells, problems


def _read(report_dir: Path, source: Source, wanted: Callable[[CellResult], bool], have: set[str],
          problems: Problems) -> list[CellResult]:
    """The results of one source's folder that `wanted` accepts, for cells not in `have`."""
    folder = report_dir / FOLDERS[source]
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        if path.name.startswith("."):
            continue  # a temporary file of an atomic write in progress
        if path.stem in have:
            continue
        name = f"{FOLDERS[source]}/{path.name}"
        try:
            size = path.stat().st_size
            if size > MAX_BYTES[source]:
                problems.unusable(path.stem, f"{name}: too large to be a cell result ({size} bytes)")
                continue
            cell = load_cell(path)
        except Exception as exc:  # noqa: BLE001 - any malformed content is a problem line, never a crash
            reason = exc.__cause__ or exc
            problems.unusable(path.stem, " ".join(f"{name}: not a readable cell result ({type(reason).__name__}: "
                                                  f"{reason})".split()))
            continue
        if cell.cell_id != path.stem:
            problems.unusable(path.stem, " ".join(f"{name}: holds the result of cell {cell.cell_id[:200]!r}, not of "
                                                  f"{path.stem!r} (its name); not used".split()))
            continue
        if wanted(cell) and cell.cell_id not in have:
            cell.source = cell.source or source
            _read_origin(cell)
            found.append(cell)
    return found


def _read_origin(cell: CellResult) -> None:
    """The origin line under its one key, whichever of ORIGIN_KEYS the file gave it."""
    line = next((cell.environment[key] for key in ORIGIN_KEYS if cell.environment.get(key)), None)
    for key in ORIGIN_KEYS[1:]:
        cell.environment.pop(key, None)
    if line is not None:
        cell.environment[ORIGIN_KEYS[0]] = line
