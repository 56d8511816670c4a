"""The token sequence of a multi-turn rollout (an agent loop), built turn by turn.

An agent loop prompts the engine with tokens, receives the tokens it generated, runs the tools it called and
prompts it again. The trainer trains on the tokens the model saw and produced, so the sequence grows by
appending: the engine's tokens are kept as they came (tokenizing their text again can split it into other
tokens). For the messages the model did not write (tool results, user turns) the chat template decides:

- after the engine's tokens comes the rest of the template's closing of that turn: what it renders after the
  stop token ("\\n" after `<|im_end|>` for Qwen3.5), or the whole closing where the engine was cut off first;
- then the new messages and the next generation prompt, as the template renders them after this history: the
  part of the whole conversation's rendering that follows the rendering of the conversation so far.

That part exists only while the template renders the history the same way once the new messages follow.
Qwen3.5's template does not at a new user query: it keeps the thinking only of the assistant turns after the
last user query, so a new one drops the thinking of every turn before it. A chat server renders each request
from its messages, so from there on the model is prompted with the history as the template renders it: the
sequence so far is closed as a segment (a training sample with the tokens generated in it) and a new one starts
from the rendering of the whole conversation, in which the earlier turns are context. Any other change of the
rendered history (one a tool result causes, say) raises `HistoryRewritten`: the model would go on from a
history it was not shown. Each generated token is trained once, in the segment it was generated in (mask 1);
everything else is context (mask 0).

The conversation is rendered whole at each step (the trainer's chat-template rendering,
trainers/patches/chat_template.py): quadratic in the number of turns, and exact for any template.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trainers.patches.chat_template import apply_chat_template

EXCERPT = 40  # characters of each side shown around a difference


class HistoryRewritten(ValueError):
    """The template renders the history differently once the new messages follow, where no segment may start."""


@dataclass
class Segment:
    """One training sample of a rollout: its tokens, which of them were generated, and why it starts."""

    ids: list[int]
    mask: list[int]
    messages_before: int  # messages of the conversation rendered whole at its start
    reason: str


@dataclass
class TurnTokens:
    """The running token sequence of one rollout: `start`, then `add_generated` and `add_context` in turn.

    `tools` and `template_kwargs` (enable_thinking, ...) go to every rendering, as the engine's prompts had them.
    """

    tokenizer: Any
    tools: list[dict] | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    messages: list[dict] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    _generated: list[int] | None = None  # the engine's tokens of the last turn, until context follows them

    def render(self, messages: Sequence[dict], generation_prompt: bool) -> list[int]:
        kwargs = dict(self.template_kwargs, add_generation_prompt=generation_prompt)
        if self.tools:
            kwargs["tools"] = self.tools
        text = apply_chat_template(self.tokenizer, messages, **kwargs)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    @property
    def prompt(self) -> list[int]:
        """The tokens the engine is prompted with next (after `add_generated`: the sequence so far)."""
        return list(self.segments[-1].ids)

    def start(self, messages: Sequence[dict]) -> list[int]:
        """The first prompt: `messages` rendered whole, with the generation prompt."""
        self.messages = [dict(m) for m in messages]
        ids = self.render(self.messages, generation_prompt=True)
        self.segments = [Segment(ids, [0] * len(ids), 0, "the first prompt")]
        self._generated = None
        return self.prompt

    def add_generated(self, ids: Sequence[int], message: dict) -> None:
        """The engine's tokens for the next assistant turn, and that turn as the loop parsed it."""
        if not self.segments:
            raise ValueError("add_generated before start: there is no prompt")
        if self._generated is not None:
            raise ValueError("add_generated twice in a row: the messages between the two turns are missing")
        segment = self.segments[-1]
        segment.ids.extend(ids)
        segment.mask.extend([1] * len(ids))
        self.messages.append(dict(message))
        self._generated = list(ids)

    def add_context(self, messages: Sequence[dict]) -> list[int]:
        """Append tool results or user turns after the engine's turn; returns the next prompt."""
        new = [dict(m) for m in messages]
        if not new or self._generated is None:
            raise ValueError("add_context needs new messages after the engine's turn (add_generated first)")
        history = self.render(self.messages, generation_prompt=False)
        following = self.render(self.messages + new, generation_prompt=True)
        if following[:len(history)] == history:
            self._append(self._closing(history) + following[len(history):])
        elif any(m.get("role") == "user" for m in new):
            self.segments.append(Segment(following, [0] * len(following), len(self.messages),
                                         f"the template renders the history again at the user query of message "
                                         f"{len(self.messages) + _first_user(new)}"))
        else:
            raise HistoryRewritten(f"message {len(self.messages)} ({new[0].get('role')}): the chat template renders "
                                   f"the conversation before it differently once it follows "
                                   f"({self._where(history, following)}); the model would go on from a history "
                                   "it was not shown")
        self.messages.extend(new)
        self._generated = None
        return self.prompt

    def _closing(self, history: list[int]) -> list[int]:
        """What the template renders after the engine's tokens to close the turn: from the turn's last special
        token (its end-of-turn marker) on, less that token where the engine generated it (its stop token)."""
        special = set(self.tokenizer.all_special_ids)
        last = max((i for i, token in enumerate(history) if token in special), default=len(history))
        closing = history[last:]
        if closing and self._generated and self._generated[-1] == closing[0]:
            return closing[1:]
        return closing

    def _append(self, ids: list[int]) -> None:
        segment = self.segments[-1]
        segment.ids.extend(ids)
        segment.mask.extend([0] * len(ids))

    def _where(self, history: list[int], following: list[int]) -> str:
        at = next((i for i, (a, b) in enumerate(zip(history, following)) if a != b), min(len(history), len(following)))
        before = self.tokenizer.decode(history[at:])[:EXCERPT]
        after = self.tokenizer.decode(following[at:])[:EXCERPT]
        return f"token {at}: {before!r} becomes {after!r}"


def _first_user(messages: Sequence[dict]) -> int:
    return next(i for i, m in enumerate(messages) if m.get("role") == "user")


__all__ = ["HistoryRewritten", "Segment", "TurnTokens"]
