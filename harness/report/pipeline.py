"""The one report pipeline: a report directory's results to one Report, and the Report to its formats.

`build_from_dir(DIR)` loads the results (harness/results/sources.py), reads DIR/run.json, compares with a
previous run when asked, merges the run into the history (DIR/history.json, history.py) and builds one
Report (build.py) with the first bad releases of DIR/first-bad.json and the [[standing]] rules of the cells'
matrices (MATRICES/<matrix>.toml, the checkout's matrices/ unless told: only a comparison a matrix declares to be
against an upstream component can be a standing finding, standing_findings.py). `render(report, fmt)` gives one
format; `write_report(DIR)` writes every format into DIR. Unreadable files become problems listed in the report;
they never stop it.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness import matrix
from harness.errors import InputError, ResultsError
from harness.results.compare import UNREADABLE, Change, compare
from harness.results.records import CellResult, write_text_atomic
from harness.results.sources import load_results

from . import history
from .build import build_report, gc_paused
from .html.page import to_html
from .json_files import json_text, support_json, to_json
from .junit import to_junit
from .markdown import to_markdown
from .model import Report
from .safe_text import clean_text
from .standing_findings import Declarations

MATRICES = Path(__file__).resolve().parents[2] / "matrices"  # the checkout's matrices
_MATRIX_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,80}")  # as axes.TAG_RE: a file name, never a path
FORMATS = {"md": "report.md", "html": "report.html", "json": "report.json", "junit": "report.junit.xml",
           "support": "support.json"}
DEFAULT_FORMATS = tuple(FORMATS)


def _load(report_dir: Path | str) -> tuple[list[CellResult], list[str], set[str]]:
    """Every readable cell result of DIR (results.sources), its problems as clean lines, and the cells whose
    result file was there but could not be used."""
    cells, problems = load_results(report_dir)
    return cells, [clean_text(problem, 300) for problem in problems], set(problems.unreadable)


def read_run_info(report_dir: Path | str) -> tuple[dict[str, Any], list[str]]:
    """DIR/run.json as {"matrix", "title", "notes", "generated_by"} (absent keys omitted), and problems."""
    path = Path(report_dir) / "run.json"
    if not path.exists():
        return {}, []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
    except Exception as exc:  # noqa: BLE001
        return {}, [clean_text(f"run.json: unreadable ({type(exc).__name__}: {exc})", 300)]
    info: dict[str, Any] = {k: str(data[k]) for k in ("matrix", "title", "generated_by") if data.get(k)}
    notes = data.get("notes") or []
    info["notes"] = [_note_text(n) for n in (notes if isinstance(notes, list) else [notes])]
    return info, []


def _note_text(note: Any) -> str:
    """A note is a string, or {"text": ..., "cells": [...]} as the runner writes matrix notes."""
    if not isinstance(note, dict):
        return str(note)
    cells = note.get("cells") or []
    cells = [str(c) for c in cells] if isinstance(cells, list) else [str(cells)]
    return str(note.get("text", "")) + (f" (cells: {', '.join(cells)})" if cells else "")


def first_bad_lines(report_dir: Path) -> tuple[list[str], list[str]]:
    """The findings of DIR/first-bad.json (harness/rerun/first_bad.py) as text, and problems reading it."""
    path = report_dir / "first-bad.json"
    if not path.exists():
        return [], []
    try:
        findings = json.loads(path.read_text(encoding="utf-8")).get("findings", [])
        return [clean_text(str(f["text"]), 2000) for f in findings], []
    except (OSError, ValueError, AttributeError, TypeError, KeyError) as exc:
        return [], [clean_text(f"first-bad.json: unreadable ({type(exc).__name__}: {exc})", 300)]


def standing_rules(cells: Iterable[CellResult], matrices: Path | str = MATRICES) -> tuple[Declarations, list[str]]:
    """The [[standing]] rules of each matrix the cells name, read from MATRICES/<name>.toml, and a problem for a
    matrix file that exists but does not load (its cells then have no standing finding). A matrix whose file is
    not there declares nothing: no failure of its cells is a standing finding."""
    found: dict[str, list] = {}
    problems = []
    for name in sorted({cell.matrix for cell in cells}):
        if not _MATRIX_NAME.fullmatch(name):
            continue  # a result file's word, never made into a path
        path = Path(matrices) / f"{name}.toml"
        if not path.is_file():
            continue
        try:
            found[name] = list(matrix.load(path).standing)
        except InputError as exc:
            problems.append(clean_text(f"{exc}; no failure of its cells is a standing finding", 400))
    return found, problems


def compare_with(cells: list[CellResult], previous_dir: Path | str,
                 unreadable: Iterable[str] = ()) -> tuple[list[Change], list[str]]:
    """Changes against a previous results directory (for example a downloaded CI artifact); `unreadable`: the
    cells of this run whose result file could not be used (each check they had before is compared too)."""
    previous, problems, _ = _load(previous_dir)
    if not previous:
        detail = f": {problems[0]}" if problems else ""
        raise ResultsError(f"--previous {previous_dir}: no readable cell results{detail}")
    changes = compare(cells, previous, unreadable)
    problems = [f"previous run: {p}" for p in problems]
    lost = sorted({c.cell_id for c in changes if c.after == UNREADABLE})
    if lost:
        problems.append(f"{len(lost)} cells of the previous run have a result file here that cannot be used, so "
                        f"each of their checks counts as failing (a new failure where it did not fail before): "
                        + ", ".join(lost[:10]) + (" ..." if len(lost) > 10 else ""))
    if changes and all(change.before is None for change in changes):  # another matrix's results, say
        problems.append(f"previous run {previous_dir} shares no (cell, check) with this run: "
                        "every entry was compared with nothing (its change says only whether it fails now)")
    return changes, problems


def build_from_dir(report_dir: Path | str, notes: Iterable[str] = (), previous: Path | str | None = None,
                   save_history: bool = True, matrices: Path | str = MATRICES) -> tuple[Report, list[Change] | None]:
    """The Report of DIR's results, and its changes against `previous` (None without one); ResultsError when
    no cell is readable. `save_history=False` leaves DIR/history.json as it is (the report still lists the
    last known good with this run merged in). `matrices`: where the cells' matrix files are (standing_rules)."""
    report_dir = Path(report_dir)
    cells, problems, unreadable = _load(report_dir)
    if not cells:
        detail = f": {problems[0]}" + (f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else "") \
            if problems else ""
        raise ResultsError(f"{report_dir}: no readable cell results{detail}")
    info, run_problems = read_run_info(report_dir)
    title = info.get("title") or (f"Qwen3.5 compatibility report: {info['matrix']}" if info.get("matrix") else "")
    generated = [f"generated by {info['generated_by']}"] if info.get("generated_by") else []
    changes, previous_problems = compare_with(cells, previous, unreadable) if previous is not None else (None, [])
    try:
        lkg = history.last_known_good_lines(history.update(report_dir, cells, save=save_history))
    except ValueError as exc:  # a corrupt history must not hide the run's results
        lkg, run_problems = [], [*run_problems, str(exc)]
    declarations, matrix_problems = standing_rules(cells, matrices)
    report = build_report(cells, title=title, notes=[*info.get("notes", []), *notes, *generated],
                          problems=[*problems, *run_problems, *previous_problems, *matrix_problems],
                          last_known_good=lkg, declarations=declarations,
                          changes=None if changes is None else {(c.cell_id, c.check): c.kind for c in changes})
    report.first_bad, bad_problems = first_bad_lines(report_dir)
    report.problems += bad_problems
    return report, changes


