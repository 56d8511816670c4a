"""`run --ray`: cells run as Ray tasks on a real local cluster, their results land in the driver's
output directory, a dead worker is retried by Ray or recorded as a crash (never lost), finished
cells are not sent again; and the address, resources and shipped files are validated."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import InputError
from harness.execution import ray_dispatch
from harness.matrix import Cell
from harness.results.records import CellResult, CheckResult, Status

ROOT = Path(__file__).resolve().parents[2]
MATRIX = """\
[matrix]
name = "r"
checks = ["misbehave"]

[axes]
backend = ["fsdp"]
model = ["text", "vl"]
device = ["cpu"]
"""


def _cell(device: str = "cpu") -> Cell:
    return Cell("r", f"fsdp-text-{device}", {"backend": "fsdp", "model": "text", "device": device}, (), ("misbehave",))


@pytest.mark.parametrize("address", ["local", "auto", "10.0.0.5:6379", "ray://head.example.org:10001",
                                     "[::1]:6379"])
def test_valid_addresses(address):
    assert ray_dispatch.validate_address(address) == address


@pytest.mark.parametrize("address", ["", "head", "head:0", "head:70000", "head:6379; rm -rf /", "$(id):1",
                                     "http://head:8265", "-head:6379"])
def test_invalid_addresses_are_input_errors(address):
    with pytest.raises(InputError, match="not a Ray address"):
        ray_dispatch.validate_address(address)


def test_bad_address_on_the_command_line_exits_2_before_anything_runs(tmp_path, project_env):
    (tmp_path / "m.toml").write_text(MATRIX)
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(tmp_path / "m.toml"), "--out",
                           str(tmp_path / "out"), "--no-index-check", "--ray", "head:6379;reboot"],
                          cwd=ROOT, env=project_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--ray" in done.stderr and not (tmp_path / "out").exists()


def test_device_cells_ask_for_their_resource():
    assert "num_gpus" not in ray_dispatch.task_options(_cell("cpu"), 2)
    assert ray_dispatch.task_options(_cell("cuda"), 2)["num_gpus"] == 1
    npu = ray_dispatch.task_options(_cell("npu"), 0)
    assert npu["resources"] == {"NPU": 1} and npu["max_retries"] == 0


def test_shipped_files_never_leave_the_output_directory(tmp_path):
    out = tmp_path / "out"
    written = ray_dispatch.land_files(out, {"cells/c/lock.txt": "torch==2.13.0\n", "../escape.txt": "x",
                                            "/etc/evil": "x", "cells/../../evil": "x"})
    assert written == [out / "cells/c/lock.txt"]
    assert not (tmp_path / "escape.txt").exists() and (out / "cells/c/lock.txt").read_text() == "torch==2.13.0\n"
    assert ray_dispatch.land_files(out, {"cells/c/lock.txt": "other"}) == []  # the driver's own copy wins


def test_long_logs_ship_only_their_tail(tmp_path):
    log = tmp_path / "cells" / "c" / "logs" / "misbehave.log"
    log.parent.mkdir(parents=True)
    log.write_bytes(b"start\n" + b"x" * (2 * ray_dispatch.LOG_TAIL_BYTES) + b"\nthe end\n")
    result = CellResult("m", "c", {}, [])
    result.checks = [CheckResult("misbehave", Status.FAIL, "no", log="cells/c/logs/misbehave.log")]
    shipped = ray_dispatch.collect_files(tmp_path, result)["cells/c/logs/misbehave.log"]
    assert shipped.endswith("the end\n") and "start" not in shipped and "cut by the Ray dispatcher" in shipped


def test_a_lost_task_keeps_the_checks_it_already_had(tmp_path):
    from harness import matrix as matrices
    from harness.execution.cell import RunOptions

    (tmp_path / "m.toml").write_text(MATRIX.replace('"misbehave"', '"stack-smoke"'))  # only its name is used
    cell = _cell()
    earlier = CellResult("r", cell.id, dict(cell.axes), [])
    earlier.checks = [CheckResult("older-check", Status.PASS, "fine")]
    matrix = matrices.load(tmp_path / "m.toml")
    opts = RunOptions(out_dir=tmp_path / "out", retries=1)
    result = ray_dispatch.crash_result(cell, matrix, opts, earlier, "WorkerCrashedError: the worker died")
    by_name = {c.check: c for c in result.checks}
    assert by_name["older-check"].status is Status.PASS
    assert by_name["misbehave"].status is Status.CRASH and by_name["misbehave"].failure_class == "infra"
    assert "the worker died" in by_name["misbehave"].message


# --- a real local cluster --------------------------------------------------------------------------

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed")


def run_on_ray(tmp_path, env, *extra: str):
    (tmp_path / "m.toml").write_text(MATRIX)
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(tmp_path / "m.toml"), "--out",
                           str(tmp_path / "out"), "--env-root", str(tmp_path / "envs"), "--no-index-check",
                           "--no-report", "--ray", "local", *extra],
                          cwd=ROOT, env={**env, "RAY_DEDUP_LOGS": "0"}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    cells = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "out" / "cells").glob("*.json")}
    assert len(cells) == 2, sorted(cells)
    return cells


@pytest.mark.slow
@needs_ray
def test_cells_run_as_ray_tasks_and_land_in_the_output_directory(tmp_path, project_env):
    cells = run_on_ray(tmp_path, {**project_env, "MISBEHAVE": "pass"})
    out = tmp_path / "out"
    for cell in cells.values():
        (check,) = cell["checks"]
        assert check["status"] == "pass"
        assert check["metrics"]["runner"].startswith("ray::"), check["metrics"]  # a Ray worker ran it
        assert (out / check["log"]).is_file() and (out / cell["lock"]).is_file()
    # A second run sends nothing: the finished cells are reused as they are.
    stamps = {p: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}
    run_on_ray(tmp_path, {**project_env, "MISBEHAVE": "kill-runner"})
    assert {p: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")} == stamps


@pytest.mark.slow
@needs_ray
def test_a_worker_that_dies_is_retried_by_ray(tmp_path, project_env):
    env = {**project_env, "MISBEHAVE": "kill-runner-once", "MISBEHAVE_MARKER": str(tmp_path / "killed-once")}
    cells = run_on_ray(tmp_path, env, "--retries", "1")
    assert (tmp_path / "killed-once").exists()
    statuses = sorted(c["checks"][0]["status"] for c in cells.values())
    assert statuses == ["pass", "pass"], cells  # one worker was killed; its task ran again


@pytest.mark.slow
@needs_ray
def test_a_worker_that_keeps_dying_is_recorded_as_a_crash_not_lost(tmp_path, project_env):
    cells = run_on_ray(tmp_path, {**project_env, "MISBEHAVE": "kill-runner"}, "--retries", "0")
    for cell in cells.values():
        (check,) = cell["checks"]
        assert check["status"] == "crash" and check["failure_class"] == "infra", check
        assert "Ray task" in check["message"]
