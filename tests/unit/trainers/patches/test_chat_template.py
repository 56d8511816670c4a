"""The chat-template fallback for conversations without a user turn, through transformers' own rendering."""
from __future__ import annotations

import os

import jinja2
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every tokenizer here is built in memory

from trainers.patches.base import NotApplicable, TargetMissing, resolve
from trainers.patches.chat_template import (
    PATCHES,
    PLACEHOLDER,
    TARGET,
    apply_chat_template,
    fallback_patch,
)

# A small template that behaves like Qwen3.5's where it matters here: it refuses a conversation
# without a user message, renders tool calls as XML, groups tool responses into a user turn and
# shows reasoning only after the last user query. Written for these tests, not copied.
QWEN35_LIKE = """
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages and messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
{{- '\\n</tools><|im_end|>\\n' }}
{%- elif messages and messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(last_query=-1) %}
{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_query = loop.index0 %}{%- endif %}{%- endfor %}
{%- if ns.last_query < 0 %}{{- raise_exception('No user query found in messages.') }}{%- endif %}
{%- for m in messages %}
{%- if m.role == 'system' %}
{%- if not loop.first %}{{- raise_exception('System message must be at the beginning.') }}{%- endif %}
{%- elif m.role == 'user' %}
{{- '<|im_start|>user\\n' + m.content + '<|im_end|>\\n' }}
{%- elif m.role == 'assistant' %}
{{- '<|im_start|>assistant\\n' }}
{%- if m.reasoning_content and loop.index0 > ns.last_query %}
{{- '<think>\\n' + m.reasoning_content + '\\n</think>\\n\\n' }}
{%- endif %}
{{- m.content or '' }}
{%- for call in m.tool_calls or [] %}
{%- set f = call.function if call.function else call %}
{{- '\\n<tool_call>\\n<function=' + f.name + '>\\n' }}
{%- for key, value in f.arguments.items() %}
{{- '<parameter=' + key + '>\\n' + (value if value is string else value | tojson) + '\\n</parameter>\\n' }}
{%- endfor %}
{{- '</function>\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif m.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- else %}
{{- raise_exception('Unexpected message role: ' + m.role) }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}, "days": {"type": "integer"}}}}}]
SYSTEM = {"role": "system", "content": "You are terse."}
ASSISTANT = {"role": "assistant", "content": "It is sunny.", "reasoning_content": "Check the forecast."}
CALL = {"role": "assistant", "content": "", "tool_calls": [
    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}]}
TOOL = {"role": "tool", "content": '{"sky": "clear"}'}


def _tokenizer(template: str):
    tokenizers = pytest.importorskip("tokenizers")
    from transformers import PreTrainedTokenizerFast

    words = ["[UNK]", "[PAD]", "hello", "assistant", "user", "system", "im_start", "im_end", "It", "is", "sunny",
             "think"]
    vocab = {word: i for i, word in enumerate(words)}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=template, pad_token="[PAD]")


@pytest.fixture(params=["template", "tokenizer"])
def renderer(request):
    """Both entry points: a Jinja template string and a tokenizer built locally around it."""
    return QWEN35_LIKE if request.param == "template" else _tokenizer(QWEN35_LIKE)


def test_the_test_template_refuses_a_conversation_without_a_user_turn():
    for messages in ([ASSISTANT], [TOOL], [SYSTEM, ASSISTANT]):
        with pytest.raises(jinja2.TemplateError):
            _tokenizer(QWEN35_LIKE).apply_chat_template(messages, tokenize=False)


def test_a_conversation_with_a_user_turn_renders_unchanged(renderer):
    messages = [SYSTEM, {"role": "user", "content": "Weather?"}, CALL, TOOL, ASSISTANT]
    stock = _tokenizer(QWEN35_LIKE).apply_chat_template(messages, tools=TOOLS, tokenize=False,
                                                         add_generation_prompt=True)
    assert apply_chat_template(renderer, messages, tools=TOOLS, add_generation_prompt=True) == stock


def test_assistant_only(renderer):
    text = apply_chat_template(renderer, [ASSISTANT])
    assert text == "<|im_start|>assistant\n<think>\nCheck the forecast.\n</think>\n\nIt is sunny.<|im_end|>\n"


def test_tool_only(renderer):
    text = apply_chat_template(renderer, [TOOL])
    assert text == '<|im_start|>user\n<tool_response>\n{"sky": "clear"}\n</tool_response><|im_end|>\n'


def test_system_and_assistant_keep_the_system_turn_first(renderer):
    text = apply_chat_template(renderer, [SYSTEM, CALL], add_generation_prompt=True)
    assert text == ("<|im_start|>system\nYou are terse.<|im_end|>\n"
                    "<|im_start|>assistant\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                    "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call><|im_end|>\n"
                    "<|im_start|>assistant\n")


def test_tools_block_and_system_stay_first_and_no_placeholder_leaks(renderer):
    text = apply_chat_template(renderer, [SYSTEM, CALL, TOOL, TOOL, ASSISTANT], tools=TOOLS)
    assert text.startswith("<|im_start|>system\nYou are terse.\n\n# Tools\n<tools>\n")
    assert PLACEHOLDER not in text and "<|im_start|>user\n<tool_response>" in text
    assert text.count("<|im_start|>user") == 1  # the two tool responses share one turn, nothing else
    assert text.endswith("<|im_start|>assistant\n<think>\nCheck the forecast.\n</think>\n\nIt is sunny.<|im_end|>\n")


def test_an_unrelated_template_error_in_a_conversation_with_a_user_turn_propagates(renderer):
    messages = [{"role": "user", "content": "hi"}, SYSTEM]  # the template wants the system turn first
    with pytest.raises(jinja2.TemplateError) as caught:
        apply_chat_template(renderer, messages)
    assert "beginning" in str(caught.value)


def test_a_template_that_fails_even_with_a_user_turn_raises_the_original_error(renderer):
    with pytest.raises(jinja2.TemplateError) as caught:
        apply_chat_template(renderer, [{"role": "critic", "content": "meh"}])  # unknown role
    assert caught.value.__notes__  # says why no fallback was tried


def test_a_different_exception_type_propagates():
    failing = QWEN35_LIKE.replace("{%- set ns = namespace",
                                  "{{- (1 / 0) if messages|length > 0 else '' }}\n{%- set ns = namespace", 1)
    with pytest.raises(ZeroDivisionError):
        apply_chat_template(failing, [ASSISTANT])
    with pytest.raises(ValueError):  # a tokenizer without any chat template
        apply_chat_template(_tokenizer(None), [ASSISTANT])


def test_a_template_that_renders_the_last_user_turn_differently_is_not_cut_blindly():
    # The placeholder cannot be cut out exactly here, so the original error must surface.
    marked = QWEN35_LIKE.replace("{{- '<|im_start|>user\\n' + m.content + '<|im_end|>\\n' }}",
                                "{{- '<|im_start|>user\\n' + m.content + ('!' if loop.index0 == ns.last_query else '')"
                                " + '<|im_end|>\\n' }}")
    assert apply_chat_template(marked, [{"role": "user", "content": "hi"}]).endswith("hi!<|im_end|>\n")
    with pytest.raises(jinja2.TemplateError):
        apply_chat_template(marked, [ASSISTANT])


def test_tokenize_is_refused_and_messages_are_not_modified(renderer):
    messages = [SYSTEM, ASSISTANT]
    snapshot = [dict(m) for m in messages]
    apply_chat_template(renderer, messages)
    assert messages == snapshot
    with pytest.raises(ValueError):
        apply_chat_template(renderer, messages, tokenize=True)


# ---- the same fallback as a Patch of the tokenizer method --------------------------------------

ASSISTANT_TEXT = "<|im_start|>assistant\n<think>\nCheck the forecast.\n</think>\n\nIt is sunny.<|im_end|>\n"


def _stock_method():
    owner, attr = resolve(TARGET)
    return owner, owner.__dict__[attr]


@pytest.fixture
def patch():
    patch = fallback_patch()
    yield patch
    patch.remove()  # never leave the tokenizer class patched for other tests


def test_the_patch_names_its_target_range_and_is_listed(patch):
    from harness.checks.patch_parity.audit import audit_patch
    from harness.results.records import Status

    assert [p.name for p in PATCHES] == [patch.name] and PATCHES[0].target == TARGET
    assert patch.applicable()[0], patch.applicable()[1]
    assert not patch.versions.contains("5.1.0") and patch.versions.contains("5.23.0")
    assert audit_patch(PATCHES[0]).status is Status.PASS  # the patch-target audit finds the method


def test_patch_off_raises_the_stock_error_and_on_renders(patch):
    tokenizer = _tokenizer(QWEN35_LIKE)
    owner, stock = _stock_method()
    with pytest.raises(jinja2.TemplateError, match="No user query"):
        tokenizer.apply_chat_template([ASSISTANT], tokenize=False)
    with patch.applied_context():
        assert owner.__dict__["apply_chat_template"] is not stock
        assert tokenizer.apply_chat_template([ASSISTANT], tokenize=False) == ASSISTANT_TEXT
        text = tokenizer.apply_chat_template([SYSTEM, CALL], tokenize=False, add_generation_prompt=True)
        assert text.startswith("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>assistant\n\n<tool_call>")
        # the plain function gives the same text through the patched method
        assert apply_chat_template(tokenizer, [SYSTEM, CALL], add_generation_prompt=True) == text
    # removal puts the very same function object back, and the stock error with it
    assert owner.__dict__["apply_chat_template"] is stock and not patch.applied
    with pytest.raises(jinja2.TemplateError, match="No user query"):
        tokenizer.apply_chat_template([ASSISTANT], tokenize=False)


def test_patched_method_tokenizes_like_the_stock_method(patch):
    tokenizer = _tokenizer(QWEN35_LIKE)
    with_user = [{"role": "user", "content": "hello"}, ASSISTANT]
    stock_out = tokenizer.apply_chat_template(with_user, return_tensors="pt")
    with patch.applied_context():
        assert tokenizer.apply_chat_template(with_user, tokenize=False) == apply_chat_template(QWEN35_LIKE, with_user)
        assert tokenizer.apply_chat_template(with_user, return_tensors="pt")["input_ids"].tolist() == \
            stock_out["input_ids"].tolist()  # transparent where the stock method works
        encoded = tokenizer.apply_chat_template([ASSISTANT])  # tokenize=True, return_dict=True by default
        ids = tokenizer(ASSISTANT_TEXT, add_special_tokens=False)["input_ids"]
        assert encoded["input_ids"] == ids and len(set(ids)) > 2  # real words, not all [UNK]
        batch = tokenizer.apply_chat_template([[ASSISTANT], with_user], padding=True, return_tensors="pt")
        texts = [ASSISTANT_TEXT, apply_chat_template(QWEN35_LIKE, with_user)]
        want = tokenizer(texts, padding=True, add_special_tokens=False, return_tensors="pt")
        assert batch["input_ids"].tolist() == want["input_ids"].tolist()
        assert batch["attention_mask"].tolist() == want["attention_mask"].tolist()
        assert tokenizer.apply_chat_template([[TOOL], with_user], tokenize=False) == [
            apply_chat_template(QWEN35_LIKE, [TOOL]), apply_chat_template(QWEN35_LIKE, with_user)]


def test_unrelated_template_errors_still_raise_with_the_patch_on(patch):
    tokenizer = _tokenizer(QWEN35_LIKE)
    with patch.applied_context():
        with pytest.raises(jinja2.TemplateError, match="beginning"):  # has a user turn: not ours
            tokenizer.apply_chat_template([{"role": "user", "content": "hi"}, SYSTEM], tokenize=False)
        with pytest.raises(jinja2.TemplateError) as caught:  # no user turn, but fails with one too
            tokenizer.apply_chat_template([{"role": "critic", "content": "meh"}], tokenize=False)
        assert caught.value.__notes__
        with pytest.raises(jinja2.TemplateError, match="No user query") as caught:  # masks need the template
            tokenizer.apply_chat_template([ASSISTANT], return_dict=True, return_assistant_tokens_mask=True)
        assert "return_assistant_tokens_mask" in caught.value.__notes__[0]
    with patch.applied_context(), pytest.raises(ValueError):  # not a template error: no template at all
        _tokenizer(None).apply_chat_template([ASSISTANT], tokenize=False)


def test_not_applicable_when_the_target_is_missing_or_the_version_is_out_of_range():
    owner, stock = _stock_method()
    renamed = fallback_patch(target=TARGET + "_v2")
    applicable, reason = renamed.applicable()
    assert not applicable and "apply_chat_template_v2" in reason
    with pytest.raises(TargetMissing):
        renamed.apply()
    gone = fallback_patch(target="transformers.tokenization_utils_gone:PreTrainedTokenizerBase.apply_chat_template")
    with pytest.raises(TargetMissing):
        gone.apply()
    old = fallback_patch(versions="<5.0")
    with pytest.raises(NotApplicable, match="not applicable"):
        old.apply()
    assert owner.__dict__["apply_chat_template"] is stock and not (renamed.applied or gone.applied or old.applied)
