"""trainers.rollout.cached_decode: the HF engine's decode loop over the model's cache gives generate's tokens and
log-probs, prefills each prompt once, leaves what it cannot do to generate, and a loop that disagrees with
generate (checked on the first batch when asked) stops the run."""
import random

import pytest
import torch

models = pytest.importorskip("trainers.models")
from qwen35_helpers import model_or_skip  # noqa: E402

from trainers.grpo.tasks import make_task  # noqa: E402
from trainers.rollout import HFRollout, make_rollout  # noqa: E402


@pytest.mark.versions  # the inputs generate gives the model differ by release: nox -s tests-affected runs 5.3.0
@pytest.mark.parametrize("kind, temperature, with_eos", [("text", 1.0, False), ("text", 0.0, True), ("moe", 0.7, True)])
def test_the_cached_decode_loop_gives_generates_tokens_and_logprobs(kind, temperature, with_eos):
    from trainers.rollout import cached_decode

    model = model_or_skip(kind)
    prompts = make_task("target-set").prompts(6, random.Random(1))
    prompts[1], prompts[4] = prompts[1][:2], prompts[4][:3]  # ragged: left padding in play
    eos = None
    if with_eos:  # an EOS that some row samples mid-way, so rows end at different steps
        first = HFRollout(model).generate(prompts, max_new_tokens=8, temperature=temperature, seed=5)
        eos = int(first.response_ids[0, 2])
    engine = HFRollout(model, eos_token_id=eos)
    assert cached_decode.applies_to(engine.model, engine.layer_types)
    ours = engine.generate(prompts, max_new_tokens=8, temperature=temperature, seed=5)
    calls = []
    real = cached_decode.decode
    try:
        cached_decode.decode = lambda *a, **k: calls.append(1) or real(*a, **k)
        engine.generate(prompts, max_new_tokens=8, temperature=temperature, seed=5)
    finally:
        cached_decode.decode = real
    assert calls, "the engine did not take the cached decode loop"
    engine.layer_types = ["full_attention"]  # not a model the loop applies to: generate itself
    assert not cached_decode.applies_to(engine.model, engine.layer_types)
    theirs = engine.generate(prompts, max_new_tokens=8, temperature=temperature, seed=5)
    assert torch.equal(ours.input_ids, theirs.input_ids) and torch.equal(ours.response_mask, theirs.response_mask)
    # float32 rounding only: CPU kernels round the last bit by where their buffers land (cached_decode's docstring)
    torch.testing.assert_close(ours.logprobs, theirs.logprobs, rtol=0, atol=2e-6)
    if with_eos:
        assert bool((ours.response_mask == 0).any()), "no row ended early: the EOS rule was not exercised"


@pytest.mark.versions  # the cache's reorder differs by release (one cache class in 5.2-5.3, layers from 5.5)
@pytest.mark.parametrize("kind", ["text", "moe"])
def test_rows_of_one_prompt_are_prefilled_once_and_decode_as_generate_does(kind, monkeypatch):
    from trainers.rollout import cached_decode

    model = model_or_skip(kind)
    base = make_task("target-set").prompts(3, random.Random(3))
    base[1] = base[1][:2]  # one group left-padded
    prompts = [p for p in base for _ in range(4)]  # GRPO's layout: each prompt's group of rows together
    engine = HFRollout(model)
    batch_rows = []
    engine.model.register_forward_pre_hook(lambda _, args, kwargs: batch_rows.append(len(kwargs["input_ids"])),
                                           with_kwargs=True)
    shared = engine.generate(prompts, max_new_tokens=6, temperature=1.0, seed=4)
    assert batch_rows[0] == 3 and set(batch_rows[1:]) == {12}, batch_rows  # prefill per prompt, decode per row
    monkeypatch.setattr(cached_decode, "prompt_groups", lambda prompt, mask: ([], None))
    per_row = engine.generate(prompts, max_new_tokens=6, temperature=1.0, seed=4)
    engine.layer_types = ["full_attention"]  # not a model the loop applies to: generate itself
    theirs = engine.generate(prompts, max_new_tokens=6, temperature=1.0, seed=4)
    for other in (per_row, theirs):
        assert torch.equal(shared.input_ids, other.input_ids)
        torch.testing.assert_close(shared.logprobs, other.logprobs, rtol=0, atol=2e-6)


