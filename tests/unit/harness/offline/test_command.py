"""The offline verbs' `run --here`: a mismatched interpreter refused, the evidence matrix's dry run on a CPU against
its box's package list, and a wheelhouse that lacks a row's or a benchmark's wheels refused before anything runs (a
row that runs: tests/e2e/test_run_here.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from wheel_helpers import here_setup, offline_index, wheel, wheelhouse_manifest

from harness import cli, matrix
from harness.offline import box_interpreter

ROOT = Path(__file__).resolve().parents[4]
EVIDENCE = ROOT / "matrices" / "gpu-evidence.toml"
BOX = ROOT / "matrices" / "gpu-evidence.box.txt"


@pytest.fixture
def here(tmp_path, monkeypatch):
    return here_setup(tmp_path, monkeypatch)


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
                         if not box_interpreter.same_release(box.get(canonicalize_name(d)), v)]
        kept[cell.id] = {d: v for d, v in pins.items() if f"{d}=={v}" not in adds[cell.id]}
        for pin in adds[cell.id]:
            wheel(folder, *pin.split("=="))
    left_out = {"add": [], "left_out": "its 9 wheels beyond the box do not fit", "requirements": ["trl==1.16.0"]}
    wheelhouse_manifest(folder, adds, "3.12", kept, {"grpo-vs-trl": left_out})


def test_the_evidence_matrix_dry_runs_on_a_cpu(tmp_path, monkeypatch, capsys):
    offline_index(monkeypatch, tmp_path)
    _evidence_wheelhouse(tmp_path / "wh", box_interpreter.read(BOX))
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
    _evidence_wheelhouse(tmp_path / "wh", box_interpreter.read(BOX))
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
