"""JUnit XML of a Report, for CI test reporters: one testsuite per cell, one testcase per check.

fail, error, crash and timeout become <failure> (type = the status, message = the check's message); skip
and xfail become <skipped> (an xfail names its known failure), and so does a check whose cell could not be
installed (message = its install verdict: "cannot be installed together: ..." or "not installable on this
runner: ..."): it did not run, so it neither passes nor fails, and a runner limit never fails a pull request.
A failure that is a standing finding (the same in every row) stays a <failure>, its message saying so, as do
one the same in every row that is none ("broken in every row") and one this project's code raised.
pass and affected are plain testcases:
`affected` records an upstream bug, not a failure of the trainer. Every case but a plain pass has its
message, sub-verdicts, log and lock in <system-out>. Every text goes through XML escaping;
safe_text.clean_text has already removed the control characters XML 1.0 cannot carry.
"""
from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from harness.results.records import Status

from .model import FAILING, STATUS_VALUES, Entry, Report

_SKIPPED = frozenset((Status.SKIP, Status.XFAIL))
_PASS = Status.PASS  # a member looked up on the Enum class costs about 0.2 µs on Python 3.11, per case


def _xml_text(text: str) -> str:
    """saxutils.escape, skipped (three `in` tests) for the many texts with nothing to escape."""
    return escape(text) if "&" in text or "<" in text or ">" in text else text


# What quoteattr changes in a value (it escapes &, < and > and the three whitespace characters, and picks
# its quotes by the " and ' inside); a value with none of these is quoted as it is.
_ATTR_SPECIAL = frozenset("&<>\"'\n\r\t")


class _Quoted(dict):
    """quoteattr with memory: check names and many messages repeat across thousands of cases."""

    def __missing__(self, text: str) -> str:
        # Cell ids are all different: for them the fast path is what counts.
        value = self[text] = quoteattr(text) if _ATTR_SPECIAL.intersection(text) else f'"{text}"'
        return value


def _testcase(entry: Entry, head: str, quoted: _Quoted) -> str:
    """A case that is not a plain pass (to_junit writes those itself: their name and time alone)."""
    status = entry.status
    value = STATUS_VALUES[status]
    body = ""
    if entry.install is not None:
        body = f"<skipped message={quoted[entry.message]}/>"
    elif status in FAILING:
        detail = _xml_text(f"repro: {entry.repro}") if entry.repro else ""
        message = f"standing finding, the same in every row: {entry.message}" if entry.standing else entry.message
        if entry.everywhere:
            message = f"broken in every row: {message}"
        if entry.raised_here:
            message = f"raised in this project's code at {entry.raised_here}: {message}"
        body = f"<failure type=\"{value}\" message={quoted[message]}>{detail}</failure>"
    elif status in _SKIPPED:
        kf = entry.known_failure
        message = quoted[f"known failure: {kf.get('reason', '')} ({kf.get('link', '')}, expires "
                         f"{kf.get('expires', '')})"] if kf else quoted[entry.message]
        body = f"<skipped message={message}/>"
    # A plain pass says all in its name; anything else (a pass with an affected sub-verdict too) explains itself.
    if status is not _PASS or any(v.status is not _PASS for v in entry.verdicts):
        out = f"{value}: {entry.message}"
        for v in entry.verdicts:
            out += f"\n{v.name}: {STATUS_VALUES[v.status]}: {v.message}"
        if entry.log:
            out += f"\nlog: {entry.log}"
        if entry.lock:
            out += f"\nlock: {entry.lock}"
        body += f"<system-out>{_xml_text(out)}</system-out>"
    return f"{head} time=\"{entry.duration:.3f}\">{body}</testcase>"


def to_junit(report: Report) -> str:
    """The whole report as one JUnit XML document (<testsuites>), cells in cell-id order."""
    suites: dict[str, list[tuple[str, Entry]]] = {}
    checks = [column.check for column in report.columns]
    for row in report.rows:
        for index, entry in row.entries.items():
            suites.setdefault(entry.cell_id, []).append((checks[index], entry))
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    parts = []
    quoted = _Quoted()
    for cell_id in sorted(suites):
        cases = sorted(suites[cell_id], key=_by_check)
        head = f"<testcase classname={quoted[cell_id]} name="
        body, failures, skipped = [], 0, 0
        for check, entry in cases:
            status = entry.status
            if status is _PASS and not entry.verdicts:  # most entries: the case is its name and time
                body.append(f"{head}{quoted[check]} time=\"{entry.duration:.3f}\"></testcase>")
                continue
            failures += status in FAILING and entry.install is None
            skipped += status in _SKIPPED or entry.install is not None
            body.append(_testcase(entry, head + quoted[check], quoted))
        seconds = sum([entry.duration for _, entry in cases])
        totals["tests"] += len(cases)
        totals["failures"] += failures
        totals["skipped"] += skipped
        parts.append(f"<testsuite name={quoted[cell_id]} tests=\"{len(cases)}\" failures=\"{failures}\" "
                     f"errors=\"0\" skipped=\"{skipped}\" time=\"{seconds:.3f}\">")
        parts += body
        parts.append("</testsuite>")
    head = (f"<testsuites name={quoteattr(report.title)} tests=\"{totals['tests']}\" "
            f"failures=\"{totals['failures']}\" errors=\"0\" skipped=\"{totals['skipped']}\">")
    return "\n".join(['<?xml version="1.0" encoding="UTF-8"?>', head, *parts, "</testsuites>"]) + "\n"


def _by_check(case: tuple[str, Entry]) -> str:
    return case[0]
