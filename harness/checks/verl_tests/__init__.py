"""verl-tests: the installed verl release's own CPU tests, from its sdist (or its git revision), in the row.

Only where verl is installed (elsewhere a skip: "no verl in this row"). The tests of the release (source.py)
run with pytest and pytest-xdist in the row's interpreter, the selection of suite.toml (selection.py), the
test tools the row lacks in an overlay folder (tools.py), and a per-test timeout (pytest_run.py). One verdict
per test file, named by its path (tests/test_protocol_v2_on_cpu.py): its passed, failed and errored counts,
each failing test with its first assertion line (metrics["mismatches"], compared case by case across rows);
"could not collect: missing module X" is a skip of that file, never verl's failure. Where the row crosses
verl's declared range the messages say so. The report compares the rows of one verl release: the row inside
the declared range is the baseline, and a test failing there too is verl's own (harness/report/verl_baseline.py).
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from harness.checks import cell_cores
from harness.results.records import CheckResult, Status, Verdict

from . import pytest_run, selection, source, tools
from .pytest_run import FileOutcome, SuiteRun

NAME = "verl-tests"
MAX_WORKERS = 8
SHOWN_FAILURES = 3
_BROKEN_RUN = (2, 3, 4)  # pytest: interrupted, internal error, usage error


def workers(max_ranks: int | None, files: int) -> int:
    """pytest-xdist workers: one per core this process may use (at most max_ranks, MAX_WORKERS, the cores the cell
    holds beside other cells, and a file each). One worker is plain pytest: no second import of verl's stack."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, max_ranks or cores, cell_cores() or cores, MAX_WORKERS, files))


def file_verdict(path: str, outcome: FileOutcome, outside: list[str]) -> Verdict:
    """The verdict of one test file; a missing module (not verl's) is a skip, never verl's failure."""
    counts = {"passed": outcome.passed, "failed": outcome.failed, "errored": outcome.errored,
              "skipped": outcome.skipped}
    metrics = {**counts, "mismatches": outcome.failures}
    crossed = "; outside verl's declared range: " + ", ".join(outside) if outside else ""
    missing = outcome.missing_module
    if missing and missing.split(".")[0] != "verl":
        return Verdict(path, Status.SKIP, f"could not collect: missing module {missing} (the row lacks it and no "
                                          "test tool provides it; not verl's failure)", metrics)
    if outcome.collect:
        return Verdict(path, Status.FAIL, f"could not collect: {outcome.collect}{crossed}", metrics)
    if outcome.failed or outcome.errored:
        shown = "; ".join(f"{f['case']}: {f['first assertion line']}" for f in outcome.failures[:SHOWN_FAILURES])
        more = f" and {len(outcome.failures) - SHOWN_FAILURES} more" if len(outcome.failures) > SHOWN_FAILURES else ""
        errored = f", {outcome.errored} errored" if outcome.errored else ""
        return Verdict(path, Status.FAIL, f"{outcome.failed} of {outcome.ran} failed{errored}: {shown}{more}{crossed}",
                       metrics)
    if not outcome.ran:
        reason = outcome.skip_reason or (f"all {outcome.skipped} tests skipped" if outcome.skipped else
                                         "no test reported")
        return Verdict(path, Status.SKIP, reason, metrics)
    skipped = f", {outcome.skipped} skipped" if outcome.skipped else ""
    return Verdict(path, Status.PASS, f"{outcome.passed} passed{skipped}", metrics)


def _foreign(loaded: list[str], package: Path) -> list[str]:
    root = package.resolve()
    return [path for path in loaded if root not in Path(path).resolve().parents]


