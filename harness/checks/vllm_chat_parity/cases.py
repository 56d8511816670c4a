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
    """Outputs that break the grammar or a value's schema, one per path of verl's Qwen3XMLToolParser (the parser
    trainers/patches/tool_parser.py ports), and hostile values."""
    weather = "<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>"
    return {
        "unclosed tool_call": "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n",
        "missing </function>": "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n"
                               "</tool_call>",
        "unclosed parameter": "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</function>\n</tool_call>",
        "function without tool_call": "Sure.\n" + weather,
        "function name without '>'": "Hm.\n<tool_call>\n<function=get_weather\n</tool_call>",
        "parameter name without '>'": "<tool_call>\n<function=get_weather>\n<parameter=city\nRome\n</parameter>\n"
                                      "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
        "two functions in one tool_call": f"<tool_call>\n{weather}\n<function=search>\n<parameter=query>\nq\n"
                                          "</parameter>\n</function>\n</tool_call>",
        "tool_call opened inside another": "<tool_call>\n<function=search>\n" + call("get_weather", city="Oslo"),
        "text after the call": "First.\n" + call("get_weather", city="Oslo") + "\nThen more text.",
        "parameter given twice": call("get_weather", city="Oslo", days="1").replace(
            "</function>", "<parameter=city>\nBergen\n</parameter>\n</function>"),
        "spaces around the function name": call("get_weather", city="Oslo").replace("get_weather", " get_weather "),
        "unknown tool": call("delete_everything", force="true", n="3"),
        "null for an integer": call("get_weather", city="Oslo", days="null"),
        "fraction for an integer": call("get_weather", city="Oslo", days="2.5"),
        "boolean that is not true or false": call("get_weather", city="Oslo", metric="yes"),
        "python dict for an object": call("search", query="q", filters="{'year': 2024}"),
        "python literal for an array": call("search", query="q", tags="('a', 'b')"),
        "set literal for an array": "Looking.\n" + call("search", query="q", tags="{1, 2}"),
        "integer that is code": call("get_weather", city="Nice", days=hostile(sentinel)),
        "object that is code": call("search", query="q", filters=hostile(sentinel)),
        "array that is code": call("search", query="q", tags=hostile(sentinel)),
        "string that is code": call("search", query=hostile(sentinel)),
    }


# Conversations the trainer and vLLM's chat entry point both render, in the form the trainer holds them
# (tool-call arguments as objects; vLLM receives them JSON-encoded, as an OpenAI client sends them).
SYSTEM = {"role": "system", "content": "You are terse."}
USER = {"role": "user", "content": "Weather in Paris?"}
FOLLOW_UP = {"role": "user", "content": "And in Oslo?"}
WEATHER = {"id": "call_0", "type": "function",
           "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}
CALL = {"role": "assistant", "content": "", "tool_calls": [WEATHER]}
THINKING_CALL = {**CALL, "reasoning_content": "Paris, three days: one call."}
TOOL = {"role": "tool", "tool_call_id": "call_0", "content": '{"sky": "clear"}'}
ANSWER = {"role": "assistant", "content": "Clear skies."}
GENERATE = {"add_generation_prompt": True}

# name: (messages, template arguments). The last ones have no user turn: Qwen3.5's template refuses
# them, so does vLLM's chat entry point; the trainer's fallback renders them (RL frameworks render a
# response turn alone to score or mask it).
CONVERSATIONS = {
    "system, user": ([SYSTEM, USER], GENERATE),
    "system, user, tools": ([SYSTEM, USER], {"tools": TOOLS, **GENERATE}),
    "multi-turn": ([SYSTEM, USER, ANSWER, FOLLOW_UP], GENERATE),
    "tool call and result": ([SYSTEM, USER, CALL, TOOL], {"tools": TOOLS, **GENERATE}),
    "tool round trip": ([SYSTEM, USER, CALL, TOOL, ANSWER], {"tools": TOOLS}),
    "reasoning before a tool call": ([USER, THINKING_CALL, TOOL], {"tools": TOOLS, **GENERATE}),
    "thinking on": ([USER], {"enable_thinking": True, **GENERATE}),
    "thinking off": ([USER], {"enable_thinking": False, **GENERATE}),
    "no user: assistant alone": ([ANSWER], {}),
    "no user: system, assistant": ([SYSTEM, ANSWER], {}),
    "no user: system, call, tool, answer": ([SYSTEM, CALL, TOOL, ANSWER], {"tools": TOOLS}),
    "no user: tool result, generation prompt": ([SYSTEM, TOOL], {"tools": TOOLS, **GENERATE}),
}
