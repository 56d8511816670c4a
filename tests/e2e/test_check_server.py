"""The check server with its default preload: torch and transformers (and megatron-core) imported once per cell.
A real cell run (a uv environment for the cell): its checks forked from the cell's check server, which imports
once, or each in a fresh interpreter with --no-fork; the cell records its phases either way."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from harness.execution import runner
from harness.execution.forkclient import CheckProcesses
from harness.results.records import Status

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the check server forks (Linux)")


def _env(project_env, mode: str, tmp_path, **extra) -> dict[str, str]:
    # One thread, as a cell's checks get it (CellEnv.run_env): else numpy's OpenBLAS starts a thread
    # pool at import, and the server refuses to fork.
    return {**project_env, "OMP_NUM_THREADS": "1", "MISBEHAVE": mode, "MISBEHAVE_PIDS": str(tmp_path / "pids"),
            "MISBEHAVE_MARKER": str(tmp_path / "marker"), **extra}


def _fresh(tmp_path, env, timeout=60.0, memory=None):
    return runner.run_isolated(sys.executable, "misbehave", [], tmp_path / "fresh" / "misbehave.log", timeout, env,
                               memory)


@pytest.mark.slow
def test_torch_and_transformers_are_imported_once_per_cell(tmp_path, project_env):
    """And megatron-core where installed (the tests' environment has it), which three checks of a Megatron cell
    import."""
    pytest.importorskip("transformers")
    expected = ["torch", "transformers"]
    if importlib.util.find_spec("megatron") is not None and importlib.util.find_spec("megatron.core") is not None:
        expected = ["megatron.core", *expected]
    env = _env(project_env, "modules", tmp_path)
    processes = CheckProcesses(sys.executable, env, tmp_path / "setup.log")  # the default preload
    try:
        imports = processes.ready()
        assert processes.server is not None, (tmp_path / "setup.log").read_text()[-2000:]
        assert imports > 0 and {"torch", "transformers"} <= set(processes.server.modules)
        first = processes.run("misbehave", [], tmp_path / "logs" / "a.log", 120)
        second = processes.run("misbehave", [], tmp_path / "logs" / "b.log", 120)
    finally:
        processes.close()
    for result in (first, second):  # both found them imported before their own code ran
        assert result.status is Status.PASS and result.metrics["preloaded"] == expected
    assert first.metrics["pid"] != second.metrics["pid"]  # two processes, one import
    fresh = _fresh(tmp_path, env)
    assert fresh.metrics["preloaded"] == []  # a fresh interpreter starts without them: the test can fail


CELL_MATRIX = """\
[matrix]
name = "phases"
checks = ["misbehave"]

[axes]
backend = ["fsdp"]
model = ["text"]
device = ["cpu"]
"""


@pytest.mark.slow
def test_a_cell_records_its_phases_and_no_fork_runs_fresh_interpreters(tmp_path, project_env):
    from harness.results.records import load_cell

    (tmp_path / "m.toml").write_text(CELL_MATRIX)
    argv = [sys.executable, "-m", "harness", "run", str(tmp_path / "m.toml"), "--out", str(tmp_path / "out"),
            "--env-root", str(tmp_path / "envs"), "--no-index-check", "--no-report", "--redo"]
    cell_file = tmp_path / "out" / "cells" / "fsdp-text.json"
    setup_log = tmp_path / "out" / "cells" / "fsdp-text" / "logs" / "setup.log"
    runs = {}
    for label, extra in (("forked", []), ("fresh", ["--no-fork"])):
        done = subprocess.run(argv + extra, cwd=ROOT, env=_env(project_env, "pass", tmp_path), capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stderr.count("jobs: up to 1 cells at once (") == 1  # the choice, said once
        runs[label] = (load_cell(cell_file), setup_log.read_text())
    forked, fresh = runs["forked"][0], runs["fresh"][0]
    # (and environment_ahead where the run's install thread built the environment before the cell started)
    assert set(forked.phases) - {"environment_ahead"} == {"environment", "capture", "imports"}
    assert forked.phases["capture"] > 0
    # no torch in this cell: the check's entry point alone
    assert "check server ready: imported harness.execution.check_process once" in runs["forked"][1]
    assert fresh.phases["imports"] == 0 and "check server" not in runs["fresh"][1]
    (a,), (b,) = forked.checks, fresh.checks
    assert a.status is b.status is Status.PASS and a.metrics["answer"] == b.metrics["answer"] == 42
    assert "-m harness run" in a.metrics["runner"] and "-m harness run" in b.metrics["runner"]  # not the server
