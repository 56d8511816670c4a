"""The compatibility report, generated only from the result files of a report directory.

    DIR/cells/<cell-id>.json   one CellResult per cell (logs and lock files under DIR/cells/<cell-id>/)
    DIR/run.json               optional: {"matrix", "title", "notes": [...], "generated_by"}
    DIR/preflight/cells/*.json the CPU pre-flight's install verdicts, shown for cells with no runner result yet
    DIR/evidence/cells/*.json  an offline box's results (run --here), shown as more rows (added_rows.py)

`write_report(DIR)` loads them, builds one `Report` (table.py) and renders it as report.md (markdown.py),
report.html (html.py; its first screen from pins.py, grid.py and glance.py, with plots from plot.py),
report.json, report.junit.xml (junit.py) and support.json (support.py: one verdict per version combination,
for other tools). Unreadable files become problems listed in the report; they never stop it.

May import: harness.errors, harness.results, harness.checks, harness.matrix.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.errors import InputError, ResultsError
from harness.results.records import CellResult, load_cell, write_text_atomic

from . import added_rows, history
from .findings import finding_json
from .gcpause import gc_paused
from .html import to_html
from .jsontext import json_text
from .junit import to_junit
from .markdown import to_markdown
from .support import support_json
from .table import REPORT_SCHEMA_VERSION, STATUS_VALUES, Report, build_report, clean_text

__all__ = ["DEFAULT_FORMATS", "REPORT_SCHEMA_VERSION", "Report", "build_report", "load_results", "read_run_info",
           "render", "support_json", "to_html", "to_json", "to_junit", "to_markdown", "write_report"]

MAX_CELL_FILE_BYTES = 32 * 1024 * 1024  # a cell file is a few KB; a huge one is not read into memory
FORMATS = {"md": "report.md", "html": "report.html", "json": "report.json", "junit": "report.junit.xml",
           "support": "support.json"}
DEFAULT_FORMATS = tuple(FORMATS)


def _problem(name: str, exc: BaseException) -> str:
    reason = exc.__cause__ or exc
    return clean_text(f"{name}: not a readable cell result ({type(reason).__name__}: {reason})", 300)


def load_results(report_dir: Path | str) -> tuple[list[CellResult], list[str]]:
    """Every readable cell of DIR/cells/*.json, and one line per file that could not be used."""
    cells_dir = Path(report_dir) / "cells"
    cells, problems = [], []
    if not cells_dir.is_dir():
        cells = added_rows.added(Path(report_dir), set(), problems)  # pre-flighted or run offline only
        if not cells:
            return [], [f"{cells_dir.name}/: no such directory in {Path(report_dir).name or report_dir}"]
        return cells, problems
    for path in sorted(cells_dir.glob("*.json")):
        name = f"cells/{path.name}"
        if path.name.startswith("."):
            continue  # a temporary file of an atomic write in progress
        try:
            if path.stat().st_size > MAX_CELL_FILE_BYTES:
                problems.append(clean_text(f"{name}: too large to be a cell result ({path.stat().st_size} bytes)"))
                continue
            cells.append(load_cell(path))
        except Exception as exc:  # noqa: BLE001 - any malformed content is a problem line, never a crash
            problems.append(_problem(name, exc))
    # Offline evidence, and the CPU pre-flight verdicts of cells no runner has run yet (added_rows.py).
    return cells + added_rows.added(Path(report_dir), {c.cell_id for c in cells}, problems), problems


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


_VALUE = STATUS_VALUES


def _entry_json(column: int, entry) -> dict[str, Any]:
    data = {"column": column, "cell_id": entry.cell_id, "status": _VALUE[entry.status], "message": entry.message,
            "duration": entry.duration, "log": entry.log, "lock": entry.lock}
    if entry.plain:  # most entries: no optional key is set
        return data
    # Optional keys only when set: a 10,000-cell report stays small and fast to write.
    if entry.origin:
        data["origin"] = entry.origin
    if entry.verdicts:
        data["verdicts"] = [{"name": v.name, "status": _VALUE[v.status], "message": v.message, "emulated": v.emulated}
                            for v in entry.verdicts]
    if entry.rejected_links:
        data["rejected_links"] = list(entry.rejected_links)
    if entry.known_failure:
        data["known_failure"] = entry.known_failure
    if entry.original_status is not None:
        data["original_status"] = _VALUE[entry.original_status]
    if entry.emulated:
        data["emulated"] = True
    if entry.plot is not None:
        data["plot"] = True  # the curves stay in the cell file; report.html draws them
    if entry.failure_class:
        data["failure_class"] = entry.failure_class
    if entry.change:
        data["change"] = entry.change
    if entry.repro:
        data["repro"] = entry.repro
    if entry.flaky:
        data["flaky"] = True
    if entry.attempts:
        data["attempts"] = entry.attempts
    if entry.reused:
        data["reused_from"] = entry.reused[0]
    if entry.install is not None:
        verdict = entry.install
        data["install"] = {"verdict": verdict.kind, "label": verdict.label, "reason": clean_text(verdict.reason, 400),
                           "remedy": clean_text(verdict.remedy, 400)}
    if entry.standing:
        data["standing"] = True
    return data


def to_json(report: Report) -> dict[str, Any]:
    """Everything in the table, JSON-serialisable, tagged with REPORT_SCHEMA_VERSION.

    Each row's entries carry column (an index into columns), cell_id, status, message, duration, log and
    lock (null when absent or unsafe); verdicts, rejected_links, known_failure, original_status, emulated,
    plot, reused_from (the cell a reused result came from), install (its cell could not be installed: verdict,
    label, reason, remedy) and standing (its failures are standing findings) appear only when set.
    """
    with gc_paused():
        return _to_json(report)


def _to_json(report: Report) -> dict[str, Any]:
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "title": report.title,
        "cell_count": report.cell_count,
        "axes": list(report.axes),
        "columns": [{"backend": c.backend, "model": c.model, "check": c.check} for c in report.columns],
        "rows": [{"axes": dict(zip(report.axes, row.axes)), "cells": row.cells, "environment": row.environment,
                  "entries": [_entry_json(i, e) for i, e in row.entries.items()]}
                 for row in report.rows],
        "legend": [{"symbol": s, "status": n, "meaning": m} for s, n, m in report.legend],
        "summary": dict(report.summary),
        "passing_ranges": [{"axis": r.axis, "tested": r.tested, "passing": r.passing, "segments": r.segments,
                            "combinations": {v: {"passing": c[0], "tested": c[1]} for v, c in r.combinations.items()},
                            "text": r.text(max_segments=1000)} for r in report.ranges],
        "has_emulated": report.has_emulated,
        "notes": list(report.notes),
        "problems": list(report.problems),
        "changes": report.changes,
        "last_known_good": list(report.last_known_good),
        "standing_findings": [finding_json(f, clean_text) for f in report.standing],
        "not_installed": dict(report.not_installed),
    }


def last_known_good_lines(history: dict) -> list[str]:
    lines = []
    for key, entry in sorted(history.get("last_known_good", {}).items()):
        versions = ", ".join(f"{axis} {value}" for axis, value in entry.get("versions", {}).items())
        lines.append(f"{key}: {versions} (cell {entry.get('cell', '?')}, {entry.get('date', '?')}, "
                     f"{len(str(entry.get('lock', '')).splitlines())} pinned packages in its lock)")
    return lines


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


def compare_with(cells: list[CellResult], previous_dir: Path | str) -> tuple[list, list[str]]:
    """Changes against a previous results directory (for example a downloaded CI artifact)."""
    from harness.results.compare import compare

    previous, problems = load_results(previous_dir)
    if not previous:
        detail = f": {problems[0]}" if problems else ""
        raise ResultsError(f"--previous {previous_dir}: no readable cell results{detail}")
    changes = compare(cells, previous)
    problems = [f"previous run: {p}" for p in problems]
    if changes and all(change.before is None for change in changes):  # another matrix's results, say
        problems.append(f"previous run {previous_dir} shares no (cell, check) with this run: "
                        "every entry was compared with nothing (its change says only whether it fails now)")
    return changes, problems


def write_report(report_dir: Path | str, formats: Iterable[str] = DEFAULT_FORMATS,
                 notes: Iterable[str] = (), previous: Path | str | None = None) -> list[Path]:
    """Render DIR's results into DIR/report.{md,html,json,junit.xml} and DIR/support.json; see render_report."""
    return render_report(report_dir, formats, notes, previous)[0]


def render_report(report_dir: Path | str, formats: Iterable[str] = DEFAULT_FORMATS,
                  notes: Iterable[str] = (), previous: Path | str | None = None) -> tuple[list[Path], list | None]:
    """Render DIR's results into DIR/report.{md,html,json}; ResultsError when no cell is readable."""
    report_dir = Path(report_dir)
    formats = list(formats)
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise InputError(f"unknown report format {unknown[0]!r}; expected one of {', '.join(FORMATS)}")
    cells, problems = load_results(report_dir)
    if not cells:
        detail = f": {problems[0]}" + (f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else "") \
            if problems else ""
        raise ResultsError(f"{report_dir}: no readable cell results{detail}")
    info, run_problems = read_run_info(report_dir)
    title = info.get("title") or (f"Qwen3.5 compatibility report: {info['matrix']}" if info.get("matrix") else "")
    generated = [f"generated by {info['generated_by']}"] if info.get("generated_by") else []
    changes, previous_problems = compare_with(cells, previous) if previous is not None else (None, [])
    try:
        lkg = last_known_good_lines(history.update(report_dir, cells))
    except ValueError as exc:  # a corrupt history must not hide the run's results
        lkg, run_problems = [], [*run_problems, str(exc)]
    report = build_report(cells, title=title, notes=[*info.get("notes", []), *notes, *generated],
                          problems=[*problems, *run_problems, *previous_problems], last_known_good=lkg,
                          changes=None if changes is None else {(c.cell_id, c.check): c.kind for c in changes})
    report.first_bad, bad_problems = first_bad_lines(report_dir)
    report.problems += bad_problems
    written = []
    for fmt in dict.fromkeys(formats):
        path = report_dir / FORMATS[fmt]
        write_text_atomic(path, render(report, fmt))
        written.append(path)
    return written, changes


def render(report: Report, fmt: str) -> str:
    """One format of the report as text (see FORMATS)."""
    with gc_paused():  # see gcpause: the renderers make many short-lived objects next to a big heap
        return _render(report, fmt)


def _render(report: Report, fmt: str) -> str:
    if fmt == "json":
        return json_text(to_json(report))  # not indented: a 10,000-cell report is 31 MB on one line
    if fmt == "support":
        return json_text(support_json(report))
    return {"md": to_markdown, "html": to_html, "junit": to_junit}[fmt](report)
