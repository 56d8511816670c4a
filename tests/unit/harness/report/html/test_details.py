"""The details of report.html (html/details.py): every entry with its status, links, message, sub-verdicts and
extras, what failed first, parser findings side by side, and where a reused result came from."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import quote

from cpu_like_cells import cpu_like_cells

from harness.report.build import build_report
from harness.report.html import details
from harness.report.html.details import entry_order
from harness.report.html.page import to_html
from harness.report.model import STATUS_LETTERS, entry_extras
from harness.report.synthetic import synthetic_cells
from harness.results.records import Status


class TableCells(HTMLParser):
    """Per body row of the details: class, title, links ({label: href}) and text of each entry cell, and the
    heading of the cell it belongs to (its text and links, in "heading")."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.rows: list[list[dict]] = []
        self.cell: dict | None = None
        self.heading: dict | None = None
        self.href: str | None = None
        self.in_body = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tbody":
            self.in_body = True
        elif self.in_body and tag == "tr" and attrs.get("class") == "cell":
            self.heading = self.cell = {"links": {}, "text": ""}
        elif self.in_body and tag == "tr":
            self.rows.append([])
        elif self.in_body and tag == "td" and (attrs.get("class") or "").startswith("s-"):
            self.cell = {"class": attrs["class"], "title": attrs.get("title"), "links": {}, "text": "",
                         "heading": self.heading}
            self.rows[-1].append(self.cell)
        elif self.cell is not None and tag == "a":
            self.href = attrs["href"]

    def handle_data(self, data):
        if self.cell is not None:
            self.cell["text"] += data
            if self.href is not None:
                self.cell["links"][data] = self.href

    def handle_endtag(self, tag):
        if tag == "a":
            self.href = None
        elif tag in ("td", "th"):
            self.cell = None
        elif tag == "tbody":
            self.in_body = False


def test_html_shows_every_entry_with_status_links_message_verdicts_and_extras():
    report = build_report(synthetic_cells(400, seed=11))
    page = to_html(report)
    assert page.isascii()
    parser = TableCells()
    parser.feed(page[page.index('<h2 id="details">'):])  # the details, not the grid
    # One closed <details> table per version combination, one table row per entry, in column order.
    assert page.count("<details>") == len(report.rows) and all(len(row) == 1 for row in parser.rows)
    cells = [row[0] for row in parser.rows]
    # Per cell, what failed first (each rank in column order).
    entries = [entry for row in report.rows for cell in details._cells(row.entries) for _, entry in entry_order(cell)]
    assert sorted(map(id, entries)) == sorted(id(e) for row in report.rows for e in row.entries.values())
    assert len(cells) == len(entries)
    # Each cell once: one heading per cell, naming it and linking its lock; its entries follow it.
    assert page.count('<tr class="cell">') == report.cell_count
    checked = 0
    for entry, cell in zip(entries, cells):
        assert cell["class"] == f"s-{entry.status.value}" and cell["title"] is None
        assert cell["text"].startswith(f"{STATUS_LETTERS[entry.status]} {entry.status.value}")
        assert f"cell {entry.cell_id}" in cell["heading"]["text"]
        lock = quote(entry.lock, safe="/") if entry.lock else None
        assert cell["heading"]["links"].get("lock") == lock and "lock" not in cell["links"]
        assert cell["links"].get("log") == (quote(entry.log, safe="/") if entry.log else None)
        assert ("plot" in cell["links"]) == (entry.plot is not None)
        texts = [entry.message, *entry_extras(entry), *entry.rejected_links, *(v.name for v in entry.verdicts)]
        for text in texts:
            assert text in cell["text"]
        if entry.known_failure:
            assert f"known failure: {entry.known_failure['reason']}" in cell["text"]
        checked += 1
    assert checked == sum(report.summary.values()) > 0


def test_details_start_with_what_failed_and_show_findings_side_by_side():
    report = build_report(cpu_like_cells())
    page = to_html(report)
    number = next(i for i, row in enumerate(report.rows) if any(
        e.check == "patch-parity" and e.status is Status.FAIL for e in row.entries.values()))
    body = page[page.index(f'<div id="r{number}"'):]
    body = body[:body.index("</details>\n")]
    rows = re.findall(r'<tr id="e\d+-(\d+)"><th scope="row">([^<]+)</th><td class="s-(\w+)"', body)
    assert rows[0][1:] == ("patch-parity", "fail") and [r[2] for r in rows[1:]].count("fail") == 0
    # The failing sub-result in the open, the 102 passing ones behind their count.
    vd = body[body.index('<div class="vd">'):]
    assert vd.index("packed/cu-seq-lens") < vd.index("<summary>102 pass sub-results</summary>")
    assert 'href="#g' in body and "back to the grid" in body
    # The parser finding: a table with its input and the two outputs in one row.
    assert re.search(r'<table class="find"><caption>unclosed-call: side by side</caption><tr><th scope="col">input'
                     r'</th><th scope="col">trainer</th><th scope="col">vllm</th></tr><tr><td>&lt;tool_call&gt;\n'
                     r'&lt;function=add&gt;\n.*?</td><td>.*?</td><td>', page, re.DOTALL)
    # An install failure: its reason once under the cell's heading, the entries point there.
    conflict = next(i for i, row in enumerate(report.rows) if any(
        e.status is Status.ERROR for e in row.entries.values()))
    body = page[page.index(f'<div id="r{conflict}"'):]
    body = body[:body.index("</details>\n")]
    assert body.count('<div class="inst">') == 1 and body.count("requires transformers&gt;=5.16.1,&lt;5.20") == 1
    assert body.count("not run: the install failure above") == len(report.rows[conflict].entries)


def test_a_reused_result_names_and_links_the_cell_it_came_from():
    cells = synthetic_cells(6, seed=2)
    cells[0].checks[0].reused_from = cells[1].cell_id
    cells[2].checks[0].log = "./" + cells[2].checks[0].log  # safe, but not as written
    cells[3].checks[0].log = "cells/a b/x+y.log"  # safe, and its link must escape the space
    cells[2].checks[0].reused_from = "../elsewhere"  # not a safe link: named, not linked
    page = to_html(build_report(cells))
    assert f'<a href="cells/{cells[1].cell_id}.json">reused from {cells[1].cell_id}</a>' in page
    assert " reused from ../elsewhere<" in page and 'href="cells/../elsewhere.json"' not in page