def write_report(report_dir: Path | str, formats: Iterable[str] = DEFAULT_FORMATS,
                 notes: Iterable[str] = (), previous: Path | str | None = None,
                 matrices: Path | str = MATRICES) -> list[Path]:
    """Render DIR's results into DIR/report.{md,html,json,junit.xml} and DIR/support.json; see render_report."""
    return render_report(report_dir, formats, notes, previous, matrices)[0]


def render_report(report_dir: Path | str, formats: Iterable[str] = DEFAULT_FORMATS, notes: Iterable[str] = (),
                  previous: Path | str | None = None,
                  matrices: Path | str = MATRICES) -> tuple[list[Path], list[Change] | None]:
    """Write the formats of DIR's report into DIR (build_from_dir), and return the files and the changes."""
    report_dir = Path(report_dir)
    formats = list(formats)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise InputError(f"unknown report format {unknown[0]!r}; expected one of {', '.join(FORMATS)}")
    report, changes = build_from_dir(report_dir, notes, previous, matrices=matrices)
    written = []
    for fmt in dict.fromkeys(formats):
        path = report_dir / FORMATS[fmt]
        write_text_atomic(path, render(report, fmt))
        written.append(path)
    return written, changes


def render(report: Report, fmt: str) -> str:
    """One format of the report as text (see FORMATS)."""
    with gc_paused():  # see build.py: the renderers make many short-lived objects next to a big heap
        return _render(report, fmt)


def _render(report: Report, fmt: str) -> str:
    if fmt == "json":
        return json_text(to_json(report))  # not indented: a 10,000-cell report is 31 MB on one line
    if fmt == "support":
        return json_text(support_json(report))
    return {"md": to_markdown, "html": to_html, "junit": to_junit}[fmt](report)
