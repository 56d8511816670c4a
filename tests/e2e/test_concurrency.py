"""Two runs on one results directory: the second stops at once with exit 7 and a one-line message while
the first runs (nothing of the first is touched); one after the other, they merge per check and lose
nothing. Real processes, real lock."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MATRIX = """\
[matrix]
name = "two"
checks = ["misbehave", "misbehave-too"]

[axes]
backend = ["fsdp"]
model = ["text", "vl"]
device = ["cpu"]
"""
pytestmark = pytest.mark.slow


def _argv(tmp_path, *checks):
    return [sys.executable, "-m", "harness", "run", str(tmp_path / "m.toml"), "--out", str(tmp_path / "out"),
            "--env-root", str(tmp_path / "envs"), "--no-index-check", "--no-report", "--checks", *checks]


def _checks(tmp_path) -> dict[str, dict[str, str]]:
    cells = sorted((tmp_path / "out" / "cells").glob("*.json"))
    return {p.stem: {c["check"]: c["status"] for c in json.loads(p.read_text())["checks"]} for p in cells}


def test_a_second_run_on_the_same_directory_stops_and_the_first_loses_nothing(tmp_path, project_env):
    (tmp_path / "m.toml").write_text(MATRIX)
    env = {**project_env, "MISBEHAVE": "slow", "MISBEHAVE_SECONDS": "2", "MISBEHAVE_PIDS": str(tmp_path / "pids")}
    first = subprocess.Popen(_argv(tmp_path, "misbehave"), cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not (tmp_path / "pids").exists() and time.time() < deadline:  # the first run is inside a check
        time.sleep(0.05)
    second = subprocess.run(_argv(tmp_path, "misbehave-too"), cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert first.poll() is None, "the first run ended before the second started: the test proves nothing"
    assert second.returncode == 7, second.stderr
    assert "another run (pid " in second.stderr and "--out" in second.stderr
    assert second.stderr.strip().startswith("error: ") and second.stderr.strip().count("\n") == 0
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert _checks(tmp_path) == {"fsdp-text": {"misbehave": "pass"}, "fsdp-vl": {"misbehave": "pass"}}

    # Once the first is done the second runs, and each cell keeps both runs' results.
    again = subprocess.run(_argv(tmp_path, "misbehave-too"), cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr
    both = {"misbehave-too": "pass", "misbehave": "pass"}
    assert _checks(tmp_path) == {"fsdp-text": both, "fsdp-vl": both}
    logs = sorted(p.name for p in (tmp_path / "out" / "cells" / "fsdp-text" / "logs").glob("*.log"))
    assert logs == ["misbehave-too.log", "misbehave.log", "setup.log"]


def test_a_cell_run_inside_its_container_runs_under_the_host_run_lock(tmp_path, project_env):
    from harness.execution.run import results_lock

    (tmp_path / "m.toml").write_text(MATRIX)
    env = {**project_env, "MISBEHAVE": "pass"}
    with results_lock(tmp_path / "out"):  # this process plays the host run
        blocked = subprocess.run(_argv(tmp_path, "misbehave"), cwd=ROOT, env=env, capture_output=True, text=True,
                                 timeout=300)
        inner = subprocess.run([*_argv(tmp_path, "misbehave"), "--cells", "fsdp-text", "--under-host-lock"],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert blocked.returncode == 7 and f"(pid {os.getpid()})" in blocked.stderr
    assert inner.returncode == 0, inner.stderr
    assert _checks(tmp_path) == {"fsdp-text": {"misbehave": "pass"}}


def test_taking_the_results_lock_removes_the_temporaries_of_a_killed_write_only(tmp_path):
    from harness.execution.run import results_lock
    from harness.results.records import write_text_atomic

    cells = tmp_path / "cells"
    cells.mkdir()
    killed = cells / ".c.json.abc123.tmp"  # what write_text_atomic leaves when SIGKILL lands mid-write
    killed.write_text("{half")
    old = time.time() - 3600
    os.utime(killed, (old, old))
    writing = tmp_path / ".report.html.def456.tmp"  # a report being written beside the run right now
    writing.write_text("<html>")
    elsewhere = tmp_path / "envs" / "lib" / ".data.abc.tmp"  # not the harness's: an environment inside --out
    elsewhere.parent.mkdir(parents=True)
    elsewhere.write_text("x")
    os.utime(elsewhere, (old, old))
    write_text_atomic(cells / "c.json", "{}")
    with results_lock(tmp_path):
        assert not killed.exists()
        assert writing.exists() and elsewhere.exists() and (cells / "c.json").read_text() == "{}"
