"""The nox sessions users expect, cells generated from the matrix files, and accelerator sessions
that stop at once on a machine without the accelerator."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("nox") is None and subprocess.run(
    [sys.executable, "-m", "nox", "--version"], capture_output=True).returncode != 0, reason="nox is not installed")


def nox(*args):
    return subprocess.run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), *args], capture_output=True,
                          text=True, cwd=ROOT)


def test_the_sessions_users_expect_are_listed():
    done = nox("-l")
    assert done.returncode == 0
    for name in ("cpu-fsdp-qwen35", "gpu-fsdp-qwen35", "gpu-megatron-qwen35", "npu-matrix", "report", "tests",
                 "tests-e2e", "bench"):
        assert f" {name} " in done.stdout or f"* {name} " in done.stdout
    assert "* cpu-fsdp-qwen35" in done.stdout  # the default


def test_ci_runs_every_test_session_and_checks_its_skips():
    """.ci/run runs each tests* session and hands its JUnit file to .ci/skipped_everywhere.py: a test session
    left out would go unrun in CI, or its skips unchecked."""
    names = [s["session"] for s in json.loads(nox("-l", "--json", "-t", "all").stdout)
             if s["session"].startswith("tests")]
    assert {"tests", "tests-e2e"} <= set(names)
    script = (ROOT / ".ci" / "run").read_text()
    skips = script[script.index("skipped_everywhere.py"):]
    for name in names:
        assert f"nox -s {name} " in script, name
        assert f"reports/tests/{name}.xml" in skips, name


def test_every_cell_is_a_session_with_its_id_as_call_spec():
    done = nox("-l", "--json", "-t", "cell")
    sessions = json.loads(done.stdout)
    from harness import matrix

    loaded = {p.stem: matrix.load(p) for p in (ROOT / "matrices").glob("*.toml")}
    expected = {f"cell-{name}({c.id})" for name, m in loaded.items() if not m.offline for c in m.cells}
    assert {s["session"] for s in sessions} == expected
    for s in sessions:
        assert s["call_spec"]["cell"] in s["session"]
    # An offline box's cells are sessions too, under their own tag, so the nightly (`-t cell`) never takes them.
    offline = json.loads(nox("-l", "--json", "-t", "offline-cell").stdout)
    assert {s["session"] for s in offline} == \
        {f"cell-{name}({c.id})" for name, m in loaded.items() if m.offline for c in m.cells} != set()


def test_tags_select_a_slice():
    done = nox("-l", "--json", "-t", "smoke")
    assert [s["call_spec"]["cell"] for s in json.loads(done.stdout)] == ["fsdp-text-tf5.23.0-torch2.13.0-td0.15.3"]


@pytest.mark.parametrize("session, device", [("gpu-fsdp-qwen35", "cuda"), ("npu-matrix", "npu")])
def test_accelerator_sessions_fail_fast_without_the_accelerator(session, device):
    from harness.envs import devices

    if devices.probe(device)[0]:
        pytest.skip(f"this machine has {device}")
    done = nox("-s", session)
    assert done.returncode != 0
    assert f"needs device '{device}'" in done.stderr
    assert "nox -s cpu-fsdp-qwen35" in done.stderr
