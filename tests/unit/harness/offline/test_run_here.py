"""`run --here`: the interpreter at hand, what a row adds installed from the wheelhouse alone (the index and every
proxy point at a closed port, so a network access would fail the run), a mismatched interpreter refused; and the
evidence matrix's dry run on a CPU against its box's package list."""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version
from wheel_helpers import offline_index, wheel

from harness import cli, matrix
from harness.offline import have

ROOT = Path(__file__).resolve().parents[4]
EVIDENCE = ROOT / "matrices" / "gpu-evidence.toml"
BOX = ROOT / "matrices" / "gpu-evidence.box.txt"


def _public(dist: str) -> str:
    return Version(importlib.metadata.version(dist)).public


def _manifest(folder: Path, cells: dict[str, list[str]], python: str, from_interpreter=None,
              benchmarks=None) -> None:
    """The manifest `wheelhouse` writes for the wheels in `folder` (named, sized and hashed as it does)."""
    files = []
    for path in sorted(folder.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(path.name)
        files.append({"name": name, "version": str(version), "file": path.name, "size": path.stat().st_size,
                      "sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
    (folder / "wheelhouse.json").write_text(json.dumps({
        "matrix": "t", "target": {"platform": "x86_64-manylinux_2_28", "python": python}, "limit_bytes": 64 << 20,
        "total_bytes": sum(f["size"] for f in files),
        "cells": {cid: {"add": add, "from_interpreter": (from_interpreter or {}).get(cid, {})}
                  for cid, add in cells.items()},
        "benchmarks": benchmarks or {}, "files": files}))


def here_toml(torch: str, transformers: str) -> str:
    """A matrix of this interpreter's torch and transformers: a text row, a VL row that needs tinypkg 1.0 from the
    wheelhouse, and a row whose torch no interpreter has."""
    return f"""
[matrix]
name = "here"
checks = ["stack-smoke"]

[axes]
torch = ["{torch}"]
transformers = ["{transformers}"]
backend = ["fsdp"]
model = ["text"]
device = ["cpu"]

[[include]]
model = "vl"
requirements = ["tinypkg==1.0"]

[[include]]
torch = "9.9.9"
"""


@pytest.fixture
def here(tmp_path, monkeypatch):
    links = tmp_path / "wheels"
    links.mkdir()
    wheel(links, "tinypkg", "1.0")
    offline_index(monkeypatch, links)
    monkeypatch.setenv("UV_DEFAULT_INDEX", "http://127.0.0.1:9/simple")  # an index that cannot answer
    torch, transformers = _public("torch"), _public("transformers")
    (tmp_path / "here.toml").write_text(here_toml(torch, transformers))
    cells = {c.axes["model"] + c.axes["torch"]: c.id for c in matrix.load(tmp_path / "here.toml").cells}
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    _manifest(links, {cells["vl" + torch]: ["tinypkg==1.0"], cells["text" + torch]: [], cells["text9.9.9"]: []}, python)
    return tmp_path, cells, torch


def test_a_row_runs_on_this_interpreter_with_the_wheelhouse_only(here):
    tmp_path, cells, torch = here
    cell = cells["vl" + torch]
    out = tmp_path / "out"
    status = cli.main(["run", str(tmp_path / "here.toml"), "--here", "--wheelhouse", str(tmp_path / "wheels"),
                       "--cells", cell, "--out", str(out), "--env-root", str(tmp_path / "envs"), "--no-report",
                       "--no-fork"])  # one check: a fresh interpreter imports less than the check server's preload
    assert status == 0
    result = json.loads((out / "cells" / f"{cell}.json").read_text())
    assert result["checks"][0]["status"] == "pass", result["checks"][0]["message"]
    assert result["environment"]["evidence"].startswith("offline run on the box's own Python")
    assert "tinypkg==1.0" in (out / result["lock"]).read_text().split()
    assert (tmp_path / "envs" / "overlays" / cell / "tinypkg" / "__init__.py").is_file()


def test_a_row_the_interpreter_does_not_match_is_refused(here, capsys):
    tmp_path, cells, _ = here
    status = cli.main(["run", str(tmp_path / "here.toml"), "--here", "--wheelhouse", str(tmp_path / "wheels"),
                       "--cells", cells["text9.9.9"], "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 2 and "the row declares 9.9.9" in err and "refusing" in err
    assert not (tmp_path / "out" / "cells").exists()


def _evidence_wheelhouse(folder: Path, box: dict[str, str]) -> None:
    """Stand-in wheels for what each evidence row adds to the box, and the manifest `wheelhouse` would write."""
    folder.mkdir()
    adds, kept = {}, {}
    for cell in matrix.load(EVIDENCE).cells:
        pins = cell.pinned_releases()
        adds[cell.id] = [f"{d}=={v}" for d, v in pins.items()
                         if not have.same_release(box.get(canonicalize_name(d)), v)]
        kept[cell.id] = {d: v for d, v in pins.items() if f"{d}=={v}" not in adds[cell.id]}
        for pin in adds[cell.id]:
            wheel(folder, *pin.split("=="))
    left_out = {"add": [], "left_out": "its 9 wheels beyond the box do not fit", "requirements": ["trl==1.16.0"]}
    _manifest(folder, adds, "3.12", kept, {"grpo-vs-trl": left_out})


def test_the_evidence_matrix_dry_runs_on_a_cpu(tmp_path, monkeypatch, capsys):
    offline_index(monkeypatch, tmp_path)
    _evidence_wheelhouse(tmp_path / "wh", have.read(BOX))
    status = cli.main(["run", str(EVIDENCE), "--here", "--wheelhouse", str(tmp_path / "wh"), "--device", "cpu",
                       "--have", str(BOX), "--dry-run"])
    out = capsys.readouterr()
    assert status == 0, out.err
    rows, bench = out.out.splitlines()[:-1], out.out.splitlines()[-1]
    assert len(rows) == 3 and all(" on cpu: " in line for line in rows)
    assert bench.startswith("benchmark grpo-vs-trl: left out of the wheelhouse (its 9 wheels")
    assert "transformers==5.3.0" in out.out and "bridge-parity" in out.out

    changed = tmp_path / "other-box.txt"  # a box whose transformers is not the row's: refused
    changed.write_text(BOX.read_text().replace("transformers==5.17.0", "transformers==5.16.1"))
    status = cli.main(["run", str(EVIDENCE), "--here", "--wheelhouse", str(tmp_path / "wh"), "--device", "cpu",
                       "--have", str(changed), "--dry-run"])
    err = capsys.readouterr().err
    assert status == 2 and "transformers: the interpreter has 5.16.1, the row declares 5.17.0" in err

    for stale in (tmp_path / "wh").glob("mbridge-*.whl"):  # a wheelhouse without a row's wheel: refused
        stale.unlink()
    status = cli.main(["run", str(EVIDENCE), "--here", "--wheelhouse", str(tmp_path / "wh"), "--device", "cpu",
                       "--have", str(BOX), "--dry-run"])
    err = capsys.readouterr().err
    assert status == 2 and "cannot install from it offline" in err and "megatron-text" in err


def test_a_benchmark_whose_wheels_are_not_in_the_folder_is_refused_before_anything_runs(tmp_path, monkeypatch,
                                                                                        capsys):
    offline_index(monkeypatch, tmp_path)
    _evidence_wheelhouse(tmp_path / "wh", have.read(BOX))
    manifest = json.loads((tmp_path / "wh" / "wheelhouse.json").read_text())
    manifest["benchmarks"]["grpo-vs-trl"] = {"add": ["trl==1.16.0"], "left_out": None}  # no trl wheel there
    (tmp_path / "wh" / "wheelhouse.json").write_text(json.dumps(manifest))
    argv = ["run", str(EVIDENCE), "--here", "--wheelhouse", str(tmp_path / "wh"), "--device", "cpu", "--have",
            str(BOX), "--dry-run"]
    assert cli.main(argv) == 2
    assert "benchmark grpo-vs-trl cannot install from it offline: trl==1.16.0 is not in its" in capsys.readouterr().err
    assert cli.main([*argv, "--no-benchmarks"]) == 0  # the rows alone are whole


def test_offline_options_need_here(capsys):
    assert cli.main(["run", str(EVIDENCE), "--wheelhouse", "wheels"]) == 2
    assert "--wheelhouse: only with --here" in capsys.readouterr().err
