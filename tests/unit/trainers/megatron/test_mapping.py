"""The project's HF <-> Megatron mapping on every Qwen3.5 weight: exact round trips and the fused layouts."""
from __future__ import annotations

import pytest
import torch

from trainers.megatron import mapping
from trainers.megatron.model import build_hf_variant


@pytest.fixture(scope="module")
def text_model():
    return build_hf_variant("hybrid", None, seed=1, kind="text")


@pytest.fixture(scope="module")
def moe_model():
    return build_hf_variant("hybrid", None, seed=2, kind="moe")


def _round_trip(model, tp: int, ep: int) -> dict:
    state = model.state_dict()
    shards = [[mapping.hf_to_megatron(state, model.config, tp, rank, ep, ep_rank) for rank in range(tp)]
              for ep_rank in range(ep)]
    return mapping.megatron_to_hf(shards, model.config)


@pytest.mark.parametrize("kind,tp,ep", [("text", 1, 1), ("text", 2, 1), ("moe", 1, 1), ("moe", 2, 1), ("moe", 1, 2)])
def test_round_trip_is_bitwise_exact_for_every_weight(kind, tp, ep, text_model, moe_model):
    model = text_model if kind == "text" else moe_model
    state = model.state_dict()
    back = _round_trip(model, tp, ep)
    assert sorted(back) == sorted(state)
    assert [k for k in state if not torch.equal(back[k], state[k])] == []
    # the hybrid model really has both layer kinds, so GDN and attention weights both went through
    assert any(".linear_attn.in_proj_qkv." in k for k in state) and any(".self_attn.q_proj." in k for k in state)


def test_gdn_in_proj_gives_each_rank_its_own_heads(text_model):
    c, state = text_model.config, text_model.state_dict()
    prefix = "model.layers.0.linear_attn."
    key, head_v = c.linear_key_head_dim * c.linear_num_key_heads, c.linear_value_head_dim
    q, k, v = state[prefix + "in_proj_qkv.weight"].split([key, key, head_v * c.linear_num_value_heads])
    z, b, a = (state[prefix + f"in_proj_{n}.weight"] for n in "zba")
    rank1 = mapping.hf_to_megatron(state, c, tp=2, rank=1)["decoder.layers.0.self_attention.in_proj.weight"]
    half_k, half_v, half_h = key // 2, head_v * c.linear_num_value_heads // 2, c.linear_num_value_heads // 2
    expected = torch.cat([q[half_k:], k[half_k:], v[half_v:], z[half_v:], b[half_h:], a[half_h:]])
    assert torch.equal(rank1, expected)  # [q_r, k_r, v_r, z_r, b_r, a_r]: the second half of every head kind
    conv = mapping.hf_to_megatron(state, c, tp=2, rank=0)["decoder.layers.0.self_attention.conv1d.weight"]
    full_conv = state[prefix + "conv1d.weight"]
    assert torch.equal(conv, torch.cat([full_conv[:half_k], full_conv[key:key + half_k],
                                        full_conv[2 * key:2 * key + half_v]]))


def test_experts_are_placed_on_their_expert_parallel_rank(moe_model):
    c, state = moe_model.config, moe_model.state_dict()
    local = c.num_experts // 2
    rank1 = mapping.hf_to_megatron(state, c, tp=1, rank=0, ep=2, ep_rank=1)
    for j in range(local):
        fc1 = rank1[f"decoder.layers.1.mlp.experts.local_experts.{j}.linear_fc1.weight"]
        assert torch.equal(fc1, state["model.layers.1.mlp.experts.gate_up_proj"][local + j])
    assert f"decoder.layers.1.mlp.experts.local_experts.{local}.linear_fc1.weight" not in rank1
    assert torch.equal(rank1["decoder.layers.1.mlp.shared_experts.gate_weight"],
                       state["model.layers.1.mlp.shared_expert_gate.weight"])
    assert torch.equal(rank1["decoder.layers.1.mlp.router.weight"], state["model.layers.1.mlp.gate.weight"])


def test_sizes_that_do_not_split_are_named(text_model):
    with pytest.raises(ValueError, match="linear_num_key_heads=2 does not split over tensor-parallel size 4"):
        mapping.check_sizes(text_model.config, tp=4)


def test_parameters_are_classified_for_gradient_reduction():
    from trainers.megatron.grads import partial_over_tensor_parallel

    assert partial_over_tensor_parallel("decoder.layers.0.self_attention.out_norm.weight")  # GDN gated norm
    assert partial_over_tensor_parallel("decoder.layers.3.self_attention.q_layernorm.weight")
    assert mapping.is_tensor_parallel("decoder.layers.0.self_attention.A_log")
    assert mapping.is_tensor_parallel("decoder.layers.0.self_attention.conv1d.weight")
    assert mapping.is_expert("decoder.layers.0.mlp.experts.local_experts.1.linear_fc2.weight")
    assert not mapping.is_expert("decoder.layers.0.mlp.shared_experts.linear_fc2.weight")
    assert not mapping.is_tensor_parallel("decoder.layers.0.mlp.router.weight")
