"""report.html (html/page.py): every in-page link lands on an element, and the plots are numbered as the details
link them."""
from __future__ import annotations

import re

from cpu_like_cells import cpu_like_cells

from harness.report.build import build_report
from harness.report.html.page import to_html
from harness.report.json_files import to_json
from harness.report.synthetic import synthetic_cells


def test_every_in_page_link_lands_on_an_element():
    from harness.report.synthetic import hostile_cells, synthetic_cells

    for cells in (cpu_like_cells(), synthetic_cells(120, seed=3), hostile_cells()):
        page = to_html(build_report(cells))
        ids = set(re.findall(r' id="([^"]+)"', page))
        targets = set(re.findall(r' href="#([^"]+)"', page))
        assert targets and targets <= ids, targets - ids


def test_plot_numbers_follow_the_table_and_every_plot_is_drawn():
    report = build_report(synthetic_cells(200, seed=12))
    page = to_html(report)
    links = re.findall(r'href="#(plot-\d+)"', page)
    figures = re.findall(r'<figure id="(plot-\d+)"><svg', page)
    assert links == figures == [f"plot-{i}" for i in range(len(figures))]
    assert len(figures) == sum(e.plot is not None for row in report.rows for e in row.entries.values()) > 0
    assert to_json(report)["rows"] and page == to_html(report)  # deterministic
