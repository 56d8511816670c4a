"""trainers.rollout.hf: the HF rollout engine's log-probs equal the trainer's recomputation; samples do not depend
on the batch they are drawn in; EOS masks the rest of a response; weights sync in place."""
import random

import pytest
import torch
from qwen35_helpers import model_or_skip

from trainers.grpo.tasks import make_task
from trainers.rollout import HFRollout


@pytest.mark.parametrize("kind", ["text", "moe"])
def test_logprobs_match_recomputation_with_left_padding(kind):
    from trainers.fsdp.train import response_logprobs

    model = model_or_skip(kind)
    prompts = make_task("target-set").prompts(4, random.Random(0))
    prompts[1], prompts[2] = prompts[1][:2], prompts[2][:4]  # ragged: left padding in play
    engine = HFRollout(model)
    batch = engine.generate(prompts, max_new_tokens=6, temperature=0.7, seed=3)
    assert batch.logprobs.shape == batch.response_mask.shape == (4, 6)
    with torch.no_grad():
        recomputed, _ = response_logprobs(model, batch, temperature=0.7)
    assert torch.allclose(recomputed, batch.logprobs, atol=1e-5)
    assert float(batch.logprobs.abs().sum()) > 0
    # at another temperature the log-probs differ: the engine really applies its temperature
    with torch.no_grad():
        other, _ = response_logprobs(model, batch, temperature=1.0)
    assert not torch.allclose(other, batch.logprobs, atol=1e-3)


def test_samples_do_not_depend_on_the_batch_and_sync_changes_them():
    model = model_or_skip()
    prompts = make_task("target-set").prompts(3, random.Random(1))
    engine = HFRollout(model)
    full = engine.generate(prompts, 5, 1.0, seed=[10, 11, 12])
    alone = engine.generate(prompts[1:2], 5, 1.0, seed=[11])
    assert torch.equal(full.response_ids[1:2], alone.response_ids)
    assert engine.generate(prompts, 5, 1.0, seed=[10, 11, 12]).responses() == full.responses()
    changed = model_or_skip()
    with torch.no_grad():
        changed.lm_head.weight.mul_(50.0)
    engine.sync_weights(changed)
    assert not torch.equal(engine.generate(prompts, 5, 1.0, seed=[10, 11, 12]).logprobs, full.logprobs)


def test_eos_masks_the_rest_of_the_response():
    model = model_or_skip()
    engine = HFRollout(model, eos_token_id=2)
    with torch.no_grad():  # make EOS overwhelmingly likely
        engine.model.lm_head.weight.zero_()
        engine.model.lm_head.weight[2] = 10.0 * torch.sign(torch.randn(model.config.hidden_size))
    batch = engine.generate([[5, 6, 7]] * 2, 4, 1.0, seed=0)
    for row in range(2):
        ends = batch.response_mask[row].tolist()
        assert ends[0] == 1 and sum(ends) <= 4 and ends == sorted(ends, reverse=True)
        assert float(batch.logprobs[row][batch.response_mask[row] == 0].abs().sum()) == 0.0


def test_a_model_without_linear_attention_still_rolls_out_with_exact_logprobs():
    # Qwen3.5's stock cache rejects such a model in transformers 5.3 to 5.9; the engine then decodes
    # without a cache. Either way its log-probs must equal the trainer's recomputation.
    from trainers.fsdp.train import response_logprobs
    from trainers.models import build_model

    model = build_model("text", {"layer_types": ["full_attention"] * 4}, seed=0)
    engine = HFRollout(model)
    batch = engine.generate([[5, 6, 7], [8, 9]], 6, 1.0, seed=3)
    with torch.no_grad():
        recomputed, _ = response_logprobs(model, batch, 1.0)
    assert float(((recomputed - batch.logprobs) * batch.response_mask).abs().max()) < 1e-5
    assert engine.use_cache == (engine.cache_error is None)


def test_sync_copies_every_weight_in_place_and_refuses_a_mismatched_state():
    model, other = model_or_skip(), model_or_skip()
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(torch.randn_like(parameter))
    engine = HFRollout(model)
    for _ in range(2):  # the second sync goes through the kept tensors
        engine.sync_weights(other.state_dict())
        for name, tensor in other.state_dict().items():
            assert torch.equal(engine.model.state_dict()[name], tensor), name
    wrong_shape = {**other.state_dict(), "lm_head.weight": torch.zeros(3, 3)}
    with pytest.raises(RuntimeError, match="lm_head.weight"):
        engine.sync_weights(wrong_shape)
    missing = {k: v for k, v in other.state_dict().items() if k != "lm_head.weight"}
    with pytest.raises(RuntimeError, match="lm_head.weight"):
        engine.sync_weights(missing)
