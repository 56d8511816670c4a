"""`run --ray`: cells run as Ray tasks on a real local cluster, their results land in the driver's
output directory, a dead worker's cell is sent again (the try recorded) or recorded as a crash with what it
left (never lost), finished cells are not sent again; on two nodes, a node killed mid-cell; and the address,
resources and shipped files are validated."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
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


def test_device_cells_ask_for_their_resource_and_ray_retries_nothing_itself():
    assert "num_gpus" not in ray_dispatch.task_options(_cell("cpu"))
    assert ray_dispatch.task_options(_cell("cuda"))["num_gpus"] == 1
    npu = ray_dispatch.task_options(_cell("npu"))
    assert npu["resources"] == {"NPU": 1} and npu["max_retries"] == 0  # the driver sends a lost cell again


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
def test_a_worker_that_dies_is_sent_again_and_its_try_recorded(tmp_path, project_env):
    env = {**project_env, "MISBEHAVE": "kill-runner-once", "MISBEHAVE_MARKER": str(tmp_path / "killed-once")}
    cells = run_on_ray(tmp_path, env, "--retries", "1")
    assert (tmp_path / "killed-once").exists()
    statuses = sorted(c["checks"][0]["status"] for c in cells.values())
    assert statuses == ["pass", "pass"], cells  # one worker was killed; its task ran again
    tried = [c["checks"][0] for c in cells.values() if c["checks"][0]["attempts"]]
    assert len(tried) == 1 and tried[0]["flaky"], cells  # the lost try, as the local runner records one
    assert tried[0]["attempts"][0]["failure_class"] == "infra" and "lost" in tried[0]["attempts"][0]["reason"]


@pytest.mark.slow
@needs_ray
def test_a_worker_that_keeps_dying_is_recorded_as_a_crash_not_lost(tmp_path, project_env):
    cells = run_on_ray(tmp_path, {**project_env, "MISBEHAVE": "kill-runner"}, "--retries", "0")
    for cell in cells.values():
        (check,) = cell["checks"]
        assert check["status"] == "crash" and check["failure_class"] == "infra", check
        assert "Ray task" in check["message"]
        # what the dead try left in the shared directory is named: its lock, setup log, check log, start
        assert cell["lock"] and (tmp_path / "out" / cell["lock"]).is_file(), cell
        assert cell["setup_log"] and cell["started"] and check["log"].endswith("misbehave.log"), cell


@pytest.mark.slow
@needs_ray
def test_a_node_killed_mid_cell_on_a_two_node_cluster(tmp_path, project_env, monkeypatch):
    """Two nodes of one machine (Ray's own cluster_utils): the cell starts on the only node with a CPU for it, that
    node dies mid-check, and the driver sends the cell again; it passes on the node that joined, with the lost try
    recorded on its check."""
    from ray.cluster_utils import Cluster

    pids = tmp_path / "pids"
    # The nodes' workers inherit this process's environment (an external cluster, not the driver's `--ray local`);
    # a home of its own, so no auth token left in the real one turns the cluster to token authentication.
    worker = {"MISBEHAVE": "slow", "MISBEHAVE_SECONDS": "20", "MISBEHAVE_PIDS": str(pids), "RAY_AUTH_MODE": "disabled",
              "HOME": str(tmp_path / "home"), "PYTHONPATH": project_env["PYTHONPATH"],
              "HARNESS_EXTRA_CHECKS": project_env["HARNESS_EXTRA_CHECKS"]}
    for name, value in worker.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "home").mkdir()
    (tmp_path / "m.toml").write_text(MATRIX)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        first = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        driver = subprocess.Popen(
            [sys.executable, "-m", "harness", "run", str(tmp_path / "m.toml"), "--out", str(tmp_path / "out"),
             "--env-root", str(tmp_path / "envs"), "--no-index-check", "--no-report", "--cells", "fsdp-text",
             "--retries", "1", "--ray", cluster.address],
            cwd=ROOT, env={**project_env, **worker}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while not (pids.exists() and pids.read_text().strip()) and driver.poll() is None:
            assert time.monotonic() < deadline, "the check never started"
            time.sleep(0.5)
        cluster.add_node(num_cpus=1)
        cluster.remove_node(first, allow_graceful=False)
        _, stderr = driver.communicate(timeout=300)
        assert driver.returncode == 0, stderr[-3000:]
    finally:
        cluster.shutdown()
    cell = json.loads((tmp_path / "out" / "cells" / "fsdp-text.json").read_text())
    (check,) = cell["checks"]
    assert check["status"] == "pass" and check["flaky"], check
    (lost,) = check["attempts"]
    assert lost["failure_class"] == "infra" and "was lost" in lost["reason"], lost
    assert "sending it again (retry 1 of 1)" in stderr
