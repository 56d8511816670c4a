"""multi-turn-tokens' comparison: turns split and mapped onto messages, differing parts classified, and the
template's own history changes measured without any side."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the tokenizer is built in memory

from harness.checks.multi_turn_tokens import compare, conversations, templates
from harness.checks.multi_turn_tokens.conversations import CONVERSATIONS, Conversation

BY_NAME = {c.name: c for c in CONVERSATIONS}


@pytest.fixture(scope="module")
def project():
    return templates.project()


def test_turns_are_cut_before_each_turn_start_token():
    assert compare.split_turns([7, 1, 2, 1, 3], start=1) == [[7], [1, 2], [1, 3]]
    assert compare.split_turns([1, 2, 1], start=1) == [[1, 2], [1]]


def test_rendered_turns_map_onto_messages_with_the_system_turn_and_grouped_tool_results():
    parallel = BY_NAME["parallel calls, two results"]  # system, user, call, result, result, answer
    assert compare.rendered_turns(parallel, 5, open_turn=True) == [0, 1, 2, 3, None]
    assert compare.rendered_turns(parallel, 6, open_turn=False) == [0, 1, 2, 3, 5]
    tools_no_system = BY_NAME["two tool rounds with reasoning"]  # the tools make a system turn of their own
    assert compare.rendered_turns(tools_no_system, 1, open_turn=True) == [None, 0, None]


def test_a_thinking_block_only_the_sequence_has_is_the_templates_and_anything_else_the_sides():
    kept = {2: True, 4: False}
    assert compare.classify("<think>\nWhy.\n</think>\n\n", "", 2, kept) == "earlier-thinking"
    assert compare.classify("\n<think>\n\n</think>\n", "\n", 2, kept) == "earlier-thinking"
    assert compare.classify("<think>\n\n</think>\n\n", "", 4, kept) == "generation-prompt"
    assert compare.classify("", "\n", 2, kept) == "tokens"
    assert compare.classify("<think>\nWhy.\n</think>", "Because", 2, kept) == "tokens"
    assert compare.classify("Why.", "", 2, kept) == "tokens"


def test_a_differing_turn_structure_is_one_part_not_attributed_to_a_message(project):
    conversation = BY_NAME["two tool rounds with reasoning"]
    render = project.render(conversation.kwargs())
    whole = render(conversation.messages[:3], True)
    start = project.tokenizer.convert_tokens_to_ids(compare.TURN_START)
    last_start = max(j for j, token in enumerate(whole) if token == start)
    merged = whole[:last_start] + whole[last_start + 1:]  # the generation prompt's turn start dropped
    [part] = compare.differences(project.tokenizer, conversation, 3, merged, whole, {})
    assert part.turn is None and part.message is None and part.kind == "tokens" and part.whole == "<|im_start|>"
    assert part.describe() == ("the turns (4 in the sequence, 5 in the whole rendering): the sequence and the whole "
                               "rendering differ: sequence '', whole rendering '<|im_start|>'")


def test_the_template_alone_drops_earlier_thinking_at_a_new_user_query_and_nowhere_else(project):
    changes = {c.name: compare.template_changes(project.tokenizer, c, project.render(c.kwargs()))
               for c in CONVERSATIONS}
    assert {name for name, found in changes.items() if found} == {
        "two queries, thinking", "two queries with tools, thinking", "two queries, thinking off"}
    [change] = changes["two queries with tools, thinking"]
    assert change["message"] == 5 and change["role"] == "user" and change["thinking_only"]
    assert [(p["message"], p["kind"], p["sequence"]) for p in change["parts"]] == [
        (2, "earlier-thinking", "<think>\nParis, three days: one call.\n</think>\n\n"),
        (4, "earlier-thinking", "<think>\nDone with Paris.\n</think>\n\n")]


def test_every_generation_prompt_of_the_project_template_is_kept_by_its_rendering_of_the_turn(project):
    for conversation in CONVERSATIONS:
        assert all(compare.prompt_kept(conversation, project.render(conversation.kwargs())).values()), conversation.name


def test_the_expected_end_is_the_whole_rendering_less_the_separator_after_the_last_turn(project):
    conversation = Conversation("c", [conversations.USER, {"role": "assistant", "content": "Hi."}])
    render = project.render(conversation.kwargs())
    end = compare.expected(render, project.special, conversation.messages, open_turn=False)
    assert end == render(conversation.messages, False)[:-1]
    assert project.tokenizer.decode(end).endswith("Hi.<|im_end|>")
    assert compare.expected(render, project.special, conversation.messages[:1], open_turn=True) == render(
        conversation.messages[:1], True)
