"""Known failures apply to reused results too: a known failure deleted or expired since a cell ran no
longer turns its failure into xfail, on the next run (which reuses the result) and in the report."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MATRIX = """\
[matrix]
name = "kf"
checks = ["misbehave"]

[axes]
backend = ["fsdp"]
model = ["text"]
device = ["cpu"]
{known}
"""
KNOWN = """
[[known_failures]]
check = "misbehave"
when = {{ backend = "fsdp" }}
reason = "broken on purpose"
link = "https://x.test/1"
expires = {expires}
"""
pytestmark = pytest.mark.slow


def _run(tmp_path, env, known: str, *extra: str) -> dict:
    (tmp_path / "m.toml").write_text(MATRIX.format(known=known))
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(tmp_path / "m.toml"), "--out",
                           str(tmp_path / "out"), "--env-root", str(tmp_path / "envs"), "--no-index-check",
                           *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    (cell,) = (tmp_path / "out" / "cells").glob("*.json")
    return json.loads(cell.read_text())["checks"][0]


@pytest.mark.parametrize("change", ["deleted", "expired"])
def test_a_reused_result_follows_the_known_failures_of_the_matrix_as_it_is_now(tmp_path, project_env, change):
    env = {**project_env, "MISBEHAVE": "raise", "MISBEHAVE_PIDS": str(tmp_path / "pids")}
    first = _run(tmp_path, env, KNOWN.format(expires="2999-01-01"), "--no-report")
    assert first["status"] == "xfail" and first["original_status"] == "error"
    known = "" if change == "deleted" else KNOWN.format(expires="2001-01-01")
    again = _run(tmp_path, env, known, "--no-report")
    assert again["status"] == "error" and again["original_status"] is None, again
    assert again["duration"] == first["duration"]  # reused, not run again
    if change == "expired":
        assert "expired on 2001-01-01" in again["message"]
    # Declared again: the same reused result is a known failure once more.
    assert _run(tmp_path, env, KNOWN.format(expires="2999-01-01"), "--no-report")["status"] == "xfail"
