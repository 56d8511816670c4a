"""multi-turn-tokens' verdicts from a replay's findings: pass, fail, and affected only for verl's kept thinking at a
new user query (the verl #7807 class); a side that stops is a finding with its one-line reason."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the tokenizer is built in memory

from harness.checks.multi_turn_tokens import replay, templates
from harness.checks.multi_turn_tokens.conversations import CONVERSATIONS
from harness.results.records import Status

AT_USER = [{"message": 2, "role": "user", "parts": [], "thinking_only": True}]
AT_TOOL = [{"message": 2, "role": "tool", "parts": [], "thinking_only": True}]


def finding(kind: str, changes: list[dict]) -> dict:
    part = {"turn": 1, "role": "assistant", "message": 1, "kind": kind, "sequence": "<think>\nx\n</think>\n\n",
            "whole": ""}
    return {"conversation": "c", "messages_before": 3, "parts": [part], "described": ["turn 1 (assistant)"],
            "template_changes": changes}


def outcome(*findings: dict, changes: dict | None = None) -> replay.Outcome:
    return replay.Outcome(total=4, findings=list(findings), changes=changes or {"c": AT_USER})


def test_no_finding_passes_and_says_what_the_template_does():
    status, message = replay.judge(outcome(), "L", "the sequence")
    assert status is Status.PASS
    assert message == ('L: the sequence equals the whole-conversation rendering at every generation point and at the '
                       'end, in all 4 conversations; the template drops earlier thinking at a new user query in 1 '
                       '("c")')


def test_kept_thinking_the_template_drops_at_a_new_query_is_affected_for_verl_only():
    status, message = replay.judge(outcome(finding("earlier-thinking", AT_USER)), "L", "verl's", True)
    assert status is Status.AFFECTED and 'differs from the whole-conversation rendering in 1 of 4' in message
    assert replay.judge(outcome(finding("earlier-thinking", AT_USER)), "L", "the trainer's")[0] is Status.FAIL


def test_kept_thinking_after_a_tool_result_or_other_tokens_fail_for_verl_too():
    tool = outcome(finding("earlier-thinking", AT_TOOL), changes={"c": AT_TOOL})
    assert replay.judge(tool, "L", "verl's", True)[0] is Status.FAIL
    assert replay.judge(outcome(finding("tokens", AT_USER)), "L", "verl's", True)[0] is Status.FAIL
    mixed = outcome(finding("earlier-thinking", AT_USER), finding("generation-prompt", AT_USER))
    assert replay.judge(mixed, "L", "verl's", True)[0] is Status.FAIL


def test_a_side_that_stops_is_a_finding_with_its_one_line_reason():
    def stops(template, conversation, outputs):
        raise RuntimeError("no engine\nsecond line")

    result = replay.replay(templates.project(), stops, CONVERSATIONS[:2])
    assert [f["error"] for f in result.findings] == ["RuntimeError: no engine"] * 2
    status, message = replay.judge(result, "L", "it")
    assert status is Status.FAIL and '"one query, thinking": stopped: RuntimeError: no engine' in message
