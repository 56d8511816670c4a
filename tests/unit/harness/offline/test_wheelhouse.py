"""The wheelhouse: only what the box lacks, the box's packages kept where they fit, and never above its size limit
(refused before anything is downloaded). Resolved against a local folder of tiny wheels: no network."""
from __future__ import annotations

import json

import pytest
from wheel_helpers import offline_index, wheel

from harness import cli
from harness.errors import InputError
from harness.offline import have

MATRIX = """
[matrix]
name = "box"
checks = ["stack-smoke"]
python = "3.11"

[axes]
torch = ["9.0.0"]
transformers = ["5.3.0"]
backend = ["fsdp"]
model = ["text"]
device = ["cuda"]

[[include]]
model = "vl"
requirements = ["bigpkg==1.0"]
"""
PLAIN = "fsdp-text-tf5.3.0-torch9.0.0-cuda"


@pytest.fixture
def setup(tmp_path, monkeypatch):
    links = tmp_path / "links"
    links.mkdir()
    wheel(links, "torch", "9.0.0")
    wheel(links, "transformers", "5.3.0", requires=("tokenizers<=0.22",))
    wheel(links, "tokenizers", "0.22.0")
    wheel(links, "tokenizers", "0.23.0")
    wheel(links, "numpy", "2.0.0")
    wheel(links, "bigpkg", "1.0", payload=2 * 1024 * 1024)
    offline_index(monkeypatch, links)
    (tmp_path / "box.toml").write_text(MATRIX)
    (tmp_path / "box.txt").write_text("# the box\ntorch==9.0.0+cu130\ntokenizers==0.23.0\nnumpy==2.0.0\n")
    return tmp_path


def _wheelhouse(tmp_path, *extra: str) -> int:
    return cli.main(["wheelhouse", str(tmp_path / "box.toml"), "--have", str(tmp_path / "box.txt"),
                     "--out", str(tmp_path / "wh"), *extra])


def test_it_holds_what_the_box_lacks_under_its_limit(setup):
    assert _wheelhouse(setup, "--limit-mb", "4") == 0
    manifest = json.loads((setup / "wh" / "wheelhouse.json").read_text())
    files = sorted(p.name for p in (setup / "wh").glob("*.whl"))
    # torch 9.0.0+cu130 is the box's 9.0.0; its tokenizers 0.23.0 is ruled out by transformers and replaced
    assert manifest["cells"][PLAIN]["add"] == ["tokenizers==0.22.0", "transformers==5.3.0"]
    assert manifest["cells"][PLAIN]["from_interpreter"] == {"torch": "9.0.0"}
    assert not any(name.startswith(("torch", "numpy")) for name in files)
    total = sum(p.stat().st_size for p in (setup / "wh").glob("*.whl"))
    assert total == manifest["total_bytes"] <= 4 * 1024 * 1024


def test_above_its_limit_it_refuses_in_one_line_and_downloads_nothing(setup, capsys):
    assert _wheelhouse(setup, "--limit-mb", "1") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--limit-mb" in err and "bigpkg-1.0-py3-none-any.whl" in err
    assert not (setup / "wh").exists()


def test_a_bad_package_list_names_its_line(tmp_path):
    path = tmp_path / "freeze.txt"
    path.write_text("torch==2.11.0\nmy-build @ file:///x\n")
    with pytest.raises(InputError, match=r"freeze.txt, line 2: .*not a name==version"):
        have.read(path)


def test_a_wheel_whose_hash_is_not_the_indexs_is_not_kept(tmp_path):
    from harness.errors import EnvironmentMissing
    from harness.offline.wheelhouse import Wheel, _fetch

    source = wheel(tmp_path, "alpha", "1.0")
    (tmp_path / "wh").mkdir()
    with pytest.raises(EnvironmentMissing, match="sha256"):
        _fetch(Wheel("alpha", "1.0", source.as_uri(), None, "0" * 64), tmp_path / "wh")
    assert not any((tmp_path / "wh").iterdir())


def test_a_rows_exclude_keeps_its_package_out_of_the_wheelhouse(setup):
    """The row's install leaves gpu-cluster-only out (a never-true override), so the wheelhouse does too."""
    wheel(setup / "links", "app", "1.0", requires=("gpu-cluster-only==1.0",))
    wheel(setup / "links", "gpu-cluster-only", "1.0", payload=3 * 1024 * 1024)
    (setup / "box.toml").write_text(MATRIX + '\n[[include]]\nmodel = "moe"\nrequirements = ["app==1.0"]\n'
                                    'install = { exclude = ["gpu-cluster-only"] }\n')
    assert _wheelhouse(setup, "--limit-mb", "4") == 0
    manifest = json.loads((setup / "wh" / "wheelhouse.json").read_text())
    assert manifest["cells"]["fsdp-moe-tf5.3.0-torch9.0.0-cuda"]["add"] == \
        ["app==1.0", "tokenizers==0.22.0", "transformers==5.3.0"]
    assert not list((setup / "wh").glob("gpu_cluster_only*"))
