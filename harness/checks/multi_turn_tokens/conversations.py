"""The conversations multi-turn-tokens replays, and the tokens a model generates in each of their assistant turns.

Each conversation is an agent loop's: a first prompt (a user query, with or without a system turn), then
assistant turns (the engine's output, with reasoning or not), each followed by tool results or a new user
query. They cover tools and their results (one call, two rounds, parallel calls, text before a call), thinking
on and off, a system turn or none, several assistant turns with reasoning, later user queries (where Qwen3.5's
template drops the earlier thinking) and a conversation that ends on a tool result (the next prompt is
compared). The tools and the first messages are vllm-chat-parity's (harness/checks/vllm_chat_parity/cases.py).

What the engine generates for an assistant turn is read from the template: its rendering of the turn as the
last one, from where the generation prompt it was given ends, up to and including the turn's end-of-turn token
(the engine stops there; the template's separator after it is not generated). Where the generation prompt
opened more than the turn's rendering has (an empty thinking block the template leaves out, say), the output
starts after the part both share.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from harness.checks.vllm_chat_parity import cases

TOOLS = cases.TOOLS
Render = Callable[[list[dict], bool], list[int]]  # (messages, generation prompt) -> token ids


@dataclass(frozen=True)
class Conversation:
    name: str
    messages: list[dict]
    tools: bool = False
    thinking: bool = True
    template_kwargs: dict = field(default_factory=dict)

    def kwargs(self) -> dict:
        """The template arguments besides the messages and the generation prompt."""
        return {**({"tools": TOOLS} if self.tools else {}), "enable_thinking": self.thinking, **self.template_kwargs}

    @property
    def first_assistant(self) -> int:
        return next(i for i, m in enumerate(self.messages) if m["role"] == "assistant")

    def steps(self) -> list[tuple[int, int]]:
        """After the first prompt, the (start, end) message ranges appended at once: one assistant turn, or the
        messages between two assistant turns (tool results together, as a loop appends them)."""
        steps, start = [], self.first_assistant
        while start < len(self.messages):
            end = start + 1
            if self.messages[start]["role"] != "assistant":
                while end < len(self.messages) and self.messages[end]["role"] != "assistant":
                    end += 1
            steps.append((start, end))
            start = end
        return steps


def _call(call_id: str, name: str, reasoning: str = "", content: str = "", **arguments) -> dict:
    message = {"role": "assistant", "content": content,
               "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}
    return {**message, "reasoning_content": reasoning} if reasoning else message


def _answer(content: str, reasoning: str = "") -> dict:
    return {"role": "assistant", "content": content, **({"reasoning_content": reasoning} if reasoning else {})}


def _result(call_id: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


SYSTEM, USER, FOLLOW_UP = cases.SYSTEM, cases.USER, cases.FOLLOW_UP
PARIS = _call("call_0", "get_weather", "Paris, three days: one call.", city="Paris", days=3)
PARIS_RESULT = _result("call_0", '{"sky": "clear"}')
OSLO = _call("call_1", "get_weather", "Now Oslo, for comparison.", city="Oslo", days=1)
OSLO_RESULT = _result("call_1", '{"sky": "snow"}')
BOTH = {"role": "assistant", "content": "", "reasoning_content": "Two cities: two calls at once.",
        "tool_calls": PARIS["tool_calls"] + OSLO["tool_calls"]}
SEARCH = _call("call_2", "search", "Search first.", content="Let me look that up.", query="fjords", limit=5)
SEARCH_RESULT = _result("call_2", '["Geirangerfjord", "Naeroyfjord"]')


def _plain(message: dict) -> dict:
    """The turn without reasoning (what a model writes with thinking off)."""
    return {k: v for k, v in message.items() if k != "reasoning_content"}


CONVERSATIONS = [
    Conversation("one query, thinking", [USER, _answer("Sunny.", "The user asks about Paris.")]),
    Conversation("system, tool round trip, thinking",
                 [SYSTEM, USER, PARIS, PARIS_RESULT, _answer("Clear skies.", "The tool says clear.")], tools=True),
    Conversation("two tool rounds with reasoning",
                 [USER, PARIS, PARIS_RESULT, OSLO, OSLO_RESULT, _answer("Clear, then snow.", "Both known now.")],
                 tools=True),
    Conversation("parallel calls, two results",
                 [SYSTEM, USER, BOTH, PARIS_RESULT, OSLO_RESULT, _answer("Paris clear, Oslo snow.", "Compare.")],
                 tools=True),
    Conversation("text before a call", [USER, SEARCH, SEARCH_RESULT, _answer("Two fjords.", "Read the list.")],
                 tools=True),
    Conversation("thinking off, tool round trip", [SYSTEM, USER, _plain(PARIS), PARIS_RESULT, _answer("Clear skies.")],
                 tools=True, thinking=False),
    Conversation("thinking off, two rounds, no system",
                 [USER, _plain(PARIS), PARIS_RESULT, _plain(OSLO), OSLO_RESULT, _answer("Clear, then snow.")],
                 tools=True, thinking=False),
    Conversation("two queries, thinking",
                 [USER, _answer("Sunny.", "Paris first."), FOLLOW_UP, _answer("Cold.", "Oslo now.")]),
    Conversation("two queries with tools, thinking",
                 [SYSTEM, USER, PARIS, PARIS_RESULT, _answer("Clear.", "Done with Paris."), FOLLOW_UP, OSLO,
                  OSLO_RESULT, _answer("Snow.", "Done with Oslo.")], tools=True),
    Conversation("two queries, thinking off", [SYSTEM, USER, _answer("Sunny."), FOLLOW_UP, _answer("Cold.")],
                 thinking=False),
    Conversation("ends on a tool result", [USER, PARIS, PARIS_RESULT], tools=True),
]


def has_later_user(conversation: Conversation) -> bool:
    """Whether a user query follows an assistant turn (an agent loop that appends user turns)."""
    return any(m["role"] == "user" for m in conversation.messages[conversation.first_assistant:])


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def end_of_turn(ids: list[int], special: set[int]) -> int:
    """The index just past the last special token of `ids` (a turn's end-of-turn marker)."""
    return max((i for i, token in enumerate(ids) if token in special), default=len(ids) - 1) + 1


def generated(conversation: Conversation, render: Render, special: set[int]) -> dict[int, list[int]]:
    """{message index: the tokens the engine generates for that assistant turn}."""
    outputs = {}
    for index, message in enumerate(conversation.messages):
        if message["role"] == "assistant":
            prompt = render(conversation.messages[:index], True)
            turn = render(conversation.messages[:index + 1], False)
            outputs[index] = turn[common_prefix(prompt, turn):end_of_turn(turn, special)]
    return outputs
