"""Standing findings (standing_findings.py): a finding the same in every row is stated once, with its cases, and
turns no row broken nor is blamed on a version; a row that fails more shows its own result."""
from __future__ import annotations

from cause_cells import parity, ran, verdicts

from harness.report.build import build_report
from harness.report.html.page import to_html
from harness.report.json_files import support_json, to_json
from harness.report.markdown import to_markdown
from harness.report.row_verdicts import lines, row_verdicts
from harness.results.records import CheckResult


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
