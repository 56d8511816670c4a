"""Figures written by hand outside docs/measured.md fail `python -m harness.docsgen --check` (no figure is written by
hand anywhere in the docs); a setting is no figure."""
from __future__ import annotations

from harness.docsgen import __main__ as docsgen_main
from harness.docsgen import handwritten, pages


def test_the_repository_s_docs_have_no_figure_written_by_hand():
    assert handwritten.by_hand() == [], "\n".join(map(str, handwritten.by_hand()))


def test_a_measured_time_written_on_a_page_is_found_with_its_page_and_line(docs_copy):
    root = docs_copy
    page = root / "docs" / "running.md"
    lines = page.read_text().splitlines()
    lines[2:2] = ["Importing verl costs about 13 s of CPU time (27 to 62 s of wall time here).",
                  "The whole check took 31.5 s; ~2 s of it is the model. A table: | x | takes 0.35 s |"]
    page.write_text("\n".join(lines) + "\n")
    found = handwritten.by_hand(root)
    assert [(f.page.as_posix(), f.line) for f in found] == [("docs/running.md", 3)] * 2 + [("docs/running.md", 4)] * 3
    assert [f.text for f in found] == ["costs about 13 s", "27 to 62 s of wall", "took 31.5 s", "~2 s", "takes 0.35 s"]
    assert "docs/running.md:3: a figure written by hand ('costs about 13 s')" in str(found[0])


def test_settings_and_the_measured_page_are_not_figures_by_hand(docs_copy):
    root = docs_copy
    (root / "docs" / "running.md").write_text(
        "A per-test timeout (300 s), results older than 10 minutes, a 1 GiB KV cache, a 64 MiB wheelhouse, "
        "`timeout = 600` and the checks' 900 s timeout are settings.\n")
    (root / "docs" / "measured.md").write_text("The run took 724.6 s, about 12 s of CPU time.\n")
    assert handwritten.by_hand(root) == []


def test_the_docs_session_fails_on_a_figure_by_hand(docs_copy, monkeypatch, capsys):
    root = docs_copy
    with (root / "docs" / "verl.md").open("a") as page:
        page.write("\nImporting verl takes about 2 s.\n")
    in_copy = handwritten.by_hand
    monkeypatch.setattr(handwritten, "by_hand", lambda: in_copy(root))
    monkeypatch.setattr(pages, "stale", lambda root=root: [])
    assert docsgen_main.main(["--check"]) == 1
    assert "docs/verl.md:" in capsys.readouterr().err
