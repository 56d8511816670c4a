"""A declared known failure through its whole life, on real runs of a fixture matrix: a failing check
becomes xfail, an expired declaration lets the failure show, and a check that passes again marks the
declaration stale; every report format says so."""
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MATRIX = """\
[matrix]
name = "kf"
checks = ["gauge"]

[axes]
backend = ["fsdp"]
model = ["text"]
device = ["cpu"]

[[known_failures]]
check = "gauge"
when = {{ device = "cpu" }}
reason = "the gauge reads high until upstream fixes it"
link = "https://github.com/example/upstream/issues/1"
expires = {expires}
"""
pytestmark = pytest.mark.slow


def run(tmp_path: Path, env: dict, name: str, value: str, expires: str) -> tuple[dict, Path]:
    (tmp_path / "input.txt").write_text(value)
    matrix = tmp_path / f"{name}.toml"
    matrix.write_text(MATRIX.format(expires=expires))
    out = tmp_path / name
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(matrix), "--out", str(out), "--env-root",
                           str(tmp_path / "envs"), "--no-index-check"],
                          cwd=ROOT, env={**env, "GAUGE_INPUT": str(tmp_path / "input.txt"),
                                         "HARNESS_EXTRA_CHECKS": "gauge=gauge"},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    (cell,) = (out / "cells").glob("*.json")
    return json.loads(cell.read_text())["checks"][0], out


def junit_case(out: Path) -> ET.Element:
    (case,) = ET.parse(out / "report.junit.xml").getroot().iter("testcase")
    return case


def test_xfail_then_expired_then_stale(tmp_path, project_env):
    check, out = run(tmp_path, project_env, "declared", "1.5", "2099-01-01")
    assert check["status"] == "xfail" and check["original_status"] == "fail"
    assert check["known_failure"]["reason"] == "the gauge reads high until upstream fixes it"
    support = json.loads((out / "support.json").read_text())
    assert [c["verdict"] for c in support["combinations"]] == ["known"]
    assert "known failure" in junit_case(out).find("skipped").get("message")
    assert "the gauge reads high" in (out / "report.html").read_text()

    check, out = run(tmp_path, project_env, "expired", "1.5", "2020-01-01")
    assert check["status"] == "fail" and check["known_failure"]["state"] == "expired"
    assert "known failure expired on 2020-01-01" in check["message"]
    assert json.loads((out / "support.json").read_text())["combinations"][0]["verdict"] == "broken"
    assert junit_case(out).find("failure").get("type") == "fail"
    assert "known failure expired" in (out / "report.md").read_text()

    check, out = run(tmp_path, project_env, "fixed", "0.5", "2099-01-01")
    assert check["status"] == "pass" and check["known_failure"]["state"].startswith("stale")
    assert json.loads((out / "support.json").read_text())["combinations"][0]["verdict"] == "works"
    case = junit_case(out)
    assert case.find("failure") is None and case.find("skipped") is None
    assert "known failure stale: the check no longer fails" in (out / "report.md").read_text()
