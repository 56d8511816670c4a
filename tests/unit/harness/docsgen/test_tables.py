"""Each table follows what it describes: the exit statuses their error classes, the sessions the nox listing (each
docstring's first sentence), the checks their registry and their module docstrings."""
from __future__ import annotations

import gc

from harness import errors
from harness.checks import CHECKS
from harness.docsgen import pages, tables


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


def test_a_docstring_gives_its_first_sentence_whole():
    """A sentence that spans lines, or holds "e.g." or a file name, is not cut; a second sentence is."""
    doc = """Resolve every cell's lock (metadata only: nothing is downloaded or built) and
    record its verdict under reports/<matrix>/preflight/, e.g. for the nightly. Answers are kept.

    More text."""
    assert tables.first_sentence(doc) == ("Resolve every cell's lock (metadata only: nothing is downloaded or built) "
                                          "and record its verdict under reports/<matrix>/preflight/, e.g. for the "
                                          "nightly.")
    assert tables.first_sentence("No full stop") == "No full stop"


def test_the_sessions_table_reads_whole_docstrings_from_the_noxfile(tmp_path):
    (tmp_path / "noxfile.py").write_text('''import nox


@nox.session(name="tests-e2e", tags=["all"])
def e2e(session):
    """The end-to-end tests (cells, ranks), which
    take minutes. More."""


@nox.session
def lint(session):
    """ruff."""
''')
    docs = tables.session_docstrings(tmp_path / "noxfile.py")
    assert docs == {"tests-e2e": "The end-to-end tests (cells, ranks), which\ntake minutes. More.", "lint": "ruff."}
    table = tables.sessions_table([{"session": "tests-e2e", "description": docs["tests-e2e"], "tags": ["all"]}])
    assert "The end-to-end tests (cells, ranks), which take minutes." in table and "More" not in table


def test_every_check_has_a_page_with_its_docstring():
    for name in CHECKS:
        if not CHECKS[name].module.startswith("harness.checks."):
            continue
        page = pages.ROOT / "docs" / "checks" / f"{name}.md"
        assert page.is_file(), f"no page for check {name}"
        assert f"<!-- generated: check-{name} -->" in page.read_text(), f"{page.name} lacks the check's docstring"
    assert "Fails, naming the transformers version" in tables.check_doc("stack-smoke")
