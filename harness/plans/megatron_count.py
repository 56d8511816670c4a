"""Parameters one rank of each pipeline stage holds, as megatron-core itself allocates them.

The count memory.py makes by splitting transformers' modules (its own divisors and stage rule) is
checked against this one, which shares nothing with it: megatron-core's GPTModel is built for one
rank of the stage on the `meta` device, at the model's real shapes, under torch's fake process group
of the plan's world size with megatron-core's own `initialize_model_parallel`, and its parameters are
counted. Qwen3.5 models (Gated DeltaNet and gated attention, dense or MoE) are built from the
trainer's layer specs (trainers.megatron.model: megatron-core's own GatedDeltaNet, attention, MLP
and MoE modules, no Transformer Engine); other models from megatron-core's local GPT spec.
"""
from __future__ import annotations

import contextlib
import warnings

from .megatron_probe import build_config, fake_world
from .plan_format import Plan

QWEN35_TYPES = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")


class CountUnavailable(RuntimeError):
    """megatron-core cannot build this model here, so its own count cannot be taken."""


def _sizes(plan: Plan) -> dict[str, int]:
    return dict(tensor_model_parallel_size=plan.tp, pipeline_model_parallel_size=plan.pp,
                context_parallel_size=plan.cp, expert_model_parallel_size=plan.ep,
                expert_tensor_parallel_size=plan.etp)


def _stage_layers(plan: Plan) -> dict:
    out = {}
    if plan.first_stage_layers:
        out["num_layers_in_first_pipeline_stage"] = plan.first_stage_layers
    if plan.last_stage_layers:
        out["num_layers_in_last_pipeline_stage"] = plan.last_stage_layers
    return out


def _qwen35_model(plan: Plan, hf_config):
    import torch

    from trainers.megatron import model as megatron_model
    from trainers.megatron.config import ParallelSizes

    sizes = ParallelSizes(tp=plan.tp, pp=plan.pp, cp=plan.cp, ep=plan.ep)
    config = megatron_model.transformer_config(hf_config, sizes, torch.bfloat16,
                                               expert_tensor_parallel_size=plan.etp, pipeline_dtype=torch.bfloat16,
                                               **_stage_layers(plan))
    from megatron.core import parallel_state as ps
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    # The stage's own layers, as megatron-core's decoder block spec slices them (its offset and count).
    offset, count = get_transformer_layer_offset(config), get_num_layers_to_build(config)
    kinds = megatron_model.layer_kinds(hf_config)[offset:offset + count]
    spec = megatron_model.block_spec(kinds, megatron_model.num_experts(hf_config))

    return megatron_model.build_from_spec(config, hf_config, spec, pre_process=ps.is_pipeline_first_stage(),
                                          post_process=ps.is_pipeline_last_stage())


def _local_spec_model(plan: Plan):
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    config = build_config(plan, **_sizes(plan), normalization="RMSNorm", gated_linear_unit=True, qk_layernorm=True,
                          perform_initialization=False)
    spec = get_gpt_layer_local_spec(num_experts=config.num_moe_experts, qk_layernorm=True, normalization="RMSNorm")
    return GPTModel(config, spec, vocab_size=plan.model.get("vocab_size"), max_sequence_length=64,
                    position_embedding_type="rope", pre_process=ps.is_pipeline_first_stage(),
                    post_process=ps.is_pipeline_last_stage(),
                    share_embeddings_and_output_weights=bool(plan.model.get("tie_word_embeddings")))


@contextlib.contextmanager
def _trainer_shims():
    """What the trainer installs to build these modules without kernels or CUDA: the names megatron-core's
    GDN and MoE modules import from absent kernel libraries, and (no CUDA here) the CPU device that
    GatedDeltaNet asks torch.cuda for. Both are removed on the way out."""
    import torch

    from trainers.megatron.cpu_shim import CpuShim
    from trainers.megatron.kernel_shim import KernelShim

    shims = [KernelShim().install()] + ([] if torch.cuda.is_available() else [CpuShim().install()])
    try:
        yield
    finally:
        for shim in reversed(shims):
            shim.remove()


def rank_params(plan: Plan, stage: int, hf_config=None) -> int:
    """Parameters megatron-core allocates on the first rank of pipeline stage `stage` (TP, EP rank 0)."""
    import torch
    from megatron.core import parallel_state as ps

    rank = stage * (plan.world_size // plan.pp)  # megatron's default order puts pipeline outermost
    qwen35 = plan.model.get("model_type") in QWEN35_TYPES
    with fake_world(plan.world_size, rank=rank), warnings.catch_warnings(), _trainer_shims():
        warnings.simplefilter("ignore")
        ps.initialize_model_parallel(**_sizes(plan), create_gloo_process_groups=False)
        try:
            if ps.get_pipeline_model_parallel_rank() != stage:
                raise CountUnavailable(f"rank {rank} is on pipeline stage {ps.get_pipeline_model_parallel_rank()}, "
                                       f"not {stage}")
            with torch.device("meta"):
                model = _qwen35_model(plan, hf_config) if qwen35 else _local_spec_model(plan)
            return sum(p.numel() for p in model.parameters())
        except (AssertionError, ImportError, NotImplementedError, TypeError, ValueError) as exc:
            raise CountUnavailable(f"megatron-core cannot build {plan.model.get('model_type')} for one rank: "
                                   f"{type(exc).__name__}: {exc}") from exc
        finally:
            ps.destroy_model_parallel()


def stage_params(plan: Plan, hf_config=None) -> list[int]:
    """rank_params for every pipeline stage."""
    return [rank_params(plan, stage, hf_config) for stage in range(plan.pp)]
