"""Where verl's tests come from: the release's sdist (find-links, the index's page, the cache), a git revision
(refused or skipped with the reason where it cannot be had), and the folder they run in."""
from __future__ import annotations

import hashlib
import json
import os

import pytest
from verl_suite_helpers import VERSION, fake_sdist, fake_verl

from harness.checks.verl_tests import source


@pytest.fixture
def no_index(monkeypatch):
    """No find-links and an index that must not be asked."""
    for name in ("UV_FIND_LINKS", "PIP_FIND_LINKS", "HARNESS_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX_URL",
                 "PIP_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(source.pipconfig, "pip_config", lambda: {})


def test_the_sdist_comes_from_find_links_once_then_from_the_cache(tmp_path, no_index):
    links = tmp_path / "wheels"
    fake_sdist(links)
    environ = {"UV_FIND_LINKS": str(links)}
    first = source._sdist(VERSION, tmp_path / "cache", environ)
    assert first.kind == "sdist" and str(links) in first.where
    (links / f"verl-{VERSION}.tar.gz").unlink()
    again = source._sdist(VERSION, tmp_path / "cache", environ)
    assert again.tests == first.tests and "cached" in again.where


def test_the_sdist_comes_from_the_index_page_with_its_hash_checked(tmp_path, no_index):
    files = tmp_path / "files"
    sdist = fake_sdist(files)
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    page = tmp_path / "simple" / "verl"
    page.mkdir(parents=True)
    page.joinpath("index.html").write_text(f'<a href="{sdist.as_uri()}#sha256={digest}">verl-{VERSION}.tar.gz</a>')
    origin = source._sdist(VERSION, tmp_path / "cache", {"UV_DEFAULT_INDEX": (tmp_path / "simple").as_uri()})
    assert origin.tests.read_bytes() == sdist.read_bytes()

    page.joinpath("index.html").write_text(f'<a href="{sdist.as_uri()}#sha256={"0" * 64}">x</a>')
    with pytest.raises(source.Unavailable, match="sha256"):
        source._sdist(VERSION, tmp_path / "other-cache", {"UV_DEFAULT_INDEX": (tmp_path / "simple").as_uri()})


def test_a_release_without_an_sdist_or_an_unreachable_index_is_unavailable(tmp_path, no_index):
    (tmp_path / "simple" / "verl").mkdir(parents=True)
    (tmp_path / "simple" / "verl" / "index.html").write_text('<a href="verl-9.9.0-py3-none-any.whl">w</a>')
    with pytest.raises(source.Unavailable, match="is not on the package index"):
        source._sdist(VERSION, tmp_path / "c1", {"UV_DEFAULT_INDEX": (tmp_path / "simple").as_uri()})
    with pytest.raises(source.Unavailable, match="cannot be reached"):
        source._sdist(VERSION, tmp_path / "c2", {"UV_DEFAULT_INDEX": "http://127.0.0.1:9/simple"})


def test_the_suite_folder_holds_only_the_sdists_tests_and_a_link_to_the_installed_verl(tmp_path, no_index):
    site = fake_verl(tmp_path / "site")
    origin = source.Origin("sdist", "x", fake_sdist(tmp_path / "links"))
    root = source.prepare(origin, site / "verl", tmp_path / "suite")
    assert (root / "tests" / "test_math_on_cpu.py").is_file() and (root / "pytest.ini").is_file()
    assert (root / "verl").resolve() == (site / "verl").resolve()  # never the sdist's own copy of verl
    assert not (root / "setup.py").exists()
    assert "tests/utils/test_reads_source_on_cpu.py" in source.suite_files(root)


@pytest.mark.parametrize("direct_url, message", [
    ({"url": "file:///somewhere/verl", "vcs_info": {"vcs": "git", "commit_id": "a" * 40}}, "does not fetch"),
    ({"url": "https://github.com/volcengine/verl", "vcs_info": {"vcs": "git", "commit_id": "--upload-pack=x"}},
     "does not fetch"),
    ({"url": "https://github.com/volcengine/verl", "vcs_info": {"vcs": "hg", "commit_id": "a" * 40}},
     "does not fetch"),
])
def test_a_git_install_the_check_cannot_fetch_safely_is_named_not_run(tmp_path, monkeypatch, direct_url, message):
    monkeypatch.setattr(source, "installed_origin", lambda: direct_url)
    with pytest.raises(source.Unavailable, match=message):
        source.locate(VERSION, tmp_path)


def test_an_unreachable_git_revision_is_a_skip_naming_it(tmp_path, monkeypatch):
    url, commit = "https://github.com/volcengine/verl", "b" * 40
    monkeypatch.setattr(source, "installed_origin", lambda: {"url": url, "vcs_info": {"vcs": "git",
                                                                                     "commit_id": commit}})
    monkeypatch.setenv("GIT_ALLOW_PROTOCOL", "file")  # https refused: as a runner without a route to the host
    with pytest.raises(source.Unavailable, match=f"pins verl at {url}@{commit}; this runner cannot take its tests"):
        source.locate(VERSION, tmp_path)
    assert not (tmp_path / "git" / commit).exists()


def test_a_local_folder_install_runs_that_folders_tests(tmp_path, monkeypatch):
    (tmp_path / "checkout" / "tests").mkdir(parents=True)
    monkeypatch.setattr(source, "installed_origin", lambda: {"url": (tmp_path / "checkout").as_uri(),
                                                             "dir_info": {"editable": True}})
    origin = source.locate(VERSION, tmp_path / "cache")
    assert origin.kind == "folder" and origin.tests == tmp_path / "checkout"
    assert json.dumps(origin.where) and os.path.isdir(origin.tests / "tests")
