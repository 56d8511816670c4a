"""A matrix run killed at any moment (SIGINT, SIGTERM, SIGKILL) and started again finishes the
remaining cells, keeps every finished result, leaves no half-written file and no orphaned check."""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.results.records import load_cell

ROOT = Path(__file__).resolve().parents[2]
MATRIX = """\
[matrix]
name = "kill"
checks = ["misbehave"]

[axes]
backend = ["fsdp"]
model = ["text", "vl", "moe"]
device = ["cpu"]
"""
pytestmark = pytest.mark.slow


def _start(tmp_path, project_env):
    # Each check sleeps 4 s and two cells run at once: when the first cell finishes, another has at least 4 s
    # to go, so a signal sent up to 1.5 s later always lands mid-run (with 1.5 s, a loaded machine let the
    # whole run end first and the interrupted run exited 0).
    env = {**project_env, "MISBEHAVE": "slow", "MISBEHAVE_SECONDS": "4", "MISBEHAVE_PIDS": str(tmp_path / "pids"),
           "CI": "1"}
    return subprocess.Popen([sys.executable, "-m", "harness", "run", str(tmp_path / "m.toml"), "--out",
                             str(tmp_path / "out"), "--env-root", str(tmp_path / "envs"), "--no-index-check",
                             "--no-report", "--jobs", "2"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=_as_a_background_job)


def _as_a_background_job():
    """A non-interactive shell starts a background job (`harness run ... &`, as CI scripts do) with SIGINT
    ignored; the run must stop on it all the same."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _finished(tmp_path):
    return sorted((tmp_path / "out" / "cells").glob("*.json")) if (tmp_path / "out" / "cells").exists() else []


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_killed_runs_resume_and_lose_nothing(tmp_path, project_env, sig):
    (tmp_path / "m.toml").write_text(MATRIX)
    rng = random.Random(sig)
    # Warm the environment once so the kills land among the checks, not in uv.
    first = _start(tmp_path, project_env)
    deadline = time.time() + 300
    while not _finished(tmp_path) and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(rng.uniform(0.0, 1.5))
    first.send_signal(sig)
    first.wait(timeout=60)
    if sig != signal.SIGKILL:
        assert first.returncode == 130
    time.sleep(0.5)
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert not [p for p in pids if _alive(p)], "a check outlived its runner"
    kept = {p.name: p.stat().st_mtime_ns for p in _finished(tmp_path)}
    for path in _finished(tmp_path):
        load_cell(path)  # never half-written
    assert not list((tmp_path / "out" / "cells").glob(".*.tmp"))

    second = _start(tmp_path, project_env)
    output = second.communicate(timeout=600)[0].decode()
    assert second.returncode == 0, output
    done = _finished(tmp_path)
    assert len(done) == 3
    for path in done:
        cell = load_cell(path)
        assert [c.status.value for c in cell.checks] == ["pass"]
        if path.name in kept:
            assert path.stat().st_mtime_ns == kept[path.name], "a finished cell was run again"
    assert json.loads((tmp_path / "out" / "run.json").read_text())["matrix"] == "kill"
