"""The first screen of report.html: one compact coloured mark per entry, one verdict per version combination.

Marks are ASCII letters on CSS-coloured squares (support.STATUS_LETTERS), so they read the same without an
emoji font and without colour; each has its column and status as title (a screen reader's description,
and a tooltip). Only the
axes that differ between rows get a column; the rows are grouped under the first of them. A mark links to
its entry in the row's <details> below, which the browser opens when it follows the link (no script).
"""
from __future__ import annotations

from harness.results.records import Status

from .htmltext import Escaper, escape_html
from .support import KIND_LABELS, KINDS, STATUS_LETTERS, RowVerdict, kind_counts, varying_axes
from .table import ABSENT, Report

_ABSENT = escape_html(ABSENT)

GLANCE_CSS = """
.m{display:inline-block;width:1.35em;line-height:1.35em;text-align:center;font:bold 12px/1.35em monospace;
border-radius:3px;color:#fff;text-decoration:none}
.m.s-pass{background:#1a7f37}.m.s-fail{background:#cf222e}.m.s-error{background:#8b0000}
.m.s-crash{background:#6e1d7a}.m.s-timeout{background:#bc4c00}.m.s-affected{background:#9a6700}
.m.s-xfail{background:#e3c000;color:#222}.m.s-skip{background:#d0d7de;color:#222}
.k{display:inline-block;padding:0 .4em;border-radius:3px;font-weight:bold;white-space:nowrap;text-decoration:none}
.k-works{background:#dafbe1;color:#116329}.k-patched{background:#ddf4ff;color:#0a3069}
.k-known{background:#fff8c5;color:#4d2d00}.k-broken{background:#ffebe9;color:#82071e}
.k-skipped{background:#eaeef2;color:#24292f}
.k-conflict{background:#fbefff;color:#5a1e78}.k-runner{background:#eaeef2;color:#24292f;font-style:italic}
.k-standing{background:#dafbe1;color:#116329;font-style:italic}
table.glance td,table.glance th{padding:1px 3px;border-color:#e4e4e4}
table.glance th.c{font-weight:normal;font-size:11px;vertical-align:bottom}
table.glance th.c span{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap}
table.glance tr.grp th{text-align:left;background:#f6f8fa;font-family:monospace}
td.why{max-width:36em;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;font-size:11px;color:#444}
p.glance-legend{font-size:12px}
"""


def _mark(status: Status, label: str) -> tuple[str, str]:
    """The mark's markup before and after its link target (the target differs per entry)."""
    text = escape_html(f"{label}: {status.value}")
    return (f'<td><a class="m s-{status.value}" href="#',
            f'" title="{text}">{STATUS_LETTERS[status]}</a></td>')


def _kind(kind: str, href: str, reason: str) -> str:
    return f'<a class="k k-{kind}" href="#{href}" title="{reason}">{escape_html(KIND_LABELS[kind])}</a>'


def _counts_line(report: Report, verdicts: list[RowVerdict]) -> str:
    counts = kind_counts(verdicts)
    parts = [f"{_kind(kind, 'details', '')} {counts[kind]}" for kind in KINDS if counts[kind]]
    _, constant = varying_axes(report)
    same = ", ".join(f"{axis} {value}" for axis, value in constant.items())
    return (f'<p><strong>{len(report.rows)} version combinations:</strong> ' + " &middot; ".join(parts)
            + (f"<br>Same in every row: {escape_html(same)}" if same else "") + "</p>")


def legend_line() -> str:
    return ('<p class="glance-legend">' + " ".join(
        f'<span class="m s-{s.value}" aria-hidden="true">{STATUS_LETTERS[s]}</span> {s.value}' for s in Status)
        + ". Click a mark or a verdict for the details.</p>")


def glance_html(report: Report, verdicts: list[RowVerdict]) -> list[str]:
    """The counts, the legend and the compact table, as pieces of the page."""
    varying, _ = varying_axes(report)
    group = varying[0] if len(varying) > 1 else None  # one varying axis: a group per row says nothing
    shown = [p for p in varying if p != group]
    labels = [c.label for c in report.columns]
    marks = [{s: _mark(s, label) for s in Status} for label in labels]
    width = len(shown) + 2 + len(report.columns)
    out = [_counts_line(report, verdicts), legend_line(), '<table class="glance"><thead><tr>']
    out += [f'<th rowspan="2">{escape_html(report.axes[p])}</th>' for p in shown]
    out.append('<th rowspan="2">verdict</th>')
    groups: list[list] = []
    for col in report.columns:
        key = (col.backend, col.model)
        if groups and groups[-1][0] == key:
            groups[-1][1] += 1
        else:
            groups.append([key, 1])
    out += [f'<th colspan="{span}">{escape_html(" · ".join(x or ABSENT for x in key))}</th>' for key, span in groups]
    out.append('<th rowspan="2">why</th></tr><tr>')
    out += [f'<th class="c"><span>{escape_html(c.check)}</span></th>' for c in report.columns]
    out.append("</tr></thead>\n")
    esc = Escaper()
    previous = None
    empty = ["<td></td>"] * len(report.columns)
    for number, (row, verdict) in enumerate(zip(report.rows, verdicts)):
        if group is not None and row.axes[group] != previous:
            previous = row.axes[group]
            out.append(f'<tr class="grp"><th colspan="{width}">{escape_html(report.axes[group])} '
                       f"{esc[previous] if previous else _ABSENT}</th></tr>\n")
        line = ["<tr>", *(f'<td class="ax">{esc[row.axes[p]] if row.axes[p] else _ABSENT}</td>' for p in shown)]
        reason = esc[verdict.reason]
        line.append(f"<td>{_kind(verdict.kind, f'r{number}', reason)}</td>")
        cells = empty.copy()
        for index, entry in row.entries.items():
            before, after = marks[index][entry.status]
            cells[index] = f"{before}e{number}-{index}{after}"
        line += cells
        line.append(f'<td class="why" title="{reason}">{reason}</td></tr>\n')
        out.append("".join(line))
    out.append("</table>\n")
    return out
