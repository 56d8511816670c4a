"""The parts of an entry's details that put what failed first: its sub-verdicts (failing ones shown, passing
ones behind a count), a parser or template finding's input and outputs side by side, and the install failure
a whole cell shares, said once under its heading with the resolver's reason.
"""
from __future__ import annotations

from harness.results.records import Status

from .evidence import Finding, install_reason, is_install_failure
from .htmltext import Escaper, ascii_html
from .table import EMULATED_MARK, FAILING, Entry

_MARK = ascii_html(f" (emulated<sup>{EMULATED_MARK}</sup>)")
_DOT = ascii_html(" · ")
_QUIET = (Status.PASS, Status.SKIP)
# Failing statuses first, then declared known failures and reproduced upstream bugs, then the rest.
_RANK = {s: 0 if s in FAILING else 1 if s is Status.XFAIL else 2 if s is Status.AFFECTED else 3 for s in Status}

DETAIL_CSS = """
table.find{margin:3px 0;table-layout:fixed;width:100%}
table.find td,table.find th{font:11px/1.3 monospace;white-space:pre-wrap;overflow-wrap:anywhere;text-align:left}
details.sub summary{cursor:pointer;color:#0a3069}
div.inst{font-size:12px;margin:2px 0;font-weight:normal}
"""


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
    """Said once under the cell's heading: the reason in one line; behind it the resolver's own output (the
    install verdict's evidence), or the whole message where it says more than the reason."""
    reason = install_reason(message)
    whole = resolver or (message if message != reason else "")
    fold = (f'<details class="sub"><summary>the resolver\'s output</summary>{esc[whole]}</details>' if whole
            else "")
    return f'<div class="inst"><strong>{esc[reason]}</strong>{fold}</div>'

