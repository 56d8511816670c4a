"""trainers.patches.tool_parser, the Qwen3.5 XML tool-call parser: typed values, no eval, unclosed and malformed
calls, unknown tools; and the same answers as verl's Qwen3XMLToolParser (the parser it ports) on every malformed
case of the vllm-chat-parity check (harness/checks/vllm_chat_parity/cases.py).

Each expected result of the verl section is what verl's parser returns for the case (verl/experimental/agent_loop/
tool_parser.py at verl 1dda039, run once on these texts, content stripped as the trainer strips it), with the path
of its code that decides it. A case added to cases.malformed() without an entry there fails, so no malformed input
is left undecided.
"""
from __future__ import annotations

import builtins

import pytest

from harness.checks.vllm_chat_parity import cases
from trainers.patches.tool_parser import convert_value, parse, parse_message

TOOLS = [
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
        "query": {"type": "string"},
        "limit": {"type": "integer"},
        "threshold": {"type": "number"},
        "exact": {"type": "boolean"},
        "cursor": {"type": "null"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "filters": {"type": "object"},
        "page": {"type": ["integer", "null"]},
        "mode": {"enum": ["fast", "deep"]},
        "code": {"type": "string"},
    }}}},
    {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}},  # bare spec
]


def call(name: str, **arguments: str) -> str:
    params = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in arguments.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def test_values_are_typed_from_the_schema():
    text = call("search", query="42", limit="10", threshold="0.5", exact="true", cursor="null",
                tags='["a", "b"]', filters='{"lang": "en", "n": 2}', page="null", mode="deep")
    content, calls = parse(text, TOOLS)
    assert content == ""
    assert calls == [{"name": "search", "arguments": {
        "query": "42", "limit": 10, "threshold": 0.5, "exact": True, "cursor": None, "tags": ["a", "b"],
        "filters": {"lang": "en", "n": 2}, "page": None, "mode": "deep"}}]


@pytest.mark.parametrize(("raw", "schema", "expected"), [
    ("-7", {"type": "integer"}, (True, -7)),
    ("7.0", {"type": "integer"}, (False, "7.0")),
    ("1e3", {"type": "number"}, (True, 1000.0)),
    ("NaN", {"type": "number"}, (False, "NaN")),  # not JSON, whatever Python's json would allow
    ("False", {"type": "boolean"}, (True, False)),
    ("yes", {"type": "boolean"}, (False, "yes")),
    ("3", {"type": ["integer", "string"]}, (True, 3)),
    ("three", {"type": ["integer", "string"]}, (True, "three")),
    ("[1, 2]", {"type": "object"}, (False, "[1, 2]")),
    ("true", {"anyOf": [{"type": "boolean"}, {"type": "string"}]}, (True, True)),
    ("x", {}, (True, "x")),  # no type declared: raw text
])
def test_convert_value(raw, schema, expected):
    assert convert_value(raw, schema) == expected


def test_only_the_single_format_newline_around_a_value_is_stripped():
    text = "<tool_call>\n<function=search>\n<parameter=code>\n\n  indented\n\n</parameter>\n</function>\n</tool_call>"
    _, calls = parse(text, TOOLS)
    assert calls[0]["arguments"]["code"] == "\n  indented\n"


