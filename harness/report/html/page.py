"""report.html: one standalone page of a Report, with inline CSS and inline SVG plots, no scripts, no external assets.

The first screen is the pins, counts and grid (first_screen.py); then the summary, legend and ranges; below
them the details (details.py), one closed <details> per version combination; then the reward plots
(plots.py), each drawing the band, reference and axes it shares with others once.

All text goes through html.escape (safe_text.escape_html, which also writes non-ASCII characters as
character references, so the page is pure ASCII); the only links are the report's own relative log and
lock paths (percent-encoded, then escaped) and in-page anchors. A Content-Security-Policy forbids
scripts and remote loads, as a second line of defence.
"""
from __future__ import annotations

from harness.results.records import Status

from ..model import EMULATED_NOTE, Report
from ..pins import known_good_stacks
from ..ranges import PASS_RANGE_RULE
from ..row_verdicts import RowVerdict, row_verdicts
from ..safe_text import Escaper, ascii_html, clean_text, escape_html
from ..standing_findings import STANDING_INTRO
from .details import DETAIL_CSS, STATUS_HTML, details_html
from .first_screen import FIRST_SCREEN_CSS, first_screen_html
from .plots import PLOT_CSS, PLOT_LEGEND, SharedPlots

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
section.standing{overflow-wrap:anywhere}
table.cases{table-layout:fixed;width:100%}
table.cases pre{margin:0;white-space:pre-wrap;overflow-wrap:anywhere}
"""

_DOT = ascii_html(" · ")
_EMULATED_NOTE = escape_html(EMULATED_NOTE)


def _not_installed_and_standing(report: Report) -> list[str]:
    """The checks that did not run because their cell could not be installed, and each standing finding once,
    with its cases side by side."""
    e = escape_html
    out = []
    if report.not_installed:
        out.append("<p><strong>Not run, their cell could not be installed:</strong> " + _DOT.join(
            f"{e(label)}: {count}" for label, count in sorted(report.not_installed.items())) + "</p>")
    if report.standing:
        out.append(f'<section class="standing"><h2 id="standing">Standing findings</h2><p>{e(STANDING_INTRO)}</p>')
    for finding in report.standing:
        out.append(f"<h3>{e(f'{finding.backend} · {finding.model} · {finding.label}')}: {e(finding.status)} in all "
                   f"{len(finding.cells)} cells that ran it</h3><p>{e(clean_text(finding.compared, 500))}.</p>"
                   f"<p>{e(clean_text(finding.message, 1000))}</p>")
        if finding.cases:
            sides = [k for k in finding.cases[0] if k != "case"]
            out.append('<table class="cases"><thead><tr>' + "".join(f'<th scope="col">{e(k)}</th>'
                                                                     for k in ["case", *sides])
                       + "</tr></thead><tbody>" + "".join(
                           "<tr>" + "".join(f"<td><pre>{e(str(case.get(k, ''))[:600])}</pre></td>" for k in
                                            ["case", *sides]) + "</tr>" for case in finding.cases)
                       + "</tbody></table>")
    if report.standing:
        out.append("</section>")
    return out


def _preamble(report: Report, verdicts: list[RowVerdict]) -> list[str]:
    """The first screen (title, counts, legend line, compact table), then the rest of the summary."""
    e = escape_html
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{e(CSP)}">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{e(report.title)}</title><style>{CSS}{FIRST_SCREEN_CSS}{DETAIL_CSS}{PLOT_CSS}</style>"
           '</head><body><a class="skip" href="#details">Skip to the details</a>',
           f"<h1>{e(report.title)}</h1>", *_first_bad(report), *first_screen_html(report, verdicts),
           f"<p>{e(report.description)}</p>",
           "<p><strong>Summary (checks):</strong> " + _DOT.join(
               f"{STATUS_HTML[Status(name)]}: {count}" for name, count in report.summary.items()) + "</p>",
           *_not_installed_and_standing(report)]
    if report.changes is not None:
        out.append("<h2>Changes since the previous run</h2><p>" + _DOT.join(
            f"{e(kind)}: {count}" for kind, count in sorted(report.changes.items()))
            + "</p><p>Rows with a new failure come first.</p>")
    out.append("<h2>Legend</h2><ul>")
    out += [f"<li>{STATUS_HTML[Status(name)]}: {e(meaning)}</li>" for _, name, meaning in report.legend]
    if report.has_emulated:
        out.append(f"<li>{_EMULATED_NOTE}</li>")
    out.append(f"</ul><h2>Passing ranges</h2><p>{e(PASS_RANGE_RULE)}</p><ul>")
    out += [f"<li><strong>{e(r.axis)}</strong>: {e(r.text(max_segments=1000))}</li>" for r in report.ranges]
    out.append("</ul>")
    if report.last_known_good:
        out.append(_last_known_good(report.last_known_good))
    return [*out, '<h2 id="details">Details per version combination</h2>']


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
    details, plots = details_html(report, verdicts, esc)
    page += details
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
                        f"<figcaption>{STATUS_HTML[entry.status]} {label}</figcaption></figure>\n")
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
