"""verl's own tests across the rows of one verl release: the row inside verl's declared range is the baseline; a
test failing there too is verl's own (stated once, no row blamed for it); what a crossed row fails beyond it is new
and said so."""
from __future__ import annotations

from report_helpers import make_cell

from harness.report import verl_baseline
from harness.report.build import build_report
from harness.report.model import entry_extras
from harness.report.row_verdicts import row_verdicts
from harness.results.records import CheckResult, Status, Verdict

PROTOCOL = "tests/test_protocol_v2_on_cpu.py"
CORE = "tests/trainer/ppo/test_core_algos_on_cpu.py"


def _file(path: str, *failing: str) -> Verdict:
    cases = [{"case": c, "first assertion line": f"assert {c}"} for c in failing]
    return Verdict(path, Status.FAIL if failing else Status.PASS, f"{len(failing)} failed" if failing else "ok",
                   {"passed": 10, "failed": len(failing), "errored": 0, "skipped": 0, "mismatches": cases})


def _row(cell_id: str, tf: str, td: str, inside: bool, *files: Verdict, release: str = "0.9.1"):
    failing = any(v.status is Status.FAIL for v in files)
    check = CheckResult("verl-tests", Status.FAIL if failing else Status.PASS, "verl's own CPU tests",
                        metrics={"verl": {"release": release, "inside": inside}}, verdicts=list(files),
                        log=f"cells/{cell_id}/logs/verl-tests.log")
    return make_cell(cell_id, [check], transformers=tf, tensordict=td, verl=release)


BASE = _row("a", "5.9.0", "0.10.0", True, _file(PROTOCOL, "test_own"), _file(CORE))
NEW = _row("d", "5.9.0", "0.15.3", False, _file(PROTOCOL, "test_own", "test_chunk_concat"), _file(CORE))
SAME = _row("f", "5.23.0", "0.10.0", False, _file(PROTOCOL, "test_own"), _file(CORE))


def _kept(cells):
    return [((tuple(sorted(c.axes.items())), "fsdp", "text"), c) for c in cells]


def test_a_test_failing_on_the_baseline_too_is_verls_own_and_stated_once():
    found = verl_baseline.compare(_kept([BASE, NEW, SAME]), set())
    assert [(f.check, f.verdict) for f in found.findings] == [("verl-tests", PROTOCOL)]
    assert "verl 0.9.1's own failure" in found.findings[0].message and "test_own" in found.findings[0].message
    assert found.findings[0].cases == [{"case": "test_own", "first assertion line": "assert test_own"}]
    assert found.covered == {("a", "verl-tests"), ("f", "verl-tests")}
    assert found.beyond == {("d", "verl-tests"): f"new against the baseline a: {PROTOCOL}: test_chunk_concat"}
    assert found.against[("f", "verl-tests")] == "against the baseline a: no new failure"
    assert "a" not in {key[0] for key in found.against}  # the baseline is not compared with itself


def test_the_report_blames_only_the_new_failure_and_shows_it_after_the_entry():
    report = build_report([BASE, NEW, SAME])
    kinds = {row.cells[0]: verdict for row, verdict in zip(report.rows, row_verdicts(report))}
    assert kinds["a"].kind == "standing" and kinds["f"].kind == "standing"
    assert kinds["d"].kind == "broken" and "test_chunk_concat" in kinds["d"].reason
    assert "test_own" not in kinds["d"].reason
    entry = next(e for row in report.rows for e in row.entries.values() if e.cell_id == "d")
    assert f"against the baseline a: new failures: {PROTOCOL}: test_chunk_concat" in entry_extras(entry)
    assert [f.verdict for f in report.standing] == [PROTOCOL]  # once: here every row fails test_own


def test_a_clean_baseline_makes_every_failure_of_a_crossed_row_new():
    clean = _row("a", "5.9.0", "0.10.0", True, _file(PROTOCOL), _file(CORE))
    found = verl_baseline.compare(_kept([clean, NEW]), set())
    assert not found.findings and not found.covered and not found.beyond  # the row shows its own failure
    assert found.against[("d", "verl-tests")] == (f"against the baseline a: new failures: {PROTOCOL}: "
                                                  "test_chunk_concat, test_own")


def test_without_a_baseline_row_or_across_releases_nothing_is_compared():
    assert verl_baseline.compare(_kept([NEW, SAME]), set()) == verl_baseline.Baselines()
    other = _row("e", "5.9.0", "0.10.0", True, _file(PROTOCOL, "test_own"), release="0.8.0")
    found = verl_baseline.compare(_kept([other, NEW]), set())
    assert not found.against  # verl 0.8.0's baseline says nothing of 0.9.1's rows
    assert [(f.verdict, f.cells) for f in found.findings] == [(PROTOCOL, ["e"])]  # but its own failure is verl's


def test_only_tests_failing_on_every_baseline_row_are_verls_own():
    second = _row("c", "5.10.0", "0.10.0", True, _file(PROTOCOL, "test_chunk_concat"), _file(CORE))
    found = verl_baseline.compare(_kept([BASE, second, NEW]), set())
    assert not found.findings  # each baseline row fails a different test: neither is verl's own
    assert ("d", "verl-tests") not in found.covered


def test_where_not_every_row_fails_it_the_baseline_still_keeps_verls_own_failure_off_the_crossed_rows():
    passing = _row("b", "5.23.0", "0.15.3", False, _file(PROTOCOL), _file(CORE))
    report = build_report([BASE, NEW, passing])
    assert [(f.verdict, f.cells) for f in report.standing] == [(PROTOCOL, ["a", "d"])]
    assert report.standing[0].message.startswith("verl 0.9.1's own failure")
    kinds = {row.cells[0]: verdict.kind for row, verdict in zip(report.rows, row_verdicts(report))}
    assert kinds == {"a": "standing", "b": "works", "d": "broken"}
