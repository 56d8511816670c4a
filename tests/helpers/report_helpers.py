"""Helpers for the report tests: cells to build reports from, a page with its plots' shared parts put back, and a
page as a browser shows it."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from harness.results.records import CellResult, CheckResult, Status, Verdict, write_json_atomic


def make_cell(cell_id: str, checks: list[CheckResult], **axes: str) -> CellResult:
    axes = {"device": "cpu", "torch": "2.13.0", "transformers": "5.3.0", "backend": "fsdp", "model": "text", **axes}
    return CellResult(matrix="cpu", cell_id=cell_id, axes=axes, checks=checks, lock=f"cells/{cell_id}/lock.txt",
                      finished="2026-11-22T10:00:00Z")


def ok(name: str = "stack-smoke", status: Status = Status.PASS, message: str = "fine", **kw) -> CheckResult:
    return CheckResult(name, status, message, log=f"cells/x/logs/{name}.log", **kw)


def write_cells(report_dir: Path, cells: list[CellResult]) -> None:
    """Each cell's result file under report_dir/cells, as a runner writes it."""
    for cell in cells:
        write_json_atomic(report_dir / "cells" / f"{cell.cell_id}.json", cell.to_dict())


def history_cell(tf, status, finished="2026-11-22T10:00:00+00:00", flaky=False, lock="torch==2.13.0\n", tmp=None):
    """A stack-smoke cell of transformers `tf`; with `tmp`, its lock file written under that report directory."""
    axes = {"backend": "fsdp", "model": "text", "device": "cpu", "transformers": tf, "torch": "2.13.0"}
    lock_rel = None
    if tmp is not None:
        lock_rel = f"cells/{tf}/lock.txt"
        (tmp / lock_rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / lock_rel).write_text(lock + f"transformers=={tf}\n")
    return CellResult("cpu", f"fsdp-text-tf{tf}", axes, checks=[CheckResult("stack-smoke", status, flaky=flaky)],
                      lock=lock_rel, finished=finished)


def _kind_cell(tf: str, *checks: CheckResult, backend: str = "fsdp") -> CellResult:
    axes = {"device": "cpu", "torch": "2.13.0", "transformers": tf, "backend": backend, "model": "text"}
    return CellResult("cpu", f"{backend}-text-tf{tf}", axes, checks=list(checks), finished="2026-11-23T10:00:00Z")


def _kind_check(name: str, status: Status, message: str = "", verdicts=(), **kw) -> CheckResult:
    return CheckResult(name, status, message, verdicts=list(verdicts), **kw)


# A row per verdict kind, of made-up check and verdict names: the kind comes from statuses and sub-verdicts,
# never from names.
CELLS = [
    _kind_cell("5.1.0",
               _kind_check("probe", Status.XFAIL, "no model", original_status=Status.FAIL,
                           known_failure={"reason": "not there yet", "link": "https://x.example/1",
                                          "expires": "2099-01-01"}),
               _kind_check("other", Status.SKIP, "n/a")),
    _kind_cell("5.3.0",
               _kind_check("probe", Status.PASS, "ok", [Verdict("stock", Status.AFFECTED, "bug"),
                                                        Verdict("ours", Status.PASS, "fixed")]),
               _kind_check("other", Status.PASS, "ok")),
    _kind_cell("5.9.0", _kind_check("probe", Status.PASS, "ok"),
               _kind_check("other", Status.AFFECTED, "upstream leak")),
    _kind_cell("5.10.0", _kind_check("probe", Status.PASS, "ok"), _kind_check("other", Status.PASS, "ok")),
    _kind_cell("5.11.0", _kind_check("probe", Status.PASS, "ok"),
               _kind_check("other", Status.TIMEOUT, "no result in 600 s")),
    _kind_cell("5.12.0", _kind_check("probe", Status.SKIP, "n/a"), _kind_check("other", Status.SKIP, "n/a")),
]


_SHARED = re.compile(r'<svg class="plot-defs"[^>]*><defs>(.*?)</defs></svg>', re.DOTALL)


def expand_shared_plot_parts(page: str) -> str:
    """The page with each `<use href="#ppN"/>` replaced by the part it shows, and the parts' holder removed."""
    page = page.replace("svg.plot-defs{position:absolute}\n", "")
    found = _SHARED.search(page)
    if not found:
        return page
    parts = dict(re.findall(r'<g id="(pp\d+)">(.*?)</g>', found.group(1)))
    page = page[:found.start()] + page[found.end():]
    return re.sub(r'<use href="#(pp\d+)"/>', lambda use: parts[use.group(1)], page)


class Shown(HTMLParser):
    """A page as a browser shows it: tags with their attributes (but class and aria-hidden) and text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self.in_style = False

    def handle_starttag(self, tag, attrs):
        self.in_style = tag == "style"
        kept = sorted((k, v) for k, v in attrs if k not in ("class", "aria-hidden"))
        self.lines.append(f"<{tag}" + "".join(f" {k}={v!r}" for k, v in kept) + ">")

    def handle_data(self, data):
        if not self.in_style and data.strip():
            self.lines.append(data)

    def handle_endtag(self, tag):
        self.in_style = False


def shown(page: str) -> list[str]:
    parser = Shown()
    parser.feed(expand_shared_plot_parts(page))
    return parser.lines
