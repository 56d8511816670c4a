"""A standalone HTML page of a Report: inline CSS, inline SVG plots, no scripts, no external assets.

The first screen is the compact table (glance.py); below it, one closed <details> per version combination
holds every entry in full (sub-verdicts, messages, logs, repro command, a link to its reward plot), under a
heading per cell that names the cell and links its lock once (the entries of a cell are consecutive there).

All text goes through html.escape (htmltext.escape_html, which also writes non-ASCII characters as
character references, so the page is pure ASCII); the only links are the report's own relative log and
lock paths (percent-encoded, then escaped) and in-page anchors. A Content-Security-Policy forbids
scripts and remote loads, as a second line of defence. The plots draw the band, reference and axes they
share once (plotshare.py): they were a fifth of a 10,000-cell page.
"""
from __future__ import annotations

import re
from urllib.parse import quote

from harness.results.records import Status

from .glance import GLANCE_CSS, PINS_CSS, glance_html
from .grid import lines as grid_lines
from .htmltext import Escaper, ascii_html, escape_html
from .htmlverdicts import DETAIL_CSS, entry_order, install_html, shared_install_failure, verdicts_html
from .pins import known_good_stacks
from .plot import PLOT_CSS, PLOT_LEGEND
from .plotshare import SharedPlots
from .support import KIND_LABELS, STATUS_LETTERS, RowVerdict, row_verdicts
from .table import (
    ABSENT,
    EMULATED_MARK,
    EMULATED_NOTE,
    PASS_RANGE_RULE,
    STATUS_VALUES,
    Entry,
    Report,
    clean_text,
    entry_extras,
    safe_url,
)

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.5em;margin:.3em 0}
a.skip{position:absolute;left:-999px}a.skip:focus{position:static}
table{border-collapse:collapse;font-size:12px}
th,td{border:1px solid #ccc;padding:3px 5px;vertical-align:top}
caption{text-align:left;font-size:12px;color:#444}
tr.cell th{text-align:left;background:#f6f8fa;font-weight:normal}
tr[id]{scroll-margin-top:8em}
tr:target{outline:3px solid #0969da;outline-offset:-3px}tr:target>*{background:#fff8c5}
a.back{font-size:11px;margin-left:.5em}
.ex,.env{overflow-wrap:anywhere}
@media (max-width:700px){body{margin:.5em}h1{font-size:1.1em}
details table,details tbody,details tr,details td,details th{display:block;max-width:100%}
.msg,.vd,.kf{max-width:none}}
td.s-pass{background:#eaf7ea}td.s-fail,td.s-error,td.s-crash,td.s-timeout{background:#fdeaea}
td.s-affected{background:#fff6e0}td.s-xfail{background:#fffbd6}td.s-skip{background:#f4f4f4}
.msg,.vd,.kf{font-size:11px;color:#444;max-width:28em}
.bad{color:#a00}
.plots{display:flex;flex-wrap:wrap;gap:1em}
figure{margin:0;border:1px solid #ddd;padding:4px}
figcaption{font-size:11px;font-family:monospace;max-width:360px;overflow-wrap:anywhere}
"""


_PLAIN_PATH = re.compile(r"[A-Za-z0-9._~/+=,-]*")


def href(path: str) -> str:
    """A safe relative path as an attribute value: percent-encoded where needed, then escaped."""
    return path if _PLAIN_PATH.fullmatch(path) else escape_html(quote(path, safe="/"))


def _status(status: Status) -> str:
    return f'<span class="m s-{status.value}" aria-hidden="true">{STATUS_LETTERS[status]}</span> {status.value}'


# Every constant piece is made ASCII once here; text from the report goes through escape_html.
_STATUS = {s: _status(s) for s in Status}
_OPEN = {s: f'<td class="s-{s.value}">{_STATUS[s]}' for s in Status}  # an entry's cell, up to its status
_MARK = ascii_html(f" (emulated<sup>{EMULATED_MARK}</sup>)")
_DOT = ascii_html(" · ")
_KIND = {kind: escape_html(label) for kind, label in KIND_LABELS.items()}
_EMULATED_NOTE = escape_html(EMULATED_NOTE)


def _cell_heading(column_group: str, entry: Entry, esc: Escaper, install: str | None, line: str) -> str:
    """The row that opens a cell's entries in the details: its backend and model, its id and its lock, once,
    with the install failure its entries share, and a link back to its line in the grid."""
    lock = f' <a href="{href(entry.lock)}">lock</a>' if entry.lock else ""
    return (f'<tr class="cell"><th colspan="2" scope="rowgroup">{column_group}: cell {esc[entry.cell_id]}{lock}'
            f' <a class="back" href="#{line}">back to the grid</a>'
            f"{install_html(install, esc, entry.install.resolver if entry.install else '') if install else ''}"
            "</th></tr>")


def _rare_head(entry: Entry) -> str:
    head = _MARK if entry.emulated and not any(v.emulated for v in entry.verdicts) else ""
    if entry.original_status is not None and entry.original_status is not entry.status:
        head += f" (was {STATUS_VALUES[entry.original_status]})"
    return head


def _rare_middle(entry: Entry, plot_id: str | None, esc: Escaper) -> str:
    """The plot link, where a reused result came from, links not shown as links, and sub-verdicts (between
    the lock link and the message)."""
    html = f' <a href="#{plot_id}">plot</a>' if plot_id else ""
    if entry.reused:
        source, link = entry.reused
        html += f' <a href="{href(link)}">reused from {esc[source]}</a>' if link else f" reused from {esc[source]}"
    for text in entry.rejected_links:
        html += f' <span class="bad">unsafe link not shown as a link: {esc[text]}</span>'
    if entry.verdicts:
        html += verdicts_html(entry, _STATUS, esc)
    return html


def _rare_tail(entry: Entry, esc: Escaper) -> str:
    """The extras (mostly a repro command, different in every entry: not remembered) and the known failure."""
    html = "".join([f'<div class="ex">{escape_html(extra)}</div>' for extra in entry_extras(entry)])
    if entry.known_failure:
        kf = entry.known_failure
        link = kf.get("link")
        shown = "" if not link else f' <a href="{escape_html(link)}">{esc[link]}</a>' if safe_url(link) else \
            f" <code>{esc[link]}</code>"
        html += ('<div class="kf">known failure: ' + esc[kf.get("reason", "")] + shown
                 + (f", expires {esc[kf['expires']]}" if kf.get("expires") else "") + "</div>")
    return html


def _entry(entry: Entry, plot_id: str | None, esc: Escaper, install: str | None = None) -> str:
    """The entry's cell in its row of the details. Most entries are plain (Entry.plain: status, log and message);
    the rarer parts are made only for the entries that have them. An install failure its cell shares is said
    in the cell's heading, not again here."""
    message = "" if not entry.message or entry.message == install else f'<div class="msg">{esc[entry.message]}</div>'
    if install and entry.message == install:
        message = '<div class="msg">not run: the install failure above</div>'

    if entry.plain:  # its log path needs no escaping
        return f'{_OPEN[entry.status]} <a href="{entry.log}">log</a>{message}</td>' if entry.log else \
            f"{_OPEN[entry.status]}{message}</td>"
    log = f' <a href="{href(entry.log)}">log</a>' if entry.log else ""
    head = _rare_head(entry) if entry.emulated or entry.original_status is not None else ""
    middle = _rare_middle(entry, plot_id, esc) if plot_id or entry.reused or entry.rejected_links or entry.verdicts \
        else ""
    tail = _rare_tail(entry, esc) if entry.repro or entry.change or entry.attempts or entry.flaky \
        or entry.failure_class or entry.known_failure or entry.origin else ""
    return f"{_OPEN[entry.status]}{head}{log}{middle}{message}{tail}</td>"


def _not_installed_and_standing(report: Report) -> list[str]:
    """The checks that did not run because their cell could not be installed, and each standing finding once,
    with its cases side by side."""
    e = escape_html
    out = []
    if report.not_installed:
        out.append("<p><strong>Not run, their cell could not be installed:</strong> " + _DOT.join(
            f"{e(label)}: {count}" for label, count in sorted(report.not_installed.items())) + "</p>")
    if report.standing:
        out.append('<h2 id="standing">Standing findings</h2><p>The same result in every cell that runs the check, '
                   "so no row's own: stated once here, not as a broken row, and not blamed on any version.</p>")
    for finding in report.standing:
        out.append(f"<h3>{e(f'{finding.backend} · {finding.model} · {finding.label}')}: {e(finding.status)} in all "
                   f"{len(finding.cells)} cells that ran it</h3><p>{e(clean_text(finding.message, 1000))}</p>")
        if finding.evidence:
            sides = [k for k in finding.evidence[0] if k != "case"]
            out.append("<table><thead><tr>" + "".join(f'<th scope="col">{e(k)}</th>' for k in ["case", *sides])
                       + "</tr></thead><tbody>" + "".join(
                           "<tr>" + "".join(f"<td><pre>{e(str(case.get(k, ''))[:600])}</pre></td>" for k in
                                            ["case", *sides]) + "</tr>" for case in finding.evidence)
                       + "</tbody></table>")
    return out


def _preamble(report: Report, verdicts: list[RowVerdict]) -> list[str]:
    """The first screen (title, counts, legend line, compact table), then the rest of the summary."""
    e = escape_html
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{e(CSP)}">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{e(report.title)}</title><style>{CSS}{GLANCE_CSS}{PINS_CSS}{DETAIL_CSS}{PLOT_CSS}</style>"
           '</head><body><a class="skip" href="#details">Skip to the details</a>',
           f"<h1>{e(report.title)}</h1>", *_first_bad(report), *glance_html(report, verdicts),
           f"<p>{e(report.description)}</p>",
           "<p><strong>Summary (checks):</strong> " + _DOT.join(
               f"{_STATUS[Status(name)]}: {count}" for name, count in report.summary.items()) + "</p>",
           *_not_installed_and_standing(report)]
    if report.changes is not None:
        out.append("<h2>Changes since the previous run</h2><p>" + _DOT.join(
            f"{e(kind)}: {count}" for kind, count in sorted(report.changes.items()))
            + "</p><p>Rows with a new failure come first.</p>")
    out.append("<h2>Legend</h2><ul>")
    out += [f"<li>{_STATUS[Status(name)]}: {e(meaning)}</li>" for _, name, meaning in report.legend]
    if report.has_emulated:
        out.append(f"<li>{_EMULATED_NOTE}</li>")
    out.append(f"</ul><h2>Passing ranges</h2><p>{e(PASS_RANGE_RULE)}</p><ul>")
    out += [f"<li><strong>{e(r.axis)}</strong>: {e(r.text(max_segments=1000))}</li>" for r in report.ranges]
    out.append("</ul>")
    if report.last_known_good:
        out.append(_last_known_good(report.last_known_good))
    return [*out, '<h2 id="details">Details per version combination</h2>']


def _row_whys(report: Report) -> list[str]:
    """Each row's reason in plain words: its grid lines' (one per backend and model), the failing ones first."""
    found: list[list] = [[] for _ in report.rows]
    for line in grid_lines(report):
        found[line.row].append(line)
    many = len({(c.backend, c.model) for c in report.columns}) > 1
    return ["; ".join((f"{ln.backend or ABSENT}: " if many else "") + ln.why
                      for ln in sorted(lines, key=lambda ln: ln.verdict.kind != "broken")) for lines in found]


def _cells(entries: dict[int, Entry]) -> list[dict[int, Entry]]:
    """A row's entries split by cell, in column order."""
    cells: list[dict[int, Entry]] = []
    for index, entry in entries.items():
        if not cells or next(iter(cells[-1].values())).cell_id != entry.cell_id:
            cells.append({})
        cells[-1][index] = entry
    return cells


def _last_known_good(lines: list[str]) -> str:
    return "<h2>Last known good</h2><ul>" + "".join(
        f"<li>{escape_html(stack)}" + (f"<br>for {escape_html(', '.join(keys))}" if keys else "") + "</li>"
        for stack, keys in known_good_stacks(lines)) + "</ul>"


def to_html(report: Report) -> str:
    """The whole report as one standalone HTML page (all ASCII)."""
    e = escape_html
    esc = Escaper()
    verdicts = row_verdicts(report)
    # One list of pieces, joined once: the page is tens of MB, so rows and plots are not joined on their own.
    page = ["\n".join(_preamble(report, verdicts)), "\n"]
    plots: list[tuple[str, Entry]] = []
    # An entry's row after its row number: its id's column part and its check (the cell's heading names
    # backend and model).
    checks = [f'{i}"><th scope="row">{e(c.check)}</th>' for i, c in enumerate(report.columns)]
    groups = [e(f"{c.backend or ABSENT} · {c.model or ABSENT}") for c in report.columns]
    axis_names = [e(axis) for axis in report.axes]
    whys = _row_whys(report)
    for number, (row, verdict) in enumerate(zip(report.rows, verdicts)):
        axes = _DOT.join([f"{name} {esc[value]}" for name, value in zip(axis_names, row.axes) if value])
        env = "; ".join([f"{k}: {v}" for k, v in row.environment.items()])
        page.append(f'<details><summary><span class="k k-{verdict.kind}">{_KIND[verdict.kind]}</span> {axes}'
                    f' &mdash; {esc[whys[number]]}</summary><div id="r{number}" class="env">{esc[env]}</div>'
                    f"<table><caption>The checks of this version combination, failures first</caption><tbody>")
        entry_id = f'<tr id="e{number}-'
        for cell in _cells(row.entries):  # a cell's entries are neighbours: columns are ordered by backend, model
            first, entry = next(iter(cell.items()))
            install = shared_install_failure(list(cell.values()))
            page.append(_cell_heading(groups[first], entry, esc, install, f"g{number}-{first}"))
            for i, entry in entry_order(cell):  # what failed first; plots are numbered in page order
                plot_id = None
                if entry.plot is not None:
                    plot_id = f"plot-{len(plots)}"
                    plots.append((plot_id, entry))
                page.append(f"{entry_id}{checks[i]}{_entry(entry, plot_id, esc, install)}</tr>")
        page.append("</tbody></table></details>\n")
    if report.has_emulated:
        page.append(f"<p>{_EMULATED_NOTE}</p>\n")
    if plots:
        page.append(f"<h2>Convergence curves</h2>{ascii_html(PLOT_LEGEND)}")
        defs_at = len(page)
        page.append('<div class="plots">\n')
        shared = SharedPlots()
        for plot_id, entry in plots:
            label = f"{esc[entry.cell_id]}{_DOT}{esc[entry.check]}"  # escaped: the parts repeat, the whole does not
            page.append(f'<figure id="{plot_id}">{shared.svg(entry.plot, label)}'
                        f"<figcaption>{_STATUS[entry.status]} {label}</figcaption></figure>\n")
        page.append("</div>\n")
        page.insert(defs_at, shared.defs())
    for heading, items in (("Notes", report.notes), ("Problems", report.problems)):
        if items:
            page.append(f"<h2>{heading}</h2><ul>" + "".join(f"<li>{e(item)}</li>" for item in items) + "</ul>\n")
    page.append("</body></html>\n")
    return "".join(page)


def _first_bad(report: Report) -> list[str]:
    """First bad releases found by bisection, above the table (harness/rerun/first_bad.py)."""
    if not report.first_bad:
        return []
    return ["<h2>First bad release</h2><ul>", *(f"<li>{escape_html(line)}</li>" for line in report.first_bad), "</ul>"]
