"""The docs' generated blocks: a page that disagrees with the code fails here (and in `nox -s docs`), a hand edit
or a new check makes a page stale, and rewriting the pages makes them agree."""
from __future__ import annotations

import dataclasses

import pytest

from harness.checks import CHECKS, CheckSpec
from harness.docsgen import pages


def test_every_generated_table_in_the_repository_matches_the_code():
    assert pages.stale() == [], "run `python -m harness.docsgen`"


def test_every_page_with_a_table_is_found():
    named = {m.group(2) for page in pages.pages() for m in pages.BLOCK.finditer(page.read_text())}
    assert {"checks", "checks-from-readme", "sessions", "exit-statuses", "measured"} <= named


def test_a_hand_edited_table_is_stale(docs_copy):
    root = docs_copy
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace("builds a tiny Qwen3.5 text model", "builds a model", 1))
    found = pages.stale(root)
    assert [(item.page.name, item.block) for item in found] == [("README.md", "checks-from-readme")]
    assert "python -m harness.docsgen" in str(found[0])


def test_a_check_added_to_the_registry_makes_the_pages_stale(docs_copy, monkeypatch):
    root = docs_copy
    monkeypatch.setitem(CHECKS, "new-check", CheckSpec("new-check", "harness.checks.new_check", "answers something"))
    assert {item.block for item in pages.stale(root)} == {"checks", "checks-from-readme", "checks-from-docs",
                                                          "verl-counterparts"}
    pages.write(root)
    assert pages.stale(root) == []
    assert "[`new-check`](docs/checks/new-check.md)" in (root / "README.md").read_text()


def test_a_checks_verl_counterpart_is_in_the_verl_page(docs_copy, monkeypatch):
    """docs/verl.md's table says which checks run verl's code in a verl row, from CheckSpec.verl."""
    root = docs_copy
    spec = dataclasses.replace(CHECKS["offload-regression"], verl="apply_fsdp2, fsdp2_load_full_state_dict")
    monkeypatch.setitem(CHECKS, "offload-regression", spec)
    assert [(item.page.name, item.block) for item in pages.stale(root)] == [("verl.md", "verl-counterparts")]
    pages.write(root)
    page = (root / "docs" / "verl.md").read_text()
    assert "| [`offload-regression`](checks/offload-regression.md) | apply_fsdp2, fsdp2_load_full_state_dict" in page
    assert "| [`stack-smoke`](checks/stack-smoke.md)" in page and "no verl counterpart" in page


def test_an_unknown_block_is_an_error():
    with pytest.raises(ValueError, match="unknown generated block 'nope'"):
        pages.render("<!-- generated: nope -->\n<!-- end generated -->", {})
