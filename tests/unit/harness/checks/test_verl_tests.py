"""verl-tests end to end on a stand-in verl release and its sdist (tests/helpers/verl_suite_helpers.py): a verdict
per test file, a broken verl helper turning its file red, a missing module never counted as verl's failure, the
row's place against verl's declared range said, and the suite held to the installed verl."""
from __future__ import annotations

import sys
import textwrap

import pytest
from verl_suite_helpers import BREAKER, BROKEN_IMPORT, SUITE, fake_sdist, fake_verl

from harness.checks import CHECKS, CORES_VARIABLE, CheckOptions
from harness.checks import verl_tests as check
from harness.checks.support import verl
from harness.checks.verl_tests import selection, source, tools
from harness.checks.verl_tests.pytest_run import FileOutcome
from harness.results.records import Status


@pytest.fixture
def row(tmp_path, monkeypatch):
    """verl 9.9.0 installed (declaring tensordict<=0.10.0), its sdist in find-links, every tool present."""
    site = fake_verl(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    for name in [m for m in sys.modules if m == "verl" or m.startswith("verl.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setenv("UV_FIND_LINKS", str(tmp_path / "links"))
    monkeypatch.setenv(source.CACHE_VARIABLE, str(tmp_path / "cache"))
    chosen = tmp_path / "selection.toml"
    chosen.write_text(textwrap.dedent("""\
        include = ["tests/*_on_cpu.py"]
        timeout = 0
        [[leave_out]]
        path = "tests/single_controller/*"
        reason = "Ray worker groups"
        """))
    monkeypatch.setenv(selection.OVERRIDE, str(chosen))
    monkeypatch.setattr(tools, "overlay", lambda *args, **kwargs: tools.Overlay(None, [], [
        {"requirement": "pytest", "reason": "runs the suite", "source": "present in the row"}]))
    monkeypatch.setattr(verl, "range_status", lambda: {"tensordict": {
        "declared": "<=0.10.0", "installed": "0.15.3", "inside": False}})
    monkeypatch.setattr(verl, "outside_range", lambda status=None: ["tensordict 0.15.3 (verl 9.9.0 declares "
                                                                   "<=0.10.0)"])
    return tmp_path


def _run(tmp_path, files=None, max_ranks=2):
    fake_sdist(tmp_path / "links", files)
    return check.run(CheckOptions(work_dir=tmp_path, max_ranks=max_ranks))


def test_no_verl_in_the_row_is_a_skip_saying_so(monkeypatch, tmp_path):
    monkeypatch.setattr(verl, "installed", lambda: None)
    result = check.run(CheckOptions(work_dir=tmp_path))
    assert result.status is Status.SKIP and result.message == "no verl in this row"


def test_each_test_file_gets_a_verdict_and_a_missing_module_is_no_failure_of_verl(row):
    result = _run(row)
    verdicts = {v.name: v for v in result.verdicts}
    assert set(verdicts) == {"tests/test_math_on_cpu.py", "tests/test_concat_on_cpu.py",
                             "tests/test_needs_missing_on_cpu.py", "tests/utils/test_reads_source_on_cpu.py"}
    missing = verdicts["tests/test_needs_missing_on_cpu.py"]
    assert missing.status is Status.SKIP and "could not collect: missing module no_such_module_for_verl_tests" in \
        missing.message
    assert verdicts["tests/test_concat_on_cpu.py"].status is Status.PASS
    assert verdicts["tests/test_concat_on_cpu.py"].metrics["passed"] == 2
    assert result.status is Status.PASS
    assert result.message.startswith("verl 9.9.0's own CPU tests: 5 of 5 passed (100.0%) in 4 files")
    assert "outside verl's declared range: tensordict 0.15.3" in result.message
    assert result.metrics["left_out"] == {"tests/single_controller/test_workers_on_cpu.py": "Ray worker groups"}
    assert result.metrics["verl"]["inside"] is False and result.metrics["tools"][0]["requirement"] == "pytest"


def test_a_broken_verl_helper_turns_its_test_files_verdict_red(row):
    result = _run(row, {**SUITE, "tests/conftest.py": BREAKER}, max_ranks=1)
    concat = next(v for v in result.verdicts if v.name == "tests/test_concat_on_cpu.py")
    assert concat.status is Status.FAIL and result.status is Status.FAIL
    assert concat.metrics["mismatches"] == [{"case": "test_concat_keeps_order",
                                             "first assertion line": "assert [2, 1] == [1, 2]"}]
    assert concat.message.startswith("1 of 2 failed: test_concat_keeps_order: assert [2, 1] == [1, 2]")
    assert "outside verl's declared range" in concat.message
    assert "1 failed in tests/test_concat_on_cpu.py" in result.message


def test_a_suite_that_imports_another_verl_fails(row):
    other = fake_verl(row / "elsewhere")  # as a suite whose own copy of verl came first on its path
    shadowing = f"import sys\nsys.path.insert(0, {str(other)!r})\nimport verl\n\ndef test_a():\n    pass\n"
    result = _run(row, {"tests/__init__.py": "", "tests/test_a_on_cpu.py": shadowing}, max_ranks=1)
    assert result.status is Status.FAIL and f"the suite imported verl from {other}" in result.message


def test_tests_that_cannot_be_had_here_are_a_skip_naming_why(row, monkeypatch):
    monkeypatch.setenv("UV_FIND_LINKS", str(row / "empty"))
    monkeypatch.setenv("UV_DEFAULT_INDEX", "http://127.0.0.1:9/simple")
    result = check.run(CheckOptions(work_dir=row))
    assert result.status is Status.SKIP and "verl 9.9.0's tests cannot run here" in result.message
    assert "cannot be reached" in result.message


@pytest.mark.parametrize("outcome, status, words", [
    (FileOutcome(collect="missing module torchdata", missing_module="torchdata"), Status.SKIP,
     "could not collect: missing module torchdata"),
    (FileOutcome(collect="missing module verl.workers.x", missing_module="verl.workers.x"), Status.FAIL,
     "could not collect: missing module verl.workers.x"),
    (FileOutcome(collect="ImportError: cannot import name 'Qwen3_5Model'"), Status.FAIL, "could not collect: Import"),
    (FileOutcome(skipped=3), Status.SKIP, "all 3 tests skipped"),
    (FileOutcome(), Status.SKIP, "no test reported"),
    (FileOutcome(passed=4, skipped=1), Status.PASS, "4 passed, 1 skipped"),
])
def test_file_verdicts(outcome, status, words):
    verdict = check.file_verdict("tests/x.py", outcome, ["tensordict 0.15.3 (...)"])
    assert verdict.status is status and verdict.message.startswith(words)
    assert ("outside verl's declared range" in verdict.message) == (status is Status.FAIL)


def test_an_import_error_that_is_not_a_missing_module_is_a_finding_of_the_row(row):
    result = _run(row, {**SUITE, **BROKEN_IMPORT}, max_ranks=1)
    broken = next(v for v in result.verdicts if v.name == "tests/test_broken_import_on_cpu.py")
    assert broken.status is Status.FAIL and "could not collect: ImportError" in broken.message


def test_the_check_is_registered_for_verl_rows_and_needs_no_accelerator():
    spec = CHECKS["verl-tests"]
    assert spec.module == "harness.checks.verl_tests" and spec.needs_axes == ("verl",)
    assert not spec.needs_accelerator and spec.verl


def test_the_suite_starts_no_more_workers_than_the_cores_its_cell_holds(monkeypatch):
    monkeypatch.setattr(check.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.delenv(CORES_VARIABLE, raising=False)
    assert check.workers(None, 30) == 8  # alone: one worker per core
    monkeypatch.setenv(CORES_VARIABLE, "1")  # beside other cells, holding one core: plain pytest
    assert check.workers(None, 30) == 1
    monkeypatch.setenv(CORES_VARIABLE, "not a number")  # unreadable: as if alone
    assert check.workers(2, 30) == 2
