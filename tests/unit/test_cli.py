"""CLI exit statuses and messages: bad input 2, missing accelerator 3, no results 4."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def harness(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT)


def test_matrix_list_json_gives_ids_axes_tags_and_pins():
    done = harness("matrix", "list", "matrices/cpu.toml", "--json")
    assert done.returncode == 0
    cells = json.loads(done.stdout)
    # 8 Megatron cells: the mbridge-from-source row joined the seven release rows; 8 verl rows (docs/verl.md)
    assert len(cells) == 39 and sum(c["axes"]["backend"] == "megatron" for c in cells) == 8
    assert sum("verl" in c["axes"] for c in cells) == 8
    assert [c["id"] for c in cells if c["axes"]["mode"] == "fully-async"] == [
        "fsdp-text-tfnewest-torch2.13.0-td0.15.3-fully-async"]
    first = cells[0]
    assert first["id"] == "fsdp-text-tf5.1.0-torch2.13.0-td0.10.0"
    assert "transformers==5.1.0" in first["requirements"]
    assert first["install"] == ["uv pip install " + " ".join(first["requirements"])]  # its install order


@pytest.mark.parametrize("args, expected", [
    (("run", "matrices/cpu.toml", "--checks", "vibes"), "unknown check 'vibes'"),
    (("run", "matrices/cpu.toml", "--cells", "nope"), "no cell 'nope'"),
    (("run", "matrices/cpu.toml", "--tags", "nope"), "no cell has tag 'nope'"),
    (("run", "matrices/cpu.toml", "--jobs", "0"), "--jobs"),
    (("run", "matrices/missing.toml"), "cannot read matrix file"),
    (("check", "vibes"), "unknown check 'vibes'"),
    (("check", "stack-smoke", "--model-config", "no-such.json"), "is not a file"),
    (("check", "stack-smoke", "--model-config", "README.md"), "not a JSON file"),
    (("check", "stack-smoke", "--model-config", "tests/resources/matrices/small.toml"), "not a JSON file"),
    (("check", "stack-smoke", "--seed", "99999999999999999999999"), "--seed: expected a whole number from 0"),
    (("check", "stack-smoke", "--seed", "-1"), "--seed: expected a whole number from 0"),
    (("check", "stack-smoke", "--steps", "0"), "--steps: expected a whole number of at least 1"),
    (("run", "matrices/cpu.toml", "--cells", "nope", "--steps", "0"), "--steps: expected a whole number of at least 1"),
    (("run", "matrices/cpu.toml", "--cells", "nope", "--seed", "-5"), "--seed: expected a whole number from 0"),
    (("repro", "../x", "--check", "stack-smoke"), "not a cell id"),
    (("repro", "fsdp-text-*", "--check", "stack-smoke"), "not a cell id"),
    (("repro", "a/b", "--check", "stack-smoke"), "not a cell id"),
    (("frobnicate",), "invalid choice"),
    (("run", "matrices/cpu.toml", "--out", "README.md"), "--out README.md: exists and is not a directory"),
    (("run", "matrices/cpu.toml", "--out", "README.md/cpu"), "--out README.md/cpu: README.md is not a directory"),
    (("run", "matrices/cpu.toml", "--env-root", "README.md"), "--env-root README.md: exists and is not a directory"),
    (("check", "grpo-convergence", "--work-dir", "README.md"), "--work-dir README.md: exists and is not a directory"),
    (("check", "bridge-parity", "--backend", "fsdp"), "--backend fsdp: check bridge-parity runs on backend megatron"),
    (("check", "patch-parity", "--backend", "megatron"), "check patch-parity runs on backend fsdp only"),
])
def test_bad_input_exits_2_with_one_line(args, expected):
    done = harness(*args)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert done.stderr.strip().count("\n") == 0


def test_an_accelerator_matrix_on_a_machine_without_it_exits_3(tmp_path):
    from harness.envs import devices

    if devices.probe("cuda")[0]:
        pytest.skip("this machine has a CUDA device")
    done = harness("run", "matrices/cuda.toml", "--no-index-check", "--env-root", tmp_path / "envs")
    assert done.returncode == 3
    assert "needs device 'cuda'" in done.stderr and "nox -s cpu-fsdp-qwen35" in done.stderr
    assert not (tmp_path / "envs").exists()


def test_report_of_a_directory_without_results_exits_4(tmp_path):
    done = harness("report", tmp_path)
    assert done.returncode == 4
    assert str(tmp_path) in done.stderr


def test_repro_never_uses_an_unchecked_id_as_a_path(tmp_path):
    victim = tmp_path / "x"
    victim.mkdir()
    (victim / "keep").write_text("precious")
    (tmp_path / "reports" / "cells").mkdir(parents=True)
    done = harness("repro", "../x", "--check", "stack-smoke", "--dir", tmp_path / "reports", "--env-root",
                   tmp_path / "envs" / "inner", cwd=tmp_path)
    assert done.returncode == 2 and "not a cell id" in done.stderr
    assert (victim / "keep").read_text() == "precious" and not (tmp_path / "envs").exists()
