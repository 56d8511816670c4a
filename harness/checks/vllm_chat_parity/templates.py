"""Which chat template chat-rendering renders, named on the verdict's face.

By default the project's own `qwen35_like.jinja`, written for this check after Qwen3.5's template (its
tool-call grammar, the "No user query found" refusal), with a byte-level tokenizer: not a released
template. `HARNESS_CHAT_TEMPLATE` puts a released one in its place:
- a folder holding a released Qwen3.5 tokenizer: `tokenizer_config.json` and the chat template
  (`chat_template.jinja`, `chat_template.json`, or the `chat_template` of `tokenizer_config.json`), as a
  model repository ships them; nothing is downloaded;
- `hub:OWNER/NAME@REVISION`, a model repository's tokenizer files at a pinned commit (40 hexadecimal
  digits: a branch or tag moves, so it is refused), fetched with huggingface_hub where the runner has
  network.
The verdict names the source and the template's sha256; a value that cannot be used is the verdict's error,
one line naming the variable.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

VARIABLE = "HARNESS_CHAT_TEMPLATE"
PROJECT_TEMPLATE = Path(__file__).with_name("qwen35_like.jinja")
# What a model repository ships for its tokenizer; copied as they are into the check's model folder.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "chat_template.json",
                   "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model")
HUB = re.compile(r"^hub:(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)@(?P<revision>[0-9a-f]{40})$")


class TemplateUnusable(ValueError):
    """HARNESS_CHAT_TEMPLATE names nothing this check can render with (one line)."""


@dataclass(frozen=True)
class TemplateSource:
    description: str  # what the verdict says it rendered
    folder: str | None  # the released tokenizer's files; None: the project's template and byte-level tokenizer
    sha256: str  # of the template's text

    def metrics(self) -> dict:
        return {"template": self.description, "template_sha256": self.sha256, "tokenizer_folder": self.folder}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def project_template() -> TemplateSource:
    return TemplateSource("the project's qwen35_like.jinja (written for this check after Qwen3.5's template, "
                          "not a released one)", None, _digest(PROJECT_TEMPLATE.read_text(encoding="utf-8")))


def folder_template(folder: Path) -> tuple[str, str]:
    """(the file the chat template was read from, its text) of a tokenizer folder; TemplateUnusable without one."""
    config = folder / "tokenizer_config.json"
    if not config.is_file():
        raise TemplateUnusable(f"{VARIABLE}: {folder} has no tokenizer_config.json")
    if (folder / "chat_template.jinja").is_file():
        return "chat_template.jinja", (folder / "chat_template.jinja").read_text(encoding="utf-8")
    try:
        if (folder / "chat_template.json").is_file():
            return "chat_template.json", json.loads((folder / "chat_template.json").read_text())["chat_template"]
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
    except (ValueError, KeyError, TypeError) as exc:
        raise TemplateUnusable(f"{VARIABLE}: {folder}'s chat template cannot be read "
                               f"({type(exc).__name__}: {exc})".splitlines()[0]) from None
    if isinstance(template, list):  # several named templates: the default one is what chat requests use
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                        None)
    if not isinstance(template, str) or not template:
        raise TemplateUnusable(f"{VARIABLE}: {folder} has no chat template (chat_template.jinja, chat_template.json "
                               "or tokenizer_config.json's chat_template)")
    return "tokenizer_config.json", template


def _hub_download(repo: str, revision: str, into: Path) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo, revision=revision, allow_patterns=list(TOKENIZER_FILES), local_dir=into))


def chosen(value: str | None, work: Path, download: Callable[[str, str, Path], Path] = _hub_download
           ) -> TemplateSource:
    """The template HARNESS_CHAT_TEMPLATE's `value` names (`work`: where a hub download goes)."""
    value = (value or "").strip()
    if not value:
        return project_template()
    if value.startswith("hub:"):
        match = HUB.match(value)
        if match is None:
            raise TemplateUnusable(f"{VARIABLE}: expected hub:OWNER/NAME@COMMIT with a 40-digit commit, got "
                                   f"{value[:120]!r}")
        repo, revision = match["repo"], match["revision"]
        try:
            folder = download(repo, revision, work / "hub-tokenizer")
        except Exception as exc:  # noqa: BLE001 - no network, no such repository or commit: the value is unusable
            raise TemplateUnusable(f"{VARIABLE}: {repo}@{revision} could not be fetched "
                                   f"({type(exc).__name__}: {exc})".splitlines()[0][:300]) from None
        origin = f"{repo} at commit {revision}"
    else:
        folder = Path(value).expanduser()
        if not folder.is_dir():
            raise TemplateUnusable(f"{VARIABLE}: {value[:200]!r} is not a folder (nor hub:OWNER/NAME@COMMIT)")
        origin = str(folder.resolve())
    name, text = folder_template(folder)
    digest = _digest(text)
    return TemplateSource(f"the released tokenizer's chat template from {origin} ({name}, sha256 {digest[:12]})",
                          str(folder), digest)


def copy_tokenizer(source: TemplateSource, folder: str) -> None:
    """The released tokenizer's files, as they are, into the check's model folder."""
    for name in TOKENIZER_FILES:
        path = Path(source.folder) / name
        if path.is_file():
            shutil.copyfile(path, Path(folder) / name)
