"""multi-turn-tokens on the project's template: it passes on the trainer, and fails, naming the conversation, turn
and tokens, on a template that strips an earlier turn's thinking within a tool chain, on a template whose rendering
leaves out the thinking block its generation prompt opened, and on a trainer that drops the turn separator."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every tokenizer here is built in memory

from harness.checks import CheckOptions, gives_verdict, multi_turn_tokens
from harness.checks.multi_turn_tokens import templates
from harness.checks.vllm_chat_parity import rendering
from harness.results.records import Status
from trainers.rollout.turns import TurnTokens

PROJECT = rendering.TEMPLATE.read_text(encoding="utf-8")
# Thinking kept only in the last message: an earlier turn's thinking goes as soon as anything follows it.
STRIPS_EARLIER = PROJECT.replace("loop.index0 > ns.last_query %}", "loop.last %}")
# The project's template as it was: a thinking block only where there is reasoning, so the empty block that the
# generation prompt opens with thinking off is never rendered.
NO_EMPTY_BLOCK = PROJECT.replace(
    "{%- if loop.index0 > ns.last_query %}\n{{- '<think>\\n' + (m.reasoning_content or '')",
    "{%- if m.reasoning_content and loop.index0 > ns.last_query %}\n{{- '<think>\\n' + m.reasoning_content")


def template(text: str, key: str = "project-template") -> templates.Template:
    return templates.Template(key, "a test template", rendering.byte_tokenizer(text), "0" * 64)


@pytest.fixture(autouse=True)
def no_released_template(monkeypatch):
    monkeypatch.delenv(templates.VARIABLE, raising=False)


def test_the_trainer_passes_on_the_project_template_where_it_drops_earlier_thinking_at_a_new_query():
    verdict = multi_turn_tokens.trainer_verdict(templates.project())
    assert verdict.status is Status.PASS, verdict.message
    assert verdict.name == "trainer/project-template"
    assert "qwen35_like.jinja, sha256 " in verdict.message and "in all 11 conversations" in verdict.message
    assert 'the template drops earlier thinking at a new user query in 3 ("two queries with tools, thinking"' \
        in verdict.message
    segments = verdict.metrics["segments"]
    assert segments["two queries, thinking"] == ["the template renders the history again at the user query of "
                                                 "message 2"]
    assert segments["two tool rounds with reasoning"] == []  # within one query Qwen3.5's template is append-only


def test_a_template_that_strips_an_earlier_turns_thinking_in_a_tool_chain_fails_naming_the_turns():
    assert STRIPS_EARLIER != PROJECT
    verdict = multi_turn_tokens.trainer_verdict(template(STRIPS_EARLIER))
    assert verdict.status is Status.FAIL
    assert ('"system, tool round trip, thinking": stopped: HistoryRewritten: message 3 (tool): the chat template '
            'renders the conversation before it differently') in verdict.message
    assert ("(the template drops the thinking of message 2 (assistant) once message 3 (tool) follows)"
            in verdict.message)
    assert "after a tool result in" in verdict.message
    failed = {f["conversation"] for f in verdict.metrics["findings"]}
    assert {"two tool rounds with reasoning", "parallel calls, two results"} <= failed


def test_a_template_that_leaves_out_the_thinking_block_its_generation_prompt_opened_fails():
    assert NO_EMPTY_BLOCK != PROJECT
    verdict = multi_turn_tokens.trainer_verdict(template(NO_EMPTY_BLOCK))
    assert verdict.status is Status.FAIL
    assert ('"thinking off, tool round trip" before message 4: turn 2 (assistant, message 2): the template renders '
            "this turn without the thinking block its generation prompt opened: "
            "sequence '<think>\\n\\n</think>\\n\\n', whole rendering ''") in verdict.message
    assert {f["conversation"] for f in verdict.metrics["findings"]} == {
        "thinking off, tool round trip", "thinking off, two rounds, no system", "two queries, thinking off"}


def test_a_trainer_that_drops_the_turn_separator_fails_naming_the_turn_and_tokens(monkeypatch):
    monkeypatch.setattr(TurnTokens, "_closing", lambda self, history: [])
    verdict = multi_turn_tokens.trainer_verdict(templates.project())
    assert verdict.status is Status.FAIL
    assert ('"system, tool round trip, thinking" before message 4: turn 2 (assistant, message 2): the sequence and '
            "the whole rendering differ: sequence '', whole rendering '\\n'") in verdict.message
    [part] = next(f for f in verdict.metrics["findings"]
                  if f["conversation"] == "system, tool round trip, thinking")["parts"]
    assert part["kind"] == "tokens"


def test_run_without_a_released_template_skips_that_verdict_and_says_how_to_name_one():
    result = multi_turn_tokens.run(CheckOptions())
    verdicts = {v.name: v for v in result.verdicts}
    assert verdicts["trainer/project-template"].status is Status.PASS
    assert verdicts["trainer/released-template"].status is Status.SKIP
    assert templates.VARIABLE in verdicts["trainer/released-template"].message
    assert result.status is (Status.AFFECTED if any(n.startswith("verl:") for n in verdicts) else Status.PASS)
    assert all(gives_verdict("multi-turn-tokens", name) for name in verdicts)


def test_a_bad_released_setting_is_one_error_line_and_the_project_verdict_stays(monkeypatch):
    monkeypatch.setenv(templates.VARIABLE, "Qwen/Qwen3.5-9B@main")
    result = multi_turn_tokens.run(CheckOptions())
    verdicts = {v.name: v for v in result.verdicts}
    assert verdicts["trainer/released-template"].status is Status.ERROR
    assert verdicts["trainer/released-template"].message == (
        "HARNESS_QWEN35_TOKENIZER='Qwen/Qwen3.5-9B@main': neither the absolute path of a tokenizer folder nor "
        "owner/name@<40-hex commit>")
    assert verdicts["trainer/project-template"].status is Status.PASS
    assert result.status is Status.FAIL


def test_a_released_tokenizer_folder_is_rendered_and_named_on_its_verdict(monkeypatch, tmp_path):
    rendering.byte_tokenizer().save_pretrained(tmp_path)
    monkeypatch.setenv(templates.VARIABLE, str(tmp_path))
    verdicts = {v.name: v for v in multi_turn_tokens.run(CheckOptions()).verdicts}
    released = verdicts["trainer/released-template"]
    assert released.status is Status.PASS, released.message
    assert released.message.startswith(f"the released template of the tokenizer folder {tmp_path} (sha256 ")
    assert released.metrics["template_sha256"] == verdicts["trainer/project-template"].metrics["template_sha256"]
