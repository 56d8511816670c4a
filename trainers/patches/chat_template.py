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

The same fallback is also a `Patch` (`PATCHES`) of the tokenizer method every Hugging Face
tokenizer renders chat templates with, for code that calls `tokenizer.apply_chat_template`
itself (tokenized or not). Processors (`ProcessorMixin.apply_chat_template`) render on their own
and are not covered.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jinja2
from packaging.specifiers import SpecifierSet

from .base import DelegatingPatch

# No whitespace at either end: templates that `trim` the content must leave it intact.
PLACEHOLDER = "\u2063placeholder-user-turn-5f0c\u2063"

# The method in transformers 5.0 to 5.23 (read in 5.0, 5.1, 5.2, 5.17, 5.18 and 5.23): only
# MistralCommonBackend overrides it. Qwen3.5 exists from 5.2, hence the range.
TARGET = "transformers.tokenization_utils_base:PreTrainedTokenizerBase.apply_chat_template"
VERSIONS = ">=5.2"

# A template that outputs the first message's content unchanged: lets the stock method tokenize
# an already rendered text exactly as it tokenizes its own renderings (padding, tensors, dicts).
VERBATIM = "{{- messages[0]['content'] }}"
# Arguments of the stock method that concern tokenization, not the template.
_TOKENIZATION = ("tokenize", "padding", "truncation", "max_length", "return_tensors", "return_dict",
                 "tokenizer_kwargs", "return_assistant_tokens_mask", "sanitize_control_tokens")
# Requests the fallback cannot honour (assistant masks need the template's {% generation %}
# spans; sanitizing would treat the rendered control tokens as user text).
_UNSUPPORTED = ("return_assistant_tokens_mask", "sanitize_control_tokens")

Renderer = Callable[..., str]  # render(messages, **template_kwargs) -> text


class _FallbackRejected(Exception):
    """The placeholder rendering cannot be trusted; the original error is raised instead."""


def _renderer(tokenizer_or_template: Any) -> Renderer:
    """transformers' own chat-template rendering, for a tokenizer or a Jinja template string."""
    if isinstance(tokenizer_or_template, str):
        from transformers.utils.chat_template_utils import render_jinja_template

        def render(messages: list[dict], **kwargs: Any) -> str:
            rendered, _ = render_jinja_template(conversations=[messages], chat_template=tokenizer_or_template,
                                                **kwargs)
            return rendered[0]
        return render

    def render_tokenizer(messages: list[dict], **kwargs: Any) -> str:
        text = tokenizer_or_template.apply_chat_template(messages, tokenize=False, **kwargs)
        if not isinstance(text, str):
            raise TypeError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, expected str")
        return text
    return render_tokenizer


def has_user_turn(messages: Sequence[dict]) -> bool:
    return any(message.get("role") == "user" for message in messages)


def _leading_system_count(messages: Sequence[dict]) -> int:
    count = 0
    while count < len(messages) and messages[count].get("role") == "system":
        count += 1
    return count


def _strip_placeholder(render: Renderer, messages: list[dict], **kwargs: Any) -> str:
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
        full = render(system + [placeholder] + rest, **kwargs)
        head = render(system + [placeholder], **head_kwargs)
        head_twice = render(system + [placeholder, placeholder], **head_kwargs)
    except jinja2.TemplateError as exc:
        raise _FallbackRejected(f"the template fails even with a user turn: {exc}") from exc
    turn = head_twice[len(head):]
    if not (head_twice.startswith(head) and PLACEHOLDER in turn and head.endswith(turn) and full.startswith(head)):
        raise _FallbackRejected("the placeholder user turn cannot be located in the rendering")
    text = head[: len(head) - len(turn)] + full[len(head):]
    if PLACEHOLDER in text:
        raise _FallbackRejected("the placeholder is still in the rendering")
    return text


