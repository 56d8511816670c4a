"""The first screen of report.html: the pins to use, then the counts, and the grid with one compact mark per
entry and one verdict and one-line reason per version combination and backend.

The pins boxes (pins.py decides what goes in them) each name the stack, link to its line in the grid, and hold
the install commands in a <pre> a reader selects and copies (no script: the page runs none). A kind of stack
with no passing line says so, with how many were tested, instead of being left out.

The grid has one line per (version combination, backend · model), not per combination (row_verdicts.lines):
the backend is a row label and the check columns are the union of the check names, not one set per backend.
Lines are grouped under the first axis that varies; the axes that do not vary inside a group go to its
heading, and a line's label names only the axes that vary inside its group.

Marks are ASCII letters on coloured squares (model.STATUS_LETTERS); a failing one (fail, error, crash,
timeout) is also a ringed circle, so it differs from a pass without colour. Each mark's accessible name
(aria-label) holds its check, status and reason, and the same text shows beside it on hover and on
keyboard focus (CSS only). A mark links to its entry in the details below, which the browser opens when it
follows the link (no script). The row label is a sticky first column, so a line keeps its name when the
grid scrolls sideways; on a phone (the CSS's media query) each line becomes a block: verdict and marks
first, then the versions, then the reason.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.results.records import Status

from .. import verl_rows
from ..failure_text import install_reason, is_install_failure
from ..model import ABSENT, FAILING, STATUS_LETTERS, STATUS_VALUES, Report
from ..order import backend_model_key, check_order
from ..pins import PinsBox, pins_boxes
from ..row_verdicts import KIND_LABELS, KINDS, Line, RowVerdict, kind_counts, lines, varying_axes
from ..safe_text import Escaper, escape_html

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
PINS_CSS = """
section.pins{display:flex;flex-wrap:wrap;gap:8px;margin:.5em 0 1em}
section.pins h2{flex-basis:100%;margin:0;font-size:1.1em}
div.pin{flex:1 1 300px;min-width:0;border:2px solid #1a7f37;border-radius:6px;padding:6px 8px;background:#f6fff8}
div.pin.none{border-color:#82071e;background:#fff5f5}
div.pin h3{margin:0 0 4px;font-size:14px}
div.pin p{margin:2px 0;font-size:12px}
div.pin pre{margin:4px 0 0;padding:4px 6px;background:#fff;border:1px solid #ccc;font-size:12px;
white-space:pre-wrap;overflow-wrap:anywhere;user-select:all}
p.topins{display:none}
@media (max-width:700px){div.first{display:flex;flex-direction:column}section.pins{order:1}
p.topins{display:block}div.pin p{display:none}div.pin{flex-basis:100%}}
"""
FIRST_SCREEN_CSS = GLANCE_CSS + PINS_CSS


@dataclass(slots=True)
class Group:
    heading: str  # the group axis and the axes every line of the group shares; "" with no group axis
    lines: list[Line]


def check_names(report: Report) -> list[str]:
    """Every check name of the columns once, in the registry's order (unknown names last, by name)."""
    return check_order({c.check for c in report.columns})


def groups(report: Report) -> list[Group]:
    """The lines grouped under the first varying axis, each labelled by what varies inside its group. verl rows
    are grouped by their verl release first (a verl user finds theirs first), the other rows as without verl."""
    varying, _ = varying_axes(report)
    verl_at = report.axes.index(verl_rows.AXIS) if verl_rows.AXIS in report.axes else None
    rest = [p for p in varying if p != verl_at]
    plain_axis = rest[0] if len(varying) > 1 and rest else None  # what groups the rows without verl
    models = len({c.model for c in report.columns}) > 1
    found: dict[tuple[int | None, str], list[Line]] = {}
    for line in lines(report):
        axes = report.rows[line.row].axes
        position = verl_at if verl_at in varying and axes[verl_at] else plain_axis
        found.setdefault((position, axes[position] if position is not None else ""), []).append(line)
    out = []
    for (group_axis, value), members in found.items():
        members.sort(key=lambda ln: (backend_model_key(ln.backend, ln.model), ln.row))
        heading = [_group_name(report.axes[group_axis], value)] if group_axis is not None else []
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


def _group_name(axis: str, value: str) -> str:
    """A group's heading: 'transformers 5.9.0', or a verl release ('verl 0.9.1')."""
    if axis == verl_rows.AXIS:
        return verl_rows.release_label(value)
    return f"{axis} {value or ABSENT}"


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


def _box(box: PinsBox) -> str:
    e = escape_html
    if box.line is None:
        return (f'<div class="pin none"><h3>{e(box.title)}</h3><p>{e(box.none_passes)}: see the grid. '
                f"By verdict: {e(box.by_verdict)}.</p></div>")
    versions = ", ".join(f"{name} {version}" for name, version in box.pins)
    other = "; ".join(f"{axis} {value}" for axis, value in box.other)
    chosen = box.chosen
    return (f'<div class="pin"><h3>{e(box.title)}</h3>'
            f'<p>{e(chosen[0].upper() + chosen[1:])}'
            f' (<a href="#{box.line.anchor}">its line</a>): {e(versions)}'
            + (f"{'; ' if versions else ''}Python {e(box.python)}" if box.python else "")
            + (f"; {e(other)}" if other else "") + ".</p>"
            + (f"<p>{e(box.outside)}: installed through uv's --override.</p>" if box.outside else "")
            + f'<pre aria-label="{e(box.title)} install commands">{e(box.command)}</pre></div>')


def pins_html(report: Report) -> list[str]:
    boxes = pins_boxes(report)
    if not boxes:
        return []
    return ['<section class="pins" aria-labelledby="pins"><h2 id="pins">Use these pins</h2>',
            *(_box(b) for b in boxes), "</section>"]


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


def first_screen_html(report: Report, verdicts: list[RowVerdict]) -> list[str]:
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
