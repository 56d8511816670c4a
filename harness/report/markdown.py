"""GitHub Markdown rendering of a Report: fit for a CI job summary, always under a byte budget.

The compact table comes first (one status symbol per entry, the verdict and its reason per version
combination), then the counts, legend and ranges, then one <details> block per row with every entry in full.

Every piece of text from result files goes through `md_text`, which escapes what GitHub would read as
markup (table pipes, emphasis, links, code, math, raw HTML, autolinks and mentions). Links are only the
report's own relative log and lock paths, percent-encoded.
"""
from __future__ import annotations

from collections.abc import Iterable
from html import escape
from urllib.parse import quote

from harness.results.records import Status

from .model import ABSENT, EMULATED_MARK, EMULATED_NOTE, STATUS_SYMBOLS, Entry, Report, Row, entry_extras
from .pins import known_good_stacks, pins_boxes
from .ranges import PASS_RANGE_RULE
from .row_verdicts import KIND_LABELS, KINDS, RowVerdict, kind_counts, row_verdicts, varying_axes
from .safe_text import clean_text, safe_url
from .standing_findings import STANDING_INTRO

_ESCAPES = str.maketrans({
    "\\": "\\\\", "|": "\\|", "`": "\\`", "*": "\\*", "_": "\\_", "[": "\\[", "]": "\\]", "~": "\\~",
    "$": "\\$", "!": "\\!", "#": "\\#", "<": "&lt;", ">": "&gt;", "&": "&amp;", "@": "&#64;",
    "\n": " ", "\r": " ",
})
MAX_LIST_ITEMS = 50
_STATUS = {s: f"{STATUS_SYMBOLS[s]} {s.value}" for s in Status}
FULL_REPORT = "report.html"


def md_text(text: str) -> str:
    """Plain text that GitHub renders literally, on one line, inside or outside a table."""
    # Entities in '://', '//' and 'www.' stop autolinking of URLs in messages.
    return text.translate(_ESCAPES).replace("://", "&#58;//").replace("//", "/&#47;").replace("www.", "www&#46;")


def _link(label: str, path: str) -> str:
    return f"[{label}]({quote(path, safe='/')})"


def entry_text(entry: Entry, emulated_mark: str = EMULATED_MARK) -> str:
    parts = [_STATUS[entry.status]]
    if entry.emulated and not (entry.verdicts and any(v.emulated for v in entry.verdicts)):
        parts[0] += f" (emulated{emulated_mark})"
    if entry.original_status is not None and entry.original_status != entry.status:
        parts.append(f"(was {entry.original_status.value})")
    links = [_link(kind, path) for kind, path in (("log", entry.log), ("lock", entry.lock)) if path]
    if entry.reused:
        label = f"reused from {md_text(entry.reused[0])}"
        links.append(_link(label, entry.reused[1]) if entry.reused[1] else label)
    links += [f"unsafe link not shown as a link: {md_text(text)}" for text in entry.rejected_links]
    parts += links
    if entry.verdicts:
        parts.append(" · ".join(
            f"{md_text(v.name)} {_STATUS[v.status]}"
            + (f" (emulated{emulated_mark})" if v.emulated else "") for v in entry.verdicts))
    if entry.message:
        parts.append(f"— {md_text(entry.message)}")
    parts += [f"— {md_text(extra)}" for extra in entry_extras(entry)]
    if entry.known_failure:
        kf = entry.known_failure
        link = kf.get("link")
        shown = f"[{md_text(link)}]({link})" if safe_url(link) else md_text(link or "")
        parts.append("— known failure: " + md_text(kf.get("reason", "")) + (f" ({shown})" if link else "")
                     + (f", expires {md_text(kf['expires'])}" if kf.get("expires") else ""))
    return " ".join(parts)


def _glance_line(row: Row, verdict: RowVerdict, shown: list[int], column_count: int) -> str:
    """One row of the compact table: the differing axes, the verdict, one symbol per entry, the reason."""
    values = [md_text(row.axes[p]) if row.axes[p] else ABSENT for p in shown]
    values.append(f"**{md_text(verdict.label)}**")
    values += [STATUS_SYMBOLS[row.entries[i].status] if i in row.entries else "" for i in range(column_count)]
    values.append(md_text(verdict.reason))
    return "| " + " | ".join(values) + " |"


