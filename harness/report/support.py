"""The at-a-glance answer: per version combination (a row of the table), one word and one line saying why.

Derived only from the entries' statuses, sub-verdicts and install verdicts, never from check names:

    broken    a check failed, crashed, timed out or could not run on an installed stack (the first one is the
              reason)
    conflict  "cannot be installed together": the resolver proves the row's pins contradict each other (the
              reason names the conflicting requirement); a finding about the stack, no check ran
    runner    "not installable on this runner": wheel tags, glibc, a source build or a source this runner
              lacks (the reason says what would make it install); a finding about the runner, no check ran
    known     a declared known failure (xfail), and nothing worse; the reason quotes the run's own figures
    awaits    nothing failed, but only the CPU pre-flight on the row's exact wheels ran its checks (or parts of
              them) and the rest await a GPU or NPU runner (results/cpu_side.py): never "works" before a runner
              has run them; or only the install pre-flight has looked at the row (the reason is its verdict,
              "installs" or "needs a build on the runner")
    standing  every check passed but for standing findings: failures the same in every row that runs the
              check (Report.standing, shown once with their evidence), so not this row's
    patched  works with the trainer's patches: an upstream bug reproduced (an `affected` status or
             sub-verdict) while the check, and so the trainer's own verdicts, passed
    works    every check that ran passed
    skipped  no check ran: every one was skipped

`support_json` is the stable machine-readable form of the same answer (support.json, SUPPORT_SCHEMA).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.results import cpu_side
from harness.results.install_verdict import CONFLICT, LABELS, RUNNER
from harness.results.records import Status

from .findings import finding_json
from .table import FAILING, STATUS_VALUES, Column, Entry, Report, Row, clean_text

SUPPORT_SCHEMA = "qwen35-support-summary"
SUPPORT_SCHEMA_VERSION = 3  # 2: install and standing kinds, standing_findings; 3: the awaits kind
KINDS = ("works", "patched", "standing", "known", "awaits", "broken", "conflict", "runner", "skipped")
KIND_LABELS = {"works": "works", "patched": "works with the trainer's patches",
               "standing": "works but for a standing finding", "known": "known failure",
               "awaits": "awaits a runner (CPU pre-flight only)", "broken": "broken",
               "conflict": LABELS[CONFLICT], "runner": LABELS[RUNNER], "skipped": "not tested (every check skipped)"}
# One ASCII letter per status: legible in any font, told apart without colour.
STATUS_LETTERS = {Status.PASS: "P", Status.FAIL: "F", Status.AFFECTED: "A", Status.SKIP: "S", Status.XFAIL: "X",
                  Status.TIMEOUT: "T", Status.CRASH: "C", Status.ERROR: "E"}

# Looking a member up on the Enum class costs about 0.2 µs on Python 3.11; row_verdict does it for every entry.
_PASS, _SKIP, _XFAIL, _AFFECTED = Status.PASS, Status.SKIP, Status.XFAIL, Status.AFFECTED
_NOT_ON_A_RUNNER = (cpu_side.LABELS[cpu_side.AWAITS], cpu_side.LABELS[cpu_side.PART])


@dataclass(frozen=True, slots=True)
class RowVerdict:
    kind: str  # one of KINDS
    reason: str  # one line

    @property
    def label(self) -> str:
        return KIND_LABELS[self.kind]


def _affected_names(entry: Entry) -> list[str]:
    return [v.name for v in entry.verdicts if v.status is Status.AFFECTED]


def _names(names: list[str], shown: int = 2) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _patched_reason(column: Column, entry: Entry) -> str:
    affected = _affected_names(entry)
    passing = [v.name for v in entry.verdicts if v.status is Status.PASS]
    if affected and passing:
        held = ", ".join(passing) if len(passing) <= 3 else f"the other {len(passing)} sub-verdicts"
        return f"{column.label}: upstream bug reproduced ({_names(affected)}); {held} pass"
    return f"{column.label}: {entry.message or 'upstream bug reproduced'}"


def _measured(entry: Entry) -> str:
    """What the run itself measured for a failure: its failing sub-verdicts' messages, else its message."""
    failing = [f"{v.name}: {v.message}" for v in entry.verdicts if v.status in FAILING and v.message]
    return "; ".join(failing) or entry.message


