"""vllm-chat-parity: the trainer's Qwen3.5 tool-call parser and chat-template fallback against the
cell's vLLM and the tokenizer's chat template.

Skipped in cells without vLLM. Verdicts (each records the engine it compared against):
- tool-calls: on well-formed outputs (one call, several, nested JSON arguments, text around them)
  trainers/patches/tool_parser.py gives the same content and calls (names, typed arguments) as
  vLLM's own `qwen3_coder` parser (the one vLLM serves Qwen3.5 with; `qwen3_xml` is the same class
  in the releases read, 0.28 and 0.32);
- tool-calls-malformed: on malformed and hostile outputs both parsers give the same result, and
  neither evaluates the text (a value that is Python code would create a sentinel file). The trainer's
  parser behaves as verl's Qwen3XMLToolParser on these (tests/unit/trainers/patches/test_tool_parser_verl.py),
  so each mismatch, recorded with its input and both outputs, says where verl's parser and vLLM's differ;
  the same in every vLLM release, the report shows it once as a standing finding;
- chat-template: conversations with a user turn render through the fallback exactly as through the
  tokenizer's template; without one, as the template renders them with a user turn after the system
  turns, minus exactly that turn (so a fallback that drops the system message fails).
Every mismatch is listed with its case (a parser mismatch with its input too). No model and no engine
process: the check takes seconds.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from harness.checks import CheckOptions
from harness.checks.support import vllm_engine
from harness.checks.vllm_chat_parity import cases as vllm_chat_cases
from harness.results.records import CheckResult, Status, Verdict

NAME = "vllm-chat-parity"
VLLM_PARSER = "qwen3_coder"
TEMPLATE = Path(__file__).with_name("qwen35_like.jinja")
# Tokens vLLM's Qwen3 parser looks up in the tokenizer's vocabulary before it parses anything.
SPECIAL = ["<tool_call>", "</tool_call>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]


def tokenizer(template: str | None = None):
    """A word-level tokenizer built in memory (nothing downloaded) with Qwen3.5's special tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", "[PAD]", *SPECIAL])},
                                         unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    made = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]",
                                   chat_template=template or TEMPLATE.read_text(encoding="utf-8"))
    made.add_special_tokens({"additional_special_tokens": SPECIAL})
    return made


def vllm_parse(text: str, tools: list[dict], tok) -> tuple[str, list[dict]]:
    """(content, calls) from vLLM's own Qwen3 tool parser, arguments decoded from its JSON."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParserManager

    request = ChatCompletionRequest(model="tiny-qwen35", messages=[{"role": "user", "content": "hi"}], tools=tools)
    parser = ToolParserManager.get_tool_parser(VLLM_PARSER)(tok, request.tools)
    found = parser.extract_tool_calls(text, request)
    calls = [{"name": c.function.name, "arguments": json.loads(c.function.arguments or "{}")}
             for c in (found.tool_calls if found.tools_called else [])]
    return (found.content or "").strip(), calls


def trainer_parse(text: str, tools: list[dict]) -> tuple[str, list[dict]]:
    from trainers.patches.tool_parser import parse

    return parse(text, tools)


def compare_outputs(cases: dict[str, str], tools: list[dict], tok, ours=trainer_parse) -> list[dict]:
    """The cases where the two parsers disagree (or one raises), with the model output both read and both
    results (the report shows the three side by side)."""
    mismatches = []
    for case, text in cases.items():
        results = {}
        for side, parse in (("trainer", ours), ("vllm", lambda t, tl: vllm_parse(t, tl, tok))):
            try:
                content, calls = parse(text, tools)
                results[side] = {"content": content, "calls": calls}
            except Exception as exc:  # noqa: BLE001 - a parser that raises on model output is a finding
                results[side] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        if results["trainer"] != results["vllm"]:
            mismatches.append({"case": case, "input": text, **results})
    return mismatches


def _user_turn_removed(render, messages: list[dict], kwargs: dict) -> str:
    """The template's rendering with a real user turn after the system turns, minus that turn."""
    leading = 0
    while leading < len(messages) and messages[leading].get("role") == "system":
        leading += 1
    user = vllm_chat_cases.USER
    full = render(messages[:leading] + [user] + messages[leading:], **kwargs)
    turn = render([user, user])[len(render([user])):]  # one user turn, as the template writes it
    if full.count(turn) != 1:
        raise ValueError("the user turn cannot be located once in the rendering")
    return full.replace(turn, "", 1)


