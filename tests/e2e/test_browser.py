"""report.html in a real browser (headless Chromium from Debian, driven by Playwright): what a person sees.

The report of a real small run (tests/resources/matrices/browser.toml: a version without Qwen3.5, with a
declared known failure, and the newest) and of hostile input. Asserts: the verdicts and marks are on the
first screen without scrolling, each mark is drawn on a coloured square and is what is under the pointer
there, a click opens the entry's details, and no text from a result file runs as a script. Screenshots go
to the test's temporary directory (and to REPORT_SCREENSHOTS, when set, to look at them).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from report_helpers import expand_shared_plot_parts

from harness.report import build_report, to_html, write_report
from harness.report.synthetic import HOSTILE_TITLE, hostile_cells, synthetic_cells

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 800}
playwright = pytest.importorskip("playwright.sync_api", reason="Playwright's Python package is not installed")
pytestmark = [pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install chromium)"),
              pytest.mark.slow]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """One Chromium for the module; each test opens its own page."""
    with playwright.sync_playwright() as driver:
        context = driver.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("profile")), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport=VIEWPORT)
        yield context
        context.close()


class Seen:
    """A page opened from a file, recording every dialog (alert) a script would open."""

    def __init__(self, browser, path: Path):
        self.dialogs: list[str] = []
        self.page = browser.new_page()
        self.page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        self.page.goto(path.as_uri())

    def screenshot(self, path: Path, **kw) -> None:
        path.write_bytes(self.page.screenshot(**kw))
        assert path.stat().st_size > 1000
        if os.environ.get("REPORT_SCREENSHOTS"):
            shutil.copy(path, Path(os.environ["REPORT_SCREENSHOTS"]) / path.name)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """report.html of a real run of the browser fixture matrix (two cells, two cheap checks)."""
    out = tmp_path_factory.mktemp("run")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(ROOT / "tests/resources/matrices/browser.toml"),
                           "--out", str(out), "--env-root", str(out / "envs"), "--no-index-check"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def on_first_screen(locator) -> bool:
    box = locator.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= VIEWPORT["height"] \
        and box["x"] + box["width"] <= VIEWPORT["width"]


def test_a_real_run_reads_at_a_glance_and_opens_details_on_click(browser, real_run, tmp_path):
    support = json.loads((real_run / "support.json").read_text())
    seen = Seen(browser, real_run / "report.html")
    page = seen.page
    seen.screenshot(tmp_path / "report-first-screen.png")

    # The answer, per version combination, on the first screen: the verdict words and every mark.
    verdicts = page.locator("table.glance a.k")
    assert verdicts.count() == len(support["combinations"]) == 2
    expected = {"known": "known failure", "works": "works", "patched": "works with the trainer's patches",
                "broken": "broken"}
    for i, combination in enumerate(support["combinations"]):
        assert verdicts.nth(i).inner_text() == expected[combination["verdict"]]
        assert on_first_screen(verdicts.nth(i))
    assert support["combinations"][0]["verdict"] == "known"  # transformers 5.1.0: the declared known failure
    marks = page.locator("table.glance a.m")
    assert marks.count() == sum(len(c["checks"]) for c in support["combinations"]) == 4
    colours = set()
    for i in range(marks.count()):
        mark = marks.nth(i)
        assert on_first_screen(mark) and mark.inner_text() in "PFASXTCE"
        colours.add(mark.evaluate("e => getComputedStyle(e).backgroundColor"))
        # What a person points at is the mark itself: nothing covers it.
        assert mark.evaluate("e => { const r = e.getBoundingClientRect();"
                             " return document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2) === e; }")
        assert "rgba(0, 0, 0, 0)" not in colours
    assert len(colours) >= 2  # the xfail and the passing marks differ in colour, not only in letter

    # Every entry's details are closed, and a click on a mark opens them at that entry.
    assert page.locator("details[open]").count() == 0
    mark = marks.first
    target = mark.get_attribute("href")
    mark.click()
    assert page.locator(target).evaluate("e => e.closest('details').open")
    assert page.locator(target).is_visible()
    text = page.locator(target).inner_text()
    assert "known failure" in text and "repro: python -m harness repro" in text and "log" in text
    seen.screenshot(tmp_path / "report-details-open.png")
    # A click on a row's summary line opens and closes it, as any <details> does.
    summary = page.locator("details summary").nth(1)
    summary.click()
    assert page.locator("details").nth(1).evaluate("e => e.open")
    summary.click()
    assert not page.locator("details").nth(1).evaluate("e => e.open")
    assert seen.dialogs == []


def test_hostile_text_is_shown_and_never_runs(browser, tmp_path):
    path = tmp_path / "report.html"
    report = build_report(hostile_cells(), title=HOSTILE_TITLE, notes=["<script>window.pwned=5</script>"])
    path.write_text(to_html(report))
    seen = Seen(browser, path)
    page = seen.page
    seen.screenshot(tmp_path / "hostile.png", full_page=True)
    assert page.title() == HOSTILE_TITLE  # the title is the text, not a script's doing
    assert page.evaluate("() => typeof window.pwned") == "undefined"
    page.locator("details").first.locator("summary").click()
    page.locator("table.glance a.m").last.click()
    page.mouse.move(300, 300)
    assert page.evaluate("() => typeof window.pwned") == "undefined" and seen.dialogs == []
    body = page.inner_text("body")
    assert "<script>window.pwned=1;document.title='pwned'</script>" in body
    assert page.locator("script, iframe, img, object, embed").count() == 0


def figure_shots(browser, path: Path, text: str, count: int = 4) -> list[bytes]:
    path.write_text(text)
    figures = Seen(browser, path).page.locator("figure")
    assert figures.count() >= count
    return [figures.nth(i).screenshot() for i in range(count)]


def test_plots_drawn_from_shared_parts_look_as_if_drawn_whole(browser, tmp_path):
    """Band, reference and axes shown by <use> from one shared copy: the same pixels as drawn in each plot."""
    page = to_html(build_report(synthetic_cells(60, seed=5)))
    assert page.count("<use ") > page.count('<g id="pp')
    whole = figure_shots(browser, tmp_path / "whole.html", expand_shared_plot_parts(page))
    assert figure_shots(browser, tmp_path / "shared.html", page) == whole
    # The comparison sees a difference: a plot that shows another plot's band and axes.
    swapped = page.replace('<use href="#pp0"/>', '<use href="#pp2"/>')
    assert figure_shots(browser, tmp_path / "swapped.html", swapped) != whole


def test_the_page_stands_alone_in_the_browser(browser, tmp_path):
    """No request leaves the page: every resource is inline (a remote or relative load would be counted)."""
    from harness.results.records import write_json_atomic

    for cell in synthetic_cells(40, seed=5):
        write_json_atomic(tmp_path / "cells" / f"{cell.cell_id}.json", cell.to_dict())
    write_report(tmp_path, formats=["html"])
    requests: list[str] = []
    page = browser.new_page()
    page.on("request", lambda request: requests.append(request.url))
    page.goto((tmp_path / "report.html").as_uri())
    page.wait_for_load_state("load")
    assert requests == [(tmp_path / "report.html").as_uri()]
