"""The Megatron layout of the memory count agrees with the parameters megatron-core itself allocates.

Qwen3.5 (Gated DeltaNet): the estimate of a real plan (Qwen3.5-35B-A3B at its published shapes,
TP2 EP8) and of tiny text and MoE models at TP2 PP2 is checked against megatron-core's own modules
of one rank per stage (harness.plans.megatron_count).

A Qwen3-MoE model (full attention, experts, QK norms; what megatron-core 0.16.1 builds from its local
spec without Transformer Engine) is built twice: transformers' modules on meta, split by the plan's
layout (memory.megatron_per_stage), and megatron-core's GPTModel for one rank on meta under the fake
process group. Their per-rank parameter counts must be equal, on the first and on the last stage.
"""
from __future__ import annotations

import json
import warnings

import pytest
from plan_helpers import write_plan

from harness.plans import megatron_count, megatron_probe, memory
from harness.plans.plan_format import load_plan

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

TINY_QWEN3_MOE = {"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "num_experts": 8,
                  "num_experts_per_tok": 2, "moe_intermediate_size": 32, "vocab_size": 256,
                  "tie_word_embeddings": False}


def megatron_rank_params(plan, rank: int) -> int:
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    sizes = dict(tensor_model_parallel_size=plan.tp, pipeline_model_parallel_size=plan.pp,
                 expert_model_parallel_size=plan.ep, expert_tensor_parallel_size=plan.etp)
    with megatron_probe.fake_world(plan.world_size, rank=rank), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ps.initialize_model_parallel(**sizes, create_gloo_process_groups=False)
        try:
            config = megatron_probe.build_config(plan, **sizes, normalization="RMSNorm", gated_linear_unit=True,
                                                 qk_layernorm=True, perform_initialization=False)
            spec = get_gpt_layer_local_spec(num_experts=config.num_moe_experts, qk_layernorm=True,
                                            normalization="RMSNorm")
            with torch.device("meta"):
                model = GPTModel(config, spec, vocab_size=plan.model.get("vocab_size"), max_sequence_length=64,
                                 position_embedding_type="rope", pre_process=ps.is_pipeline_first_stage(),
                                 post_process=ps.is_pipeline_last_stage(),
                                 share_embeddings_and_output_weights=False)
            return sum(p.numel() for p in model.parameters())
        finally:
            ps.destroy_model_parallel()


@pytest.mark.parametrize("rank, stage", [(0, 0), (7, 1)])
def test_per_rank_count_equals_megatron_core_modules(tmp_path, rank, stage):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny-qwen3-moe.json").write_text(json.dumps({"hf_config": TINY_QWEN3_MOE}))
    plan = load_plan(write_plan(tmp_path, plan__model="tiny-qwen3-moe", parallel__tp=2, parallel__pp=2,
                                parallel__ep=2, cluster__nodes=1, cluster__devices_per_node=8, rollout__tp=2),
                     models_dir=tmp_path / "models")
    per_stage = memory.megatron_per_stage(memory.build_meta_model(plan.model), plan, [2, 2])
    ours = sum(per_stage[stage].values())
    assert ours == megatron_rank_params(plan, rank)


@pytest.mark.parametrize("kind, model_type, ep", [("text", "qwen3_5_text", 1), ("moe", "qwen3_5_moe_text", 2)])
def test_qwen35_gated_deltanet_count_equals_megatron_core_per_stage(tmp_path, kind, model_type, ep):
    models = pytest.importorskip("trainers.models")
    config = {**models.default_config(kind), "model_type": model_type}
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / f"tiny-{kind}.json").write_text(json.dumps({"hf_config": config}))
    plan = load_plan(write_plan(tmp_path, plan__model=f"tiny-{kind}", parallel__tp=2, parallel__pp=2,
                                parallel__ep=ep, cluster__nodes=1, cluster__devices_per_node=8, rollout__tp=2),
                     models_dir=tmp_path / "models")
    model = memory.build_meta_model(plan.model)
    assert any(".linear_attn." in name for name, _ in model.named_parameters())  # Gated DeltaNet layers
    stages = megatron_probe.layers_per_stage(plan)
    ours = [sum(stage.values()) for stage in memory.megatron_per_stage(model, plan, stages)]
    assert ours == megatron_count.stage_params(plan, model.config)


def test_real_qwen35_plan_estimate_is_checked_against_megatron_core():
    from pathlib import Path

    root = Path(__file__).resolve().parents[4]
    plan = load_plan(root / "plans" / "qwen3.5-35b-a3b-megatron-grpo.toml")
    groups = megatron_probe.world_layout(plan)
    estimate = memory.megatron_estimate(plan, megatron_probe.layers_per_stage(plan), groups["dp"],
                                        groups["expert_dp"])
    assert "per-stage count equal to megatron-core's own modules of one rank" in estimate.note
