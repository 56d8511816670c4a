"""The faster rendering paths say exactly what the plain ones did: every entry in report.html, the
all-ASCII page, whole-curve polylines, remembered reference curves, plain links, the paused collector."""
from __future__ import annotations

import gc
import math
import random
import re
from array import array
from html.parser import HTMLParser
from urllib.parse import quote

import pytest

from harness.report import build_report, html, plot, table, to_html, to_json
from harness.report.html import href
from harness.report.htmltext import escape_html
from harness.report.htmlverdicts import entry_order
from harness.report.support import STATUS_LETTERS
from harness.report.synthetic import synthetic_cells
from harness.report.table import entry_extras, safe_link


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
    entries = [entry for row in report.rows for cell in html._cells(row.entries) for _, entry in entry_order(cell)]
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


def test_plot_numbers_follow_the_table_and_every_plot_is_drawn():
    report = build_report(synthetic_cells(200, seed=12))
    page = to_html(report)
    links = re.findall(r'href="#(plot-\d+)"', page)
    figures = re.findall(r'<figure id="(plot-\d+)"><svg', page)
    assert links == figures == [f"plot-{i}" for i in range(len(figures))]
    assert len(figures) == sum(e.plot is not None for row in report.rows for e in row.entries.values()) > 0
    assert to_json(report)["rows"] and page == to_html(report)  # deterministic


def test_a_whole_curve_is_one_polyline_at_the_expected_pixels():
    values = (0.4, 0.55, 0.5, 0.9, 0.75, 0.8, 0.6)
    guide = plot._guide((), (), ())
    svg = plot.convergence_svg({"reward": values, "guide": guide}, label="c")
    (points,) = re.findall(r'<polyline class="rew" points="([^"]*)"/>', svg)
    low, high = plot._nice_range(min(values), max(values))
    sy = 128 / (high - low)
    expected = [f"{44 + i * 266 / 6:.1f},{10 + high * sy - v * sy:.1f}" for i, v in enumerate(values)]
    assert points.split() == expected
    # The same curve with a gap goes through the general path: the same pixels, in two lines.
    gap = plot.convergence_svg({"reward": (*values[:2], None, *values[3:]), "guide": guide}, label="c")
    runs = re.findall(r'<polyline class="rew" points="([^"]*)"/>', gap)
    assert [r.split() for r in runs] == [expected[:2], expected[3:]]


TRICKY_CURVES = [[1, 2.5], [True, 2.5], [1.0, 2.5], [0.5, "x"], [0.5, None], [0.5, float("nan")], [1e301, 0.5],
                 [0.5, [1]], [2.5, 1], [True, "x"], [1, "x"], (0.25, 0.5), [], [10**400, 0.5], [10**400, 10**400],
                 [0.5, float("inf")], [1j, 0.5], "ab", None, [0.5] * (plot.MAX_POINTS + 3)]


def _floats_as_first_written(value):
    """plot._floats before its fast path lost the array: the reference for it."""
    if not isinstance(value, (list, tuple)) or not value:
        return None
    value = tuple(value[:plot.MAX_POINTS])
    try:
        fast = array("d", value)
    except (TypeError, OverflowError):
        pass
    else:
        if not math.isnan(sum(fast)) and -1e300 < min(fast) and max(fast) < 1e300:
            return value
    out = tuple(float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and -1e300 < x < 1e300
                else None for x in value)
    return out if any(v is not None for v in out) else None


def test_a_curve_is_checked_as_it_was_first():
    for curve in TRICKY_CURVES:
        assert repr(plot._floats(curve)) == repr(_floats_as_first_written(curve)), curve
        checked = plot._checked(curve)
        if checked:
            assert checked[1] == plot._extent(checked[0])


def _fresh_series(metrics):
    plot._GUIDES.clear()
    plot._guide.cache_clear()
    plot._guide_with_band.cache_clear()
    return plot.convergence_series([metrics])


def test_a_remembered_guide_draws_what_a_fresh_one_draws():
    """Guides are remembered by the curves and band as given: equal inputs must draw alike, and a band that
    differs only in type (True is none, 1 is one) must not reuse another's."""
    bands = [0.1, 1, True, 1.0, None, float("nan"), -1, "x"]
    metrics = [{"reward_curve": [0.5, 0.7, 0.9, 0.8], "reference_curve": curve, "band": band}
               for curve in TRICKY_CURVES[:12] for band in bands]
    metrics += [{"reward_curve": [0.2, 0.4], "band_lower": [0.1, True], "band_upper": upper}
                for upper in ([0.3, 0.6], [0.3, "x"], [[0.3], 0.6])]
    drawn = {}
    for _ in range(2):
        for i in random.Random(1).sample(range(len(metrics)), len(metrics)):
            drawn.setdefault(i, []).append(plot.draw(plot.convergence_series([metrics[i]])))
    for i, m in enumerate(metrics):
        fresh = _fresh_series(m)
        assert drawn[i] == [plot.draw(fresh)] * 2, m
        # The reward's extent, carried from the check, is the one draw would work out.
        assert plot.draw({"reward": fresh["reward"], "guide": fresh["guide"]}) == plot.draw(fresh)
    # The comparison can fail: a band of True draws no band, a band of 1 does.
    with_true, with_one = (plot.draw(_fresh_series({**metrics[0], "band": b})) for b in (True, 1))
    assert with_true != with_one


