"""verl's tool parser as vllm-chat-parity's trainer side: the comparison and the sentinel on stand-in parsers (no
verl needed), and with verl installed its parser against this project's, which fails when verl's parser is changed."""
from __future__ import annotations

import pytest

from harness.checks import CheckOptions
from harness.checks import vllm_chat_parity as check
from harness.checks.support import verl
from harness.checks.vllm_chat_parity import cases, verl_side
from harness.results.records import CheckResult, Status


def _plain(text, tools):
    return text.strip(), []


def _evaluating(text, tools):
    """A parser that runs a value as Python where it finds one: what verl 0.8.0's parser did."""
    for line in text.splitlines():
        if line.startswith("__import__("):
            eval(line)  # noqa: S307 - the hostile cases' payload touches a file in a temporary folder only
    return _plain(text, tools)


def test_a_parser_that_runs_model_output_fails_naming_the_security_problem_and_the_cases():
    made = verl_side.parser_verdicts(_evaluating, [], "project", "a stand-in", _plain)
    assert [v.name for v in made] == ["verl:tool-calls", "verl:tool-calls-malformed"]
    assert made[0].status is Status.PASS
    hostile = made[1]
    assert hostile.status is Status.FAIL and verl_side.SECURITY in hostile.message
    assert hostile.metrics["evaluated"] == [name for name in cases.malformed("x") if name.endswith("that is code")]


def test_each_difference_is_listed_with_its_input_and_both_sides():
    def no_text(text, tools):
        return "", []

    made = verl_side.parser_verdicts(_plain, [], "project", "a stand-in", no_text)
    assert made[0].status is Status.FAIL and "differ from a stand-in" in made[0].message
    first = made[0].metrics["mismatches"][0]
    assert set(first) == {"case", "input", "verl", "project"} and first["project"] == {"content": "", "calls": []}


def test_without_vllm_a_verl_row_is_judged_on_verls_parser_and_says_against_what(monkeypatch):
    monkeypatch.setattr(check.vllm_engine, "installed", lambda: None)
    monkeypatch.setattr(verl, "installed", lambda: "9.9.0")
    monkeypatch.setattr(verl_side, "verdicts", lambda engine, parse: verl_side.parser_verdicts(
        _plain, [], "project", "this project's parser (no vLLM in this row)", _plain))
    result = check.run(CheckOptions())
    assert result.status is Status.PASS and result.message.startswith("no vLLM in this cell: verl's parser against")
    assert [v.name for v in result.verdicts] == ["verl:tool-calls", "verl:tool-calls-malformed"]


def test_without_verl_nothing_is_added(monkeypatch):
    monkeypatch.setattr(check.vllm_engine, "installed", lambda: None)
    monkeypatch.setattr(verl, "installed", lambda: None)
    assert check.run(CheckOptions()) == CheckResult("vllm-chat-parity", Status.SKIP, "no vLLM in this cell")


# --- with verl installed (the `tests-verl` session) ---------------------------------------------------------------


@pytest.fixture
def verl_parser():
    pytest.importorskip("verl")
    pytest.importorskip("transformers")
    from verl.experimental.agent_loop.tool_parser import ToolParser

    return type(ToolParser.get_tool_parser(verl_side.PARSER, None))


@pytest.mark.verl
def test_verls_parser_against_the_projects_names_what_it_ran_and_runs_no_code(verl_parser):
    made = [verl.attributed(v) for v in verl_side.verdicts(None, None)]
    assert all("evaluated" not in v.metrics for v in made) or verl.installed() == "0.8.0"
    ran = made[0].metrics["verl"]["ran"]
    assert ran[0] == "verl.experimental.agent_loop.tool_parser.ToolParser.get_tool_parser"
    assert ran[1].endswith("Qwen3XMLToolParser.extract_tool_calls")
    assert "one call" not in made[0].message  # a plain call parses alike


@pytest.mark.verl
def test_a_changed_verl_parser_fails_the_verdict(verl_parser, monkeypatch):
    monkeypatch.setattr(verl_parser, "_get_function_calls", lambda self, text: [])  # finds no call any more
    made = verl_side.verdicts(None, None)
    assert made[0].status is Status.FAIL and "one call" in made[0].message, made[0].message
