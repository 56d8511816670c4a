"""The `python` axis end to end: a real cell on the machine's Python 3.12 builds its uv environment and runs a
check; a cell naming a Python the runner lacks records `skip` with the reason and builds nothing."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.envs import interpreters

ROOT = Path(__file__).resolve().parents[2]
RUN_MATRIX = textwrap.dedent("""\
    [matrix]
    name = "py"
    checks = ["misbehave"]

    [axes]
    backend = ["fsdp"]
    model = ["text"]
    device = ["cpu"]
    python = ["3.12", "3.95"]
    """)


def test_a_cell_on_python_3_12_builds_and_runs_and_a_missing_python_is_a_skip(tmp_path, project_env):
    """A real uv environment on the machine's Python 3.12 (found through pyenv or PATH) runs a check;
    a cell naming a Python the runner lacks records `skip` with the reason and builds nothing."""
    try:
        wanted = interpreters.find("3.12")
    except interpreters.InterpreterMissing as exc:
        pytest.skip(f"this runner has no Python 3.12: {exc}")
    path = tmp_path / "py.toml"
    path.write_text(RUN_MATRIX)
    out, envs = tmp_path / "out", tmp_path / "envs"
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(path), "--out", str(out), "--env-root",
                           str(envs), "--no-index-check"], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**project_env, "UV_PYTHON_DOWNLOADS": "automatic"})
    assert done.returncode == 0, done.stderr[-3000:]

    ran = json.loads((out / "cells" / "fsdp-text-py3.12.json").read_text())
    assert ran["checks"][0]["status"] == "pass", ran["checks"][0]
    assert ran["environment"]["python"].startswith(wanted.version)
    home = (envs / "fsdp-text-py3.12" / "pyvenv.cfg").read_text()
    assert f"version_info = {wanted.version}" in home or f"version = {wanted.version}" in home

    skipped = json.loads((out / "cells" / "fsdp-text-py3.95.json").read_text())
    check = skipped["checks"][0]
    assert check["status"] == "skip" and "Python 3.95 is not on this runner" in check["message"]
    assert check["failure_class"] == "infra"  # a runner that has it runs the cell next time
    assert not (envs / "fsdp-text-py3.95").exists()
    assert os.path.getsize(out / "cells" / "fsdp-text-py3.95.json") > 0
