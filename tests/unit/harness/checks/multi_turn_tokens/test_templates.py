"""multi-turn-tokens' templates: the project's, labelled with its file and sha256, and a released one named by
HARNESS_QWEN35_TOKENIZER, loaded without network, or one line saying why it cannot be."""
from __future__ import annotations

import hashlib
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may be downloaded

from harness.checks.multi_turn_tokens import templates
from harness.checks.vllm_chat_parity import rendering


def test_the_project_template_is_labelled_with_its_file_and_digest():
    project = templates.project()
    digest = hashlib.sha256(rendering.TEMPLATE.read_bytes()).hexdigest()
    assert project.digest == digest and project.key == "project-template"
    assert project.label == (f"the project's Qwen3.5-like template (harness/checks/vllm_chat_parity/qwen35_like.jinja, "
                             f"sha256 {digest[:12]}) on a byte-level tokenizer")


@pytest.mark.parametrize("value", ["relative/folder", "/no/such/folder", "Qwen/Qwen3.5-9B@main",
                                   "Qwen/Qwen3.5-9B@" + "g" * 40, "Qwen/Qwen3.5-9B; rm -rf /@" + "a" * 40])
def test_a_setting_that_names_no_folder_or_pinned_revision_is_refused_in_one_line(value):
    with pytest.raises(templates.BadSetting) as raised:
        templates.released(value)
    assert str(raised.value) == (f"HARNESS_QWEN35_TOKENIZER={value!r}: neither the absolute path of a tokenizer folder "
                                 "nor owner/name@<40-hex commit>")


def test_a_pinned_revision_missing_from_the_local_cache_is_not_downloaded(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(templates.BadSetting, match=r"^HARNESS_QWEN35_TOKENIZER='Qwen/Qwen3\.5-9B@a{40}': no tokenizer "
                                                   r"loads from it without network \(\w+") as raised:
        templates.released("Qwen/Qwen3.5-9B@" + "a" * 40)
    assert "\n" not in str(raised.value)


def test_a_tokenizer_folder_without_qwen_tokens_is_refused(tmp_path):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")),
                            chat_template="{{ messages }}").save_pretrained(tmp_path)
    with pytest.raises(templates.BadSetting, match="not a Qwen3.5 tokenizer"):
        templates.released(str(tmp_path))