def test_nothing_is_evaluated(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("the parser evaluated model output")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    payload = "__import__('os').system('x')"
    text = call("search", query=payload, limit=payload, tags=payload, filters="{'a': 1}")
    parsed = parse_message(text, TOOLS)
    arguments = parsed.calls[0]["arguments"]
    # A Python dict literal for an object is read as verl reads it (ast.literal_eval: literals only).
    assert arguments == {"query": payload, "limit": payload, "tags": payload, "filters": {"a": 1}}
    assert [issue.kind for issue in parsed.issues] == ["type_mismatch"] * 3


def test_content_is_the_text_before_the_first_call_as_in_verl():
    text = ("I will look twice.\n" + call("search", query="a") + "\nthen\n" + call("get_time", zone="UTC")
            + "\nDone.")
    content, calls = parse(text, TOOLS)
    assert [c["name"] for c in calls] == ["search", "get_time"]
    assert calls[1]["arguments"] == {"zone": "UTC"}
    assert content == "I will look twice."


def test_an_unclosed_call_at_the_end_runs_to_the_end_and_is_reported():
    text = "Let me see. " + call("search", query="a").removesuffix("</tool_call>")
    parsed = parse_message(text, TOOLS)
    assert parsed.calls == [{"name": "search", "arguments": {"query": "a"}}]
    assert parsed.content == "Let me see."
    assert [i.kind for i in parsed.issues] == ["unclosed_tool_call"]
    assert parsed.issues[0].start == text.index("<tool_call>")


def test_a_truncated_call_after_a_complete_one():
    text = call("search", query="a") + "\n<tool_call>\n<function=search>\n<parameter=query>\nhal"
    parsed = parse_message(text, TOOLS)
    assert parsed.calls == [{"name": "search", "arguments": {"query": "a"}},
                            {"name": "search", "arguments": {"query": "hal"}}]
    assert parsed.content == ""
    assert [i.kind for i in parsed.issues] == ["unclosed_tool_call", "unclosed_function", "unclosed_parameter"]


# Each outcome is what verl's Qwen3XMLToolParser returns for the same text (checked by running it).
@pytest.mark.parametrize(("body", "calls", "kinds"), [
    ("\n<function=search>\n<parameter=query>\na\n</parameter>\n", [{"name": "search", "arguments": {"query": "a"}}],
     ["unclosed_function"]),
    ("\n<parameter=query>\na\n</parameter>\n", [], ["malformed_tool_call"]),
    ("\n<function=search>\njunk<parameter=query>\na\n</parameter>\n</function>\n",
     [{"name": "search", "arguments": {"query": "a"}}], []),  # text between tags is ignored
    ("\n<function=search>\n<parameter=query>\na\n</function>\n", [{"name": "search", "arguments": {"query": "a"}}],
     ["unclosed_parameter"]),
    ("\n<function=search>\n</function>\n<function=get_time>\n</function>\n",
     [{"name": "search", "arguments": {}}, {"name": "get_time", "arguments": {}}], []),
    ("\n<function=search>\n<parameter=query>\na\n</parameter>\n<parameter=query>\nb\n</parameter>\n</function>\n",
     [{"name": "search", "arguments": {"query": "b"}}], []),
    ("\n<function=>\n</function>\n", [{"name": "", "arguments": {}}], ["unknown_tool"]),
])
def test_malformed_blocks_parse_as_in_verl_and_are_reported(body, calls, kinds):
    text = f"before <tool_call>{body}</tool_call> after " + call("get_time", zone="UTC")
    parsed = parse_message(text, TOOLS)
    assert parsed.calls == [*calls, {"name": "get_time", "arguments": {"zone": "UTC"}}]  # the good call too
    assert parsed.content == "before"
    assert [i.kind for i in parsed.issues] == kinds


def test_a_call_opened_inside_another_belongs_to_the_first():
    text = "<tool_call>\n<function=search>\n" + call("get_time", zone="UTC")
    parsed = parse_message(text, TOOLS)
    assert parsed.calls == [{"name": "search", "arguments": {"zone": "UTC"}}]
    assert parsed.content == ""
    assert "malformed_tool_call" in [i.kind for i in parsed.issues]


def test_unknown_tool_keeps_raw_string_arguments():
    parsed = parse_message(call("delete_everything", force="true", n="3"), TOOLS)
    assert parsed.calls == [{"name": "delete_everything", "arguments": {"force": "true", "n": "3"}}]
    assert [i.kind for i in parsed.issues] == ["unknown_tool"]
    assert parse(call("search", limit="3"), None)[1][0]["arguments"] == {"limit": "3"}  # no tools given


def test_unicode_names_values_and_content():
    text = "好的 🌤️\n" + call("search", query="東京の天気 — ☔", tags='["日本", "é"]')
    content, calls = parse(text, TOOLS)
    assert content == "好的 🌤️"
    assert calls[0]["arguments"] == {"query": "東京の天気 — ☔", "tags": ["日本", "é"]}


def test_text_without_calls_and_empty_text():
    assert parse("  just words  ", TOOLS) == ("just words", [])
    assert parse("", TOOLS) == ("", [])
    assert parse("a </tool_call> b", TOOLS) == ("a </tool_call> b", [])  # a stray closing tag is text


def test_a_value_may_contain_markup_but_ends_at_the_first_closing_function_tag():
    code = "if a < b:\n    print('<function=x>')\n</function>"
    parsed = parse_message(call("search", code=code), TOOLS)
    assert parsed.calls[0]["arguments"]["code"] == "if a < b:\n    print('<function=x>')"  # as verl
    assert [i.kind for i in parsed.issues] == ["unclosed_parameter"]


# --- the same answers as verl's Qwen3XMLToolParser ----------------------------------------------------

HOSTILE = cases.hostile("SENTINEL")

VERL = {
    # tool_call_regex's second branch `<tool_call>(.*?)$`: an open call runs to the end, its parameter too.
    "unclosed tool_call": ("Checking.", [{"name": "get_weather", "arguments": {"city": "Rome"}}]),
    # tool_call_function_regex's `<function=(.*)$`: the function runs to the end of its block.
    "missing </function>": ("", [{"name": "get_weather", "arguments": {"city": "Rome"}}]),
    # tool_call_parameter_regex's `<parameter=(.*?)$`, less the newline before </function>.
    "unclosed parameter": ("", [{"name": "get_weather", "arguments": {"city": "Rome"}}]),
    # extract_tool_calls returns (text, []) when "<tool_call>" is absent, before any function fallback.
    "function without tool_call": (
        "Sure.\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>", []),
    # _parse_xml_function_call returns None without '>'; the content is still the text before <tool_call>.
    "function name without '>'": ("Hm.", []),
    # a parameter without '>' is skipped ("Skipping malformed parameter"); the others stay.
    "parameter name without '>'": ("", [{"name": "get_weather", "arguments": {"days": 2}}]),
    # findall over the block: every function in it is a call.
    "two functions in one tool_call": ("", [{"name": "get_weather", "arguments": {"city": "Rome"}},
                                            {"name": "search", "arguments": {"query": "q"}}]),
    # the lazy block runs to the first </tool_call>, and the function to the first </function>.
    "tool_call opened inside another": ("", [{"name": "search", "arguments": {"city": "Oslo"}}]),
    # content = text[:text.find("<tool_call>")]: what follows the call is dropped.
    "text after the call": ("First.", [{"name": "get_weather", "arguments": {"city": "Oslo"}}]),
    # param_dict[name] = ...: the last value wins, in the first one's place.
    "parameter given twice": ("", [{"name": "get_weather", "arguments": {"city": "Bergen", "days": 1}}]),
    # the name is function_call_str[:end_index], unstripped: not a known tool, so values stay text.
    "spaces around the function name": ("", [{"name": " get_weather ", "arguments": {"city": "Oslo"}}]),
    # get_arguments_config gives {} for an unknown tool: every value is its text.
    "unknown tool": ("", [{"name": "delete_everything", "arguments": {"force": "true", "n": "3"}}]),
    # `if param_value.lower() == "null": return None`, before any type.
    "null for an integer": ("", [{"name": "get_weather", "arguments": {"city": "Oslo", "days": None}}]),
    # int("2.5") raises: "degenerating to string".
    "fraction for an integer": ("", [{"name": "get_weather", "arguments": {"city": "Oslo", "days": "2.5"}}]),
    # booleans: `param_value == "true"`, so anything else is False.
    "boolean that is not true or false": ("", [{"name": "get_weather", "arguments": {"city": "Oslo",
                                                                                   "metric": False}}]),
    # objects: json.loads fails, then ast.literal_eval.
    "python dict for an object": ("", [{"name": "search", "arguments": {"query": "q", "filters": {"year": 2024}}}]),
    # arrays (any other type): ast.literal_eval, and json.dumps makes the tuple a list.
    "python literal for an array": ("", [{"name": "search", "arguments": {"query": "q", "tags": ["a", "b"]}}]),
    # ast.literal_eval gives a set, json.dumps raises, and the outer `except` returns (text, []).
    "set literal for an array": (
        "Looking.\n<tool_call>\n<function=search>\n<parameter=query>\nq\n</parameter>\n<parameter=tags>\n{1, 2}\n"
        "</parameter>\n</function>\n</tool_call>", []),
    # int() and literal_eval refuse code: the text stays text, nothing runs.
    "integer that is code": ("", [{"name": "get_weather", "arguments": {"city": "Nice", "days": HOSTILE}}]),
    "object that is code": ("", [{"name": "search", "arguments": {"query": "q", "filters": HOSTILE}}]),
    "array that is code": ("", [{"name": "search", "arguments": {"query": "q", "tags": HOSTILE}}]),
    "string that is code": ("", [{"name": "search", "arguments": {"query": HOSTILE}}]),
}
MALFORMED = cases.malformed("SENTINEL")


def test_every_malformed_case_is_decided():
    assert set(MALFORMED) == set(VERL)


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_the_trainer_parses_each_malformed_case_as_verl_does(case):
    assert parse(MALFORMED[case], cases.TOOLS) == VERL[case]


@pytest.mark.parametrize("case", ["unclosed tool_call", "missing </function>", "unclosed parameter",
                                  "function name without '>'", "set literal for an array"])
def test_each_deviation_is_reported(case):
    assert parse_message(MALFORMED[case], cases.TOOLS).issues


def test_a_well_formed_json_array_follows_the_schema_where_verl_reads_text():
    # verl's arrays go through ast.literal_eval only, which refuses JSON's null: it keeps the text. The schema
    # decides here, as vLLM does; this is a well-formed value, not a malformed one.
    text = cases.call("search", query="q", tags='["x", {"y": null}]')
    assert parse(text, cases.TOOLS)[1][0]["arguments"]["tags"] == ["x", {"y": None}]
