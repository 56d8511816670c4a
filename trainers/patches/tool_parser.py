"""Parser of Qwen3.5's XML tool calls, with argument values typed from the tool's JSON schema.

The grammar the model emits:

    <tool_call>
    <function=NAME>
    <parameter=ARG>
    value
    </parameter>
    </function>
    </tool_call>

It behaves as the parser it ports, verl's Qwen3XMLToolParser (verl/experimental/agent_loop/tool_parser.py),
on every malformed output, so that a reward computed here matches verl's:
- no `<tool_call>` at all: everything is content, even a bare `<function=...>`;
- a `<tool_call>`, `<function=` or `<parameter=` left open runs to the end of the text (a `<tool_call>` or
  `<parameter=` less one final newline); a block takes everything up to the first closing tag after it, so a
  `<tool_call>` opened inside another belongs to the first; one `<tool_call>` may hold several functions;
- a function or parameter whose name has no `>` is dropped; names are kept as written (not stripped);
  a parameter given twice keeps its last value;
- the content is the text before the first `<tool_call>` (text after or between calls is dropped), or the
  whole text when no function is found; here it is also stripped of surrounding whitespace;
- a value that fits its schema is typed by the schema (JSON for numbers, arrays and objects, never
  evaluated); one that does not fit is typed as verl types it: `null` (any case) is None for every
  parameter, integers by int(), numbers by float() (integral ones as int), booleans true only for `true`,
  objects by JSON then Python literals, arrays and other types by Python literals (ast.literal_eval, which
  evaluates nothing), else the raw text; a tool or parameter not in `tools` keeps raw text;
- a value that JSON cannot hold (a Python set literal, say) makes the whole message content, with no calls,
  as verl's exception path does.
Where verl differs on well-formed output (it reads a JSON array holding null or true as text), the schema
decides here, as vLLM's qwen3_coder parser does. Every deviation from the grammar is reported as an issue.
"""
from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_INTEGER = re.compile(r"[+-]?\d+")


@dataclass
class ParseIssue:
    # unclosed_tool_call | unclosed_function | unclosed_parameter | malformed_tool_call | unknown_tool |
    # type_mismatch | unserialisable
    kind: str
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


def _trim_format_newlines(value: str) -> str:
    return value.removeprefix("\n").removesuffix("\n")


def _blocks(text: str, opening: str, closing: str, open_end_newline: bool) -> list[tuple[int, str, bool]]:
    """(offset, body, closed) of each `opening ... closing` block, in order. A block ends at the first `closing`
    after its opening; one never closed runs to the end of the text (less one final newline where
    `open_end_newline`, as a lazy match up to `$` leaves it) and ends the scan."""
    found, position = [], 0
    while (start := text.find(opening, position)) != -1:
        inner = start + len(opening)
        end = text.find(closing, inner)
        if end == -1:
            body = text[inner:]
            found.append((start, body[:-1] if open_end_newline and body.endswith("\n") else body, False))
            break
        found.append((start, text[inner:end], True))
        position = end + len(closing)
    return found


def _verl_fallback(raw: str, schema: Any) -> Any:
    """A value that does not fit its schema, typed as verl's Qwen3XMLToolParser types it."""
    kind = str(schema.get("type", "string") if isinstance(schema, dict) else "string").strip().lower()
    if kind in ("string", "str", "text", "varchar", "char", "enum"):
        return raw
    try:
        if kind.startswith(("int", "uint", "long", "short", "unsigned")):
            return int(raw)
        if kind.startswith(("num", "float")):
            number = float(raw)
            return number if number - int(number) != 0 else int(number)
    except (ValueError, OverflowError):
        return raw
    if kind in ("boolean", "bool", "binary"):
        return raw.lower() == "true"
    if kind == "object" or kind.startswith("dict"):
        try:
            return json.loads(raw)
        except ValueError:
            pass
    try:
        return ast.literal_eval(raw)  # literals only: nothing is evaluated
    except Exception:  # noqa: BLE001 - SyntaxError, ValueError, RecursionError...: the text stays text
        return raw


