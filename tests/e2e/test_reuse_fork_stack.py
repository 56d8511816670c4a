"""Reuse with the fork server on the real stack: two cells that differ only in transformers, their checks forked
from a server that preloaded torch and transformers. nested-chunking, which never imports transformers, counts
none of it and is reused by the second cell; a check that reaches transformers only through trainers/ counts it
and what it pulled in, and runs again where its version differs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MATRIX = """\
[matrix]
name = "forkreuse"
checks = ["nested-chunking", "via-trainers"]

[axes]
transformers = ["5.9.0", "5.23.0"]
torch = ["2.13.0"]
tensordict = ["0.15.3"]
backend = ["fsdp"]
model = ["text"]
device = ["cpu"]
"""
FIRST, SECOND = (f"fsdp-text-tf{tf}-torch2.13.0-td0.15.3" for tf in ("5.9.0", "5.23.0"))
# What transformers imports from other distributions (its own requirements, present in both cells).
TRANSFORMERS_PULLS_IN = {"transformers", "huggingface-hub", "tokenizers", "safetensors", "regex", "pyyaml", "torch"}
pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform != "linux", reason="the check server forks (Linux)")]


def test_a_forked_check_counts_the_preloaded_packages_it_touches_and_is_reused_across_the_others(
        tmp_path, project_env):
    (tmp_path / "m.toml").write_text(MATRIX)
    env = {**project_env, "HARNESS_EXTRA_CHECKS": "via-trainers=reuse_via_trainers"}
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(tmp_path / "m.toml"), "--out",
                           str(tmp_path / "out"), "--env-root", str(tmp_path / "envs"), "--no-index-check",
                           "--no-report", "--jobs", "1"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    cells = {}
    for cell in (FIRST, SECOND):
        data = json.loads((tmp_path / "out" / "cells" / f"{cell}.json").read_text())
        cells[cell] = {check["check"]: check for check in data["checks"]}
        log = (tmp_path / "out" / "cells" / cell / "logs" / "setup.log").read_text()
        assert "transformers" in log and "each check counts the preloaded packages it touches" in log
    nested, via = cells[FIRST]["nested-chunking"], cells[FIRST]["via-trainers"]
    assert {"torch", "tensordict"} <= set(nested["loaded"]) and "transformers" not in nested["loaded"]
    assert TRANSFORMERS_PULLS_IN <= set(via["loaded"]) and via["loaded"]["transformers"] == "5.9.0"
    assert cells[SECOND]["nested-chunking"]["reused_from"] == FIRST
    assert cells[SECOND]["nested-chunking"]["status"] == nested["status"]
    rerun = cells[SECOND]["via-trainers"]
    assert rerun["reused_from"] is None and rerun["loaded"]["transformers"] == "5.23.0"
    assert rerun["metrics"]["pid"] != via["metrics"]["pid"]