def html_text(text: str) -> str:
    """Text for raw HTML in GitHub Markdown: escaped, and no mention, issue reference or autolink."""
    # '#' first: the references put in after it contain one.
    return escape(text, quote=False).replace("#", "&#35;").replace("@", "&#64;").replace(
        "://", "&#58;//").replace("www.", "www&#46;")


def _details_block(report: Report, row: Row, verdict: RowVerdict) -> str:
    """A <details> block with every entry of the row in full (GitHub renders Markdown inside it)."""
    axes = " · ".join(f"{axis} {value}" for axis, value in zip(report.axes, row.axes) if value)
    lines = [f"<details><summary>{html_text(verdict.label)}: {html_text(axes)}</summary>", ""]
    lines += [f"- **{md_text(report.columns[i].label)}**: {entry_text(entry)}"
              for i, entry in row.entries.items()]
    # A row an accelerator ran (it has a date): where, on which GPU, driver and torch build; `newest` resolved; a
    # verl row: whose code, verl's range.
    ran_on = ("origin", "devices", "driver", "torch", "date") if row.environment.get("date") else ()
    for key in (*ran_on, "resolved", "verl", "outside_range"):
        if row.environment.get(key):
            lines.append(f"- **{key}**: {md_text(row.environment[key])}")
    return "\n".join([*lines, "", "</details>"])


def _bullets(items: list[str]) -> list[str]:
    lines = [f"- {md_text(item)}" for item in items[:MAX_LIST_ITEMS]]
    if len(items) > MAX_LIST_ITEMS:
        lines.append(f"- … and {len(items) - MAX_LIST_ITEMS} more (see {FULL_REPORT})")
    return lines


def _size(lines: list[str]) -> int:
    return sum(len(line.encode("utf-8")) + 1 for line in lines)


def _hard_cut(text: str, max_bytes: int) -> str:
    note = f"\n\n… cut to stay under {max_bytes} bytes; the full report is {FULL_REPORT}.\n"
    room = max_bytes - len(note.encode("utf-8")) - 1
    if room <= 0:
        return note.encode("utf-8")[: max(0, max_bytes - 1)].decode("utf-8", "ignore")
    head = text.encode("utf-8")[:room].decode("utf-8", "ignore")
    return head[: head.rfind("\n") + 1] + note


def _pins_lines(report: Report) -> list[str]:
    """Per backend, without and with vLLM: the newest stack that passes every check, as commands to copy."""
    lines = []
    for box in pins_boxes(report):
        if box.line is None:
            none = box.none_passes[0].lower() + box.none_passes[1:]
            lines.append(f"- **{md_text(box.title)}**: {none} (by verdict: {md_text(box.by_verdict)})")
        else:
            lines.append(f"- **{md_text(box.title)}** ({md_text(box.chosen)}): "
                         + md_text(box.command.replace("\n", " && "))
                         + (f" ({md_text(box.outside)}: installed through uv's --override)" if box.outside else ""))
    return ["## Use these pins", "", *lines, ""] if lines else []


def _head(report: Report, verdicts: list[RowVerdict], shown: list[int]) -> tuple[list[str], list[str]]:
    """The lines before the compact table's body, and its header."""
    counts = kind_counts(verdicts)
    _, constant = varying_axes(report)
    head = [f"# {md_text(report.title)}", ""]
    if report.first_bad:  # a new release that broke a check, bisected: the first thing a reader sees
        head += ["## First bad release", "", *(f"- {md_text(line)}" for line in report.first_bad), ""]
    head += [f"**{len(report.rows)} version combinations:** "
            + " · ".join(f"{KIND_LABELS[k]} {counts[k]}" for k in KINDS if counts[k]), ""]
    head += _pins_lines(report)
    if constant:
        head += ["Same in every row: " + md_text(", ".join(f"{a} {v}" for a, v in constant.items())), ""]
    head += [" ".join(f"{symbol} {name}" for symbol, name, _ in report.legend) + "; details below the table.", ""]
    names = [md_text(report.axes[p]) for p in shown] + ["verdict"]
    names += [md_text(f"{c.backend}·{c.model} {c.check}") for c in report.columns] + ["why"]
    return head, ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]


