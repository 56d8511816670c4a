"""multi-turn-tokens' conversations: what they cover, how a loop appends them, and what an engine generates."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the tokenizer is built in memory

from harness.checks.multi_turn_tokens import conversations, templates
from harness.checks.multi_turn_tokens.conversations import CONVERSATIONS


def test_the_set_covers_tools_thinking_on_and_off_system_or_none_and_later_queries():
    assert {c.tools for c in CONVERSATIONS} == {c.thinking for c in CONVERSATIONS} == {True, False}
    assert {c.messages[0]["role"] for c in CONVERSATIONS} == {"system", "user"}
    assert any(conversations.has_later_user(c) for c in CONVERSATIONS)
    assert any(c.messages[-1]["role"] == "tool" for c in CONVERSATIONS)
    reasoned = [sum(1 for m in c.messages if m.get("reasoning_content")) for c in CONVERSATIONS]
    assert max(reasoned) >= 3


def test_a_loop_appends_one_assistant_turn_or_all_the_messages_up_to_the_next():
    parallel = next(c for c in CONVERSATIONS if c.name == "parallel calls, two results")
    assert parallel.first_assistant == 2
    assert parallel.steps() == [(2, 3), (3, 5), (5, 6)]


def test_the_engine_generates_from_the_end_of_its_prompt_to_its_end_of_turn_token():
    project = templates.project()
    tok = project.tokenizer
    for conversation in CONVERSATIONS:
        outputs = conversations.generated(conversation, project.render(conversation.kwargs()), project.special)
        assert sorted(outputs) == [i for i, m in enumerate(conversation.messages) if m["role"] == "assistant"]
        for index, ids in outputs.items():
            text = tok.decode(ids)
            assert text.endswith("<|im_end|>") and "<|im_start|>" not in text
            assert "<think>" not in text  # the generation prompt opened it
            reasoning = conversation.messages[index].get("reasoning_content")
            if reasoning:
                assert text.startswith(reasoning + "\n</think>\n\n")
            elif not conversation.thinking:
                assert "</think>" not in text  # thinking off: the generation prompt closed the empty block
