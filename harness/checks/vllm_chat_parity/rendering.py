"""The chat-rendering verdict: each conversation's token ids and text from the trainer against vLLM's chat path.

Both sides load one model folder: a tiny Qwen3.5 config, and by default a byte-level tokenizer with Qwen3.5's
special tokens and the project's Qwen3.5-like template (nothing downloaded), whose token ids spell the text
byte by byte, so a difference of one character is a difference of ids; or a released Qwen3.5 tokenizer and its
chat template (templates.py, HARNESS_CHAT_TEMPLATE). The verdict names the template it rendered.
The trainer renders with the tokenizer's `apply_chat_template` under its chat-template fallback patch
(trainers/patches/chat_template.py), as a trainer that installs the patch set does; vLLM renders through
`vllm_chat.ChatRenderer`, before the patch is applied (both share transformers' tokenizer class, so the
patch would reach vLLM's tokenizer too).

A conversation vLLM refuses (no user turn: the template raises, the server answers 400) is recorded with
vLLM's reason and compared with vLLM's own rendering of it with a user turn after the system turns, minus
exactly that turn (its ids and text measured by vLLM as well): a fallback that drops or moves a message fails.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.checks.support import vllm_engine
from harness.checks.vllm_chat_parity import cases, templates
from harness.checks.vllm_chat_parity.vllm_chat import Refused, Rendered

TEMPLATE = templates.PROJECT_TEMPLATE
SPECIAL = ["<tool_call>", "</tool_call>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
# The tiny model's config: the head dims vLLM's CPU build loads, the architecture vLLM registers (the config
# alone names none; 0.28 then rejects the model), a context that fits the longest case's bytes.
MODEL_CONFIG = {**vllm_engine.HEAD_DIMS, "architectures": [vllm_engine.ARCHITECTURES["text"]],
                "max_position_embeddings": 8192}
EXCERPT = 80  # characters kept before the first difference

VllmRender = Callable[[list[dict], dict], Rendered]
TrainerRender = Callable[[object, list[dict], dict], Rendered]


def byte_tokenizer(template: str | None = None):
    """A byte-level tokenizer (one id per byte, no merges) with Qwen3.5's special tokens and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE({c: i for i, c in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    made = PreTrainedTokenizerFast(tokenizer_object=backend,
                                   chat_template=template or TEMPLATE.read_text(encoding="utf-8"))
    made.add_special_tokens({"pad_token": "<|endoftext|>", "additional_special_tokens": SPECIAL})
    return made


def save_model_folder(folder: str, source: templates.TemplateSource | None = None) -> None:
    """The tokenizer (the byte-level one with the project's template, or `source`'s released files as they are)
    and a tiny Qwen3.5 text config, where vLLM and the trainer both load them."""
    from transformers import AutoTokenizer

    from trainers.models import build_config

    Path(folder).mkdir(parents=True, exist_ok=True)
    if source is None or source.folder is None:
        byte_tokenizer().save_pretrained(folder)
    else:
        templates.copy_tokenizer(source, folder)
    vocab = len(AutoTokenizer.from_pretrained(folder))
    build_config("text", {**MODEL_CONFIG, "vocab_size": vocab}).save_pretrained(folder)


def trainer_render(tok, messages: list[dict], kwargs: dict) -> Rendered:
    """The trainer's rendering: the tokenizer's own method with the chat-template fallback patch applied."""
    from trainers.patches.chat_template import fallback_patch

    with fallback_patch().applied_context():
        text = tok.apply_chat_template(messages, tokenize=False, **kwargs)
        ids = tok.apply_chat_template(messages, tokenize=True, return_dict=False, **kwargs)
    return Rendered(text, list(ids))


def _remove_once(whole: list, part: list) -> list:
    starts = [i for i in range(len(whole) - len(part) + 1) if whole[i:i + len(part)] == part]
    if len(starts) != 1:
        raise ValueError(f"the user turn occurs {len(starts)} times in vLLM's rendering, not once")
    return whole[:starts[0]] + whole[starts[0] + len(part):]


def without_user_turn(vllm: VllmRender, messages: list[dict], kwargs: dict) -> Rendered:
    """vLLM's rendering with a user turn after the leading system turns, minus exactly that turn."""
    lead = 0
    while lead < len(messages) and messages[lead].get("role") == "system":
        lead += 1
    full = vllm(messages[:lead] + [cases.USER] + messages[lead:], kwargs)
    one, two = vllm([cases.USER], {}), vllm([cases.USER, cases.USER], {})
    if two.text[:len(one.text)] != one.text or two.ids[:len(one.ids)] != one.ids:
        raise ValueError("vLLM's rendering of two user turns does not extend that of one")
    text = _remove_once(list(full.text), list(two.text[len(one.text):]))
    return Rendered("".join(text), _remove_once(full.ids, two.ids[len(one.ids):]))


def _difference(trainer: Rendered, vllm: Rendered) -> dict:
    """Where the two renderings part: the first differing token and the text from just before it."""
    at = next((i for i, (a, b) in enumerate(zip(trainer.ids, vllm.ids)) if a != b),
              min(len(trainer.ids), len(vllm.ids)))
    char = next((i for i, (a, b) in enumerate(zip(trainer.text, vllm.text)) if a != b),
                min(len(trainer.text), len(vllm.text)))
    start = max(0, char - EXCERPT)

    def excerpt(text: str) -> str:
        return ("\u2026" if start else "") + text[start:]

    return {"difference": f"token {at} of {len(trainer.ids)} (trainer) and {len(vllm.ids)} (vLLM)",
            "trainer": excerpt(trainer.text), "vllm": excerpt(vllm.text)}


def compare(vllm: VllmRender, tok, trainer: TrainerRender = trainer_render) -> tuple[list[dict], dict[str, str]]:
    """(mismatches, {case: vLLM's reason} for the conversations vLLM refused). vLLM renders every case
    before the trainer renders any (the trainer's patch must not reach vLLM's tokenizer)."""
    from trainers.patches.chat_template import has_user_turn

    expected: dict[str, Rendered | str] = {}
    refused: dict[str, str] = {}
    for name, (messages, kwargs) in cases.CONVERSATIONS.items():
        try:
            expected[name] = vllm(messages, kwargs)
        except Refused as why:
            refused[name] = str(why)
            if has_user_turn(messages):
                expected[name] = f"vLLM refuses it: {why}"
                continue
            try:
                expected[name] = without_user_turn(vllm, messages, kwargs)
            except (Refused, ValueError) as exc:
                expected[name] = f"vLLM refuses it ({why}) and cannot render it with a user turn either: {exc}"
    mismatches = []
    for name, (messages, kwargs) in cases.CONVERSATIONS.items():
        want = expected[name]
        try:
            got = trainer(tok, [dict(m) for m in messages], dict(kwargs))
        except Exception as exc:  # noqa: BLE001 - a trainer that cannot render a conversation is a mismatch
            got = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        if isinstance(want, str) or isinstance(got, str):
            mismatches.append({"case": name, "trainer": got if isinstance(got, str) else got.text,
                               "vllm": want if isinstance(want, str) else want.text})
        elif got != want:
            mismatches.append({"case": name, **_difference(got, want)})
    return mismatches, refused
