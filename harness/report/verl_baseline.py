"""verl's own tests across the rows of one verl release: the row inside verl's declared range is the baseline.

verl-tests (harness/checks/verl_tests) runs a release's own CPU tests in every row that installs it, and records
in its metrics whether the row is inside the range verl declares for the packages it crosses
(metrics["verl"]["inside"]) and, per test file, the failing tests (the verdict's `mismatches` cases). Per
column and verl release, the rows inside the range are the baseline: a test that fails in every one of them is
verl's own failure. It is stated once (a standing finding, with each test's first assertion line) and never
blamed on a crossed release: a row that fails nothing else is "works but for a standing finding". What a row
fails beyond it is new against the baseline, and each compared row says so (`against`: shown after its entry).
Without a baseline row in the report, nothing is compared and each row shows its own result.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.results.records import CellResult, CheckResult, did_not_run

from .standing_findings import CASES_LIMIT, StandingFinding

CHECK = "verl-tests"
WHOLE_FILE = "(the whole file)"  # a failing file that lists no failing test (it could not be collected)
SHOWN = 6  # failing tests named per file in a row's text


@dataclass
class Baselines:
    findings: list[StandingFinding] = field(default_factory=list)
    covered: set[tuple[str, str]] = field(default_factory=set)  # (cell, check) failing only what the baseline fails
    beyond: dict[tuple[str, str], str] = field(default_factory=dict)  # new failures, where the baseline fails too
    against: dict[tuple[str, str], str] = field(default_factory=dict)  # every compared crossed row: what is new


def _verl(check: CheckResult) -> dict:
    value = check.metrics.get("verl")
    return value if isinstance(value, dict) else {}


def failing_tests(check: CheckResult) -> dict[str, set[str]]:
    """Test file -> the tests failing in it (WHOLE_FILE for a failing file that lists none)."""
    failing = {}
    for verdict in check.verdicts:
        if verdict.status.is_failure:
            cases = {str(m.get("case")) for m in verdict.metrics.get("mismatches") or [] if isinstance(m, dict)}
            failing[verdict.name] = cases or {WHOLE_FILE}
    return failing


def _text(tests: dict[str, set[str]]) -> str:
    return "; ".join(f"{path}: " + ", ".join(sorted(cases)[:SHOWN]) + (f" and {len(cases) - SHOWN} more"
                                                                    if len(cases) > SHOWN else "")
                     for path, cases in sorted(tests.items()))


def _cases(check: CheckResult, path: str, cases: set[str]) -> list[dict[str, str]]:
    verdict = next((v for v in check.verdicts if v.name == path), None)
    listed = [m for m in (verdict.metrics.get("mismatches") or [] if verdict else [])
              if isinstance(m, dict) and m.get("case") in cases]
    return [{str(k): str(v)[:2000] for k, v in m.items()} for m in listed[:CASES_LIMIT]]


def compare(kept: list[tuple[tuple, CellResult]], already: set[tuple[str, str]],
            stated: list[StandingFinding] = ()) -> Baselines:
    """The baselines of a report's cells (`kept` as standing_findings takes them); entries in `already` (covered
    by a standing finding the same in every row) are left as they are, and a test file that one of `stated`
    (those findings) names is not stated again."""
    named = {(f.backend, f.model, f.verdict) for f in stated if f.check == CHECK}
    groups: dict[tuple[str, str, str], list[tuple[CellResult, CheckResult]]] = {}
    for (_, backend, model), cell in kept:
        check = cell.check(CHECK)
        release = _verl(check).get("release") if check is not None else None
        if check is not None and release and not did_not_run(check):
            groups.setdefault((backend, model, str(release)), []).append((cell, check))
    out = Baselines()
    for (backend, model, release), ran in sorted(groups.items()):
        base = [(cell, check) for cell, check in ran if _verl(check).get("inside") is True]
        if not base:
            continue
        own = failing_tests(base[0][1])
        for _, check in base[1:]:
            other = failing_tests(check)
            own = {path: cases & other[path] for path, cases in own.items() if cases & other.get(path, set())}
        names = ", ".join(sorted(cell.cell_id for cell, _ in base))
        blamed = []
        for cell, check in ran:
            key = (cell.cell_id, CHECK)
            failing = failing_tests(check)
            new = {path: cases - own.get(path, set()) for path, cases in failing.items()
                   if cases - own.get(path, set())}
            if _verl(check).get("inside") is not True:
                out.against[key] = (f"against the baseline {names}: " + (f"new failures: {_text(new)}" if new else
                                                                         "no new failure"))
            if not failing or key in already:
                continue
            if any(own.get(path, set()) & cases for path, cases in failing.items()):
                blamed.append(cell.cell_id)  # not blamed for it, that is: the finding lists it
            if not new:
                out.covered.add(key)
            elif own:
                out.beyond[key] = f"new against the baseline {names}: {_text(new)}"
        for path, cases in sorted(own.items() if blamed else ()):  # else a finding the same in every row has it
            if (backend, model, path) in named:
                continue
            out.findings.append(StandingFinding(
                backend, model, CHECK, path, "fail",
                f"verl {release}'s own failure: fails on the stack verl declares too (the baseline {names}), so no "
                f"row of verl {release} is blamed for it: {', '.join(sorted(cases))}",
                sorted(blamed), ours=f"verl {release}'s own tests on the rows crossing its range",
                upstream=f"the same tests on the stack verl {release} declares",
                cases=_cases(base[0][1], path, cases), log=base[0][1].log))
    return out
