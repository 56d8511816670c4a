"""report.json and support.json: the report as JSON data, and that data as pure-ASCII text.

report.json (`to_json`) holds everything in the table, tagged with REPORT_SCHEMA_VERSION; support.json
(`support_json`) holds one verdict per version combination for other tools, its keys and order fixed by
SUPPORT_SCHEMA_VERSION.

`json_text` writes them with orjson's encoding, kept pure ASCII. orjson writes the same data as json.dumps,
several times faster, but writes characters beyond ASCII as UTF-8. Decoded to a str, a single emoji (the
legend's status symbols) makes Python store every one of the 31 million characters of a 10,000-cell
report.json in four bytes: decoding and writing that cost more than orjson saves. So the ASCII decoder reads
it, and an error handler writes each other character as json.dumps does (\\uXXXX, a surrogate pair beyond the
BMP); the ASCII in between is decoded at C speed. Without orjson (an air-gapped box runs the harness on its
own interpreter, which need not have it), json.dumps writes the same JSON data, pure ASCII, more slowly.
"""
from __future__ import annotations

import codecs
import json
from typing import Any

from .build import gc_paused
from .model import STATUS_VALUES, Report
from .row_verdicts import RowVerdict, kind_counts, row_verdicts, varying_axes
from .safe_text import clean_text
from .standing_findings import StandingFinding

# 2: a standing finding's cases under "cases" (not "evidence"), with "ours" and "upstream"; entries' "everywhere"
# and "raised_here"
REPORT_SCHEMA_VERSION = 2
SUPPORT_SCHEMA = "qwen35-support-summary"
# 2: install and standing kinds, standing_findings; 3: the awaits kind; 4: a standing finding's cases under
# "cases" (not "evidence": that word is the offline box's evidence run's), with "ours" and "upstream"
SUPPORT_SCHEMA_VERSION = 4
_VALUE = STATUS_VALUES


def _finding_json(finding: StandingFinding) -> dict[str, Any]:
    """A finding as report.json and support.json give it, each text one safe line."""
    return {"backend": finding.backend, "model": finding.model, "check": finding.check, "verdict": finding.verdict,
            "status": finding.status, "message": clean_text(finding.message, 1000), "cells": finding.cells,
            "ours": clean_text(finding.ours, 200), "upstream": clean_text(finding.upstream, 200),
            "cases": [{k: clean_text(v, 600) for k, v in case.items()} for case in finding.cases]}


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
    if entry.everywhere:
        data["everywhere"] = True
    if entry.raised_here:
        data["raised_here"] = entry.raised_here
    return data


def to_json(report: Report) -> dict[str, Any]:
    """Everything in the table, JSON-serialisable, tagged with REPORT_SCHEMA_VERSION.

    Each row's entries carry column (an index into columns), cell_id, status, message, duration, log and
    lock (null when absent or unsafe); verdicts, rejected_links, known_failure, original_status, emulated,
    plot, reused_from (the cell a reused result came from), install (its cell could not be installed: verdict,
    label, reason, remedy), standing (its failures are standing findings), everywhere (it fails the same way in
    every row, no standing finding) and raised_here (this project's file that raised its failure) appear only
    when set.
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
        "standing_findings": [_finding_json(f) for f in report.standing],
        "not_installed": dict(report.not_installed),
    }


def support_json(report: Report, verdicts: list[RowVerdict] | None = None) -> dict[str, Any]:
    """The support summary for other tools; keys and order are fixed by SUPPORT_SCHEMA_VERSION.

    {"schema", "schema_version", "title", "constant_axes": {axis: value}, "varying_axes": [axis...],
     "columns": [{"key": "backend/model/check", "backend", "model", "check"}], "counts": {kind: n},
     "combinations": [{"axes": {axis: value} (varying axes, "" when absent), "verdict": kind, "label", "reason",
     "cells": [cell id...], "checks": {column key: status}}],
     "standing_findings": [{"backend", "model", "check", "verdict", "status", "message", "cells", "ours",
     "upstream", "cases"}]}
    A check whose cell could not be installed has status "cannot be installed together" or "not installable on
    this runner" in "checks", not "error".
    """
    verdicts = row_verdicts(report) if verdicts is None else verdicts
    varying, constant = varying_axes(report)
    labels = [f"{c.backend}/{c.model}/{c.check}" for c in report.columns]  # as history.json keys them
    return {
        "schema": SUPPORT_SCHEMA,
        "schema_version": SUPPORT_SCHEMA_VERSION,
        "title": report.title,
        "constant_axes": constant,
        "varying_axes": [report.axes[p] for p in varying],
        "columns": [{"key": key, "backend": c.backend, "model": c.model, "check": c.check}
                    for key, c in zip(labels, report.columns)],
        "counts": kind_counts(verdicts),
        "combinations": [
            {"axes": {report.axes[p]: row.axes[p] for p in varying}, "verdict": verdict.kind, "label": verdict.label,
             "reason": verdict.reason, "cells": sorted(row.cells),
             "checks": {labels[i]: entry.install.label if entry.install else STATUS_VALUES[entry.status]
                        for i, entry in row.entries.items()}}
            for row, verdict in zip(report.rows, verdicts)],
        "standing_findings": [_finding_json(f) for f in report.standing],
    }


try:
    import orjson
except ModuleNotFoundError:  # a box's own interpreter (`run --here`): the standard library writes the same data
    orjson = None

_ASCII = bytes(range(128))
# Past this many non-ASCII bytes (a report of Chinese messages), one UTF-8 decode is faster than escaping
# each character: the text then holds them as they are, which is the same JSON data.
MANY_NON_ASCII = 100_000


_ESCAPED: dict[bytes, str] = {}  # a few characters repeat thousands of times (the " · " of column labels)


def _escape(error: UnicodeDecodeError) -> tuple[str, int]:
    """The \\u escape of the UTF-8 character at the error (orjson writes only valid UTF-8), and where to go on."""
    data, start = error.object, error.start
    lead = data[start]
    size = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    char = data[start:start + size]
    escaped = _ESCAPED.get(char)
    if escaped is None:
        if len(_ESCAPED) > 10_000:  # a report in another script must not grow it without bound
            _ESCAPED.clear()
        escaped = _ESCAPED[char] = json.dumps(char.decode("utf-8"))[1:-1]
    return escaped, start + size


codecs.register_error("harness-json-ascii", _escape)


def json_text(data: Any) -> str:
    """`data` as one line of JSON (no spaces), ending in a newline."""
    if orjson is None:
        return json.dumps(data, separators=(",", ":")) + "\n"
    raw = orjson.dumps(data, option=orjson.OPT_APPEND_NEWLINE)
    if raw.isascii():
        return raw.decode("ascii")
    if len(raw.translate(None, _ASCII)) > MANY_NON_ASCII:
        return raw.decode("utf-8")
    return raw.decode("ascii", "harness-json-ascii")
