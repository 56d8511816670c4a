"""An incremental token sequence against the whole-conversation rendering, turn by turn, and what the template does.

A side (the trainer, verl) is replayed through a conversation and observed at each point where an engine would
generate (before each assistant turn) and at the end. Its sequence there must equal the template's rendering of
the conversation up to that point, tokenized: with the generation prompt at a generation point; at the end, the
whole conversation less what follows its last end-of-turn token (the engine does not generate the separator),
or with the generation prompt where the conversation ends on a tool result or user turn.

A difference is located by rendered turn: both sequences are cut before each turn-start token (`<|im_start|>`)
and compared turn by turn; within a turn, the part both begin and end with is trimmed. Each differing part is
classified:
- `earlier-thinking`: the side has a thinking block (`<think>...</think>`, empty or not) the whole rendering lacks,
  in an assistant turn the template rendered with it when it was the last turn: the template drops that turn's
  thinking once later messages follow (Qwen3.5 does at a new user query);
- `generation-prompt`: the same, in a turn whose rendering never had the block its generation prompt opened (a
  template whose generation prompt and rendering of the turn disagree);
- `tokens`: anything else, a difference of the side's own making (a separator dropped, a turn rendered alone).

`template_changes` measures the template alone, with no side: at each step where messages follow an assistant
turn, whether the rendering of the history stays a prefix of the rendering with them, and, where not, which
turns change and how. That tells "the template drops earlier thinking" from a side's bug.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .conversations import Conversation, Render, end_of_turn

TURN_START = "<|im_start|>"
THINKING = re.compile(r"\s*<think>.*</think>\s*", re.S)
EXCERPT = 60  # characters of a differing part kept in messages


@dataclass
class Part:
    """One differing part of one rendered turn."""

    turn: int | None  # rendered turn, counted from 0 (a system or tools turn is one); None: the turns themselves
    role: str
    message: int | None  # the conversation's message of that turn, where the rendering maps onto the messages
    side: str
    whole: str
    kind: str = "tokens"

    def describe(self) -> str:
        owner = f", message {self.message}" if self.message is not None else ""
        where = self.role if self.turn is None else f"turn {self.turn} ({self.role}{owner})"
        what = {"earlier-thinking": "the template drops this turn's thinking once later messages follow; the "
                                    "sequence keeps it",
                "generation-prompt": "the template renders this turn without the thinking block its generation "
                                     "prompt opened",
                "tokens": "the sequence and the whole rendering differ"}[self.kind]
        return f"{where}: {what}: sequence {_cut(self.side)!r}, whole rendering {_cut(self.whole)!r}"

    def to_dict(self) -> dict:
        return {"turn": self.turn, "role": self.role, "message": self.message, "kind": self.kind,
                "sequence": self.side, "whole": self.whole}


def _cut(text: str) -> str:
    return text if len(text) <= EXCERPT else text[:EXCERPT] + "\u2026"


def expected(render: Render, special: set[int], messages: list[dict], open_turn: bool) -> list[int]:
    """The whole rendering of `messages`: with the generation prompt (`open_turn`), or less what follows the last
    end-of-turn token (the separator, which the engine does not generate)."""
    if open_turn:
        return render(messages, True)
    whole = render(messages, False)
    return whole[:end_of_turn(whole, special)]


def rendered_turns(conversation: Conversation, messages_before: int, open_turn: bool) -> list[int | None]:
    """The message each rendered turn of the first `messages_before` messages stands for (ChatML as Qwen3.5 renders
    it: a system or tools turn first, consecutive tool results in one turn), and None for the open generation turn
    where there is one."""
    messages = conversation.messages[:messages_before]
    turns: list[int | None] = []
    if conversation.tools or (messages and messages[0]["role"] == "system"):
        turns.append(0 if messages and messages[0]["role"] == "system" else None)
    for index, message in enumerate(messages):
        role = message["role"]
        if role == "system" or (role == "tool" and index and messages[index - 1]["role"] == "tool"):
            continue
        turns.append(index)
    return turns + [None] if open_turn else turns


def split_turns(ids: list[int], start: int) -> list[list[int]]:
    turns: list[list[int]] = [[]]
    for token in ids:
        if token == start and turns[-1]:
            turns.append([])
        turns[-1].append(token)
    return turns


def classify(side: str, whole: str, message: int | None, keeps_prompt: dict[int, bool]) -> str:
    if whole.strip() or not THINKING.fullmatch(side):
        return "tokens"
    return "generation-prompt" if message is not None and not keeps_prompt.get(message, True) else "earlier-thinking"


def differences(tok, conversation: Conversation, messages_before: int, side: list[int], whole: list[int],
                keeps_prompt: dict[int, bool], open_turn: bool = True) -> list[Part]:
    """The differing parts of `side` against `whole` at one point, by rendered turn (`open_turn`: `whole` ends
    with a generation prompt)."""
    start = tok.convert_tokens_to_ids(TURN_START)
    a, b = split_turns(side, start), split_turns(whole, start)
    owners = rendered_turns(conversation, messages_before, open_turn)
    structure = len(a) != len(b)
    if structure:  # the turns themselves differ: one part, the whole sequences less what both begin and end with
        a, b, owners = [side], [whole], [None]
    parts = []
    for turn, (x, y) in enumerate(zip(a, b)):
        if x == y:
            continue
        head = 0
        while head < min(len(x), len(y)) and x[head] == y[head]:
            head += 1
        tail = 0
        while tail < min(len(x), len(y)) - head and x[-1 - tail] == y[-1 - tail]:
            tail += 1
        message = owners[turn] if len(owners) == len(a) else None
        role = tok.decode(y[1:]).split("\n", 1)[0] if y and y[0] == start else "preamble"
        if structure:
            role = (f"the turns ({len(split_turns(side, start))} in the sequence, "
                    f"{len(split_turns(whole, start))} in the whole rendering)")
        side_text, whole_text = tok.decode(x[head:len(x) - tail]), tok.decode(y[head:len(y) - tail])
        parts.append(Part(None if structure else turn, role, message, side_text, whole_text,
                          classify(side_text, whole_text, message, keeps_prompt)))
    return parts


def prompt_kept(conversation: Conversation, render: Render) -> dict[int, bool]:
    """{assistant message: whether the template's rendering of it, as the last turn, begins with its generation
    prompt}: False for a template whose generation prompt opens what its rendering of the turn leaves out."""
    kept = {}
    for index, message in enumerate(conversation.messages):
        if message["role"] == "assistant":
            prompt = render(conversation.messages[:index], True)
            kept[index] = render(conversation.messages[:index + 1], False)[:len(prompt)] == prompt
    return kept


def template_changes(tok, conversation: Conversation, render: Render) -> list[dict]:
    """Where the template renders the history differently once the next messages follow: for each such step, the
    first message appended, its role, and the differing parts of the history's turns."""
    changes = []
    keeps = prompt_kept(conversation, render)
    for first, end in conversation.steps():
        if conversation.messages[first]["role"] == "assistant":
            continue
        history = render(conversation.messages[:first], False)
        following = render(conversation.messages[:end], True)
        if following[:len(history)] == history:
            continue
        start = tok.convert_tokens_to_ids(TURN_START)
        kept = len(split_turns(history, start))
        parts = differences(tok, conversation, first, history, _first_turns(following, start, kept), keeps,
                            open_turn=False)
        changes.append({"message": first, "role": conversation.messages[first]["role"],
                        "parts": [p.to_dict() for p in parts], "thinking_only": bool(parts) and all(
                            p.kind == "earlier-thinking" for p in parts)})
    return changes


def _first_turns(ids: list[int], start: int, count: int) -> list[int]:
    return [token for turn in split_turns(ids, start)[:count] for token in turn]
