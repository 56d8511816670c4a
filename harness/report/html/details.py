"""The details of report.html: one closed <details> per version combination, every entry in full.

Each <details> holds its row's entries (sub-verdicts, messages, logs, repro command, a link to its reward
plot) under a heading per cell that names the cell and links its lock once (the entries of a cell are
consecutive there), with what failed first: failing sub-verdicts shown, passing ones behind a count, a parser
or template finding's input and outputs side by side, and the install failure a whole cell shares said once
under its heading, with the resolver's reason.
"""
from __future__ import annotations

import re
from urllib.parse import quote

from harness.results.records import Status

from ..failure_text import Finding, install_reason, is_install_failure
from ..model import ABSENT, EMULATED_MARK, FAILING, STATUS_LETTERS, STATUS_VALUES, Entry, Report, entry_extras
from ..row_verdicts import KIND_LABELS, RowVerdict
from ..row_verdicts import lines as grid_lines
from ..safe_text import Escaper, ascii_html, escape_html, safe_url

_QUIET = (Status.PASS, Status.SKIP)
# Failing statuses first, then declared known failures and reproduced upstream bugs, then the rest.
_RANK = {s: 0 if s in FAILING else 1 if s is Status.XFAIL else 2 if s is Status.AFFECTED else 3 for s in Status}

DETAIL_CSS = """
table.find{margin:3px 0;table-layout:fixed;width:100%}
table.find td,table.find th{font:11px/1.3 monospace;white-space:pre-wrap;overflow-wrap:anywhere;text-align:left}
details.sub summary{cursor:pointer;color:#0a3069}
div.inst{font-size:12px;margin:2px 0;font-weight:normal}
"""


_PLAIN_PATH = re.compile(r"[A-Za-z0-9._~/+=,-]*")


def href(path: str) -> str:
    """A safe relative path as an attribute value: percent-encoded where needed, then escaped."""
    return path if _PLAIN_PATH.fullmatch(path) else escape_html(quote(path, safe="/"))


def _status(status: Status) -> str:
    return f'<span class="m s-{status.value}" aria-hidden="true">{STATUS_LETTERS[status]}</span> {status.value}'


# Every constant piece is made ASCII once here; text from the report goes through escape_html.
STATUS_HTML = {s: _status(s) for s in Status}
_OPEN = {s: f'<td class="s-{s.value}">{STATUS_HTML[s]}' for s in Status}  # an entry's cell, up to its status
_MARK = ascii_html(f" (emulated<sup>{EMULATED_MARK}</sup>)")
_DOT = ascii_html(" · ")
_KIND = {kind: escape_html(label) for kind, label in KIND_LABELS.items()}


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
        html += verdicts_html(entry, STATUS_HTML, esc)
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


def details_html(report: Report, verdicts: list[RowVerdict],
                 esc: Escaper) -> tuple[list[str], list[tuple[str, Entry]]]:
    """One closed <details> per row, as pieces of the page, and the entries with a reward plot, each with the id
    its plot gets (numbered in page order)."""
    e = escape_html
    page: list[str] = []
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
    return page, plots


def entry_order(entries: dict[int, Entry]) -> list[tuple[int, Entry]]:
    """A cell's entries with what failed first, each rank in column order."""
    return sorted(entries.items(), key=lambda item: (_RANK[item[1].status], item[0]))


def _finding(finding: Finding, esc: Escaper) -> str:
    heads = "".join(f'<th scope="col">{esc[label]}</th>' for label, _ in finding.sides)
    texts = "".join(f"<td>{esc[text]}</td>" for _, text in finding.sides)
    return (f'<table class="find"><caption>{esc[finding.case]}: side by side</caption>'
            f"<tr>{heads}</tr><tr>{texts}</tr></table>")


def _verdict(verdict, status_html: dict, esc: Escaper) -> str:
    html = f"{esc[verdict.name]} {status_html[verdict.status]}" + (_MARK if verdict.emulated else "")
    if verdict.message and verdict.status not in _QUIET:
        html += f": {esc[verdict.message]}"
    return html + "".join(_finding(f, esc) for f in verdict.findings)


def verdicts_html(entry: Entry, status_html: dict, esc: Escaper) -> str:
    """Failing and notable sub-verdicts in full; passing and skipped ones behind a count."""
    loud = sorted((v for v in entry.verdicts if v.status not in _QUIET), key=lambda v: _RANK[v.status])
    quiet = [v for v in entry.verdicts if v.status in _QUIET]
    html = '<div class="vd">' + "<br>".join(_verdict(v, status_html, esc) for v in loud)
    if quiet:
        words = " and ".join(f"{n} {s.value}" for s in _QUIET if (n := sum(v.status is s for v in quiet)))
        html += (f'<details class="sub"><summary>{words} sub-result{"s" if len(quiet) > 1 else ""}</summary>'
                 + _DOT.join(_verdict(v, status_html, esc) for v in quiet) + "</details>")
    return html + "</div>"


def shared_install_failure(entries: list[Entry]) -> str | None:
    """The install failure message every entry of a cell carries, if they all carry the same one."""
    messages = {e.message for e in entries}
    if len(messages) == 1 and is_install_failure(entries[0].message):
        return entries[0].message
    return None


def install_html(message: str, esc: Escaper, resolver: str = "") -> str:
    """Said once under the cell's heading: the reason in one line; behind it the resolver's own output (what the
    install verdict was read from), or the whole message where it says more than the reason."""
    reason = install_reason(message)
    whole = resolver or (message if message != reason else "")
    fold = (f'<details class="sub"><summary>the resolver\'s output</summary>{esc[whole]}</details>' if whole
            else "")
    return f'<div class="inst"><strong>{esc[reason]}</strong>{fold}</div>'

