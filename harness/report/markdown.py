"""GitHub Markdown rendering of a Report: fit for a CI job summary, always under a byte budget.

Every piece of text from result files goes through `md_text`, which escapes what GitHub would read as
markup (table pipes, emphasis, links, code, math, raw HTML, autolinks and mentions). Links are only the
report's own relative log and lock paths, percent-encoded.
"""
from __future__ import annotations

from urllib.parse import quote

from harness.results.records import Status

from .table import (
    ABSENT,
    EMULATED_MARK,
    EMULATED_NOTE,
    PASS_RANGE_RULE,
    STATUS_SYMBOLS,
    Entry,
    Report,
    Row,
    entry_extras,
)

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
        parts.append("— known failure: " + md_text(kf.get("reason", ""))
                     + (f" ({md_text(kf['link'])})" if kf.get("link") else "")
                     + (f", expires {md_text(kf['expires'])}" if kf.get("expires") else ""))
    return " ".join(parts)


def _row_line(row: Row, column_count: int) -> str:
    values = [md_text(v) if v else ABSENT for v in row.axes]
    values += [entry_text(row.entries[i]) if i in row.entries else "" for i in range(column_count)]
    return "| " + " | ".join(values) + " |"


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


def to_markdown(report: Report, max_bytes: int = 1_000_000) -> str:
    """The report as GitHub Markdown, under `max_bytes` bytes (UTF-8): rows are cut if needed."""
    summary = " · ".join(f"{STATUS_SYMBOLS[Status(name)]} {name}: {count}" for name, count in report.summary.items())
    head = [f"# {md_text(report.title)}", "", report.description, "", f"**Summary (checks):** {summary}", "",
            "## Legend", ""]
    head += [f"- {symbol} **{name}**: {meaning}" for symbol, name, meaning in report.legend]
    if report.has_emulated:
        head.append(f"- {md_text(EMULATED_NOTE)}")
    head += ["", "## Passing ranges", "", PASS_RANGE_RULE, ""]
    head += [f"- **{md_text(r.axis)}**: {md_text(r.text())}" for r in report.ranges] or ["- no package axes"]
    if report.changes is not None:
        head += ["", "## Changes since the previous run", "",
                 " · ".join(f"{md_text(kind)}: {count}" for kind, count in sorted(report.changes.items())),
                 "", "Rows with a new failure come first."]
    if report.last_known_good:
        head += ["", "## Last known good", "", *_bullets(report.last_known_good)]
    head += ["", "## Support table", ""]

    tail = []
    if report.has_emulated:
        tail += ["", md_text(EMULATED_NOTE)]
    if report.notes:
        tail += ["", "## Notes", "", *_bullets(report.notes)]
    if report.problems:
        tail += ["", "## Problems", "", *_bullets(report.problems)]

    width = len(report.axes) + len(report.columns)
    table_head = ["| " + " | ".join([md_text(a) for a in report.axes] + [md_text(c.label) for c in report.columns])
                  + " |", "|" + "---|" * width]
    budget = max_bytes - 600 - _size(head) - _size(tail) - _size(table_head)
    body = []
    for row in report.rows:
        line = _row_line(row, len(report.columns))
        cost = len(line.encode("utf-8")) + 1
        if cost > budget:
            break
        budget -= cost
        body.append(line)
    lines = head + (table_head + body if body else ["No rows."] if not report.rows else [])
    cut = len(report.rows) - len(body)
    if cut:
        lines += ["", (f"**{cut} of {len(report.rows)} rows were cut** (rows {len(body) + 1} to {len(report.rows)}) "
                       f"to keep this file under {max_bytes} bytes; the full table is in {FULL_REPORT} "
                       "(and report.json) next to this file.")]
    text = "\n".join(lines + tail) + "\n"
    return text if len(text.encode("utf-8")) < max_bytes else _hard_cut(text, max_bytes)
