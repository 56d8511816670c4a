"""The first screen of report.html (html/first_screen.py): the grid has a line per backend, grouped under the first
differing axis, one column per check name, marks that link to their entries, and verdicts that link to the
check that decided them."""
from __future__ import annotations

import re

from cpu_like_cells import cpu_like_cells

from harness.report.build import build_report
from harness.report.html.first_screen import check_names, groups
from harness.report.html.page import to_html
from harness.report.model import STATUS_LETTERS
from harness.report.row_verdicts import lines
from harness.report.safe_text import escape_html
from harness.report.synthetic import synthetic_cells
from harness.results.records import Status


def test_the_glance_table_comes_first_with_a_line_per_backend_grouped_under_the_first_differing_axis():
    cells = synthetic_cells(120, seed=21)
    for cell in cells:
        cell.axes["torch"] = "2.13.0"  # the same in every row: listed once, not a column
    report = build_report(cells)
    page = to_html(report)
    glance = page[page.index('<table class="glance">'):page.index("</table>")]
    assert page.index("Use these pins") < page.index('<table class="glance">') < page.index("Generated from")
    assert page.index("version combinations:") < page.index('<table class="glance">')
    assert "Same in every row: torch 2.13.0" in page and "torch 2.13.0" not in glance
    groups = re.findall(r'<tr class="grp"><th colspan="\d+" scope="rowgroup"><span>device (\w+)', glance)
    assert groups == sorted(set(groups), key=groups.index) and set(groups) == {c.axes["device"] for c in cells}
    # One check column per check name, not one set per backend.
    heads = re.findall(r'<th scope="col" class="c"><span>([^<]+)</span>', glance)
    assert sorted(heads) == sorted({c.check for c in report.columns})
    # A line per (row, backend, model), labelled by its backend.
    labels = re.findall(r'<tr id="g(\d+)-(\d+)"><th scope="row" class="lbl">([^<]*)</th>', glance)
    assert len(labels) == sum(len({(report.columns[i].backend, report.columns[i].model) for i in row.entries})
                              for row in report.rows)
    for _row, first, label in labels:
        column = report.columns[int(first)]
        assert label.startswith(f"{column.backend} &#183; {column.model}")
    marks = re.findall(r'<a class="m s-(\w+)" href="#e(\d+)-(\d+)" aria-label="([^"]*)">([A-Z])</a>', glance)
    assert len(marks) == sum(len(row.entries) for row in report.rows)
    for status, row, column, name, letter in marks:
        entry = report.rows[int(row)].entries[int(column)]
        assert status == entry.status.value and letter == STATUS_LETTERS[entry.status]
        # The accessible name: check, status and reason.
        assert name == escape_html(f"{report.columns[int(column)].check}: {status}"
                                   + (f": {entry.message}" if entry.message else ""))
        assert f'<tr id="e{row}-{column}">' in page  # the mark's target is its entry in the details


def test_the_grid_has_a_line_per_backend_and_one_column_per_check_name():
    report = build_report(cpu_like_cells())
    assert len(check_names(report)) == 9 < len(report.columns)  # not one set of check columns per backend
    found = lines(report)
    assert len(found) == len(report.rows) == 27  # each combination ran on one backend here
    heading = {g.heading: g for g in groups(report)}
    newest = heading["transformers 5.23.0; megatron: tensordict 0.15.3, mbridge 0.15.1"]
    labels = [line.label for line in newest.lines]
    assert "megatron · megatron_core 0.19.2 · python 3.12" in labels and "fsdp · tensordict 0.10.0" in labels
    assert all("device" not in label and "torch " not in label for label in labels)  # the same everywhere


def test_a_verdict_links_to_the_check_that_decided_it():
    report = build_report(cpu_like_cells())
    page = to_html(report)
    for line in lines(report):
        link = re.search(rf'<tr id="{line.anchor}">.*?<a class="k k-(\w+)" href="#([\w-]+)">', page).groups()
        failing = [i for i, e in line.entries.items() if e.status in (Status.FAIL, Status.ERROR, Status.XFAIL)]
        assert link == (line.verdict.kind, f"e{line.row}-{failing[0]}" if failing else f"r{line.row}")
