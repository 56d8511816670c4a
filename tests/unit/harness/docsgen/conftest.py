"""A copy of the README and docs/ to edit in a test, so the repository's pages stay as they are."""
import shutil

import pytest

from harness.docsgen import pages


@pytest.fixture
def docs_copy(tmp_path):
    shutil.copy(pages.ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(pages.ROOT / "docs", tmp_path / "docs")
    return tmp_path
