"""harness.results.verdict_diff: two results directories compared entry by entry (cell, check status,
sub-verdict status), identical or with every difference named."""
import subprocess
import sys
from pathlib import Path

from harness.results import verdict_diff
from harness.results.records import CellResult, CheckResult, Status, Verdict, cell_path, write_json_atomic

ROOT = Path(__file__).resolve().parents[4]


def cell(cell_id: str, *checks: CheckResult) -> CellResult:
    return CellResult("m", cell_id, {"backend": "fsdp"}, checks=list(checks))


def offload(trainer: Status = Status.PASS, upstream: Status = Status.AFFECTED) -> CheckResult:
    return CheckResult("offload-regression", Status.PASS,
                       verdicts=[Verdict("upstream", upstream), Verdict("trainer", trainer)])


def write_run(directory: Path, cells: list[CellResult]) -> Path:
    for one in cells:
        write_json_atomic(cell_path(directory, one.cell_id), one.to_dict())
    return directory


def test_identical_runs_have_no_difference(tmp_path):
    run = [cell("a", offload(), CheckResult("nested-chunking", Status.XFAIL)), cell("b", offload())]
    assert verdict_diff.compare_dirs(write_run(tmp_path / "one", run), write_run(tmp_path / "two", run)) == []


def test_a_changed_sub_verdict_is_named_even_when_the_check_status_is_the_same():
    found = verdict_diff.differences([cell("a", offload())], [cell("a", offload(trainer=Status.FAIL))])
    assert [str(d) for d in found] == ["a offload-regression trainer: pass -> fail"]


def test_changed_status_missing_check_and_missing_cell():
    first = [cell("a", offload(), CheckResult("grpo-convergence", Status.PASS)), cell("b", offload())]
    second = [cell("a", CheckResult("offload-regression", Status.FAIL, verdicts=offload().verdicts)),
              cell("c", offload())]
    assert [str(d) for d in verdict_diff.differences(first, second)] == [
        "a grpo-convergence: pass -> absent",
        "a offload-regression: pass -> fail",
        "b: present -> absent",  # one line for the cell, not one per check
        "c: absent -> present",
    ]


def test_command_line_exit_statuses(tmp_path):
    same = write_run(tmp_path / "same", [cell("a", offload())])
    other = write_run(tmp_path / "other", [cell("a", offload(upstream=Status.PASS))])
    (tmp_path / "empty").mkdir()
    (tmp_path / "corrupt" / "cells").mkdir(parents=True)
    (tmp_path / "corrupt" / "cells" / "x.json").write_text("{not json")

    def run(*args):
        return subprocess.run([sys.executable, "-m", "harness.results.verdict_diff", *map(str, args)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)

    assert run(same, same).returncode == 0
    differ = run(same, other)
    assert differ.returncode == 6 and "a offload-regression upstream: affected -> pass" in differ.stdout
    empty = run(same, tmp_path / "empty")
    assert empty.returncode == 4 and "no cell results" in empty.stderr
    corrupt = run(same, tmp_path / "corrupt")
    assert corrupt.returncode == 4 and "x.json: not a readable cell result" in corrupt.stderr
    assert run(same).returncode == 2
