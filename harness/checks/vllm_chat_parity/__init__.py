"""vllm-chat-parity: the trainer's Qwen3.5 tool-call parser and chat rendering against the cell's vLLM
(its own tool parser and its own chat path).

Skipped in cells without vLLM. Verdicts (each records the engine it compared against):
- tool-calls: on well-formed outputs (one call, several, nested JSON arguments, text around them)
  trainers/patches/tool_parser.py gives the same content and calls (names, typed arguments) as
  vLLM's own `qwen3_coder` parser (the one vLLM serves Qwen3.5 with; `qwen3_xml` is the same class
  in the releases read, 0.28 and 0.32);
- tool-calls-malformed: on malformed and hostile outputs both parsers give the same result, and
  neither evaluates the text (a value that is Python code would create a sentinel file). The trainer's
  parser behaves as verl's Qwen3XMLToolParser on these (tests/unit/trainers/patches/test_tool_parser.py),
  so each mismatch, recorded with its input and both outputs, says where verl's parser and vLLM's differ;
  the matrices declare this verdict a comparison with vLLM's parser ([[standing]]), so the cases every
  vLLM release shares are one standing finding in the report;
- chat-rendering: each conversation (system and user, multi-turn, tool definitions with tool calls and
  results, reasoning before a tool call, thinking on and off, with and without a generation prompt, and
  four without a user turn) renders to the same token ids and text through the trainer (the tokenizer's
  `apply_chat_template` with the chat-template fallback patch) as through vLLM's own chat path:
  `OnlineRenderer.render_chat`, which vLLM's OpenAI chat-completions server runs on each request, given
  the request an OpenAI client sends (vllm_chat.py names the releases read). Both load one tiny Qwen3.5
  model folder whose byte-level tokenizer makes one differing character a differing id. vLLM refuses a
  conversation without a user turn (Qwen3.5's template raises; its server answers 400): the verdict records
  the refusal and compares the trainer's fallback with vLLM's rendering of it with a user turn after the
  system turns, minus exactly that turn. The verdict names the vLLM function that rendered and the template:
  the project's own `qwen35_like.jinja` (written after Qwen3.5's, not a released one) unless
  `HARNESS_CHAT_TEMPLATE` names a released Qwen3.5 tokenizer folder or a pinned hub commit (templates.py).
  A vLLM older than the first release vllm_chat.py reads skips it; on a supported release a chat module that
  fails to import is an error.
Every mismatch is listed with its case (a parser mismatch with its input too; a rendering mismatch with
its first differing token and both texts from just before it). No model weights and no engine process:
the check takes under a minute, most of it importing vLLM.
In a row that installs verl, verl_side adds `verl:tool-calls` and `verl:tool-calls-malformed`: verl's own parser in
the trainer's place (without vLLM, against this project's parser).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from harness.checks import CheckOptions
from harness.checks.support import verl, vllm_engine
from harness.checks.vllm_chat_parity import cases as vllm_chat_cases
from harness.checks.vllm_chat_parity import rendering, templates, verl_side
from harness.checks.vllm_chat_parity import vllm_chat as vllm_chat_path
from harness.results.records import CheckResult, Status, Verdict

NAME = "vllm-chat-parity"
VLLM_PARSER = "qwen3_coder"
TEMPLATE = rendering.TEMPLATE
SPECIAL = rendering.SPECIAL  # vLLM's Qwen3 parser looks these up in the vocabulary before it parses anything


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


def _verdict(name: str, mismatches: list[dict], total: int, engine: dict, what: str, label: str) -> Verdict:
    if mismatches:
        cases = ", ".join(m["case"] for m in mismatches)
        return Verdict(name, Status.FAIL, f"{len(mismatches)} of {total} {what} differ from {label}: {cases}",
                       {"mismatches": mismatches, "cases": total, "engine": engine})
    return Verdict(name, Status.PASS, f"{total} {what} agree with {label}", {"cases": total, "engine": engine})


def run(options: CheckOptions) -> CheckResult:
    engine = vllm_engine.installed()
    result = run_with(engine) if engine else CheckResult(NAME, Status.SKIP, "no vLLM in this cell")
    if verl.installed():  # a verl row: verl's own tool parser as the trainer side too (verl_side)
        tok = tokenizer() if engine else None
        verl_side.add(result, engine, lambda text, tools: vllm_parse(text, tools, tok))
    return result


def run_with(engine: dict, ours=trainer_parse, trainer=rendering.trainer_render) -> CheckResult:
    """The check; tests pass a broken parser (`ours`) or a broken chat rendering (`trainer`)."""
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
            # the project's parser ran, not verl's: verl's own parser gives the `verl:` verdicts in verl rows
            malformed.message = ("the trainer's tool-call parser (this project's code, written to behave as verl's "
                                 "Qwen3XMLToolParser) and " + label + " differ: " + malformed.message)
        if Path(sentinel).exists():
            malformed.status = Status.FAIL
            malformed.message = "a parser evaluated model output (the sentinel file was created); " + malformed.message
        verdicts.append(malformed)
        verdicts.append(chat_rendering(engine, label, folder, trainer,
                                       template=os.environ.get(templates.VARIABLE)))
    failed = [v for v in verdicts if v.status in (Status.FAIL, Status.ERROR)]
    status = Status.FAIL if any(v.status is Status.FAIL for v in failed) else Status.ERROR if failed else Status.PASS
    return CheckResult(NAME, status, "; ".join(v.message for v in failed or verdicts),
                       metrics={"engine": engine, "parser": VLLM_PARSER}, verdicts=verdicts)


def chat_rendering(engine: dict, label: str, folder: str, trainer=rendering.trainer_render,
                   make_renderer=vllm_chat_path.ChatRenderer, template: str | None = None) -> Verdict:
    """The chat-rendering verdict on a model folder made in `folder`, with the template `template` names
    (HARNESS_CHAT_TEMPLATE's value: templates.py; None or empty: the project's)."""
    from transformers import AutoTokenizer

    reason = vllm_chat_path.unsupported(engine.get("version"))
    if reason:
        return Verdict("chat-rendering", Status.SKIP, f"{label}: {reason}", {"engine": engine})
    try:
        source = templates.chosen(template, Path(folder))
    except templates.TemplateUnusable as exc:
        return Verdict("chat-rendering", Status.ERROR, str(exc), {"engine": engine})
    model = str(Path(folder) / "model")
    rendering.save_model_folder(model, source)
    try:
        vllm = make_renderer(model)
    except ImportError as exc:  # a release vllm_chat reads whose chat modules do not import: never a skip
        return Verdict("chat-rendering", Status.ERROR, f"{label} is a release vllm_chat reads (from "
                       f"{vllm_chat_path.FIRST_RELEASE} on), but its chat modules failed to import: "
                       f"{type(exc).__name__}: {exc}".splitlines()[0], {"engine": engine, **source.metrics()})
    mismatches, refused = rendering.compare(vllm.render, AutoTokenizer.from_pretrained(model), trainer)
    where = f"{label}'s chat path ({vllm.rendered_by})"
    verdict = _verdict("chat-rendering", mismatches, len(vllm_chat_cases.CONVERSATIONS), engine, "conversations",
                       where)
    verdict.message += f"; template: {source.description}"
    verdict.metrics.update(rendered_by=vllm.rendered_by, refused_by_vllm=refused, **source.metrics())
    if refused:
        reasons = sorted(set(refused.values()))
        verdict.message += (f"; {len(refused)} refused by vLLM ({'; '.join(reasons)}), compared with its rendering "
                            "with a user turn added, that turn removed")
    return verdict