def summary(run: SuiteRun, verdicts: list[Verdict], left_out: dict[str, str], outside: list[str],
            release: str) -> tuple[Status, str, dict]:
    """The check's status, message (the suite's pass rate first) and totals."""
    totals = {key: sum(v.metrics[key] for v in verdicts) for key in ("passed", "failed", "errored", "skipped")}
    ran = totals["passed"] + totals["failed"] + totals["errored"]
    rate = round(100.0 * totals["passed"] / ran, 1) if ran else None
    failing = [v.name for v in verdicts if v.status is Status.FAIL]
    uncollected = sorted({v.message.split(": ", 1)[1].split(" (")[0] for v in verdicts
                          if v.status is Status.SKIP and v.message.startswith("could not collect")})
    parts = [f"verl {release}'s own CPU tests: {totals['passed']} of {ran} passed"
             + (f" ({rate}%)" if rate is not None else "") + f" in {len(verdicts)} files"]
    if failing:
        parts.append(f"{totals['failed'] + totals['errored']} failed in {', '.join(failing)}")
    if uncollected:
        parts.append(f"could not collect: {', '.join(uncollected)} (not verl's failures)")
    if left_out:
        parts.append(f"{len(left_out)} files left out by the selection")
    if outside:
        parts.append("outside verl's declared range: " + ", ".join(outside))
    status = Status.FAIL if failing else Status.PASS if ran else Status.SKIP
    return status, "; ".join(parts), {**totals, "pass_rate": rate}


def run(options) -> CheckResult:
    from ..support import verl

    release = verl.installed()
    if release is None:
        return CheckResult(NAME, Status.SKIP, "no verl in this row")
    try:
        chosen, tool_list = selection.selection(), selection.tools()
    except selection.SelectionError as exc:
        return CheckResult(NAME, Status.ERROR, str(exc))
    status_of_range = verl.range_status()
    outside = verl.outside_range(status_of_range)
    package = source.installed_package()
    metrics = {"verl": {"release": release, "range": status_of_range, "inside": not outside},
               "selection": chosen.source}
    cache = source.cache_root()
    with tempfile.TemporaryDirectory(prefix="verl-tests-") as tmp:
        try:
            origin = source.locate(release, cache)
            metrics["verl"]["tests_from"] = f"{origin.kind}: {origin.where}"
            root = source.prepare(origin, package, Path(tmp) / "suite")
            files, left_out = chosen.choose(source.suite_files(root))
            if not files:
                return CheckResult(NAME, Status.SKIP, f"the selection ({chosen.source}) matches no test file of "
                                                      f"{origin.where}", metrics=metrics)
            kit = tools.overlay(tool_list, cache)
        except source.Unavailable as exc:
            return CheckResult(NAME, Status.SKIP, f"verl {release}'s tests cannot run here: {exc}", metrics=metrics)
        metrics.update(tools=kit.listed, left_out=left_out, files=len(files))
        log = Path(options.work_dir) / "verl-tests-pytest.log"
        count = workers(options.max_ranks, len(files))
        run_result = pytest_run.run_suite(root, files, count, chosen.timeout, kit.path, log=log)
    metrics.update(workers=count, pytest_exit=run_result.returncode, seconds=run_result.seconds,
                   verl_loaded=run_result.verl_loaded)
    print(run_result.output_tail, file=sys.stderr)
    verdicts = [file_verdict(path, outcome, outside) for path, outcome in run_result.files.items()]
    if run_result.returncode in _BROKEN_RUN and not any(v.metrics["passed"] or v.metrics["failed"] for v in verdicts):
        return CheckResult(NAME, Status.ERROR, f"pytest could not run verl's suite (exit {run_result.returncode}): "
                           + run_result.output_tail[-600:], metrics=metrics, verdicts=verdicts)
    foreign = _foreign(run_result.verl_loaded, package)
    if foreign:
        return CheckResult(NAME, Status.FAIL, f"the suite imported verl from {', '.join(foreign)}, not the installed "
                           f"release at {package}", metrics=metrics, verdicts=verdicts)
    status, message, totals = summary(run_result, verdicts, left_out, outside, release)
    metrics.update(totals)
    return CheckResult(NAME, status, message, metrics=metrics, verdicts=verdicts)
