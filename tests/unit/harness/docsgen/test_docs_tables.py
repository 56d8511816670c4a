"""The docs' tables are generated from the code: a page that disagrees with the code fails here (and in
`nox -s docs`), and each generator follows what it describes."""
from __future__ import annotations

import gc
import shutil

import pytest

from harness import errors
from harness.checks import CHECKS, CheckSpec
from harness.docsgen import figures, pages, tables


def test_every_generated_table_in_the_repository_matches_the_code():
    assert pages.stale() == [], "run `python -m harness.docsgen`"


def test_every_page_with_a_table_is_found():
    named = {m.group(2) for page in pages.pages() for m in pages.BLOCK.finditer(page.read_text())}
    assert {"checks", "checks-from-readme", "sessions", "exit-statuses", "measured"} <= named


def _copy(tmp_path):
    shutil.copy(pages.ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(pages.ROOT / "docs", tmp_path / "docs")
    return tmp_path


def test_a_hand_edited_table_is_stale(tmp_path):
    root = _copy(tmp_path)
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace("builds a tiny Qwen3.5 text model", "builds a model", 1))
    found = pages.stale(root)
    assert [(item.page.name, item.block) for item in found] == [("README.md", "checks-from-readme")]
    assert "python -m harness.docsgen" in str(found[0])


def test_a_check_added_to_the_registry_makes_the_pages_stale(tmp_path, monkeypatch):
    root = _copy(tmp_path)
    monkeypatch.setitem(CHECKS, "new-check", CheckSpec("new-check", "harness.checks.new_check", "answers something"))
    assert {item.block for item in pages.stale(root)} == {"checks", "checks-from-readme", "checks-from-docs"}
    pages.write(root)
    assert pages.stale(root) == []
    assert "[`new-check`](docs/checks/new-check.md)" in (root / "README.md").read_text()


def test_an_unknown_block_is_an_error():
    with pytest.raises(ValueError, match="unknown generated block 'nope'"):
        pages.render("<!-- generated: nope -->\n<!-- end generated -->", {})


def test_exit_statuses_come_from_the_error_classes():
    table = tables.exit_status_table()
    for cls in (errors.InputError, errors.EnvironmentMissing, errors.ResultsError, errors.NewFailures,
                errors.BaselineChanged, errors.ResultsBusy):
        assert f"| {cls.exit_code} " in table.replace("|        ", "| ").replace("|       ", "| ")
    assert "130" in table and "interrupted" in table

    class Exploded(errors.HarnessError):  # a class of the harness's own: its status joins the table
        """The test's own error; exit 9."""

        exit_code = 9

    Exploded.__module__ = "harness.errors"
    assert "| Exploded" in tables.exit_status_table().replace("|        9 ", "")
    Exploded.__module__ = __name__  # a test's (or a plugin's) subclass is not the harness's: left out
    assert "Exploded" not in tables.exit_status_table()
    del Exploded
    gc.collect()


def test_sessions_come_from_the_nox_listing():
    listing = [{"session": "tests", "description": "The tests.\n\nMore text.", "tags": ["all", "tests"]},
               {"session": "cell-cpu(x)", "description": "One cell.", "tags": ["all", "cell"]}]
    table = tables.sessions_table(listing)
    assert "`tests`" in table and "The tests." in table and "More text" not in table
    assert "cell-cpu(x)" not in table and "cell-<matrix>(<cell id>)" in table


def test_measured_figures_carry_machine_and_date_and_say_what_is_missing():
    data = {"date": "2026-01-02", "machine": {"cpu": "Some CPU", "cores": 2},
            "report": {"render_cpu_s": 1.5, "html_bytes": 2**20, "date": "2026-01-01"}}
    table = figures.measured_table(data)
    row = next(line for line in table.splitlines() if "10,000" in line)
    assert "1.50 s" in row and "1.0 MiB" in row and "2026-01-01" in row and "Some CPU, 2 cores" in row
    assert "not measured" in table  # the groups this data lacks
    partial = figures.measured_table({**data, "report": {"date": "2026-01-01"}})
    assert "CPU time, every format: not measured" in partial


def test_the_measured_page_shows_the_file_figures():
    current = figures.load()
    assert f"{current['grpo_vs_trl']['summary']['speedup_to_threshold']:.2f}x" in (
        pages.ROOT / "docs" / "measured.md").read_text()


def test_every_check_has_a_page_with_its_docstring():
    for name in CHECKS:
        if not CHECKS[name].module.startswith("harness.checks."):
            continue
        page = pages.ROOT / "docs" / "checks" / f"{name}.md"
        assert page.is_file(), f"no page for check {name}"
        assert f"<!-- generated: check-{name} -->" in page.read_text(), f"{page.name} lacks the check's docstring"
    assert "Fails, naming the transformers version" in tables.check_doc("stack-smoke")
