"""JUnit XML of a Report, for CI test reporters: one testsuite per cell, one testcase per check.

fail, error, crash and timeout become <failure> (type = the status, message = the check's message); skip
and xfail become <skipped> (an xfail names its known failure). pass and affected are plain testcases:
`affected` is evidence of an upstream bug, not a failure of the trainer. Every case but a plain pass has its
message, sub-verdicts, log and lock in <system-out>. Every text goes through XML escaping;
table.clean_text has already removed the control characters XML 1.0 cannot carry.
"""
from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from harness.results.records import Status

from .table import FAILING, STATUS_VALUES, Entry, Report

_SKIPPED = frozenset((Status.SKIP, Status.XFAIL))


def _xml_text(text: str) -> str:
    """saxutils.escape, skipped (three `in` tests) for the many texts with nothing to escape."""
    return escape(text) if "&" in text or "<" in text or ">" in text else text


class _Quoted(dict):
    """quoteattr with memory: check names and many messages repeat across thousands of cases."""

    def __missing__(self, text: str) -> str:
        value = self[text] = quoteattr(text)
        return value


def _testcase(entry: Entry, head: str, quoted: _Quoted) -> str:
    status = entry.status
    # A plain pass (most entries) is its name and time alone.
    if status is Status.PASS and not entry.verdicts:
        return f"{head} time=\"{entry.duration:.3f}\"></testcase>"
    body = []
    message = quoted[entry.message]
    value = STATUS_VALUES[status]
    if status in FAILING:
        detail = entry.repro and f"repro: {entry.repro}"
        body.append(f"<failure type=\"{value}\" message={message}>{_xml_text(detail)}</failure>")
    elif status in _SKIPPED:
        if entry.known_failure:
            kf = entry.known_failure
            message = quoted[f"known failure: {kf.get('reason', '')} ({kf.get('link', '')}, expires "
                             f"{kf.get('expires', '')})"]
        body.append(f"<skipped message={message}/>")
    # A plain pass says all in its name; anything else (a pass with an affected sub-verdict too) explains itself.
    if status is not Status.PASS or any(v.status is not Status.PASS for v in entry.verdicts):
        out = [f"{value}: {entry.message}"]
        if entry.verdicts:
            out += [f"{v.name}: {STATUS_VALUES[v.status]}: {v.message}" for v in entry.verdicts]
        out += [f"{kind}: {path}" for kind, path in (("log", entry.log), ("lock", entry.lock)) if path]
        body.append(f"<system-out>{_xml_text(chr(10).join(out))}</system-out>")
    return f"{head} time=\"{entry.duration:.3f}\">{''.join(body)}</testcase>"


def to_junit(report: Report) -> str:
    """The whole report as one JUnit XML document (<testsuites>), cells in cell-id order."""
    suites: dict[str, list[tuple[str, Entry]]] = {}
    for row in report.rows:
        for index, entry in row.entries.items():
            column = report.columns[index]
            suites.setdefault(entry.cell_id, []).append((column.check, entry))
    out = ['<?xml version="1.0" encoding="UTF-8"?>']
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    parts = []
    quoted = _Quoted()
    for cell_id in sorted(suites):
        cases = sorted(suites[cell_id], key=lambda pair: pair[0])
        failures = sum([e.status in FAILING for _, e in cases])
        skipped = sum([e.status in _SKIPPED for _, e in cases])
        seconds = sum(e.duration for _, e in cases)
        totals["tests"] += len(cases)
        totals["failures"] += failures
        totals["skipped"] += skipped
        parts.append(f"<testsuite name={quoted[cell_id]} tests=\"{len(cases)}\" failures=\"{failures}\" "
                     f"errors=\"0\" skipped=\"{skipped}\" time=\"{seconds:.3f}\">")
        head = f"<testcase classname={quoted[cell_id]} name="
        parts += [_testcase(entry, head + quoted[label], quoted) for label, entry in cases]
        parts.append("</testsuite>")
    out.append(f"<testsuites name={quoteattr(report.title)} tests=\"{totals['tests']}\" "
               f"failures=\"{totals['failures']}\" errors=\"0\" skipped=\"{totals['skipped']}\">")
    return "\n".join([*out, *parts, "</testsuites>"]) + "\n"
