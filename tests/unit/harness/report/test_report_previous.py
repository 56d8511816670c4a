"""`report --previous` on results that share no (cell, check) with the run says so, on stderr and in the
report, instead of calling every entry unchanged in silence."""
import subprocess
import sys
from pathlib import Path

from harness.results.records import CellResult, CheckResult, Status, write_json_atomic

ROOT = Path(__file__).resolve().parents[4]


def write(directory: Path, matrix: str, cell_id: str) -> None:
    cell = CellResult(matrix, cell_id, {"backend": "fsdp", "model": "text"},
                      checks=[CheckResult("stack-smoke", Status.PASS, "msg")])
    write_json_atomic(directory / "cells" / f"{cell_id}.json", cell.to_dict())


def harness(*args):
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True, cwd=ROOT)


def test_results_of_another_matrix_are_said_to_share_nothing(tmp_path):
    run, other, same = tmp_path / "run", tmp_path / "other", tmp_path / "same"
    write(run, "cpu", "fsdp-text-tf5.3.0")
    write(other, "cuda", "fsdp-text-cuda-tf5.3.0")
    write(same, "cpu", "fsdp-text-tf5.3.0")
    done = harness("report", run, "--previous", other)
    assert done.returncode == 0, done.stderr
    assert f"--previous {other}: shares no (cell, check) with {run}; nothing was compared" in done.stderr
    assert "shares no (cell, check) with this run" in (run / "report.md").read_text()
    json_done = harness("report", run, "--previous", other, "--format", "json")
    assert "shares no (cell, check)" in json_done.stdout and "shares no (cell, check)" in json_done.stderr
    done = harness("report", run, "--previous", same)  # overlapping results: no such note
    assert done.returncode == 0 and "shares no" not in done.stderr
    assert "shares no" not in (run / "report.md").read_text()