def _safe_link_rules(path):
    """safe_link as first written: the reference for its fast path."""
    if not isinstance(path, str) or not path or len(path) > 1000 or path[0] in "/~" \
            or re.search(r"[\x00-\x1f\x7f:\\]", path):
        return None
    parts = [p for p in path.split("/") if p != "."]
    if not parts or "" in parts or ".." in parts:
        return None
    return "/".join(parts)


def test_safe_link_fast_path_follows_the_rules():
    rng = random.Random(3)
    alphabet = "ab._-~/:\\+=,\x00 é"
    paths = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(20_000)]
    paths += ["a/b.log", ".a/b", "a/..b", "a/b..", "..a", "a/.", "a/./b", "-a/_b", "a" * 1001, "a/" * 500 + "b"]
    for path in paths:
        assert safe_link(path) == _safe_link_rules(path), path


def test_the_collector_is_paused_only_while_a_report_is_built():
    cells = synthetic_cells(20, seed=1)
    assert gc.isenabled()
    build_report(cells)
    to_json(build_report(cells))
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    gc.disable()
    try:
        build_report(cells)
        assert not gc.isenabled()  # a caller's choice is kept
    finally:
        gc.enable()
    gc.freeze()  # a program that froze its objects (before forking workers) keeps them frozen
    try:
        frozen = gc.get_freeze_count()
        build_report(cells)
        assert gc.get_freeze_count() == frozen and gc.isenabled()
    finally:
        gc.unfreeze()


def test_the_collector_is_enabled_again_when_building_fails(monkeypatch):
    def fail(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(table, "_entry", fail)
    with pytest.raises(RuntimeError):
        build_report(synthetic_cells(5, seed=1))
    assert gc.isenabled()


def test_escape_html_is_html_escape_written_in_ascii():
    text = "<a href='x'>&</a> \u2705 \u00b7 \U0001f4a5 \u202e"
    assert escape_html(text) == "&lt;a href=&#x27;x&#x27;&gt;&amp;&lt;/a&gt; &#9989; &#183; &#128165; &#8238;"


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


def test_a_reused_result_names_and_links_the_cell_it_came_from():
    cells = synthetic_cells(6, seed=2)
    cells[0].checks[0].reused_from = cells[1].cell_id
    cells[2].checks[0].log = "./" + cells[2].checks[0].log  # safe, but not as written
    cells[3].checks[0].log = "cells/a b/x+y.log"  # safe, and its link must escape the space
    cells[2].checks[0].reused_from = "../elsewhere"  # not a safe link: named, not linked
    page = to_html(build_report(cells))
    assert f'<a href="cells/{cells[1].cell_id}.json">reused from {cells[1].cell_id}</a>' in page
    assert " reused from ../elsewhere<" in page and 'href="cells/../elsewhere.json"' not in page


def _has_more_than_status_message_log_and_lock(entry) -> bool:
    """Anything an Entry.plain entry must not have, or a log path that a link must escape."""
    return bool(entry.verdicts or entry.rejected_links or entry.known_failure or entry.original_status is not None
                or entry.emulated or entry.plot is not None or entry.failure_class or entry.flaky or entry.attempts
                or entry.change or entry.repro or entry.reused or (entry.log and href(entry.log) != entry.log))


def test_plain_entries_are_plain_and_render_as_the_full_path_does():
    cells = synthetic_cells(300, seed=4)
    cells[0].checks[0].reused_from = cells[1].cell_id
    cells[2].checks[0].log = "./" + cells[2].checks[0].log  # safe, but not as written
    cells[3].checks[0].log = "cells/a b/x+y.log"  # safe, and its link must escape the space
    changes = {(c.cell_id, c.checks[0].check): "fixed" for c in cells[::7]}  # a change alone makes an entry rare
    report = build_report(cells, changes=changes)
    entries = [e for row in report.rows for e in row.entries.values()]
    assert 0 < sum(e.plain for e in entries) < len(entries)
    rewritten = cells[2].checks[0].log[2:]  # plain is False where that is only slower: a log not shown as written
    for entry in entries:
        assert entry.plain is not _has_more_than_status_message_log_and_lock(entry) or entry.log == rewritten, entry
    page, data = to_html(report), to_json(report)
    for entry in entries:
        entry.plain = False  # always right, only slower
    assert to_html(report) == page and to_json(report) == data