def _render_with_fallback(render: Renderer, messages: list[dict], **kwargs: Any) -> str:
    try:
        return render(messages, **kwargs)
    except jinja2.TemplateError as original:
        if has_user_turn(messages):
            raise
        try:
            return _strip_placeholder(render, messages, **kwargs)
        except _FallbackRejected as why:
            original.add_note(f"no fallback without a user turn: {why}")
            raise original from None


def apply_chat_template(tokenizer_or_template: Any, messages: Sequence[dict], **kwargs: Any) -> str:
    """Render `messages` to text (never tokenized); keyword arguments go to the template
    (tools, add_generation_prompt, enable_thinking, ...). Conversations without a user turn
    render with their leading system message first and no trace of a user turn."""
    if kwargs.pop("tokenize", False):
        raise ValueError("apply_chat_template here returns text; tokenize the result instead")
    return _render_with_fallback(_renderer(tokenizer_or_template), [dict(m) for m in messages], **kwargs)


def _conversations(conversation: Any) -> tuple[list[list[dict]], bool] | None:
    """(conversations, batched) as the stock method reads them; None for inputs left alone."""
    batched = isinstance(conversation, (list, tuple)) and bool(conversation) and \
        isinstance(conversation[0], (list, tuple))
    conversations = list(conversation) if batched else [conversation]
    if all(isinstance(c, (list, tuple)) and all(isinstance(m, Mapping) for m in c) for c in conversations):
        return [[dict(m) for m in c] for c in conversations], batched
    return None


def make_fallback_method(stock: Callable[..., Any]) -> Callable[..., Any]:
    """The patched `apply_chat_template`: the stock method; on a template error for a conversation
    without a user turn (alone or in a batch), the fallback's text, tokenized by the stock method
    when tokens are asked for. Other conversations of a batch render as the stock method does."""
    signature = inspect.signature(stock)

    @functools.wraps(stock)
    def apply_chat_template(self, conversation, *args, **kwargs):
        try:
            return stock(self, conversation, *args, **kwargs)
        except jinja2.TemplateError as error:
            original = error
        parsed = _conversations(conversation)
        if parsed is None or all(has_user_turn(c) for c in parsed[0]):
            raise original  # an unrelated template error: not ours to handle
        bound = signature.bind(self, conversation, *args, **kwargs)
        bound.apply_defaults()
        arguments = {k: v for k, v in bound.arguments.items() if k not in ("self", "conversation")}
        for name, param in signature.parameters.items():
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                arguments.update(arguments.pop(name, {}))  # extra template variables
        blocked = [name for name in _UNSUPPORTED if arguments.get(name)]
        if blocked:
            original.add_note(f"no fallback without a user turn: {', '.join(blocked)} not supported by it")
            raise original
        template_kwargs = {k: v for k, v in arguments.items() if k not in _TOKENIZATION}
        render = functools.partial(_stock_text, stock, self)
        texts = [_render_with_fallback(render, messages, **template_kwargs) for messages in parsed[0]]
        if not arguments.get("tokenize", True):
            return texts if parsed[1] else texts[0]
        wrapped = [[{"role": "user", "content": text}] for text in texts]
        tokenization = {k: arguments[k] for k in _TOKENIZATION if k in arguments and k not in _UNSUPPORTED}
        return stock(self, wrapped if parsed[1] else wrapped[0], chat_template=VERBATIM, **tokenization)

    return apply_chat_template


def _stock_text(stock: Callable[..., Any], tokenizer: Any, messages: list[dict], **kwargs: Any) -> str:
    return stock(tokenizer, messages, tokenize=False, **kwargs)


def fallback_patch(target: str = TARGET, versions: str = VERSIONS) -> DelegatingPatch:
    return DelegatingPatch(
        name="chat-template-fallback", target=target, replacement=None, make=make_fallback_method,
        versions=SpecifierSet(versions),
        description="render conversations without a user turn (Qwen3.5: 'No user query found in messages.')")


PATCHES = [fallback_patch()]

__all__ = ["PATCHES", "PLACEHOLDER", "TARGET", "apply_chat_template", "fallback_patch", "has_user_turn",
           "make_fallback_method"]