def _typed(name: str, key: str, raw: str, schemas: dict[str, dict], issues: list[str]) -> Any:
    if raw.lower() == "null":
        return None
    if name not in schemas or key not in schemas[name]:
        return raw
    ok, value = convert_value(raw, schemas[name][key])
    if ok:
        return value
    issues.append(f"{name}.{key}: {raw[:40]!r} does not fit its schema")
    return _verl_fallback(raw, schemas[name][key])


def _call(function: str, closed: bool, schemas: dict[str, dict], issues: list[ParseIssue], start: int,
          stop: int) -> dict[str, Any] | None:
    """One function block (the text after `<function=`) as a call, or None when its name has no `>`."""
    name, separator, inner = function.partition(">")
    if not separator:
        issues.append(ParseIssue("malformed_tool_call", "function name without '>': dropped", start, stop))
        return None
    if not closed:
        issues.append(ParseIssue("unclosed_function", f"<function={name}> without </function>", start, stop))
    if name not in schemas:
        issues.append(ParseIssue("unknown_tool", f"{name!r} is not among the tools", start, stop))
    arguments: dict[str, Any] = {}
    mismatches: list[str] = []
    for _, parameter, parameter_closed in _blocks(inner, "<parameter=", "</parameter>", True):
        key, separator, value = parameter.partition(">")
        if not separator:
            issues.append(ParseIssue("malformed_tool_call", "parameter name without '>': dropped", start, stop))
            continue
        if not parameter_closed:
            issues.append(ParseIssue("unclosed_parameter", f"<parameter={key}> without </parameter>", start, stop))
        arguments[key] = _typed(name, key, _trim_format_newlines(value), schemas, mismatches)
    issues += [ParseIssue("type_mismatch", f"{m}; typed as verl types it", start, stop) for m in mismatches]
    return {"name": name, "arguments": arguments}


def parse_message(text: str, tools: Sequence[dict] | None = None) -> ParsedMessage:
    """Split model output into content text, typed tool calls, and the issues found (see the module docstring)."""
    first = text.find(OPEN)
    if first == -1:
        return ParsedMessage(content=text.strip())
    schemas = _tool_schemas(tools)
    issues: list[ParseIssue] = []
    calls: list[dict[str, Any]] = []
    functions_found = False
    for start, body, closed in _blocks(text, OPEN, CLOSE, True):
        stop = start + len(OPEN) + len(body) + (len(CLOSE) if closed else 0)
        if not closed:
            issues.append(ParseIssue("unclosed_tool_call", "<tool_call> without </tool_call>", start, len(text)))
        if OPEN in body:
            issues.append(ParseIssue("malformed_tool_call", "<tool_call> opened inside another", start, stop))
        functions = _blocks(body, "<function=", "</function>", False)
        if not functions:
            issues.append(ParseIssue("malformed_tool_call", "no <function=...> in the block", start, stop))
        functions_found = functions_found or bool(functions)
        for _, function, function_closed in functions:
            if (call := _call(function, function_closed, schemas, issues, start, stop)) is not None:
                calls.append(call)
    if not functions_found:  # verl: no function anywhere, so the whole text is content
        return ParsedMessage(content=text.strip(), issues=issues)
    try:  # the arguments as verl hands them on: through JSON (tuples become lists, keys strings)
        calls = [{"name": c["name"], "arguments": json.loads(json.dumps(c["arguments"], ensure_ascii=False))}
                 for c in calls]
    except (TypeError, ValueError) as exc:
        issues.append(ParseIssue("unserialisable", f"an argument JSON cannot hold ({exc}): no calls", first, len(text)))
        return ParsedMessage(content=text.strip(), issues=issues)
    return ParsedMessage(content=text[:first].strip(), calls=calls, issues=issues)


def parse(text: str, tools: Sequence[dict] | None = None) -> tuple[str, list[dict[str, Any]]]:
    """(content text, [{"name", "arguments"}]) of one model message."""
    parsed = parse_message(text, tools)
    return parsed.content, parsed.calls


__all__ = ["ParseIssue", "ParsedMessage", "convert_value", "parse", "parse_message"]
