"""The committed baseline of expected verdicts: written by a command, compared by `report --baseline`
(exit 6 naming each changed cell and check), refused clearly when malformed (exit 2)."""
import json
import subprocess
import sys
from pathlib import Path

from harness import matrix
from harness.report.baseline import read_baseline
from harness.results.records import CellResult, CheckResult, Status, write_json_atomic

ROOT = Path(__file__).resolve().parents[4]
BASELINES = ROOT / "matrices" / "baselines"


def write(directory: Path, statuses: dict[str, Status]) -> None:
    for tf, status in statuses.items():
        cell = CellResult("cpu", f"fsdp-text-tf{tf}", {"backend": "fsdp", "model": "text", "transformers": tf},
                          checks=[CheckResult("stack-smoke", status, "msg"), CheckResult("nested-chunking",
                                                                                         Status.AFFECTED, "m")])
        write_json_atomic(directory / "cells" / f"{cell.cell_id}.json", cell.to_dict())


def harness(*args):
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True, cwd=ROOT)


def test_an_unchanged_run_passes_and_a_changed_verdict_fails_naming_it(tmp_path):
    run, baseline = tmp_path / "run", tmp_path / "baseline.json"
    write(run, {"5.3.0": Status.PASS, "5.9.0": Status.PASS})
    assert harness("report", run, "--write-baseline", baseline).returncode == 0
    data = json.loads(baseline.read_text())
    assert data["cells"] == {"fsdp-text-tf5.3.0": {"nested-chunking": "affected", "stack-smoke": "pass"},
                             "fsdp-text-tf5.9.0": {"nested-chunking": "affected", "stack-smoke": "pass"}}
    assert data["written_by"].startswith("python -m harness report") and "--write-baseline" in data["written_by"]
    assert harness("report", run, "--baseline", baseline).returncode == 0

    write(run, {"5.9.0": Status.FAIL, "5.10.0": Status.PASS})  # a pin bump broke 5.9.0; a new cell appeared
    done = harness("report", run, "--baseline", baseline)
    assert done.returncode == 6, done.stderr
    assert "fsdp-text-tf5.9.0 stack-smoke: expected pass, got fail" in done.stderr
    assert "fsdp-text-tf5.10.0: expected not in the baseline, got run" in done.stderr
    assert "--write-baseline" in done.stderr.splitlines()[-1]  # the last line says how to accept the change
    assert (run / "report.html").exists()  # the report is still written for people to read

    assert harness("report", run, "--write-baseline", baseline).returncode == 0  # accepting the change
    assert harness("report", run, "--baseline", baseline).returncode == 0


def test_a_malformed_baseline_is_bad_input(tmp_path):
    write(tmp_path / "run", {"5.3.0": Status.PASS})
    for text in ("{not json", "[]", json.dumps({"schema": "other"}),
                 json.dumps({"schema": "qwen35-verdict-baseline", "schema_version": 1, "cells": {"a": "pass"}})):
        (tmp_path / "b.json").write_text(text)
        done = harness("report", tmp_path / "run", "--baseline", tmp_path / "b.json")
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert done.returncode == 2 and len(errors) == 1 and "b.json" in errors[0], done.stderr
    assert harness("report", tmp_path / "run", "--baseline", tmp_path / "missing.json").returncode == 2


def test_the_committed_cpu_smoke_baseline_covers_exactly_the_pull_request_slice():
    """ci.yml's cpu-smoke job runs `nox -t smoke boundary`: the baseline names exactly those cells."""
    expected = read_baseline(BASELINES / "cpu-smoke.json")
    cells = matrix.load(ROOT / "matrices" / "cpu.toml").cells
    slice_ids = {c.id for c in cells if {"smoke", "boundary"} & set(c.tags)}
    assert set(expected) == slice_ids
    statuses = {s.value for s in Status}
    for checks in expected.values():
        assert set(checks) and set(checks.values()) <= statuses
    # Every check the slice runs has an expected status: a check added to the matrix without a baseline
    # entry would turn the pull-request job red ("expected absent, got skip") on every pull request.
    for cell in cells:
        if cell.id in expected:
            assert set(expected[cell.id]) == set(cell.checks), cell.id
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    assert "nox -t smoke boundary" in workflow and "--baseline matrices/baselines/cpu-smoke.json" in workflow


def test_a_baseline_with_an_unknown_status_or_of_another_matrix_is_bad_input_before_anything_is_written(tmp_path):
    run, baseline = tmp_path / "run", tmp_path / "baseline.json"
    write(run, {"5.3.0": Status.PASS})
    assert harness("report", run, "--write-baseline", baseline).returncode == 0
    (run / "report.html").unlink()
    data = json.loads(baseline.read_text())

    data["cells"]["fsdp-text-tf5.3.0"]["stack-smoke"] = "passed"
    baseline.write_text(json.dumps(data))
    done = harness("report", run, "--baseline", baseline)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"error: --baseline {baseline}: cells.fsdp-text-tf5.3.0.stack-smoke: unknown status "
                           "'passed'; expected one of affected, crash, error, fail, pass, skip, timeout, xfail\n")

    data["cells"]["fsdp-text-tf5.3.0"]["stack-smoke"] = "pass"
    data["matrix"] = "cuda"
    baseline.write_text(json.dumps(data))
    done = harness("report", run, "--baseline", baseline)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"error: --baseline {baseline}: written for matrix cuda; these results are of "
                           "matrix cpu\n")
    assert not (run / "report.html").exists()  # refused before the report was rendered
