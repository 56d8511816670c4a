"""TurnTokens, the trainer's agent-loop token sequence, on the project's Qwen3.5-like template (byte-level ids)."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the tokenizer is built in memory

from harness.checks.vllm_chat_parity import cases, rendering
from trainers.rollout.turns import HistoryRewritten, TurnTokens

USER = cases.USER
CALL = {**cases.THINKING_CALL}
RESULT = cases.TOOL
ANSWER = {"role": "assistant", "content": "Clear skies.", "reasoning_content": "The tool says clear."}
THINKING_CALL_TEXT = ("Paris, three days: one call.\n</think>\n\n\n<tool_call>\n<function=get_weather>\n"
                      "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n"
                      "</tool_call><|im_end|>")
ANSWER_TEXT = "The tool says clear.\n</think>\n\nClear skies.<|im_end|>"


@pytest.fixture(scope="module")
def tok():
    return rendering.byte_tokenizer()


def whole(tok, messages, generation_prompt=False, **kwargs):
    return list(tok.apply_chat_template(messages, tools=cases.TOOLS, add_generation_prompt=generation_prompt,
                                        tokenize=True, return_dict=False, **kwargs))


def encode(tok, text):
    return tok.encode(text, add_special_tokens=False)


def test_a_tool_round_trip_appends_to_one_segment_equal_to_the_whole_rendering(tok):
    turns = TurnTokens(tok, tools=cases.TOOLS)
    assert turns.start([USER]) == whole(tok, [USER], True)
    turns.add_generated(encode(tok, THINKING_CALL_TEXT), CALL)
    assert turns.add_context([RESULT]) == whole(tok, [USER, CALL, RESULT], True)
    turns.add_generated(encode(tok, ANSWER_TEXT), ANSWER)
    full = whole(tok, [USER, CALL, RESULT, ANSWER])
    assert turns.prompt == full[:-1]  # the template's "\n" after the last <|im_end|> is not generated
    [segment] = turns.segments
    generated = encode(tok, THINKING_CALL_TEXT) + encode(tok, ANSWER_TEXT)
    assert [t for t, m in zip(segment.ids, segment.mask) if m] == generated
    newline = encode(tok, "\n")
    start_of_result = len(whole(tok, [USER], True)) + len(encode(tok, THINKING_CALL_TEXT))
    assert segment.ids[start_of_result:start_of_result + 1] == newline and segment.mask[start_of_result] == 0


def test_a_new_user_query_starts_a_segment_from_the_rendering_that_drops_earlier_thinking(tok):
    first = {"role": "assistant", "content": "Sunny.", "reasoning_content": "Paris first."}
    turns = TurnTokens(tok)
    turns.start([USER])
    turns.add_generated(encode(tok, "Paris first.\n</think>\n\nSunny.<|im_end|>"), first)
    prompt = turns.add_context([cases.FOLLOW_UP])
    assert prompt == list(tok.apply_chat_template([USER, first, cases.FOLLOW_UP], add_generation_prompt=True,
                                                  tokenize=True, return_dict=False))
    assert "Paris first." not in tok.decode(prompt)  # Qwen3.5 keeps thinking only after the last user query
    closed, new = turns.segments
    assert "Paris first." in tok.decode(closed.ids) and sum(closed.mask) > 0
    assert new.messages_before == 2 and "user query of message 2" in new.reason and not any(new.mask)


def test_an_engine_turn_cut_off_before_its_stop_token_is_closed_as_the_template_closes_it(tok):
    turns = TurnTokens(tok, tools=cases.TOOLS)
    turns.start([USER])
    cut = encode(tok, THINKING_CALL_TEXT)[:-1]  # no <|im_end|>
    turns.add_generated(cut, CALL)
    prompt = turns.add_context([RESULT])
    assert prompt[len(whole(tok, [USER], True)) + len(cut):][:2] == encode(tok, "<|im_end|>\n")
    assert prompt == whole(tok, [USER, CALL, RESULT], True)


def test_a_template_that_changes_the_history_after_a_tool_result_is_refused_by_message(tok):
    keeps_last_only = rendering.TEMPLATE.read_text().replace("loop.index0 > ns.last_query %}", "loop.last %}")
    assert keeps_last_only != rendering.TEMPLATE.read_text()
    broken = rendering.byte_tokenizer(keeps_last_only)
    turns = TurnTokens(broken, tools=cases.TOOLS)
    turns.start([USER])
    turns.add_generated(encode(broken, THINKING_CALL_TEXT), CALL)
    with pytest.raises(HistoryRewritten, match=r"^message 2 \(tool\): the chat template renders the conversation "
                                               r"before it differently once it follows \(token \d+: "):
        turns.add_context([RESULT])


def test_turns_out_of_order_are_refused(tok):
    turns = TurnTokens(tok)
    with pytest.raises(ValueError, match="add_generated before start"):
        turns.add_generated([1], ANSWER)
    turns.start([USER])
    with pytest.raises(ValueError, match="add_context needs new messages after the engine's turn"):
        turns.add_context([cases.FOLLOW_UP])
    turns.add_generated(encode(tok, ANSWER_TEXT), ANSWER)
    with pytest.raises(ValueError, match="add_generated twice in a row"):
        turns.add_generated([1], ANSWER)