def compare_templates(tok, fallback=None) -> list[dict]:
    from trainers.patches.chat_template import apply_chat_template

    fallback = fallback or apply_chat_template

    def render(messages, **kwargs):
        return tok.apply_chat_template(messages, tokenize=False, **kwargs)

    mismatches = []
    cases = [(name, m, k, False) for name, (m, k) in vllm_chat_cases.WITH_USER.items()]
    cases += [(name, m, k, True) for name, (m, k) in vllm_chat_cases.WITHOUT_USER.items()]
    for name, messages, kwargs, no_user in cases:
        try:
            expected = _user_turn_removed(render, messages, kwargs) if no_user else render(messages, **kwargs)
            got = fallback(tok, messages, **kwargs)
        except Exception as exc:  # noqa: BLE001 - a rendering that fails is a mismatch to report
            mismatches.append({"case": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
            continue
        if got != expected:
            mismatches.append({"case": name, "expected": expected, "fallback": got})
    return mismatches


def _verdict(name: str, mismatches: list[dict], total: int, engine: dict, what: str, label: str) -> Verdict:
    if mismatches:
        cases = ", ".join(m["case"] for m in mismatches)
        return Verdict(name, Status.FAIL, f"{len(mismatches)} of {total} {what} differ from {label}: {cases}",
                       {"mismatches": mismatches, "cases": total, "engine": engine})
    return Verdict(name, Status.PASS, f"{total} {what} agree with {label}", {"cases": total, "engine": engine})


def run(options: CheckOptions) -> CheckResult:
    engine = vllm_engine.installed()
    if engine is None:
        return CheckResult(NAME, Status.SKIP, "no vLLM in this cell")
    return run_with(engine)


def run_with(engine: dict, ours=trainer_parse, fallback=None) -> CheckResult:
    """The check; tests pass a broken parser (`ours`) or a broken template fallback."""
    import transformers

    tok = tokenizer()
    label = vllm_engine.describe(engine)
    tools = vllm_chat_cases.TOOLS
    with tempfile.TemporaryDirectory(prefix="vllm-chat-") as folder:
        sentinel = str(Path(folder) / "evaluated")
        good = vllm_chat_cases.well_formed()
        bad = vllm_chat_cases.malformed(sentinel)
        verdicts = [_verdict("tool-calls", compare_outputs(good, tools, tok, ours), len(good), engine,
                             "well-formed outputs", label)]
        malformed = _verdict("tool-calls-malformed", compare_outputs(bad, tools, tok, ours), len(bad), engine,
                             "malformed or hostile outputs", label)
        if ours is trainer_parse and malformed.status is Status.FAIL:
            malformed.message = ("verl's Qwen3XMLToolParser (which the trainer's parser follows) and " + label
                                 + " differ: " + malformed.message)
        if Path(sentinel).exists():
            malformed.status = Status.FAIL
            malformed.message = "a parser evaluated model output (the sentinel file was created); " + malformed.message
        verdicts.append(malformed)
    total = len(vllm_chat_cases.WITH_USER) + len(vllm_chat_cases.WITHOUT_USER)
    template = f"the tokenizer's chat template (transformers {transformers.__version__})"
    verdicts.append(_verdict("chat-template", compare_templates(tok, fallback), total, engine, "conversations",
                             template))
    failed = [v for v in verdicts if v.status is Status.FAIL]
    return CheckResult(NAME, Status.FAIL if failed else Status.PASS, "; ".join(v.message for v in failed or verdicts),
                       metrics={"engine": engine, "parser": VLLM_PARSER}, verdicts=verdicts)
