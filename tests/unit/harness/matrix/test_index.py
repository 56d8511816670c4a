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


def test_a_pin_read_from_another_releases_declarations_is_its_finding_not_bad_input(tmp_path, monkeypatch):
    """verl 0.9.1's [vllm] extra pins vllm 0.24.0; where the index lacks it, the cell's install verdict says so
    (pre-flight, run), and the matrix is not refused. A release the matrix writes itself that the index lacks is."""
    from verl_index import verl_index, write_matrix

    from harness import matrix
    from harness.matrix.index import check_cells

    fake = verl_index(tmp_path, monkeypatch)  # no vllm on this index
    m = matrix.load(write_matrix(tmp_path, '[[include]]\nverl = "0.9.1"\nverl_extra = "vllm"\n'
                                           'vllm = "as-pinned-by-verl"\ntransformers = "5.9.0"\n'))
    cell = next(c for c in m.cells if "verl" in c.axes)
    assert cell.axes["vllm"] == "0.24.0" and "vllm" in cell.derived_axes
    check_cells([cell], m.locate, PackageIndex(fake.url, []))  # not raised: vllm 0.24.0 is verl's pin
    written = matrix.load(write_matrix(tmp_path, '[[include]]\nverl = "0.9.1"\ntransformers = "5.10.0"\n'))
    with pytest.raises(InputError, match="transformers 5.10.0 does not exist"):
        check_cells(written.cells, written.locate, PackageIndex(fake.url, []))