def test_prompt_groups_need_the_same_tokens_and_mask():
    from trainers.rollout.cached_decode import prompt_groups

    prompt = torch.tensor([[0, 5, 6], [1, 2, 3], [0, 5, 6], [0, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1], [1, 1, 1]])  # row 3: the same tokens, its pad id is a token
    first_rows, expand = prompt_groups(prompt, mask)
    assert first_rows == [0, 1, 3] and expand.tolist() == [0, 1, 0, 2]
    assert prompt_groups(prompt[:2], mask[:2]) == ([], None)  # nothing shared: every row prefilled as before


def test_a_cache_expanded_to_the_wrong_rows_stops_the_run(monkeypatch):
    from trainers.rollout import RolloutMismatch, cached_decode

    real = cached_decode.expand_cache
    monkeypatch.setattr(cached_decode, "expand_cache", lambda cache, expand: real(cache, expand.roll(1)))
    engine = make_rollout("hf", model_or_skip("text"), check="generate")
    prompts = [p for p in make_task("target-set").prompts(3, random.Random(3)) for _ in range(4)]
    with pytest.raises(RolloutMismatch, match="disagree on the first rollout batch"):
        engine.generate(prompts, max_new_tokens=6, temperature=1.0, seed=4)


def test_the_cached_decode_loop_leaves_the_vl_model_and_custom_generation_configs_to_generate():
    from trainers.rollout import cached_decode

    text = model_or_skip("text")
    assert cached_decode.applies_to(text, ["linear_attention", "full_attention"])
    text.generation_config.repetition_penalty = 1.3  # generate would add a processor the loop does not have
    assert not cached_decode.applies_to(text, ["linear_attention", "full_attention"])
    assert not cached_decode.applies_to(model_or_skip("vl"), ["linear_attention", "full_attention"])


def test_the_first_batch_is_checked_against_generate_once_when_asked():
    model = model_or_skip("text")
    prompts = make_task("target-set").prompts(4, random.Random(2))
    engine = make_rollout("hf", model, check="generate")
    first = engine.generate(prompts, max_new_tokens=6, temperature=1.0, seed=1)
    assert engine.generate_check["same_tokens"] and engine.generate_check["max_logit_diff"] < 1e-4
    assert not engine.check_against_generate  # once: later batches take the loop alone
    assert torch.equal(first.input_ids, HFRollout(model).generate(prompts, 6, 1.0, seed=1).input_ids)
    assert make_rollout("hf", model).generate_check is None  # not asked: no comparison
    with pytest.raises(ValueError, match="does not apply to rollout 'vllm'"):
        make_rollout("vllm", model, check="generate")


@pytest.mark.parametrize("broken", ["tokens", "logits"])
def test_a_decode_loop_that_disagrees_with_generate_stops_the_run(monkeypatch, broken):
    from trainers.rollout import RolloutMismatch, cached_decode

    real = cached_decode.decode

    def wrong(*args, **kwargs):
        sequences, logits = real(*args, **kwargs)
        if broken == "tokens":
            sequences = sequences.clone()
            sequences[0, -1] = (sequences[0, -1] + 1) % 100
        else:
            logits = [logits[0] + 1e-2, *logits[1:]]  # a wrong position or a stale cache moves logits by this much
        return sequences, logits

    monkeypatch.setattr(cached_decode, "decode", wrong)
    engine = make_rollout("hf", model_or_skip("text"), check="generate")
    prompts = make_task("target-set").prompts(4, random.Random(2))
    with pytest.raises(RolloutMismatch, match="disagree on the first rollout batch"):
        engine.generate(prompts, max_new_tokens=6, temperature=1.0, seed=1)
