"""A real run of two cells that differ only in mbridge's version: the check that imports nothing of it is
reused from the first cell, with a link in the report; the checks that import mbridge, in their own process
or in a child process, run again; --no-reuse runs everything. A cell whose checks are all reused starts no
check server, and cells running at the same time reuse each other's results."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MATRIX = """\
[matrix]
name = "reuse"
checks = ["plain", "imports", "child"]

[axes]
backend = ["fsdp"]
model = ["text"]
device = ["cpu"]
mbridge = ["0.13.0", "0.15.1"]
"""
FIRST, SECOND = "fsdp-text-mbridge0.13.0", "fsdp-text-mbridge0.15.1"
pytestmark = pytest.mark.slow


def _run(tmp_path: Path, env: dict, *extra: str, jobs: str = "1") -> dict[str, dict[str, dict]]:
    """The two cells run (by default one after the other), then their checks by cell and name."""
    (tmp_path / "m.toml").write_text(MATRIX)
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(tmp_path / "m.toml"), "--out",
                           str(tmp_path / "out"), "--env-root", str(tmp_path / "envs"), "--no-index-check",
                           "--jobs", jobs, *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    cells = {}
    for cell in (FIRST, SECOND):
        data = json.loads((tmp_path / "out" / "cells" / f"{cell}.json").read_text())
        cells[cell] = {check["check"]: check for check in data["checks"]}
    return cells


def test_a_check_that_does_not_load_the_differing_distribution_is_reused_and_one_that_does_is_rerun(
        tmp_path, project_env):
    env = {**project_env, "HARNESS_EXTRA_CHECKS": "plain=reuse_plain,imports=reuse_imports,child=reuse_child"}
    cells = _run(tmp_path, env)
    first, second = cells[FIRST], cells[SECOND]
    assert all(check["status"] == "pass" and check["fingerprint"] for check in [*first.values(), *second.values()])
    assert "mbridge" not in first["plain"]["loaded"]
    assert second["plain"]["reused_from"] == FIRST
    assert second["plain"]["metrics"]["pid"] == first["plain"]["metrics"]["pid"]  # the same run's result
    assert second["plain"]["log"] == first["plain"]["log"]  # its log is the first cell's
    for name in ("imports", "child"):  # mbridge looked up in the check's process, then in a child process
        assert first[name]["loaded"]["mbridge"] == "0.13.0" and second[name]["loaded"]["mbridge"] == "0.15.1"
        assert second[name]["reused_from"] is None
        assert second[name]["metrics"]["pid"] != first[name]["metrics"]["pid"]
    html = (tmp_path / "out" / "report.html").read_text()
    assert f'<a href="cells/{FIRST}.json">reused from {FIRST}</a>' in html
    assert f"reused from {FIRST}" in (tmp_path / "out" / "report.md").read_text()

    again = _run(tmp_path, env, "--redo", "--no-reuse", "--no-report")
    assert all(check["reused_from"] is None for cell in again.values() for check in cell.values())
    assert again[SECOND]["plain"]["metrics"]["pid"] != again[FIRST]["plain"]["metrics"]["pid"]


def test_a_cell_whose_checks_are_all_reused_starts_no_check_server(tmp_path, project_env):
    env = {**project_env, "HARNESS_EXTRA_CHECKS": "plain=reuse_plain,imports=reuse_imports,child=reuse_child"}
    cells = _run(tmp_path, env, "--checks", "plain", "imports", "--no-report")
    assert cells[SECOND]["plain"]["reused_from"] == FIRST and cells[SECOND]["imports"]["reused_from"] is None
    logs = {cell: (tmp_path / "out" / "cells" / cell / "logs" / "setup.log").read_text() for cell in (FIRST, SECOND)}
    assert "check server ready" in logs[FIRST] and "check server ready" in logs[SECOND]  # one check to run

    again = _run(tmp_path, env, "--redo", "--checks", "plain", "--no-report")  # --redo: reused from this run only
    assert again[SECOND]["plain"]["reused_from"] == FIRST
    log = (tmp_path / "out" / "cells" / SECOND / "logs" / "setup.log").read_text()
    assert "check server" not in log  # every check reused: no server, no imports
    second = json.loads((tmp_path / "out" / "cells" / f"{SECOND}.json").read_text())
    assert second["phases"]["imports"] == 0 and second["phases"]["capture"] > 0
    assert "check server ready" in (tmp_path / "out" / "cells" / FIRST / "logs" / "setup.log").read_text()


def test_cells_running_at_the_same_time_reuse_each_others_results(tmp_path, project_env):
    env = {**project_env, "HARNESS_EXTRA_CHECKS": "plain=reuse_plain,imports=reuse_imports,child=reuse_child",
           "REUSE_PLAIN_SECONDS": "6"}  # both cells reach `plain` while the other runs it
    checks = _run(tmp_path, env, "--no-report", "--checks", "plain", "imports", jobs="2")
    plain = sorted(str(checks[cell]["plain"]["reused_from"]) for cell in (FIRST, SECOND))
    assert plain in (["None", FIRST], ["None", SECOND])  # one ran it, the other waited and took its result
    assert all(checks[cell]["imports"]["reused_from"] is None for cell in (FIRST, SECOND))  # mbridge differs
