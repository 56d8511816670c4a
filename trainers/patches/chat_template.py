"""Chat-template rendering that also works for conversations without a user turn.

Qwen3.5's chat template raises "No user query found in messages." when no message has the
user role, so a lone assistant turn or tool turn (what RL frameworks render to score or mask
a response) cannot be rendered. `apply_chat_template` renders normally and, only when that
fails with a template error for a conversation that has no user turn, renders again with a
placeholder user turn and cuts that turn out of the text.

The condition is recognised by behaviour, not by the error text: the conversation has no user
turn, the template renders once a user turn is added, and the placeholder turn can be located
exactly (see `_strip_placeholder`). Anything else re-raises the original error: a different
exception type, a template error in a conversation that has a user turn, or a template that
still fails with the placeholder.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jinja2

# No whitespace at either end: templates that `trim` the content must leave it intact.
PLACEHOLDER = "\u2063placeholder-user-turn-5f0c\u2063"


class _FallbackRejected(Exception):
    """The placeholder rendering cannot be trusted; the original error is raised instead."""


def _render(tokenizer_or_template: Any, messages: list[dict], **kwargs: Any) -> str:
    """Render with transformers' own chat-template code (a tokenizer, or a Jinja template string)."""
    if isinstance(tokenizer_or_template, str):
        from transformers.utils.chat_template_utils import render_jinja_template

        rendered, _ = render_jinja_template(conversations=[messages], chat_template=tokenizer_or_template, **kwargs)
        return rendered[0]
    text = tokenizer_or_template.apply_chat_template(messages, tokenize=False, **kwargs)
    if not isinstance(text, str):
        raise TypeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, expected str")
    return text


def has_user_turn(messages: Sequence[dict]) -> bool:
    return any(message.get("role") == "user" for message in messages)


def _leading_system_count(messages: Sequence[dict]) -> int:
    count = 0
    while count < len(messages) and messages[count].get("role") == "system":
        count += 1
    return count


def _strip_placeholder(tokenizer_or_template: Any, messages: list[dict], **kwargs: Any) -> str:
    """Render `messages` with a placeholder user turn after the leading system turns, then remove it.

    The placeholder turn's text U is measured, not guessed: with S the system turns and P the
    placeholder, render(S + P + P) must extend render(S + P) by exactly U, render(S + P) must
    end with U, and the full rendering must start with render(S + P). The result is then
    render(S + P)[:-len(U)] + the rest of the full rendering. Raises _FallbackRejected otherwise.
    """
    n_system = _leading_system_count(messages)
    system, rest = list(messages[:n_system]), list(messages[n_system:])
    placeholder = {"role": "user", "content": PLACEHOLDER}
    head_kwargs = {k: v for k, v in kwargs.items() if k not in ("add_generation_prompt", "continue_final_message")}
    try:
        full = _render(tokenizer_or_template, system + [placeholder] + rest, **kwargs)
        head = _render(tokenizer_or_template, system + [placeholder], **head_kwargs)
        head_twice = _render(tokenizer_or_template, system + [placeholder, placeholder], **head_kwargs)
    except jinja2.TemplateError as exc:
        raise _FallbackRejected(f"the template fails even with a user turn: {exc}") from exc
    turn = head_twice[len(head):]
    if not (head_twice.startswith(head) and PLACEHOLDER in turn and head.endswith(turn) and full.startswith(head)):
        raise _FallbackRejected("the placeholder user turn cannot be located in the rendering")
    text = head[: len(head) - len(turn)] + full[len(head):]
    if PLACEHOLDER in text:
        raise _FallbackRejected("the placeholder is still in the rendering")
    return text


def apply_chat_template(tokenizer_or_template: Any, messages: Sequence[dict], **kwargs: Any) -> str:
    """Render `messages` to text (never tokenized); keyword arguments go to the template
    (tools, add_generation_prompt, enable_thinking, ...). Conversations without a user turn
    render with their leading system message first and no trace of a user turn."""
    if kwargs.pop("tokenize", False):
        raise ValueError("apply_chat_template here returns text; tokenize the result instead")
    messages = [dict(message) for message in messages]
    try:
        return _render(tokenizer_or_template, messages, **kwargs)
    except jinja2.TemplateError as original:
        if has_user_turn(messages):
            raise
        try:
            return _strip_placeholder(tokenizer_or_template, messages, **kwargs)
        except _FallbackRejected as why:
            original.add_note(f"no fallback without a user turn: {why}")
            raise original from None


__all__ = ["PLACEHOLDER", "apply_chat_template", "has_user_turn"]
