"""The first screen of report.html: the pins to use (pinsbox.py), then the grid (grid.py) with one compact mark
per entry and one verdict and one-line reason per version combination and backend.

Marks are ASCII letters on coloured squares (support.STATUS_LETTERS); a failing one (fail, error, crash,
timeout) is also a ringed circle, so it differs from a pass without colour. Each mark's accessible name
(aria-label) holds its check, status and reason, and the same text shows beside it on hover and on
keyboard focus (CSS only). A mark links to its entry in the details below, which the browser opens when it
follows the link (no script). The row label is a sticky first column, so a line keeps its name when the
grid scrolls sideways; on a phone (glance CSS's media query) each line becomes a block: verdict and marks
first, then the versions, then the reason.
"""
from __future__ import annotations

from harness.results.records import Status

from .evidence import install_reason, is_install_failure
from .grid import Line, check_names, groups
from .htmltext import Escaper, escape_html
from .pinsbox import PINS_CSS, pins_html
from .support import KIND_LABELS, KINDS, STATUS_LETTERS, RowVerdict, kind_counts, varying_axes
from .table import FAILING, STATUS_VALUES, Report

GLANCE_CSS = """
.m{display:inline-block;position:relative;width:1.35em;line-height:1.35em;text-align:center;
font:bold 12px/1.35em monospace;border-radius:3px;color:#fff;text-decoration:none}
.m.s-pass{background:#1a7f37}.m.s-fail{background:#cf222e}.m.s-error{background:#8b0000}
.m.s-crash{background:#6e1d7a}.m.s-timeout{background:#bc4c00}.m.s-affected{background:#9a6700}
.m.s-xfail{background:#e3c000;color:#222}.m.s-skip{background:#d0d7de;color:#222}
.m.s-fail,.m.s-error,.m.s-crash,.m.s-timeout{border-radius:50%;box-shadow:0 0 0 2px #222;font-weight:900}
a.m:hover::after,a.m:focus::after{content:attr(aria-label);position:absolute;z-index:3;left:0;top:1.6em;
width:max-content;max-width:30em;white-space:normal;text-align:left;font:12px/1.3 system-ui,sans-serif;
background:#222;color:#fff;padding:3px 6px;border-radius:3px}
a.m:focus{outline:3px solid #0969da;outline-offset:1px}
.k{display:inline-block;padding:0 .4em;border-radius:3px;font-weight:bold;white-space:nowrap;text-decoration:none}
.k-works{background:#dafbe1;color:#116329}.k-patched{background:#ddf4ff;color:#0a3069}
.k-known{background:#fff8c5;color:#4d2d00}.k-broken{background:#ffebe9;color:#82071e;border:1px solid #82071e}
.k-skipped{background:#eaeef2;color:#24292f}
table.glance{width:100%;border-collapse:separate;border-spacing:0}
table.glance caption{text-align:left;font-weight:bold;padding:4px 0}
table.glance td,table.glance th{padding:2px 4px;border:0;border-bottom:1px solid #e4e4e4}
table.glance thead th{background:#f3f3f3;font-weight:normal;font-size:11px;vertical-align:bottom;text-align:left}
.k-conflict{background:#fbefff;color:#5a1e78}.k-runner{background:#eaeef2;color:#24292f;font-style:italic}
.k-standing{background:#dafbe1;color:#116329;font-style:italic}
.k-awaits{background:#fff;color:#24292f;border:1px dashed #57606a}
table.glance th.c span{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap}
table.glance th.lbl{position:sticky;left:0;z-index:1;background:#fff;text-align:left;font-weight:normal;
font-size:12px;max-width:24em;min-width:15em}
table.glance thead th.lbl{background:#f3f3f3}
table.glance tr.grp th{text-align:left;background:#f6f8fa;font-size:12px;font-weight:bold}
table.glance tr.grp th span{position:sticky;left:4px}
td.why{width:100%;max-width:0;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;font-size:12px;color:#333}
tr:target th.lbl,tr:target td{background:#fff8c5}
p.glance-legend{font-size:12px}
@media (max-width:700px){
table.glance,table.glance tbody,table.glance caption{display:block;width:auto}
table.glance thead{display:none}
table.glance tr{display:flex;flex-wrap:wrap;align-items:center;gap:2px;padding:4px 0;
border-bottom:1px solid #e4e4e4}
table.glance td,table.glance th{border:0;padding:1px 2px}
table.glance td.v{order:-1;margin-right:4px}
table.glance td.none{display:none}
table.glance th.lbl{order:1;flex-basis:100%;position:static;max-width:none;font-family:monospace;font-size:11px}
td.why{order:2;flex-basis:100%;max-width:none;white-space:normal;overflow-wrap:anywhere}
table.glance tr.grp{border:0}
table.glance tr.grp th{flex-basis:100%;overflow-wrap:anywhere}
}
"""


