"""Row verdicts: per version combination (a row of the table), one word and one line saying why.

Derived only from the entries' statuses, sub-verdicts and install verdicts, never from check names:

    broken    a check failed, crashed, timed out or could not run on an installed stack (the first one is the
              reason); a failure the same in every row that runs the check, and no standing finding, reads
              "broken in every row", naming the file of this project that raised it, where one did
    conflict  "cannot be installed together": the resolver proves the row's pins contradict each other (the
              reason names the conflicting requirement); a finding about the stack, no check ran
    runner    "not installable on this runner": wheel tags, glibc, a source build or a source this runner
              lacks (the reason says what would make it install); a finding about the runner, no check ran
    known     a declared known failure (xfail), and nothing worse; the reason quotes the run's own figures
    awaits    nothing failed, but only the CPU pre-flight on the row's exact wheels ran its checks (or parts of
              them) and the rest await a GPU or NPU runner (results/sources.py): never "works" before a runner
              has run them; or only the install pre-flight has looked at the row (the reason is its verdict,
              "installs" or "needs a build on the runner")
    standing  every check passed but for standing findings: failures of a comparison the matrix declares to be
              against a named upstream component, the same cases in every row that runs the check
              (Report.standing, shown once with their cases; standing_findings.py), so not this row's
    patched  works with the trainer's patches: an upstream bug reproduced (an `affected` status or
             sub-verdict) while the check, and so the trainer's own verdicts, passed
    works    every check that ran passed
    skipped  no check ran: every one was skipped

The first screen splits a row into lines, one per backend and model that ran its versions (`lines`): each
line gets its own verdict (row_verdict on its entries) and a "why" in plain words on one line (`why_text`):
an install failure once, by the resolver's reason. support.json (json_files.support_json) is the stable
machine-readable form of the same answer.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.results.install_verdict import CONFLICT, LABELS, RUNNER
from harness.results.records import Status
from harness.results.sources import AWAITS, CPU_SIDE_LABELS, PART

from .failure_text import install_reason, is_install_failure
from .model import ABSENT, FAILING, STATUS_VALUES, Column, Entry, Report, Row
from .order import backend_model_key

KINDS = ("works", "patched", "standing", "known", "awaits", "broken", "conflict", "runner", "skipped")
KIND_LABELS = {"works": "works", "patched": "works with the trainer's patches",
               "standing": "works but for a standing finding", "known": "known failure",
               "awaits": "awaits a runner (CPU pre-flight only)", "broken": "broken",
               "conflict": LABELS[CONFLICT], "runner": LABELS[RUNNER], "skipped": "not tested (every check skipped)"}

# Looking a member up on the Enum class costs about 0.2 µs on Python 3.11; row_verdict does it for every entry.
_PASS, _SKIP, _XFAIL, _AFFECTED = Status.PASS, Status.SKIP, Status.XFAIL, Status.AFFECTED
_NOT_ON_A_RUNNER = (CPU_SIDE_LABELS[AWAITS], CPU_SIDE_LABELS[PART])


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


def failure_words(entry: Entry) -> str:
    """How a failing entry failed, in a few words: its status, and "broken in every row" and this project's file
    where they hold ("error, broken in every row, raised in this project's code at trainers/x.py, line 3")."""
    words = STATUS_VALUES[entry.status] + (", broken in every row" if entry.everywhere else "")
    return words + (f", raised in this project's code at {entry.raised_here}" if entry.raised_here else "")


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
        return RowVerdict("broken", f"{columns[index].label}: {failure_words(entry)}"
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


@dataclass(slots=True)
class Line:
    row: int  # index into report.rows
    backend: str
    model: str
    entries: dict[int, Entry]  # column index -> entry, this backend and model's only
    verdict: RowVerdict
    why: str
    label: str = ""  # backend (and model), then the axes that vary inside its group

    @property
    def anchor(self) -> str:
        return f"g{self.row}-{min(self.entries)}"  # its first entry's column: the details link back by it


def _strip_label(reason: str, backend: str, model: str) -> str:
    prefix = f"{backend or ABSENT} · {model or ABSENT} · "
    return reason.removeprefix(prefix)


def why_text(report: Report, entries: dict[int, Entry], verdict: RowVerdict, backend: str, model: str) -> str:
    """The line's reason in plain words: the install failure once, else the first failing check and how many
    others fail (a standing finding is not the line's: only what it fails beyond one), else the verdict's own
    reason without the backend and model its label already names."""
    failing = [(i, e) for i, e in entries.items() if e.status in FAILING and not e.standing]
    if failing:
        messages = {e.message for _, e in failing}
        if len(messages) == 1 and is_install_failure(failing[0][1].message):
            return install_reason(failing[0][1].message)
        index, entry = failing[0]
        more = f" (and {len(failing) - 1} more)" if len(failing) > 1 else ""
        message = f"beyond the standing finding, in {entry.beyond_standing}" if entry.beyond_standing else \
            entry.message
        return f"{report.columns[index].check} {failure_words(entry)}{more}: {message}".rstrip(": ")
    return _strip_label(verdict.reason, backend, model)


def lines(report: Report) -> list[Line]:
    """Every line of the grid, in report row order, then backend and model order."""
    cached = report.__dict__.get("_grid_lines")
    if cached is not None:
        return cached
    out = []
    whole = row_verdicts(report)
    for number, row in enumerate(report.rows):
        parts: dict[tuple[str, str], dict[int, Entry]] = {}
        for index, entry in row.entries.items():
            column = report.columns[index]
            parts.setdefault((column.backend, column.model), {})[index] = entry
        for backend, model in sorted(parts, key=lambda k: backend_model_key(*k)):
            entries = parts[(backend, model)]
            # A row that ran on one backend and model is one line, with the row's own verdict.
            verdict = whole[number] if len(parts) == 1 else \
                row_verdict(report.columns, Row(row.axes, entries, row.cells, row.environment))
            out.append(Line(number, backend, model, entries, verdict,
                            why_text(report, entries, verdict, backend, model)))
    report.__dict__["_grid_lines"] = out
    return out

