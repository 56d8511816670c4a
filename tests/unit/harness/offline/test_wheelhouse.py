"""The wheelhouse: only what the box lacks, the box's packages kept where they fit, and never above its size limit
(refused before anything is downloaded). Resolved against a local folder of tiny wheels: no network."""
from __future__ import annotations

import hashlib
import json

import pytest
from wheel_helpers import offline_index, wheel

from harness import cli
from harness.errors import InputError

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


@pytest.fixture
def tiny_bench(setup, monkeypatch):
    """An offline benchmark needing tinybench (beyond the box) and the rows' transformers (a bare name)."""
    from harness.offline import benchmarks

    monkeypatch.setitem(benchmarks.BENCHMARKS, "tiny-bench", ("a test's benchmark", ("tinybench==1.0",
                                                                                     "transformers"), "x"))
    (setup / "box.toml").write_text(MATRIX.replace('python = "3.11"', 'python = "3.11"\noffline = true\n'
                                                   'benchmarks = ["tiny-bench"]'))
    return setup


def test_a_benchmark_goes_in_with_the_rows_pins_where_its_wheels_fit(tiny_bench, capsys):
    wheel(tiny_bench / "links", "tinybench", "1.0", payload=512 * 1024)
    assert _wheelhouse(tiny_bench, "--limit-mb", "4") == 0
    entry = json.loads((tiny_bench / "wh" / "wheelhouse.json").read_text())["benchmarks"]["tiny-bench"]
    # its bare transformers is the rows' 5.3.0, which needs the wheelhouse's tokenizers: all of it is in its overlay
    assert entry == {"add": ["tinybench==1.0", "tokenizers==0.22.0", "transformers==5.3.0"], "left_out": None,
                     "requirements": ["tinybench==1.0", "transformers==5.3.0"]}
    assert list((tiny_bench / "wh").glob("tinybench-1.0-*.whl"))
    assert "benchmark tiny-bench: from the wheelhouse tinybench==1.0" in capsys.readouterr().out


def test_a_benchmark_that_does_not_fit_is_left_out_and_the_rows_are_kept(tiny_bench, capsys):
    wheel(tiny_bench / "links", "tinybench", "1.0", payload=3 * 1024 * 1024)
    assert _wheelhouse(tiny_bench, "--limit-mb", "4") == 0  # the rows take 2.x MiB; 3 more do not fit
    manifest = json.loads((tiny_bench / "wh" / "wheelhouse.json").read_text())
    why = manifest["benchmarks"]["tiny-bench"]["left_out"]
    assert "tinybench-1.0-py3-none-any.whl 3.0 MiB" in why and "do not fit" in why
    assert not list((tiny_bench / "wh").glob("tinybench*")) and list((tiny_bench / "wh").glob("bigpkg*"))
    assert "benchmark tiny-bench: left out of the wheelhouse" in capsys.readouterr().out


def test_an_unknown_benchmark_is_refused_before_anything_resolves(tiny_bench, capsys):
    (tiny_bench / "box.toml").write_text(MATRIX.replace('python = "3.11"', 'python = "3.11"\noffline = true\n'
                                                        'benchmarks = ["no-such-bench"]'))
    assert _wheelhouse(tiny_bench) == 2
    err = capsys.readouterr().err
    assert "matrix.benchmarks: unknown benchmark 'no-such-bench'" in err and "box.toml" in err
    assert not (tiny_bench / "wh").exists()


def test_the_folder_is_checked_against_its_manifest_before_anything_installs(setup):
    from harness.offline import manifest as wheelhouse_manifest

    assert _wheelhouse(setup, "--limit-mb", "4") == 0
    folder = setup / "wh"
    manifest = json.loads((folder / "wheelhouse.json").read_text())
    pins = manifest["cells"][PLAIN]["add"]
    wheelhouse_manifest.verify(folder, manifest, pins, f"row {PLAIN}")  # as built: whole
    for tag, fits in (("cp311-cp311-manylinux_2_17_x86_64", True), ("cp311-abi3-manylinux2014_x86_64", True),
                      ("cp312-cp312-manylinux_2_28_x86_64", False), ("cp311-cp311-manylinux_2_34_x86_64", False),
                      ("cp311-cp311-win_amd64", False)):
        built = wheel(folder, "plat", "1.0", tag=tag)
        entry = {"name": "plat", "version": "1.0", "file": built.name,
                 "sha256": hashlib.sha256(built.read_bytes()).hexdigest()}
        other = {**manifest, "files": [*manifest["files"], entry]}
        if fits:  # the box: Python 3.11 on x86_64 with glibc 2.28
            wheelhouse_manifest.verify(folder, other, ["plat==1.0"], f"row {PLAIN}")
        else:
            with pytest.raises(InputError, match="plat==1.0: .* is not for x86_64-manylinux_2_28, Python 3.11"):
                wheelhouse_manifest.verify(folder, other, ["plat==1.0"], f"row {PLAIN}")
        built.unlink()
    target = next(folder.glob("transformers-*.whl"))
    target.write_bytes(target.read_bytes() + b"\0")  # changed in transit
    with pytest.raises(InputError, match=rf"row {PLAIN} cannot install from it offline: transformers==5.3.0: .*sha256"):
        wheelhouse_manifest.verify(folder, manifest, pins, f"row {PLAIN}")
    target.unlink()
    with pytest.raises(InputError, match="is missing from the folder"):
        wheelhouse_manifest.verify(folder, manifest, pins, f"row {PLAIN}")
    with pytest.raises(InputError, match="is not in its wheelhouse.json"):
        wheelhouse_manifest.verify(folder, manifest, ["numpy==2.0.0"], f"row {PLAIN}")
