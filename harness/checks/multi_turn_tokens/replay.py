"""A side replayed through the conversations, its observations compared with the whole renderings, and a verdict.

A side is a function (conversation, generated tokens) -> observations: (messages before the point, whether the
sequence ends with a generation prompt, its token ids), one per generation point, one at the end, and (the
trainer) one per closed segment. The trainer's side drives trainers/rollout/turns.py's TurnTokens as an agent
loop does; verl's sides live in verl_side.py.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.results.records import Status

from . import compare
from .conversations import CONVERSATIONS, Conversation, generated
from .templates import Template

Observation = tuple[int, bool, list[int]]  # (messages before, open for generation, ids)
Side = Callable[[Template, Conversation, dict[int, list[int]]], list[Observation]]
SHOWN = 3  # conversations named in a message


@dataclass
class Outcome:
    """What one side did on every conversation with one template."""

    total: int = 0
    findings: list[dict] = field(default_factory=list)  # the first differing point (or error) per conversation
    changes: dict[str, list[dict]] = field(default_factory=dict)  # the template's own history changes
    segments: dict[str, list[str]] = field(default_factory=dict)  # the trainer's segments' reasons


def trainer_side(template: Template, conversation: Conversation, outputs: dict[int, list[int]],
                 segments: dict[str, list[str]] | None = None) -> list[Observation]:
    """TurnTokens as an agent loop drives it: the first prompt, then the engine's tokens and the messages that
    follow them, turn by turn; each closed segment is observed too."""
    from trainers.rollout.turns import TurnTokens

    kwargs = conversation.kwargs()
    tools = kwargs.pop("tools", None)
    turns = TurnTokens(template.tokenizer, tools=tools, template_kwargs=kwargs)
    first = conversation.first_assistant
    seen: list[Observation] = [(first, True, turns.start(conversation.messages[:first]))]
    for start, end in conversation.steps():
        if conversation.messages[start]["role"] == "assistant":
            turns.add_generated(outputs[start], conversation.messages[start])
            continue
        before = len(turns.segments)
        prompt = turns.add_context(conversation.messages[start:end])
        if len(turns.segments) > before:
            closed = turns.segments[-2]
            seen.append((turns.segments[-1].messages_before, False, list(closed.ids)))
        seen.append((end, True, prompt))
    if conversation.messages[-1]["role"] == "assistant":
        seen.append((len(conversation.messages), False, turns.prompt))
    if segments is not None:
        segments[conversation.name] = [s.reason for s in turns.segments[1:]]
    return seen


def replay(template: Template, side: Side, conversations: list[Conversation] = CONVERSATIONS) -> Outcome:
    """`side` on each conversation; a finding per conversation: its first point that differs, or its error."""
    outcome = Outcome(total=len(conversations))
    for conversation in conversations:
        render = template.render(conversation.kwargs())
        outputs = generated(conversation, render, template.special)
        changes = compare.template_changes(template.tokenizer, conversation, render)
        if changes:
            outcome.changes[conversation.name] = changes
        try:
            seen = side(template, conversation, outputs)
        except Exception as exc:  # noqa: BLE001 - a side that cannot go on is a finding, with its reason
            outcome.findings.append({"conversation": conversation.name, "error": f"{type(exc).__name__}: {exc}"
                                     .splitlines()[0][:400], "template_changes": changes})
            continue
        keeps = compare.prompt_kept(conversation, render)
        for before, open_turn, ids in seen:
            want = compare.expected(render, template.special, conversation.messages[:before], open_turn)
            if ids != want:
                parts = compare.differences(template.tokenizer, conversation, before, ids, want, keeps, open_turn)
                outcome.findings.append({"conversation": conversation.name, "messages_before": before,
                                         "parts": [p.to_dict() for p in parts],
                                         "described": [p.describe() for p in parts],
                                         "template_changes": changes})
                break
    return outcome


def template_summary(outcome: Outcome) -> str:
    """What the template does to the history, measured without any side."""
    at_user = sorted(name for name, changes in outcome.changes.items() if any(c["role"] == "user" for c in changes))
    elsewhere = sorted(name for name, changes in outcome.changes.items() if any(c["role"] != "user" for c in changes))
    thinking = all(c["thinking_only"] for changes in outcome.changes.values() for c in changes)
    if not outcome.changes:
        return "the template renders the history the same way whatever follows (append-only)"
    text = []
    if at_user:
        text.append(f"at a new user query in {len(at_user)} ({_names(at_user)})")
    if elsewhere:
        text.append(f"after a tool result in {len(elsewhere)} ({_names(elsewhere)})")
    what = "drops earlier thinking" if thinking else "renders earlier turns again"
    return f"the template {what} " + " and ".join(text)


def _names(names: list[str]) -> str:
    return ", ".join(f'"{name}"' for name in names)


def _finding_text(finding: dict) -> str:
    if "error" in finding:
        text = f'"{finding["conversation"]}": stopped: {finding["error"]}'
        for change in finding["template_changes"][:1]:
            for part in change["parts"][:1]:
                verb = "drops the thinking of" if part["kind"] == "earlier-thinking" else "renders differently"
                text += (f" (the template {verb} message {part['message']} ({part['role']}) once message "
                         f"{change['message']} ({change['role']}) follows)")
        return text
    where = f'"{finding["conversation"]}" before message {finding["messages_before"]}: '
    return where + "; ".join(finding["described"])


def judge(outcome: Outcome, label: str, who: str, thinking_kept_is_known: bool = False) -> tuple[Status, str]:
    """(status, message) for the sequence `who` names: pass where every point equals the whole rendering; for verl
    (`thinking_kept_is_known`) affected where the only differences are earlier thinking the template drops at a new
    user query and the side keeps (the class of verl #7807); fail otherwise."""
    summary = template_summary(outcome)
    if not outcome.findings:
        message = (f"{label}: {who} equals the whole-conversation rendering at every generation point and at the end, "
                   f"in all {outcome.total} conversations; {summary}")
        if outcome.segments and any(outcome.segments.values()):
            message += "; the trainer starts a new segment there, each equal to the rendering up to it"
        return Status.PASS, message
    shown = "; ".join(_finding_text(f) for f in outcome.findings[:SHOWN])
    more = f"; and {len(outcome.findings) - SHOWN} more" if len(outcome.findings) > SHOWN else ""
    message = (f"{label}: {who} differs from the whole-conversation rendering in {len(outcome.findings)} of "
               f"{outcome.total} conversations: {shown}{more}; {summary}")
    known = thinking_kept_is_known and all(
        "parts" in f and f["parts"] and all(p["kind"] == "earlier-thinking" for p in f["parts"])
        and any(c["role"] == "user" for c in f["template_changes"]) for f in outcome.findings)
    if known:
        return Status.AFFECTED, message + ("; the class of verl #7807: the sequence keeps the thinking the model "
                                           "generated, the template drops it at a new user query")
    return Status.FAIL, message
