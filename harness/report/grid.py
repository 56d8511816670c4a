"""The first screen's grid as data: one line per (version combination, backend · model), not per combination.

A report row holds the entries of every backend and model that ran its versions; the grid splits it so
the backend is a row label and the check columns are the union of the check names, not one set per
backend (which left half the columns empty in every row). Lines are grouped under the first axis that
varies; the axes that do not vary inside a group go to its heading, and a line's label names only the
axes that vary inside its group. Each line gets its own verdict (support.row_verdict on its entries) and
a "why" in plain words on one line (`why_text`): an install failure once, by the resolver's reason.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import table
from .evidence import install_reason, is_install_failure
from .support import RowVerdict, row_verdict, row_verdicts, varying_axes
from .table import ABSENT, BACKEND_ORDER, FAILING, MODEL_ORDER, STATUS_VALUES, Entry, Report, Row


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


@dataclass(slots=True)
class Group:
    heading: str  # the group axis and the axes every line of the group shares; "" with no group axis
    lines: list[Line]


def check_names(report: Report) -> list[str]:
    """Every check name of the columns once, in the registry's order (unknown names last, by name)."""
    order = list(table.CHECKS)
    names = {c.check for c in report.columns}
    return sorted(names, key=lambda n: (order.index(n), "") if n in order else (len(order), n))


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
        return f"{report.columns[index].check} {STATUS_VALUES[entry.status]}{more}: {message}".rstrip(": ")
    return _strip_label(verdict.reason, backend, model)


def _key(backend: str, model: str) -> tuple:
    return (BACKEND_ORDER.index(backend) if backend in BACKEND_ORDER else len(BACKEND_ORDER), backend,
            MODEL_ORDER.index(model) if model in MODEL_ORDER else len(MODEL_ORDER), model)


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
        for backend, model in sorted(parts, key=lambda k: _key(*k)):
            entries = parts[(backend, model)]
            # A row that ran on one backend and model is one line, with the row's own verdict.
            verdict = whole[number] if len(parts) == 1 else \
                row_verdict(report.columns, Row(row.axes, entries, row.cells, row.environment))
            out.append(Line(number, backend, model, entries, verdict,
                            why_text(report, entries, verdict, backend, model)))
    report.__dict__["_grid_lines"] = out
    return out


def groups(report: Report) -> list[Group]:
    """The lines grouped under the first varying axis, each labelled by what varies inside its group."""
    varying, _ = varying_axes(report)
    group_axis = varying[0] if len(varying) > 1 else None
    models = len({c.model for c in report.columns}) > 1
    found: dict[str, list[Line]] = {}
    for line in lines(report):
        value = report.rows[line.row].axes[group_axis] if group_axis is not None else ""
        found.setdefault(value, []).append(line)
    out = []
    for value, members in found.items():
        members.sort(key=lambda ln: (_key(ln.backend, ln.model), ln.row))
        heading = [f"{report.axes[group_axis]} {value or ABSENT}"] if group_axis is not None else []
        heading += _shared(report, members, [p for p in varying if p != group_axis])
        kinds: dict[tuple[str, str], list[Line]] = {}
        per_backend: list[str] = []
        for line in members:
            kinds.setdefault((line.backend, line.model), []).append(line)
        others = [p for p in varying if p != group_axis and p not in _positions(report, members)]
        for (backend, model), kind in kinds.items():
            name = (backend or ABSENT) + (f" · {model or ABSENT}" if models else "")
            shared = _shared(report, kind, others) if len(kinds) > 1 else []
            if shared:  # what every line of this backend shares in the group: said once
                per_backend.append(f"{name}: {', '.join(shared)}")
            inner = [p for p in others if len({report.rows[ln.row].axes[p] for ln in kind}) > 1]
            for line in kind:
                axes = report.rows[line.row].axes
                line.label = " · ".join([name, *(f"{report.axes[p]} {axes[p]}" for p in inner if axes[p])])
        out.append(Group(" · ".join(heading) + "".join(f"; {part}" for part in per_backend), members))
    return out


def _values(report: Report, members: list[Line], position: int) -> set[str]:
    return {report.rows[line.row].axes[position] for line in members}


def _shared(report: Report, members: list[Line], positions: list[int]) -> list[str]:
    """'axis value' for each of `positions` that has one and the same value in every line of `members`."""
    out = []
    for p in positions:
        values = _values(report, members, p)
        if len(values) == 1 and next(iter(values)):
            out.append(f"{report.axes[p]} {next(iter(values))}")
    return out


def _positions(report: Report, members: list[Line]) -> set[int]:
    """The axes with one and the same (non-empty) value in every line of the group: in its heading."""
    shared = set()
    for p in range(len(report.axes)):
        values = _values(report, members, p)
        if len(values) == 1 and next(iter(values)):
            shared.add(p)
    return shared
