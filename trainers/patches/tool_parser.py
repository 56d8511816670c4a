"""Parser of Qwen3.5's XML tool calls, with argument values typed from the tool's JSON schema.

The grammar the model emits:

    <tool_call>
    <function=NAME>
    <parameter=ARG>
    value
    </parameter>
    </function>
    </tool_call>

Values are text: one newline after the opening tag and one before the closing tag belong to the
format and are removed. A value is converted only as its schema allows (integer, number,
boolean, null, array and object through json.loads), never evaluated. A block that does not
follow the grammar, or a `<tool_call>` left open, stays in the content text and is reported
as an issue; a tool that is not in `tools` keeps its arguments as raw strings.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_FUNCTION = re.compile(r"\s*<function=([^<>\n]+)>(.*)</function>\s*", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^<>\n]+)>(.*?)</parameter>", re.DOTALL)
_INTEGER = re.compile(r"[+-]?\d+")


@dataclass
class ParseIssue:
    kind: str  # unclosed_tool_call | malformed_tool_call | unknown_tool | type_mismatch
    message: str
    start: int  # offsets of the block in the parsed text
    end: int


@dataclass
class ParsedMessage:
    content: str
    calls: list[dict[str, Any]] = field(default_factory=list)  # {"name": str, "arguments": dict}
    issues: list[ParseIssue] = field(default_factory=list)


def _tool_schemas(tools: Sequence[dict] | None) -> dict[str, dict]:
    """name -> parameter properties, from OpenAI-style {"type": "function", "function": {...}} or bare specs."""
    schemas: dict[str, dict] = {}
    for tool in tools or ():
        spec = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            parameters = spec.get("parameters") or {}
            schemas[spec["name"]] = dict(parameters.get("properties") or {}) if isinstance(parameters, dict) else {}
    return schemas


def _schema_types(schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return []
    kind = schema.get("type")
    types = [kind] if isinstance(kind, str) else [t for t in kind or [] if isinstance(t, str)]
    for key in ("anyOf", "oneOf"):
        for option in schema.get(key) or []:
            types.extend(_schema_types(option))
    if not types and isinstance(schema.get("enum"), list):  # an untyped enum: its values' types
        names = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}
        types = [names[type(v)] for v in schema["enum"] if type(v) in names]
    return types


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # json.loads would otherwise accept NaN and Infinity


def _convert(raw: str, kind: str) -> tuple[bool, Any]:
    """(converted?, value) for one JSON-schema type."""
    text = raw.strip()
    if kind == "string":
        return True, raw
    if kind == "integer":
        return (True, int(text)) if _INTEGER.fullmatch(text) else (False, None)
    if kind == "boolean":
        lowered = text.lower()
        return (True, lowered == "true") if lowered in ("true", "false") else (False, None)
    if kind == "null":
        return (True, None) if text.lower() in ("null", "none") else (False, None)
    if kind in ("number", "array", "object"):
        try:
            value = json.loads(text, parse_constant=_reject_constant)
        except ValueError:
            return False, None
        wanted = {"number": (int, float), "array": (list,), "object": (dict,)}[kind]
        if isinstance(value, wanted) and not isinstance(value, bool):
            return True, value
    return False, None


def convert_value(raw: str, schema: Any) -> tuple[bool, Any]:
    """Type `raw` by `schema`: (True, value) when a declared type fits, else (False, raw).

    Non-string types are tried first, so {"type": ["integer", "string"]} turns "3" into 3.
    A schema without a type keeps the raw string.
    """
    types = _schema_types(schema)
    if not types:
        return True, raw
    for kind in sorted(types, key=lambda t: t == "string"):
        ok, value = _convert(raw, kind)
        if ok:
            return True, value
    return False, raw


def _strip_format_newlines(value: str) -> str:
    return value.removeprefix("\n").removesuffix("\n")


def _parse_block(body: str) -> tuple[str, dict[str, str]]:
    """(function name, raw arguments) of the inside of one <tool_call> block; ValueError if malformed."""
    match = _FUNCTION.fullmatch(body)
    if match is None:
        raise ValueError("expected exactly one <function=NAME>...</function> in the block")
    name, inner = match.group(1).strip(), match.group(2)
    if not name:
        raise ValueError("empty function name")
    arguments: dict[str, str] = {}
    position = 0
    for parameter in _PARAMETER.finditer(inner):
        if between := inner[position:parameter.start()].strip():
            raise ValueError(f"unexpected text in function {name!r}: {between[:40]!r}")
        key = parameter.group(1).strip()
        if key in arguments:
            raise ValueError(f"parameter {key!r} given twice")
        arguments[key] = _strip_format_newlines(parameter.group(2))
        position = parameter.end()
    if inner[position:].strip():
        raise ValueError(f"unexpected text in function {name!r}: {inner[position:].strip()[:40]!r}")
    return name, arguments


def parse_message(text: str, tools: Sequence[dict] | None = None) -> ParsedMessage:
    """Split model output into content text, typed tool calls, and the issues found."""
    schemas = _tool_schemas(tools)
    content: list[str] = []
    result = ParsedMessage(content="")
    position = 0
    while (start := text.find(OPEN, position)) != -1:
        content.append(text[position:start])
        end = text.find(CLOSE, start + len(OPEN))
        if end == -1:
            result.issues.append(ParseIssue("unclosed_tool_call", "<tool_call> without </tool_call>", start, len(text)))
            position = start
            break
        stop = end + len(CLOSE)
        body = text[start + len(OPEN):end]
        if OPEN in body:  # a new call opened before this one closed: keep the first as text
            nested = start + len(OPEN) + body.index(OPEN)
            result.issues.append(ParseIssue("malformed_tool_call", "<tool_call> opened inside another", start, nested))
            content.append(text[start:nested])
            position = nested
            continue
        try:
            name, raw_arguments = _parse_block(body)
        except ValueError as exc:
            result.issues.append(ParseIssue("malformed_tool_call", str(exc), start, stop))
            content.append(text[start:stop])
            position = stop
            continue
        arguments: dict[str, Any] = dict(raw_arguments)
        if name not in schemas:
            result.issues.append(ParseIssue("unknown_tool", f"{name!r} is not among the tools", start, stop))
        else:
            for key, raw in raw_arguments.items():
                ok, arguments[key] = convert_value(raw, schemas[name].get(key))
                if not ok:
                    result.issues.append(ParseIssue(
                        "type_mismatch", f"{name}.{key}: {raw[:40]!r} does not fit its schema; kept as text",
                        start, stop))
        result.calls.append({"name": name, "arguments": arguments})
        position = stop
    content.append(text[position:])
    result.content = "".join(content).strip()
    return result


def parse(text: str, tools: Sequence[dict] | None = None) -> tuple[str, list[dict[str, Any]]]:
    """(content text, [{"name", "arguments"}]) of one model message."""
    parsed = parse_message(text, tools)
    return parsed.content, parsed.calls


__all__ = ["ParseIssue", "ParsedMessage", "convert_value", "parse", "parse_message"]
