"""The model outputs and conversations the vllm-chat-parity check feeds to both sides.

Outputs follow Qwen3.5's XML tool-call grammar (well-formed, several calls, nested JSON
arguments) or break it (unclosed, half-written, hostile text). Hostile values are text a parser
that evaluated its input would act on: each names the sentinel file it would create, and the
check fails if that file appears.
"""
from __future__ import annotations

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                         "metric": {"type": "boolean"}}}}},
    {"type": "function", "function": {"name": "search", "description": "Search documents", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}, "filters": {"type": "object"},
                                         "limit": {"type": "number"}, "tags": {"type": "array"}}}}},
]


def call(name: str, **arguments: str) -> str:
    params = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in arguments.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def hostile(sentinel: str) -> str:
    """Python that creates `sentinel` if anything evaluates or executes it."""
    return f"__import__('pathlib').Path({sentinel!r}).touch()"


def well_formed() -> dict[str, str]:
    return {
        "one call": call("get_weather", city="Paris", days="3"),
        "text then call": "Let me look that up.\n\n" + call("get_weather", city="Lyon", days="1", metric="true"),
        "several calls": call("get_weather", city="Oslo", days="2") + "\n" + call("search", query="fjords", limit="5"),
        "nested JSON arguments": call("search", query="a <b> & c", filters='{"year": [2024, 2025], "lang": {"in": '
                                      '["en", "de"]}, "draft": false}', tags='["x", {"y": null}]', limit="2.5"),
        "multi-line string": call("search", query="line one\nline two\n  indented"),
        "no call": "The weather in Paris is sunny.",
    }


def malformed(sentinel: str) -> dict[str, str]:
    return {
        "unclosed tool_call": "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n",
        "missing </function>": "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n"
                               "</tool_call>",
        "integer that is code": call("get_weather", city="Nice", days=hostile(sentinel)),
        "object that is code": call("search", query="q", filters=hostile(sentinel)),
        "python literal for an array": call("search", query="q", tags="('a', 'b')"),
        "string that is code": call("search", query=hostile(sentinel)),
    }


# Conversations rendered by the tokenizer's chat template and by the trainer's fallback.
SYSTEM = {"role": "system", "content": "You are terse."}
USER = {"role": "user", "content": "Weather in Paris?"}
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}]}
TOOL = {"role": "tool", "content": '{"sky": "clear"}'}
ANSWER = {"role": "assistant", "content": "Clear skies."}

# Each with a user turn: the fallback must render exactly what the template renders.
WITH_USER = {
    "user": ([USER], {"add_generation_prompt": True}),
    "system, user, tools": ([SYSTEM, USER], {"tools": TOOLS, "add_generation_prompt": True}),
    "tool round trip": ([SYSTEM, USER, CALL, TOOL, ANSWER], {"tools": TOOLS}),
}
# Without a user turn (what RL frameworks render to score a response): the fallback must equal the
# template's rendering of the same conversation with a user turn after the system turns, minus
# exactly that turn; so the system message and every other turn stay.
WITHOUT_USER = {
    "assistant alone": ([ANSWER], {}),
    "system, assistant": ([SYSTEM, ANSWER], {}),
    "system, call, tool, answer": ([SYSTEM, CALL, TOOL, ANSWER], {"tools": TOOLS}),
}
