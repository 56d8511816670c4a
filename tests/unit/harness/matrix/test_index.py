"""Release checks against a package index: a file:// simple index and find-links directories."""
import pytest

from harness.errors import InputError
from harness.matrix.index import PackageIndex, check_releases


@pytest.fixture
def index(tmp_path):
    simple = tmp_path / "simple"
    (simple / "transformers").mkdir(parents=True)
    (simple / "transformers" / "index.html").write_text(
        '<a href="../../f/transformers-5.3.0-py3-none-any.whl#sha256=00">x</a>'
        '<a href="transformers-5.9.0.tar.gz">y</a><a href="unrelated-1.0.tar.gz">z</a>')
    links = tmp_path / "wheels"
    links.mkdir()
    (links / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    return PackageIndex(f"file://{simple}", [str(links)])


def test_versions_come_from_the_index_and_find_links(index):
    assert {str(v) for v in index.versions("transformers")} == {"5.3.0", "5.9.0"}
    assert index.has("torch", "2.13.0")  # 2.13.0 matches the local build 2.13.0+cpu
    assert not index.has("transformers", "5.4.0")


def test_a_missing_release_is_an_input_error_naming_it(index):
    with pytest.raises(InputError, match="transformers 5.4.0 does not exist"):
        check_releases({"transformers": {"5.3.0", "5.4.0"}}, "m.toml", index)


def test_a_missing_package_is_an_input_error(index):
    with pytest.raises(InputError, match="package 'no-such-pkg' not found"):
        check_releases({"no-such-pkg": {"1.0"}}, "m.toml", index)


def test_existing_releases_pass(index):
    check_releases({"transformers": {"5.3.0"}, "torch": {"2.13.0"}}, "m.toml", index)
