"""The trainer's tool parser behaves as verl's Qwen3XMLToolParser (the parser it ports) on every malformed case
of the vllm-chat-parity check (harness/checks/vllm_chat_parity/cases.py).

Each expected result is what verl's parser returns for the case (verl/experimental/agent_loop/tool_parser.py at
verl 1dda039, run once on these texts, content stripped as the trainer strips it), with the path of its code
that decides it. A case added to cases.malformed() without an entry here fails, so no malformed input is left
undecided.
"""
import pytest

from harness.checks.vllm_chat_parity import cases
from trainers.patches.tool_parser import parse, parse_message

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
