"""multi-turn-tokens in a verl row: verl's own ToolAgentLoop (a scripted engine in place of its rollout server) and
its Continuous Token builder, broken on purpose: the newline verl puts back after `<|im_end|>` removed, and a template
that drops an earlier turn's thinking within a tool chain."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the tokenizer is built in memory

pytest.importorskip("verl")
pytestmark = pytest.mark.verl

from harness.checks import multi_turn_tokens  # noqa: E402
from harness.checks.multi_turn_tokens import templates  # noqa: E402
from harness.checks.support import verl  # noqa: E402
from harness.checks.vllm_chat_parity import rendering  # noqa: E402
from harness.results.records import Status  # noqa: E402

PROJECT = rendering.TEMPLATE.read_text(encoding="utf-8")
STRIPS_EARLIER = PROJECT.replace("loop.index0 > ns.last_query %}", "loop.last %}")


def verdicts(template: templates.Template) -> dict:
    return {v.name: verl.attributed(v) for v in multi_turn_tokens.verl_verdicts(template)}


def test_verls_tool_agent_loop_passes_and_its_builder_keeps_thinking_the_template_drops_at_a_new_query():
    found = verdicts(templates.project())
    loop = found["verl:multi-turn-tokens/tool-agent-loop/project-template"]
    assert loop.status is Status.PASS, loop.message
    assert loop.emulated and "a scripted engine stands in for its rollout server" in loop.message
    assert "verl.experimental.agent_loop.tool_agent_loop.ToolAgentLoop.run" in loop.metrics["verl"]["ran"]
    builder = found["verl:multi-turn-tokens/builder/project-template"]
    assert builder.status is Status.AFFECTED, builder.message
    assert ('"two queries, thinking" before message 3: turn 1 (assistant, message 1): the template drops this '
            "turn's thinking once later messages follow; the sequence keeps it") in builder.message


def test_verl_without_its_newline_after_im_end_fails_naming_the_turn(monkeypatch):
    from verl.utils.tokenizer.continuous_token import ContinuousTokenBuilder, QwenContinuousTokenBuilder

    monkeypatch.setattr(QwenContinuousTokenBuilder, "_merge_context_token_ids",
                        ContinuousTokenBuilder._merge_context_token_ids)
    loop = verdicts(templates.project())["verl:multi-turn-tokens/tool-agent-loop/project-template"]
    assert loop.status is Status.FAIL
    assert ('"system, tool round trip, thinking" before message 4: turn 2 (assistant, message 2): the sequence and the '
            "whole rendering differ: sequence '', whole rendering '\\n'") in loop.message


def test_verl_on_a_template_that_drops_thinking_within_a_tool_chain_fails_naming_the_turn():
    broken = templates.Template("project-template", "a test template", rendering.byte_tokenizer(STRIPS_EARLIER), "0")
    loop = verdicts(broken)["verl:multi-turn-tokens/tool-agent-loop/project-template"]
    assert loop.status is Status.FAIL  # verl's builder refuses the tool turn: its suffix no longer matches
    assert ('"system, tool round trip, thinking": stopped: ValueError: Continuous Token token-id suffix diff failed '
            "for roles: ['tool'] (the template drops the thinking of message 2 (assistant) once message 3 (tool) "
            "follows)") in loop.message
