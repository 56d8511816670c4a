"""vllm-chat-parity in a row that installs verl: verl's own tool parser as the trainer side.

`verl:tool-calls` and `verl:tool-calls-malformed`: verl's Qwen3.5 parser, as its agent loop looks it up
(`ToolParser.get_tool_parser("qwen3_coder", tokenizer)`, `Qwen3XMLToolParser`; `extract_tool_calls` decodes the
response's token ids with the tokenizer, so the check's byte-level tokenizer makes the decoded text exactly the case's
text), on the check's well-formed and malformed outputs (cases.py), against vLLM's own `qwen3_coder` parser. In a row
without vLLM the other side is this project's parser (trainers/patches/tool_parser.py), and the verdict says so. A
hostile value that verl's parser evaluates as Python creates a sentinel file in a temporary folder (the only thing
the payload does): the verdict fails naming the security problem and the cases that ran code.
verl's chat rendering is not compared: its `apply_chat_template` (verl.utils.tokenizer.chat_template; verl 0.8:
verl.utils.chat_template) calls the tokenizer's own method, and for a conversation without a user turn renders one
whose content is a list of parts, which the check's stand-in template (qwen35_like.jinja) does not render.
"""
from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from harness.checks.support import verl, vllm_engine
from harness.checks.vllm_chat_parity import cases as chat_cases
from harness.checks.vllm_chat_parity import rendering
from harness.results.records import CheckResult, Status, Verdict

PARSER = "qwen3_coder"  # the name verl's agent loop configures for Qwen3.5 (and vLLM's for the same grammar)
SECURITY = ("verl's tool parser evaluated model output as Python code (the sentinel file was created): a model's "
            "reply can run arbitrary code in the trainer's process")


def parser_functions() -> list:
    """What the parser verdicts run of verl: its registry's lookup and the registered class's parse."""
    from verl.experimental.agent_loop.tool_parser import ToolParser

    return [ToolParser.get_tool_parser, type(ToolParser.get_tool_parser(PARSER, None)).extract_tool_calls]


def verl_parse(text: str, tools: list[dict], tok) -> tuple[str, list[dict]]:
    """(content, calls) from verl's parser, in the check's form: content stripped as vLLM's is, arguments decoded
    from the JSON string verl returns."""
    from verl.experimental.agent_loop.tool_parser import ToolParser
    from verl.tools.schemas import OpenAIFunctionToolSchema

    parser = ToolParser.get_tool_parser(PARSER, tok)
    schemas = [OpenAIFunctionToolSchema.model_validate(tool) for tool in tools]
    ids = tok.encode(text, add_special_tokens=False)
    content, calls = asyncio.run(parser.extract_tool_calls(ids, schemas))
    return content.strip(), [{"name": c.name, "arguments": json.loads(c.arguments or "{}")} for c in calls]


def compare(outputs: dict[str, str], tools: list[dict], sides: dict[str, Callable]) -> list[dict]:
    """The cases where the two parsers disagree (or one raises), each with its input and both results."""
    mismatches = []
    for case, text in outputs.items():
        results = {}
        for side, parse in sides.items():
            try:
                content, calls = parse(text, tools)
                results[side] = {"content": content, "calls": calls}
            except Exception as exc:  # noqa: BLE001 - a parser that raises on model output is a finding
                results[side] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        first, second = results.values()
        if first != second:
            mismatches.append({"case": case, "input": text, **results})
    return mismatches


class Sentinel:
    """A parse (`parse(text, tools)`), followed by a look for the sentinel file: each case that created it is
    recorded, and the file removed so the next case starts clean."""

    def __init__(self, path: Path, outputs: dict[str, str], parse: Callable):
        self.path, self.by_text, self.parse, self.evaluated = path, {v: k for k, v in outputs.items()}, parse, []

    def __call__(self, text: str, tools: list[dict]) -> tuple[str, list[dict]]:
        try:
            return self.parse(text, tools)
        finally:
            if self.path.exists():
                self.evaluated.append(self.by_text.get(text, "?"))
                self.path.unlink()


def parser_verdicts(ours: Callable, ran: list, side: str, other: str, other_parse: Callable) -> list[Verdict]:
    """The two parser verdicts of verl's parse `ours(text, tools)` (running the verl functions `ran`) against
    `other` (its label; `side` its key in each mismatch) parsing with `other_parse(text, tools)`."""
    tools = chat_cases.TOOLS
    made = []
    with tempfile.TemporaryDirectory(prefix="verl-parser-") as folder:
        sentinel = Path(folder) / "evaluated"
        sets = {"tool-calls": ("well-formed outputs", chat_cases.well_formed()),
                "tool-calls-malformed": ("malformed or hostile outputs", chat_cases.malformed(str(sentinel)))}
        for part, (what, outputs) in sets.items():
            watched = Sentinel(sentinel, outputs, ours)
            mismatches = compare(outputs, tools, {"verl": watched, side: other_parse})
            metrics = {"mismatches": mismatches, "cases": len(outputs), "against": other}
            differ = f"{len(mismatches)} of {len(outputs)} {what} differ from {other}"
            if watched.evaluated:
                metrics["evaluated"] = watched.evaluated
                made.append(verl.verdict(part, Status.FAIL, f"{SECURITY}; the cases that ran it: "
                                         f"{', '.join(watched.evaluated)}; {differ}", ran, metrics))
            elif mismatches:
                made.append(verl.verdict(part, Status.FAIL, f"{differ}: {', '.join(m['case'] for m in mismatches)}",
                                         ran, metrics))
            else:
                made.append(verl.verdict(part, Status.PASS, f"{len(outputs)} {what} agree with {other}", ran, metrics))
    return made


def verdicts(engine: dict | None, vllm_parse: Callable) -> list[Verdict]:
    """The verl verdicts of this row: verl's parser against vLLM's (`vllm_parse(text, tools)`) where the row has
    vLLM (`engine`), else against this project's parser."""
    tok = rendering.byte_tokenizer()
    ran = parser_functions()

    def ours(text: str, tools: list[dict]) -> tuple[str, list[dict]]:
        return verl_parse(text, tools, tok)

    if engine is None:
        from trainers.patches.tool_parser import parse

        return parser_verdicts(ours, ran, "project", "this project's parser (trainers/patches/tool_parser.py; no vLLM "
                               "in this row)", parse)
    return parser_verdicts(ours, ran, "vllm", f"{vllm_engine.describe(engine)}'s {PARSER} parser", vllm_parse)


def add(result: CheckResult, engine: dict | None, vllm_parse: Callable) -> CheckResult:
    """The check's result with this row's verl verdicts: a failing one fails it; in a row without vLLM (the check
    itself skipped) the verl verdicts are its outcome."""
    made = verl.guarded("tool-calls", lambda: verdicts(engine, vllm_parse))
    result.verdicts += made
    failed = [v for v in made if v.status is Status.FAIL]
    summary = "; ".join(v.message for v in failed) or \
        f"verl's parser agrees with {'this project' if engine is None else 'vLLM'}'s on every case"
    if engine is None:
        result.status = Status.FAIL if failed else Status.PASS
        result.message = f"{result.message}: verl's parser against this project's; {summary}"
    elif failed:
        result.status = Status.FAIL
        result.message = f"{result.message}; {summary}"
    return result
