"""vllm-chat-parity's parser comparison without vLLM: what a mismatch records for the report."""
from __future__ import annotations

from harness.checks import vllm_chat_parity
from harness.report.build import build_report
from harness.report.html.page import to_html
from harness.results.records import CellResult, CheckResult, Status


def agreeing(text, tools, tok=None):
    return text.strip(), []


def test_a_parser_mismatch_records_its_input_and_both_outputs_and_the_page_shows_them(monkeypatch):
    monkeypatch.setattr(vllm_chat_parity, "vllm_parse", agreeing)
    cases = {"unclosed": "<tool_call>\n<function=f>", "plain": "just text"}
    assert vllm_chat_parity.compare_outputs(cases, [], None, ours=agreeing) == []
    broken = vllm_chat_parity.compare_outputs(cases, [], None, ours=lambda text, tools: ("", [{"name": "f"}]))
    assert [m["case"] for m in broken] == ["unclosed", "plain"]
    assert broken[0] == {"case": "unclosed", "input": "<tool_call>\n<function=f>",
                         "trainer": {"content": "", "calls": [{"name": "f"}]},
                         "vllm": {"content": "<tool_call>\n<function=f>", "calls": []}}
    verdict = vllm_chat_parity._verdict("tool-calls-malformed", broken, 2, {}, "outputs", "vLLM")
    cell = CellResult("cpu", "c", {"backend": "fsdp", "model": "text", "transformers": "5.23.0"},
                      checks=[CheckResult("vllm-chat-parity", Status.FAIL, verdict.message, verdicts=[verdict])])
    page = to_html(build_report([cell]))
    assert ('<tr><th scope="col">input</th><th scope="col">trainer</th><th scope="col">vllm</th></tr>'
            '<tr><td>&lt;tool_call&gt;\n&lt;function=f&gt;</td>') in page
