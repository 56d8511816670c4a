"""Failure classes and retries: a crash that passes on a retry is flaky, never a plain pass;
an install that cannot reach the index is infra and is retried; pins that conflict are their own
class (install-conflict, "cannot be installed together", naming the requirement) and are not retried."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MATRIX = """\
[matrix]
name = "r"
checks = ["misbehave"]

[axes]
backend = ["fsdp"]
model = ["text"]
device = ["cpu"]
{extra}
"""
pytestmark = pytest.mark.slow


def run(tmp_path, env, extra="", retries="2"):
    (tmp_path / "m.toml").write_text(MATRIX.format(extra=extra))
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(tmp_path / "m.toml"), "--out",
                           str(tmp_path / "out"), "--env-root", str(tmp_path / "envs"), "--no-index-check",
                           "--no-report", "--retries", retries],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    (cell,) = (tmp_path / "out" / "cells").glob("*.json")
    return json.loads(cell.read_text())["checks"][0]


def test_a_crash_then_a_pass_is_flaky_with_the_first_try_recorded(tmp_path, project_env):
    env = {**project_env, "MISBEHAVE": "crash-once", "MISBEHAVE_MARKER": str(tmp_path / "crashed")}
    check = run(tmp_path, env)
    assert check["status"] == "pass" and check["flaky"] is True
    assert len(check["attempts"]) == 1 and check["attempts"][0]["failure_class"] == "crash"
    assert "SIGABRT" in check["attempts"][0]["reason"]


def test_a_plain_failure_is_class_test_and_not_retried(tmp_path, project_env):
    check = run(tmp_path, {**project_env, "MISBEHAVE": "raise"})
    assert check["status"] == "error" and check["failure_class"] == "test" and check["attempts"] == []


def test_an_unreachable_index_is_infra_retried_with_each_reason(tmp_path, project_env):
    env = {**project_env, "MISBEHAVE": "pass", "UV_DEFAULT_INDEX": "http://127.0.0.1:9/simple", "UV_FIND_LINKS": "",
           "UV_HTTP_TIMEOUT": "2", "UV_HTTP_RETRIES": "0", "UV_CACHE_DIR": str(tmp_path / "empty-cache")}
    check = run(tmp_path, env, 'transformers = ["5.3.0"]', retries="1")
    assert check["status"] == "error" and check["failure_class"] == "infra"
    assert len(check["attempts"]) == 1 and check["attempts"][0]["failure_class"] == "infra"


def test_conflicting_pins_are_an_install_conflict_and_not_retried(tmp_path, project_env):
    # vLLM 0.18.0 requires transformers < 5: the combination cannot be installed at all.
    check = run(tmp_path, {**project_env, "MISBEHAVE": "pass"}, 'transformers = ["5.3.0"]\nvllm = ["0.18.0"]')
    assert check["status"] == "error" and check["failure_class"] == "install-conflict"
    assert check["message"] == ("cannot be installed together: vllm 0.18.0 requires transformers>=4.56.0,<5; the row "
                                "pins transformers 5.3.0") and check["attempts"] == []
    assert check["metrics"]["install"]["verdict"] == "conflict" and "No solution found" in check["metrics"]["install"][
        "resolver"]


def test_a_check_added_to_the_matrix_runs_alone_in_finished_cells(tmp_path, project_env):
    env = {**project_env, "MISBEHAVE": "slow", "MISBEHAVE_SECONDS": "0", "MISBEHAVE_PIDS": str(tmp_path / "runs")}
    run(tmp_path, env)
    assert len((tmp_path / "runs").read_text().split()) == 1
    (tmp_path / "m.toml").write_text(MATRIX.format(extra="").replace('["misbehave"]', '["misbehave", "misbehave-too"]'))
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(tmp_path / "m.toml"), "--out",
                           str(tmp_path / "out"), "--env-root", str(tmp_path / "envs"), "--no-index-check",
                           "--no-report"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "runs").read_text().split()) == 2  # only the new check ran
    (cell,) = (tmp_path / "out" / "cells").glob("*.json")
    assert [c["check"] for c in json.loads(cell.read_text())["checks"]] == ["misbehave", "misbehave-too"]


def test_redo_of_some_checks_keeps_the_cells_other_results(tmp_path, project_env):
    env = {**project_env, "MISBEHAVE": "slow", "MISBEHAVE_SECONDS": "0", "MISBEHAVE_PIDS": str(tmp_path / "runs")}
    (tmp_path / "m.toml").write_text(MATRIX.format(extra="").replace('["misbehave"]', '["misbehave", "misbehave-too"]'))
    base = [sys.executable, "-m", "harness", "run", str(tmp_path / "m.toml"), "--out", str(tmp_path / "out"),
            "--env-root", str(tmp_path / "envs"), "--no-index-check", "--no-report"]
    assert subprocess.run(base, cwd=ROOT, env=env, capture_output=True, timeout=600).returncode == 0
    done = subprocess.run(base + ["--redo", "--checks", "misbehave-too"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "runs").read_text().split()) == 3  # two, then only the redone one
    (cell,) = (tmp_path / "out" / "cells").glob("*.json")
    assert sorted(c["check"] for c in json.loads(cell.read_text())["checks"]) == ["misbehave", "misbehave-too"]


def test_an_infra_failure_is_run_again_by_the_next_run(tmp_path, project_env):
    # A network blip says nothing about the stack: the next run tries the check again instead of
    # reusing the error, as it reuses real results.
    unreachable = {**project_env, "MISBEHAVE": "pass", "UV_DEFAULT_INDEX": "http://127.0.0.1:9/simple",
                   "UV_FIND_LINKS": "", "UV_HTTP_TIMEOUT": "2", "UV_HTTP_RETRIES": "0",
                   "UV_CACHE_DIR": str(tmp_path / "empty-cache")}
    first = run(tmp_path, unreachable, 'transformers = ["5.3.0"]', retries="0")
    assert first["status"] == "error" and first["failure_class"] == "infra"
    second = run(tmp_path, {**project_env, "MISBEHAVE": "pass"}, 'transformers = ["5.3.0"]', retries="0")
    assert second["status"] == "pass"
    third = run(tmp_path, {**project_env, "MISBEHAVE": "raise"}, 'transformers = ["5.3.0"]', retries="0")
    assert third["status"] == "pass"  # a real result is reused as it is


def test_kept_results_drop_redone_and_infra_checks_only():
    from harness.results.records import CellResult, CheckResult, Status, kept_results

    earlier = CellResult("m", "c", {}, [])
    earlier.checks = [CheckResult("a", Status.ERROR, "index unreachable", failure_class="infra"),
                      CheckResult("b", Status.FAIL, "wrong numbers", failure_class="test"),
                      CheckResult("c", Status.PASS, "fine")]
    assert set(kept_results(earlier, ("a", "b"), redo=False)) == {"b", "c"}
    assert set(kept_results(earlier, ("a", "b"), redo=True)) == {"c"}
    assert set(kept_results(earlier, ("c",), redo=False)) == {"a", "b", "c"}  # not wanted: kept as it was
    assert kept_results(None, ("a",), redo=False) == {}
