"""The chat templates multi-turn-tokens renders, each with the tokenizer it comes with and a label for the verdict.

- `project`: the project's Qwen3.5-like template (harness/checks/vllm_chat_parity/qwen35_like.jinja) on the
  byte-level tokenizer vllm-chat-parity builds (one id per byte, Qwen3.5's special tokens as single ids), so a
  difference of one character is a difference of ids. Always rendered.
- `released`: a released Qwen3.5 tokenizer, where the runner has one, named by HARNESS_QWEN35_TOKENIZER: the
  absolute path of a tokenizer folder, or `owner/name@<40-hex commit>` already in the local Hugging Face cache.
  Nothing is downloaded (`local_files_only`). Its verdict names the folder or the revision and the template's
  sha256.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.checks.vllm_chat_parity import rendering

VARIABLE = "HARNESS_QWEN35_TOKENIZER"
HUB_REVISION = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95})@(?P<revision>[0-9a-f]{40})")
PROJECT_ROOT = Path(__file__).resolve().parents[3]


class BadSetting(ValueError):
    """HARNESS_QWEN35_TOKENIZER names nothing this runner has."""


@dataclass
class Template:
    key: str  # the verdicts' suffix: project-template, released-template
    label: str  # said on the verdict's face
    tokenizer: Any
    digest: str

    def render(self, kwargs: dict):
        """(messages, generation prompt) -> the whole rendering's ids, as transformers' apply_chat_template gives
        them (`kwargs`: tools, enable_thinking, ...)."""
        def render(messages: list[dict], generation_prompt: bool) -> list[int]:
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True,
                                                     return_dict=False, **kwargs)
            return [int(i) for i in ids]
        return render

    @property
    def special(self) -> set[int]:
        return set(self.tokenizer.all_special_ids)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def project() -> Template:
    text = rendering.TEMPLATE.read_text(encoding="utf-8")
    digest = _digest(text)
    path = rendering.TEMPLATE.resolve().relative_to(PROJECT_ROOT).as_posix()
    return Template("project-template", f"the project's Qwen3.5-like template ({path}, sha256 {digest[:12]}) on a "
                                        "byte-level tokenizer", rendering.byte_tokenizer(text), digest)


def released_setting() -> str | None:
    return os.environ.get(VARIABLE) or None


def released(value: str) -> Template:
    """The tokenizer `value` names, loaded without network; BadSetting (one line) where it names nothing usable."""
    from transformers import AutoTokenizer

    hub = HUB_REVISION.fullmatch(value)
    if hub:
        source, where = hub["repo"], f"{hub['repo']}@{hub['revision'][:12]} (local hub cache)"
        options = {"revision": hub["revision"]}
    elif os.path.isabs(value) and os.path.isdir(value):
        source, where, options = value, f"the tokenizer folder {value}", {}
    else:
        raise BadSetting(f"{VARIABLE}={value!r}: neither the absolute path of a tokenizer folder nor "
                         "owner/name@<40-hex commit>")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True, **options)
    except (OSError, ValueError) as exc:
        raise BadSetting(f"{VARIABLE}={value!r}: no tokenizer loads from it without network "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from None
    text = tokenizer.chat_template
    if not isinstance(text, str) or rendering.SPECIAL[2] not in tokenizer.get_vocab():
        raise BadSetting(f"{VARIABLE}={value!r}: the tokenizer has no single chat template or no "
                         f"{rendering.SPECIAL[2]} token (not a Qwen3.5 tokenizer)")
    digest = _digest(text)
    return Template("released-template", f"the released template of {where} (sha256 {digest[:12]})", tokenizer, digest)
