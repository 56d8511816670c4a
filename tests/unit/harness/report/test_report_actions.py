"""What people act on, in the rendered report: new failures first, flaky and failure classes,
repro commands, stale known failures, last known good, and --fail-on-new."""
import json
import subprocess
import sys
from pathlib import Path

from harness.report import render_report
from harness.results.records import CellResult, CheckResult, Status, write_json_atomic

ROOT = Path(__file__).resolve().parents[4]


def write(directory: Path, cells):
    for cell in cells:
        write_json_atomic(directory / "cells" / f"{cell.cell_id}.json", cell.to_dict())


def cell(tf, status, **check):
    axes = {"backend": "fsdp", "model": "text", "device": "cpu", "transformers": tf, "torch": "2.13.0"}
    return CellResult("cpu", f"fsdp-text-tf{tf}-torch2.13.0", axes,
                      checks=[CheckResult("stack-smoke", status, "msg", **check)], finished="2026-11-22T10:00:00")


def harness(*args):
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True, cwd=ROOT)


def test_new_failures_come_first_and_gate_ci(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    write(old, [cell("5.3.0", Status.PASS), cell("5.9.0", Status.PASS)])
    write(new, [cell("5.3.0", Status.PASS), cell("5.9.0", Status.FAIL, failure_class="test")])
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


def test_a_previous_run_of_an_older_schema_is_refused_clearly(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    (old / "cells").mkdir(parents=True)
    (old / "cells" / "x.json").write_text(json.dumps({"schema_version": 0, "cell": "x"}))
    write(new, [cell("5.3.0", Status.PASS)])
    done = harness("report", new, "--previous", old)
    assert done.returncode == 4
    assert "--previous" in done.stderr and "schema_version 0" in done.stderr


def test_flaky_classes_and_stale_known_failures_are_shown(tmp_path):
    write(tmp_path, [
        cell("5.3.0", Status.PASS, flaky=True, attempts=[{"status": "crash", "reason": "SIGKILL"}]),
        cell("5.5.3", Status.ERROR, failure_class="infra"),
        cell("5.9.0", Status.PASS, known_failure={"reason": "r", "link": "https://x.test/1", "expires": "2026-01-01",
                                                  "state": "stale: the check no longer fails"}),
    ])
    render_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    html = (tmp_path / "report.html").read_text()
    for text in ("flaky: passed after 1 failed try", "class: infra", "known failure stale: the check no longer fails"):
        assert text in md and text in html


def test_last_known_good_is_listed_and_kept_across_renders(tmp_path):
    write(tmp_path, [cell("5.23.0", Status.PASS)])
    render_report(tmp_path)
    write(tmp_path, [cell("5.23.0", Status.FAIL, failure_class="test")])
    render_report(tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "## Last known good" in md and "- transformers 5.23.0" in md and "— for fsdp/text/stack-smoke" in md
