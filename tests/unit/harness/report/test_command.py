"""`harness report` (command.py): --format prints the report the written files hold; --previous and --fail-on-new
gate CI on new failures; --baseline compares with a committed baseline (exit 6) and is refused before anything is
written when malformed (exit 2)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from report_helpers import write_cells

from harness.report.pipeline import render_report
from harness.results.records import CellResult, CheckResult, Status, write_json_atomic

ROOT = Path(__file__).resolve().parents[4]


def harness(*args):
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True, cwd=ROOT)


def cell(tf, status, **check):
    axes = {"backend": "fsdp", "model": "text", "device": "cpu", "transformers": tf, "torch": "2.13.0"}
    return CellResult("cpu", f"fsdp-text-tf{tf}-torch2.13.0", axes,
                      checks=[CheckResult("stack-smoke", status, "msg", **check)], finished="2026-11-22T10:00:00")


def write_matrix_cell(directory: Path, matrix: str, cell_id: str) -> None:
    cell = CellResult(matrix, cell_id, {"backend": "fsdp", "model": "text"},
                      checks=[CheckResult("stack-smoke", Status.PASS, "msg")])
    write_json_atomic(directory / "cells" / f"{cell_id}.json", cell.to_dict())


def write_statuses(directory: Path, statuses: dict[str, Status]) -> None:
    for tf, status in statuses.items():
        cell = CellResult("cpu", f"fsdp-text-tf{tf}", {"backend": "fsdp", "model": "text", "transformers": tf},
                          checks=[CheckResult("stack-smoke", status, "msg"), CheckResult("nested-chunking",
                                                                                         Status.AFFECTED, "m")])
        write_json_atomic(directory / "cells" / f"{cell.cell_id}.json", cell.to_dict())


def test_format_prints_the_report_the_written_files_hold(tmp_path):
    """--format builds the report as `report DIR` does: the last known good and the first bad releases are in it,
    and nothing is written into DIR."""
    write_cells(tmp_path, [cell("5.23.0", Status.PASS)])
    (tmp_path / "first-bad.json").write_text(json.dumps({"findings": [{"text": "transformers 5.24.0 first fails"}]}))
    done = harness("report", tmp_path, "--format", "md")
    assert done.returncode == 0, done.stderr
    assert "## Last known good" in done.stdout and "- transformers 5.23.0" in done.stdout
    assert "transformers 5.24.0 first fails" in done.stdout
    assert not (tmp_path / "history.json").exists() and not (tmp_path / "report.md").exists()
    data = json.loads(harness("report", tmp_path, "--format", "json").stdout)
    assert data["last_known_good"][0].startswith("fsdp/text/stack-smoke: transformers 5.23.0")
    harness("report", tmp_path)
    assert json.loads(harness("report", tmp_path, "--format", "json").stdout) == json.loads(
        (tmp_path / "report.json").read_text())


def test_new_failures_come_first_and_gate_ci(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    write_cells(old, [cell("5.3.0", Status.PASS), cell("5.9.0", Status.PASS)])
    write_cells(new, [cell("5.3.0", Status.PASS), cell("5.9.0", Status.FAIL, failure_class="test")])
    paths, changes = render_report(new, previous=old)
    assert [c.kind for c in changes][0] == "new failure"
    md = (new / "report.md").read_text()
    table = md[md.index("| transformers"):]
    assert table.index("5.9.0") < table.index("5.3.0")  # the row with the new failure first
    assert "NEW FAILURE" in md and "Changes since the previous run" in md
    assert "repro: python -m harness repro fsdp-text-tf5.9.0-torch2.13.0 --check stack-smoke" in md
    assert json.loads((new / "report.json").read_text())["changes"]["new failure"] == 1

    done = harness("report", new, "--previous", old, "--fail-on-new")
    assert done.returncode == 5 and "1 new failures" in done.stderr
    assert harness("report", new, "--previous", old).returncode == 0
    assert harness("report", new, "--fail-on-new").returncode == 2


def test_a_previously_passing_cell_whose_file_is_now_truncated_is_a_new_failure(tmp_path):
    """The row must not just disappear: its checks count as failing, and --fail-on-new exits 5 naming it."""
    old, new = tmp_path / "old", tmp_path / "new"
    write_cells(old, [cell("5.3.0", Status.PASS), cell("5.9.0", Status.PASS), cell("5.10.0", Status.FAIL)])
    write_cells(new, [cell("5.3.0", Status.PASS), cell("5.9.0", Status.PASS), cell("5.10.0", Status.FAIL)])
    for tf in ("5.9.0", "5.10.0"):
        path = new / "cells" / f"fsdp-text-tf{tf}-torch2.13.0.json"
        path.write_text(path.read_text()[:40])
    done = harness("report", new, "--previous", old, "--fail-on-new")
    assert done.returncode == 5, done.stderr
    assert "1 new failures: fsdp-text-tf5.9.0-torch2.13.0 stack-smoke" in done.stderr
    _, changes = render_report(new, previous=old)
    lost = {c.cell_id: (c.kind, c.after) for c in changes if c.after == "unreadable"}
    assert lost == {"fsdp-text-tf5.9.0-torch2.13.0": ("new failure", "unreadable"),
                    "fsdp-text-tf5.10.0-torch2.13.0": ("still failing", "unreadable")}
    problems = json.loads((new / "report.json").read_text())["problems"]
    assert any("cannot be used, so each of their checks counts as failing" in p for p in problems)


def test_a_previous_run_of_an_older_schema_is_refused_clearly(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    (old / "cells").mkdir(parents=True)
    (old / "cells" / "x.json").write_text(json.dumps({"schema_version": 0, "cell": "x"}))
    write_cells(new, [cell("5.3.0", Status.PASS)])
    done = harness("report", new, "--previous", old)
    assert done.returncode == 4
    assert "--previous" in done.stderr and "schema_version 0" in done.stderr


def test_results_of_another_matrix_are_said_to_share_nothing(tmp_path):
    run, other, same = tmp_path / "run", tmp_path / "other", tmp_path / "same"
    write_matrix_cell(run, "cpu", "fsdp-text-tf5.3.0")
    write_matrix_cell(other, "cuda", "fsdp-text-cuda-tf5.3.0")
    write_matrix_cell(same, "cpu", "fsdp-text-tf5.3.0")
    done = harness("report", run, "--previous", other)
    assert done.returncode == 0, done.stderr
    assert f"--previous {other}: shares no (cell, check) with {run}; nothing was compared" in done.stderr
    assert "shares no (cell, check) with this run" in (run / "report.md").read_text()
    json_done = harness("report", run, "--previous", other, "--format", "json")
    assert "shares no (cell, check)" in json_done.stdout and "shares no (cell, check)" in json_done.stderr
    done = harness("report", run, "--previous", same)  # overlapping results: no such note
    assert done.returncode == 0 and "shares no" not in done.stderr
    assert "shares no" not in (run / "report.md").read_text()


def test_an_unchanged_run_passes_and_a_changed_verdict_fails_naming_it(tmp_path):
    run, baseline = tmp_path / "run", tmp_path / "baseline.json"
    write_statuses(run, {"5.3.0": Status.PASS, "5.9.0": Status.PASS})
    assert harness("report", run, "--write-baseline", baseline).returncode == 0
    data = json.loads(baseline.read_text())
    assert data["cells"] == {"fsdp-text-tf5.3.0": {"nested-chunking": "affected", "stack-smoke": "pass"},
                             "fsdp-text-tf5.9.0": {"nested-chunking": "affected", "stack-smoke": "pass"}}
    assert data["written_by"].startswith("python -m harness report") and "--write-baseline" in data["written_by"]
    assert harness("report", run, "--baseline", baseline).returncode == 0

    write_statuses(run, {"5.9.0": Status.FAIL, "5.10.0": Status.PASS})  # a pin bump broke 5.9.0; a new cell appeared
    done = harness("report", run, "--baseline", baseline)
    assert done.returncode == 6, done.stderr
    assert "fsdp-text-tf5.9.0 stack-smoke: expected pass, got fail" in done.stderr
    assert "fsdp-text-tf5.10.0: expected not in the baseline, got run" in done.stderr
    assert "--write-baseline" in done.stderr.splitlines()[-1]  # the last line says how to accept the change
    assert (run / "report.html").exists()  # the report is still written for people to read

    assert harness("report", run, "--write-baseline", baseline).returncode == 0  # accepting the change
    assert harness("report", run, "--baseline", baseline).returncode == 0


def test_a_malformed_baseline_is_bad_input(tmp_path):
    write_statuses(tmp_path / "run", {"5.3.0": Status.PASS})
    for text in ("{not json", "[]", json.dumps({"schema": "other"}),
                 json.dumps({"schema": "qwen35-verdict-baseline", "schema_version": 1, "cells": {"a": "pass"}})):
        (tmp_path / "b.json").write_text(text)
        done = harness("report", tmp_path / "run", "--baseline", tmp_path / "b.json")
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        assert done.returncode == 2 and len(errors) == 1 and "b.json" in errors[0], done.stderr
    assert harness("report", tmp_path / "run", "--baseline", tmp_path / "missing.json").returncode == 2


def test_a_baseline_with_an_unknown_status_or_of_another_matrix_is_bad_input_before_anything_is_written(tmp_path):
    run, baseline = tmp_path / "run", tmp_path / "baseline.json"
    write_statuses(run, {"5.3.0": Status.PASS})
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