def _middle(report: Report) -> list[str]:
    """What follows the compact table: counts per status, changes, legend, ranges, last known good."""
    summary = " · ".join(f"{STATUS_SYMBOLS[Status(name)]} {name}: {count}" for name, count in report.summary.items())
    lines = ["", report.description, "", f"**Summary (checks):** {summary}"]
    if report.not_installed:
        lines += ["", "**Not run, their cell could not be installed:** " + " · ".join(
            f"{md_text(label)}: {count}" for label, count in sorted(report.not_installed.items()))]
    lines += standing_lines(report)
    if report.changes is not None:
        lines += ["", "## Changes since the previous run", "",
                  " · ".join(f"{md_text(kind)}: {count}" for kind, count in sorted(report.changes.items())),
                  "", "Rows with a new failure come first."]
    lines += ["", "## Legend", ""]
    lines += [f"- {symbol} **{name}**: {meaning}" for symbol, name, meaning in report.legend]
    if report.has_emulated:
        lines.append(f"- {md_text(EMULATED_NOTE)}")
    lines += ["", "## Passing ranges", "", PASS_RANGE_RULE, ""]
    lines += [f"- **{md_text(r.axis)}**: {md_text(r.text())}" for r in report.ranges] or ["- no package axes"]
    if report.last_known_good:
        stacks = [stack + (f" — for {', '.join(keys)}" if keys else "")
                  for stack, keys in known_good_stacks(report.last_known_good)]
        lines += ["", "## Last known good", "", *_bullets(stacks)]
    return lines


def standing_lines(report: Report) -> list[str]:
    """The standing findings, each once, with its cases side by side (a table per finding)."""
    if not report.standing:
        return []
    lines = ["", "## Standing findings", "", STANDING_INTRO, ""]
    for finding in report.standing:
        where = f"{finding.backend} · {finding.model} · {finding.label}"
        lines += [f"- **{md_text(where)}** ({finding.status}, in all {len(finding.cells)} cells that ran it): "
                  + md_text(clean_text(finding.compared, 500)) + ". " + md_text(clean_text(finding.message, 1000))]
        if finding.cases:
            sides = [k for k in finding.cases[0] if k != "case"]
            lines += ["", "  | case | " + " | ".join(md_text(s) for s in sides) + " |",
                      "  |---|" + "---|" * len(sides)]
            lines += ["  | " + " | ".join(md_text(clean_text(case.get(k, ""), 400)) for k in ["case", *sides]) + " |"
                      for case in finding.cases]
            lines.append("")
    return lines


def _fit(lines: Iterable[str], budget: int) -> tuple[list[str], int]:
    """The leading lines that fit in `budget` bytes, and the budget left (lines are made only until then)."""
    kept = []
    for line in lines:
        cost = len(line.encode("utf-8")) + 1
        if cost > budget:
            break
        budget -= cost
        kept.append(line)
    return kept, budget


def to_markdown(report: Report, max_bytes: int = 1_000_000) -> str:
    """The report as GitHub Markdown, compact table first, details after, under `max_bytes` bytes (UTF-8).

    When it would not fit, the details go first, then rows of the compact table, each cut said so."""
    verdicts = row_verdicts(report)
    varying, _ = varying_axes(report)
    head, table_head = _head(report, verdicts, varying)
    middle = _middle(report)
    tail = []
    if report.has_emulated:
        tail += ["", md_text(EMULATED_NOTE)]
    if report.notes:
        tail += ["", "## Notes", "", *_bullets(report.notes)]
    if report.problems:
        tail += ["", "## Problems", "", *_bullets(report.problems)]
    budget = max_bytes - 1200 - _size(head) - _size(table_head) - _size(middle) - _size(tail)
    count = len(report.columns)
    body, budget = _fit((_glance_line(r, v, varying, count) for r, v in zip(report.rows, verdicts)), budget)
    details, budget = _fit((_details_block(report, r, v) for r, v in zip(report.rows[:len(body)], verdicts)), budget)
    lines = head + (table_head + body if body else ["No rows."] if not report.rows else [])
    cut = len(report.rows) - len(body)
    if cut:
        lines += ["", (f"**{cut} of {len(report.rows)} rows were cut** (rows {len(body) + 1} to {len(report.rows)}) "
                       f"to keep this file under {max_bytes} bytes; the full table is in {FULL_REPORT} "
                       "(and report.json) next to this file.")]
    lines += middle
    if details:
        lines += ["", "## Details per version combination", "", *details]
    if len(details) < len(body):
        lines += ["", f"Details of {len(body) - len(details)} more rows are in {FULL_REPORT}."]
    text = "\n".join(lines + tail) + "\n"
    return text if len(text.encode("utf-8")) < max_bytes else _hard_cut(text, max_bytes)