def row_verdict(columns: list[Column], row: Row) -> RowVerdict:
    """The row's kind and reason (see the module docstring); the first column decides among equals."""
    failing = known = patched = install = standing = None
    ran = awaiting = 0
    for index, entry in row.entries.items():
        status = entry.status
        awaiting += entry.origin in _NOT_ON_A_RUNNER
        if entry.install is not None:
            if install is None or (install[1].install.kind == RUNNER and entry.install.kind == CONFLICT):
                install = (index, entry)
            continue
        if status in FAILING:
            if entry.standing:
                standing = standing or (index, entry)
            else:
                failing = failing or (index, entry)
        elif status is _XFAIL:
            known = known or (index, entry)
        elif status is _AFFECTED or (status is _PASS and entry.verdicts and _affected_names(entry)):
            patched = patched or (index, entry)
        ran += status is not _SKIP
    if failing:
        index, entry = failing
        if entry.beyond_standing:  # the rest of its failure is a standing finding: name only what is this row's
            return RowVerdict("broken", f"{columns[index].label}: {STATUS_VALUES[entry.status]} beyond the standing "
                                        f"finding, in {entry.beyond_standing}")
        return RowVerdict("broken", f"{columns[index].label}: {STATUS_VALUES[entry.status]}"
                          + (f": {entry.message}" if entry.message else ""))
    if install:  # no check ran on this stack: the resolver's reason is the row's
        return RowVerdict(install[1].install.kind, install[1].message)
    if awaiting and not ran:  # an install verdict only (harness/preflight/store.py): its words are the reason
        first = next(e for e in row.entries.values() if e.origin in _NOT_ON_A_RUNNER)
        return RowVerdict("awaits", f"no check has run yet: {first.message}")
    if awaiting:
        others = " but for a standing finding" if standing else ""
        waits = "awaits" if awaiting == 1 else "await"
        return RowVerdict("awaits", f"{_count(ran, 'check')} ran on CPU from the row's exact wheels, none failed"
                                    f"{others}; {awaiting} {waits} a runner")
    if known:
        index, entry = known
        measured = _measured(entry)
        link = (entry.known_failure or {}).get("link")
        reason = measured or (entry.known_failure or {}).get("reason", "")
        return RowVerdict("known", f"{columns[index].label}: known failure" + (f": {reason}" if reason else "")
                          + (f" ({link})" if link else ""))
    if standing:
        index, entry = standing
        names = sorted({columns[i].check for i, e in row.entries.items() if e.standing})
        differ = "differs" if len(names) == 1 else "differ"
        return RowVerdict("standing", f"{_count(ran, 'check')} ran; {_names(names)} {differ} only by standing "
                                      "findings, the same in every row (shown once)")
    if patched:
        return RowVerdict("patched", _patched_reason(columns[patched[0]], patched[1]))
    if not ran:
        return RowVerdict("skipped", f"all {len(row.entries)} checks skipped")
    passes = "passes" if ran == 1 else "pass"
    return RowVerdict("works", f"{_count(ran, 'check')} {passes}" + (f", {len(row.entries) - ran} skipped"
                                                                     if ran < len(row.entries) else ""))


def row_verdicts(report: Report) -> list[RowVerdict]:
    """Every row's verdict; worked out once per report (a built Report is not changed afterwards), since
    report.md, report.html and support.json each need them."""
    cached = report.__dict__.get("_row_verdicts")
    if cached is None or len(cached) != len(report.rows):
        cached = report.__dict__["_row_verdicts"] = [row_verdict(report.columns, row) for row in report.rows]
    return cached


def varying_axes(report: Report) -> tuple[list[int], dict[str, str]]:
    """Positions of the axes whose value differs between rows, and the axes every row shares (axis: value)."""
    varying, constant = [], {}
    for position, axis in enumerate(report.axes):
        values = {row.axes[position] for row in report.rows}
        if len(values) > 1:
            varying.append(position)
        elif values and next(iter(values)):
            constant[axis] = next(iter(values))
    return varying, constant


def kind_counts(verdicts: list[RowVerdict]) -> dict[str, int]:
    counts = dict.fromkeys(KINDS, 0)
    for verdict in verdicts:
        counts[verdict.kind] += 1
    return counts


def support_json(report: Report, verdicts: list[RowVerdict] | None = None) -> dict[str, Any]:
    """The support summary for other tools; keys and order are fixed by SUPPORT_SCHEMA_VERSION.

    {"schema", "schema_version", "title", "constant_axes": {axis: value}, "varying_axes": [axis...],
     "columns": [{"key": "backend/model/check", "backend", "model", "check"}], "counts": {kind: n},
     "combinations": [{"axes": {axis: value} (varying axes, "" when absent), "verdict": kind, "label", "reason",
     "cells": [cell id...], "checks": {column key: status}}],
     "standing_findings": [{"backend", "model", "check", "verdict", "status", "message", "cells", "evidence"}]}
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
        "standing_findings": [finding_json(f, clean_text) for f in report.standing],
    }
