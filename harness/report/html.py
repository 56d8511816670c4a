"""A standalone HTML page of a Report: inline CSS, inline SVG plots, no scripts, no external assets.

All text goes through html.escape; the only links are the report's own relative log and lock paths
(percent-encoded, then escaped) and in-page anchors. A Content-Security-Policy forbids scripts and
remote loads, as a second line of defence.
"""
from __future__ import annotations

import re
from html import escape
from urllib.parse import quote

from ..results import Status
from .plot import PLOT_CSS, PLOT_LEGEND, convergence_svg
from .table import ABSENT, EMULATED_MARK, EMULATED_NOTE, PASS_RANGE_RULE, STATUS_SYMBOLS, Entry, Report, entry_extras

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:12px}
th,td{border:1px solid #ccc;padding:3px 5px;vertical-align:top}
thead{position:sticky;top:0}thead th{background:#f3f3f3}
td.ax{white-space:nowrap;font-family:monospace}
td.s-pass{background:#eaf7ea}td.s-fail,td.s-error,td.s-crash,td.s-timeout{background:#fdeaea}
td.s-affected{background:#fff6e0}td.s-xfail{background:#fffbd6}td.s-skip{background:#f4f4f4}
.msg,.vd,.kf{font-size:11px;color:#444;max-width:28em}
.bad{color:#a00}
.plots{display:flex;flex-wrap:wrap;gap:1em}
figure{margin:0;border:1px solid #ddd;padding:4px}
figcaption{font-size:11px;font-family:monospace;max-width:360px;overflow-wrap:anywhere}
"""


class _Escaper(dict):
    """html.escape with memory: statuses, names and many messages repeat across thousands of entries."""

    def __missing__(self, text: str) -> str:
        value = self[text] = escape(text)
        return value


_PLAIN_PATH = re.compile(r"[A-Za-z0-9._~/+=,-]*")


def href(path: str) -> str:
    """A safe relative path as an attribute value: percent-encoded where needed, then escaped."""
    return path if _PLAIN_PATH.fullmatch(path) else escape(quote(path, safe="/"))


def _status(status: Status) -> str:
    return f'<span title="{status.value}">{STATUS_SYMBOLS[status]}</span> {status.value}'


_STATUS = {s: _status(s) for s in Status}
_VALUE = {s: s.value for s in Status}  # Enum.value is a slow descriptor; this runs once per entry
_MARK = f"<sup>{EMULATED_MARK}</sup>"


def _entry(entry: Entry, plot_id: str | None, esc: _Escaper) -> str:
    head = _STATUS[entry.status]
    if entry.emulated and not (entry.verdicts and any(v.emulated for v in entry.verdicts)):
        head += f" (emulated{_MARK})"
    if entry.original_status is not None and entry.original_status != entry.status:
        head += f" (was {entry.original_status.value})"
    parts = [f'<td class="s-{_VALUE[entry.status]}" title="{esc[entry.cell_id]}">{head}']
    if entry.log:
        parts.append(f' <a href="{href(entry.log)}">log</a>')
    if entry.lock:
        parts.append(f' <a href="{href(entry.lock)}">lock</a>')
    if plot_id:
        parts.append(f' <a href="#{plot_id}">plot</a>')
    for text in entry.rejected_links:
        parts.append(f' <span class="bad">unsafe link not shown as a link: {esc[text]}</span>')
    if entry.verdicts:
        parts.append('<div class="vd">' + " · ".join(
            f"{esc[v.name]} {_STATUS[v.status]}" + (f" (emulated{_MARK})" if v.emulated else "")
            for v in entry.verdicts) + "</div>")
    if entry.message:
        parts.append(f'<div class="msg">{esc[entry.message]}</div>')
    parts += [f'<div class="ex">{esc[extra]}</div>' for extra in entry_extras(entry)]
    if entry.known_failure:
        kf = entry.known_failure
        parts.append('<div class="kf">known failure: ' + esc[kf.get("reason", "")]
                     + (f" <code>{esc[kf['link']]}</code>" if kf.get("link") else "")
                     + (f", expires {esc[kf['expires']]}" if kf.get("expires") else "") + "</div>")
    parts.append("</td>")
    return "".join(parts)


def _header(report: Report) -> list[str]:
    """Three header rows: backend, model and check, with repeated groups merged by colspan."""
    out = []
    for level in range(3):
        cells = [f'<th rowspan="3">{escape(a)}</th>' for a in report.axes] if level == 0 else []
        groups: list[list] = []
        for col in report.columns:
            key = tuple(getattr(col, name) for name in ("backend", "model", "check")[: level + 1])
            if groups and groups[-1][0] == key:
                groups[-1][1] += 1
            else:
                groups.append([key, 1])
        cells += [f'<th colspan="{span}">{escape(key[-1] or ABSENT)}</th>' for key, span in groups]
        out.append("<tr>" + "".join(cells) + "</tr>")
    return out


def to_html(report: Report) -> str:
    """The whole report as one standalone HTML page."""
    e = escape
    esc = _Escaper()
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{e(CSP)}">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{e(report.title)}</title><style>{CSS}{PLOT_CSS}</style></head><body>",
           f"<h1>{e(report.title)}</h1>",
           f"<p>{e(report.description)}</p>",
           "<p><strong>Summary (checks):</strong> " + " · ".join(
               f"{_status(Status(name))}: {count}" for name, count in report.summary.items()) + "</p>",
           "<h2>Legend</h2><ul>"]
    out += [f"<li>{symbol} <strong>{e(name)}</strong>: {e(meaning)}</li>" for symbol, name, meaning in report.legend]
    if report.has_emulated:
        out.append(f"<li>{e(EMULATED_NOTE)}</li>")
    out.append(f"</ul><h2>Passing ranges</h2><p>{e(PASS_RANGE_RULE)}</p><ul>")
    out += [f"<li><strong>{e(r.axis)}</strong>: {e(r.text(max_segments=1000))}</li>" for r in report.ranges]
    out.append("</ul>")
    if report.changes is not None:
        out.append("<h2>Changes since the previous run</h2><p>" + " · ".join(
            f"{e(kind)}: {count}" for kind, count in sorted(report.changes.items()))
            + "</p><p>Rows with a new failure come first.</p>")
    if report.last_known_good:
        out.append("<h2>Last known good</h2><ul>" + "".join(f"<li>{e(x)}</li>" for x in report.last_known_good)
                   + "</ul>")
    out += ["<h2>Support table</h2><table><thead>", *_header(report), "</thead><tbody>"]

    plots: list[tuple[str, Entry]] = []
    ncols = len(report.columns)
    for row in report.rows:
        env = "; ".join(f"{k}: {v}" for k, v in row.environment.items())
        line = [f'<tr title="{e(env)}">'] + [f'<td class="ax">{esc[v or ABSENT]}</td>' for v in row.axes]
        for i in range(ncols):
            entry = row.entries.get(i)
            if entry is None:
                line.append("<td></td>")
                continue
            plot_id = None
            if entry.plot is not None:
                plot_id = f"plot-{len(plots)}"
                plots.append((plot_id, entry))
            line.append(_entry(entry, plot_id, esc))
        out.append("".join(line) + "</tr>")
    out.append("</tbody></table>")
    if report.has_emulated:
        out.append(f"<p>{e(EMULATED_NOTE)}</p>")
    if plots:
        out.append(f"<h2>Convergence curves</h2>{PLOT_LEGEND}<div class=\"plots\">")
        for plot_id, entry in plots:
            label = f"{entry.cell_id} · {entry.check}"
            out.append(f'<figure id="{plot_id}">{convergence_svg(entry.plot, label=label)}'
                       f"<figcaption>{_status(entry.status)} {e(label)}</figcaption></figure>")
        out.append("</div>")
    for heading, items in (("Notes", report.notes), ("Problems", report.problems)):
        if items:
            out.append(f"<h2>{heading}</h2><ul>" + "".join(f"<li>{e(item)}</li>" for item in items) + "</ul>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