def _kind(kind: str, href: str) -> str:
    return f'<a class="k k-{kind}" href="#{href}">{escape_html(KIND_LABELS[kind])}</a>'


def _counts_line(report: Report, verdicts: list[RowVerdict]) -> str:
    counts = kind_counts(verdicts)
    parts = [f"{_kind(kind, 'details')} {counts[kind]}" for kind in KINDS if counts[kind]]
    _, constant = varying_axes(report)
    same = ", ".join(f"{axis} {value}" for axis, value in constant.items())
    return (f'<p><strong>{len(report.rows)} version combinations:</strong> ' + " &middot; ".join(parts)
            + (f"<br>Same in every row: {escape_html(same)}" if same else "") + "</p>")


def legend_line() -> str:
    return ('<p class="glance-legend">' + " ".join(
        f'<span class="m s-{s.value}" aria-hidden="true">{STATUS_LETTERS[s]}</span> {s.value}' for s in Status)
        + ". A ringed circle is a failure. Point at or focus a mark for its check and reason; click it, or a "
        "verdict, for the details.</p>")


def _target(line: Line) -> str:
    """Where the verdict links: the line's first failing or known-failing entry, else its row's details."""
    for index, entry in line.entries.items():
        if entry.status in FAILING or entry.status is Status.XFAIL:
            return f"e{line.row}-{index}"
    return f"r{line.row}"


def _line_html(line: Line, positions: dict[str, int], report: Report, esc: Escaper) -> str:
    cells = ['<td class="none"></td>'] * len(positions)
    for index, entry in line.entries.items():
        check = report.columns[index].check
        status = STATUS_VALUES[entry.status]
        reason = install_reason(entry.message) if is_install_failure(entry.message) else entry.message
        origin = f" ({entry.origin})" if entry.origin else ""  # a CPU pre-flight's, or awaiting a runner
        name = esc[f"{check}: {status}{origin}" + (f": {reason}" if reason else "")]
        cells[positions[check]] = (f'<td><a class="m s-{status}" href="#e{line.row}-{index}" aria-label="{name}">'
                                   f"{STATUS_LETTERS[entry.status]}</a></td>")
    why = esc[line.why]
    return (f'<tr id="{line.anchor}"><th scope="row" class="lbl">{esc[line.label]}</th>'
            f'<td class="v">{_kind(line.verdict.kind, _target(line))}</td>{"".join(cells)}'
            f'<td class="why" title="{why}">{why}</td></tr>\n')


def glance_html(report: Report, verdicts: list[RowVerdict]) -> list[str]:
    """The pins, the counts, the legend and the grid, as pieces of the page."""
    names = check_names(report)
    positions = {name: i for i, name in enumerate(names)}
    width = len(names) + 3
    out = ['<div class="first">', *pins_html(report), _counts_line(report, verdicts), legend_line(),
           '<p class="topins"><a href="#pins">Use these pins</a> (below the grid on a small screen)</p>',
           '<table class="glance"><caption>Verdict, one mark per check and the reason, per version combination '
           'and backend</caption><thead><tr><th scope="col" class="lbl">stack</th><th scope="col">verdict</th>']
    out += [f'<th scope="col" class="c"><span>{escape_html(name)}</span></th>' for name in names]
    out.append('<th scope="col">why</th></tr></thead>\n')
    esc = Escaper()
    for group in groups(report):
        out.append("<tbody>")
        if group.heading:
            out.append(f'<tr class="grp"><th colspan="{width}" scope="rowgroup"><span>{esc[group.heading]}</span>'
                       "</th></tr>\n")
        out += [_line_html(line, positions, report, esc) for line in group.lines]
        out.append("</tbody>")
    out.append("</table></div>\n")
    return out


__all__ = ["GLANCE_CSS", "PINS_CSS", "glance_html", "legend_line"]
