"""A verl row that pins a release outside verl's declared range installs exactly those pins through uv's
--override, computed from verl's metadata when the matrix expands (or when `newest` resolves it), shown in its
install order and recorded; inside the range there is no override, and nothing is guessed."""
from __future__ import annotations

import datetime as dt
import json
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

import pytest
from verl_index import verl_index, write_matrix

from harness import matrix
from harness.envs import cellenv
from harness.errors import InputError
from harness.matrix import crossing
from harness.matrix.index import PackageIndex
from harness.matrix.metadata import MetadataSource
from harness.matrix.newest import Resolver, resolve_cells

DAY = dt.date(2026, 11, 28)


def _cells(tmp_path, body):
    return {c.id: c for c in matrix.load(write_matrix(tmp_path, body)).cells}


def test_pins_outside_verls_range_get_an_override_and_pins_inside_get_none(tmp_path, monkeypatch):
    verl_index(tmp_path, monkeypatch)
    cells = _cells(tmp_path, '[[include]]\nverl = "0.9.1"\ntransformers = ["5.9.0", "5.23.0"]\n'
                             'tensordict = ["0.10.0", "0.15.3"]\n')
    inside = cells["fsdp-text-verl0.9.1-tf5.9.0-torch2.13.0-td0.10.0"]
    assert inside.install.outside == () and inside.install.overrides() == []
    assert inside.install_order() == ["uv venv --python 3.11",
                                      "uv pip install verl==0.9.1 torch==2.13.0 transformers==5.9.0 tensordict==0.10.0"]
    both = cells["fsdp-text-verl0.9.1-tf5.23.0-torch2.13.0-td0.15.3"]
    assert both.install.overrides() == ["transformers==5.23.0", "tensordict==0.15.3"]
    assert [o.text() for o in both.install.outside] == [
        "transformers 5.23.0 (verl 0.9.1 declares transformers!=5.6.0,<5.11,>=5.5.3)",
        "tensordict 0.15.3 (verl 0.9.1 declares tensordict!=0.9.0,<=0.10.0,>=0.8.0)"]
    order = both.install_order()[1]
    assert order.startswith("uv pip install --override overrides.txt verl==0.9.1 ")
    assert "transformers==5.23.0: outside verl 0.9.1's declared transformers!=5.6.0,<5.11,>=5.5.3" in order
    only_td = cells["fsdp-text-verl0.9.1-tf5.9.0-torch2.13.0-td0.15.3"]
    assert [o.distribution for o in only_td.install.outside] == ["tensordict"]
    # the ranges were read once and cached beside the matrix, as the derived values are
    assert (tmp_path / "metadata" / "verl-0.9.1.json").is_file()


def test_the_rows_extra_is_part_of_the_range(tmp_path, monkeypatch):
    """verl[cpu] pins torch==2.11.0: the matrix's torch 2.13.0 is outside it, while plain verl sets no torch."""
    verl_index(tmp_path, monkeypatch)
    cells = _cells(tmp_path, '[[include]]\nverl = "0.9.1"\nverl_extra = ["cpu", "fsdp"]\n')
    cpu = cells["fsdp-text-verl0.9.1-extra-cpu-tf5.9.0-torch2.13.0-td0.10.0"]
    assert [o.text() for o in cpu.install.outside] == ["torch 2.13.0 (verl[cpu] 0.9.1 declares torch==2.11.0)"]
    assert cpu.requirements[0] == "verl[cpu]==0.9.1"
    assert cells["fsdp-text-verl0.9.1-extra-fsdp-tf5.9.0-torch2.13.0-td0.10.0"].install.outside == ()


def test_a_release_whose_requirements_cannot_be_read_is_an_error_not_a_row_without_overrides(tmp_path, monkeypatch):
    fake = verl_index(tmp_path, monkeypatch)
    (fake.files / "verl-0.9.1-py3-none-any.whl").rename(fake.files / "verl-0.9.1.tar.gz")  # an sdist only
    fake._write_pages()
    with pytest.raises(InputError) as caught:
        _cells(tmp_path, '[[include]]\nverl = "0.9.1"\ntransformers = "5.23.0"\n')
    message = str(caught.value)
    assert "m.toml" in message and "include.verl" in message and "\n" not in message
    assert "verl 0.9.1: its declared requirements cannot be read (no wheel to read the requirements from)" in message


def test_a_git_revision_of_verl_gets_no_override(tmp_path, monkeypatch):
    """No index metadata to read: a pin outside the revision's range is the resolver's conflict, not a guess."""
    verl_index(tmp_path, monkeypatch)
    source = "git+https://github.com/verl-project/verl@" + "1" * 40
    cell, = [c for c in _cells(tmp_path, f'[[include]]\nverl = "{source}"\ntransformers = "5.23.0"\n').values()
             if "verl" in c.axes]
    assert cell.install.outside == () and cell.requirements[0] == f"verl @ {source}"


def test_a_newest_verl_is_judged_when_it_resolves(tmp_path, monkeypatch):
    """verl `newest` with transformers 5.23.0: the newest verl is taken (its range is crossed on purpose, not a
    misfit) and the override follows from the release it resolved to."""
    fake = verl_index(tmp_path, monkeypatch)
    m = matrix.load(write_matrix(tmp_path, '[[include]]\nverl = "newest"\ntransformers = "5.23.0"\n'))
    cell = next(c for c in m.cells if "verl" in c.axes)
    assert cell.install.outside == ()  # not known before the run resolves it
    index = PackageIndex(fake.url, find_links=[])
    resolver = Resolver(index, MetadataSource(index, tmp_path / "cache", DAY), DAY, {})
    resolved, = resolve_cells(m, [cell], resolver)
    assert resolved.axes["verl"] == "0.9.1"
    assert [o.pin for o in resolved.install.outside] == ["transformers==5.23.0"]
    assert "--override overrides.txt verl==0.9.1 " in resolved.install_order()[1]


def test_the_override_reaches_uv(tmp_path, monkeypatch):
    verl_index(tmp_path, monkeypatch)
    cell = _cells(tmp_path, '[[include]]\nverl = "0.9.1"\ntransformers = "5.23.0"\n')[
        "fsdp-text-verl0.9.1-tf5.23.0-torch2.13.0-td0.10.0"]
    read = []

    def run_logged(argv, log, env):
        if argv[1] == "venv":  # the environment uv would make
            (Path(argv[-1]) / "bin").mkdir(parents=True, exist_ok=True)
            (Path(argv[-1]) / "bin" / "python").write_text("")
        if "--override" in argv:  # what uv reads, when it reads it
            read.append((argv[argv.index("--override") + 2:], Path(argv[argv.index("--override") + 1]).read_text()))

    monkeypatch.setattr(cellenv, "_run_logged", run_logged)
    monkeypatch.setattr(cellenv, "uv_binary", lambda: "uv")
    monkeypatch.setattr(cellenv, "install_import_recorder", lambda env: None)
    cellenv.build(cell.id, cell.requirements, tmp_path / "envs", tmp_path / "setup.log",
                  overrides=tuple(cell.install.overrides()))
    (pins, override), = read
    assert override == "transformers==5.23.0\n" and "verl==0.9.1" in pins and "transformers==5.23.0" in pins


def test_out_of_range_reads_nothing_for_a_row_without_a_verl_release():
    class Unused:
        metadata = None

        def requirement_on(self, *args):
            raise AssertionError("no release to read")

    assert crossing.out_of_range({"verl": "newest", "transformers": "5.23.0"}, "3.11", Unused()) == ()
    assert crossing.out_of_range({"transformers": "5.23.0"}, "3.11", Unused()) == ()


@pytest.mark.verl
def test_the_cached_ranges_are_the_installed_verls_own():
    """In the verl-dev cell (nox -s tests-verl): what the rows' overrides were computed from is what the installed
    verl declares (matrices/metadata/verl-X.json against its own METADATA)."""
    pytest.importorskip("verl")
    try:
        installed = version("verl")
    except PackageNotFoundError:  # a stand-in module another test left importable, not the distribution
        pytest.skip("verl is not installed as a distribution")
    cached = Path(__file__).resolve().parents[4] / "matrices" / "metadata" / f"verl-{installed}.json"
    assert sorted(json.loads(cached.read_text())["requires_dist"]) == sorted(requires("verl"))
