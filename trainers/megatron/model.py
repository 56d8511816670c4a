"""A Qwen3.5 text model as a megatron-core `GPTModel`, built from the Hugging Face config.

Only megatron-core's local (non Transformer Engine) modules are used, so the same model runs
on CPU. What Qwen3.5's full-attention layers need from Megatron:
- an output gate on attention (`attention_output_gate`: q_proj also yields a sigmoid gate);
- RMSNorm on q and k per head (`qk_layernorm`);
- partial rotary embeddings (`rotary_percent` = partial_rotary_factor);
- zero-centred RMSNorm weights, `x * (1 + w)`: megatron's torch norm refuses
  `layernorm_zero_centered_gamma`, so `ZeroCenteredRMSNorm` below is put in the layer spec.
  Keeping HF's parameter as it is (rather than storing 1 + w) keeps the conversion exact.
Gated DeltaNet (linear_attention) layers exist in megatron-core only behind Transformer Engine
and flash-linear-attention: `build_hybrid_gpt_model` tries that real path and lets its error out.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .config import ParallelSizes


class ZeroCenteredRMSNorm(torch.nn.Module):
    """RMSNorm with a zero-initialised weight applied as (1 + w), computed in float32 as HF does."""

    def __init__(self, config=None, hidden_size: int = 0, eps: float = 1e-6, **_unused):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.zeros(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * (1.0 + self.weight.float())).type_as(x)


def layer_kinds(hf_config) -> list[str]:
    return list(getattr(hf_config, "layer_types", None) or ["full_attention"] * hf_config.num_hidden_layers)


def _rope(hf_config) -> tuple[float, float]:
    rope = dict(getattr(hf_config, "rope_parameters", None) or {})
    if rope.get("rope_type", "default") != "default":
        raise NotImplementedError(f"rope_type {rope.get('rope_type')!r}: only default RoPE is mapped to Megatron")
    return float(rope.get("partial_rotary_factor", 1.0)), float(rope.get("rope_theta", 10000.0))


def transformer_config(hf_config, sizes: ParallelSizes, dtype=torch.float32, **extra):
    """megatron-core's TransformerConfig for a Qwen3.5 text config (fusions off: they need CUDA)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    if getattr(hf_config, "attention_bias", False):
        raise NotImplementedError("attention_bias=True is not mapped (Qwen3.5 has none)")
    if hf_config.hidden_act != "silu":
        raise NotImplementedError(f"hidden_act {hf_config.hidden_act!r}: only silu (SwiGLU) is mapped")
    return TransformerConfig(
        num_layers=hf_config.num_hidden_layers,
        hidden_size=hf_config.hidden_size,
        ffn_hidden_size=hf_config.intermediate_size,
        num_attention_heads=hf_config.num_attention_heads,
        num_query_groups=hf_config.num_key_value_heads,
        kv_channels=hf_config.head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=hf_config.rms_norm_eps,
        add_bias_linear=False,
        add_qkv_bias=False,
        gated_linear_unit=True,
        activation_func=F.silu,
        qk_layernorm=True,
        attention_output_gate=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        attention_softmax_in_fp32=True,
        bias_activation_fusion=False,
        bias_dropout_fusion=False,
        masked_softmax_fusion=False,
        apply_rope_fusion=False,
        gradient_accumulation_fusion=False,
        use_cpu_initialization=True,
        perform_initialization=False,  # every parameter is loaded from the HF weights
        params_dtype=dtype,
        transformer_impl="local",
        tensor_model_parallel_size=sizes.tp,
        pipeline_model_parallel_size=sizes.pp,
        context_parallel_size=sizes.cp,
        expert_model_parallel_size=sizes.ep,
        sequence_parallel=False,
        **extra,
    )


def full_attention_block_spec(config):
    """Megatron's local GPT layer spec with the zero-centred norms swapped in."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

    layer = get_gpt_layer_local_spec(qk_layernorm=True, normalization="RMSNorm")
    layer.submodules.input_layernorm = ZeroCenteredRMSNorm
    layer.submodules.pre_mlp_layernorm = ZeroCenteredRMSNorm
    layer.submodules.self_attention.submodules.q_layernorm = ZeroCenteredRMSNorm
    layer.submodules.self_attention.submodules.k_layernorm = ZeroCenteredRMSNorm
    return TransformerBlockSubmodules(layer_specs=[layer] * config.num_layers, layer_norm=ZeroCenteredRMSNorm)


def _gpt_model(config, hf_config, block_spec):
    from megatron.core.models.gpt import GPTModel

    partial, theta = _rope(hf_config)
    return GPTModel(config=config, transformer_layer_spec=block_spec, vocab_size=hf_config.vocab_size,
                    max_sequence_length=hf_config.max_position_embeddings, parallel_output=False,
                    share_embeddings_and_output_weights=bool(hf_config.tie_word_embeddings),
                    position_embedding_type="rope", rotary_percent=partial, rotary_base=theta)


def build_full_attention_gpt_model(hf_config, sizes: ParallelSizes, dtype=torch.float32):
    kinds = layer_kinds(hf_config)
    if any(kind != "full_attention" for kind in kinds):
        raise ValueError(f"layer_types {kinds} include non full-attention layers; use build_hybrid_gpt_model")
    config = transformer_config(hf_config, sizes, dtype)
    return _gpt_model(config, hf_config, full_attention_block_spec(config))


def build_hybrid_gpt_model(hf_config, sizes: ParallelSizes, dtype=torch.float32):
    """Gated DeltaNet + full attention the way megatron-core builds it (Qwen3-Next style spec).

    megatron-core 0.16.1 builds this block only with Transformer Engine, and GatedDeltaNet
    needs flash-linear-attention: on a CPU machine this raises, and the caller records why.
    """
    from megatron.core.models.gpt.experimental_attention_variant_module_specs import (
        get_transformer_block_with_experimental_attention_variant_spec,
    )

    kinds = layer_kinds(hf_config)
    config = transformer_config(
        hf_config, sizes, dtype, experimental_attention_variant="gated_delta_net",
        linear_attention_freq=[1 if kind == "linear_attention" else 0 for kind in kinds],
        linear_conv_kernel_dim=hf_config.linear_conv_kernel_dim, linear_key_head_dim=hf_config.linear_key_head_dim,
        linear_value_head_dim=hf_config.linear_value_head_dim,
        linear_num_key_heads=hf_config.linear_num_key_heads,
        linear_num_value_heads=hf_config.linear_num_value_heads)
    return _gpt_model(config, hf_config, get_transformer_block_with_experimental_attention_variant_spec(config))


def build_gpt_model(hf_config, sizes: ParallelSizes, dtype=torch.float32):
    if all(kind == "full_attention" for kind in layer_kinds(hf_config)):
        return build_full_attention_gpt_model(hf_config, sizes, dtype)
    return build_hybrid_gpt_model(hf_config, sizes, dtype)


def padded_attention_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Megatron's mask, (B, 1, S, S), True where attention is NOT allowed: causal and key padding.

    Batches are padded BSHD; query rows of padding see nothing real and their outputs are unused.
    """
    length = attention_mask.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=attention_mask.device).tril()
    allowed = causal[None, :, :] & attention_mask.bool()[:, None, :]
    return ~allowed[:, None, :, :]


def megatron_logits(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Full-vocabulary logits (B, S, V) from a GPTModel built with parallel_output=False.

    RoPE here counts positions from the left edge of the padded row, HF from each row's first
    real token: attention depends only on position differences, so both give the same logits
    up to rounding (the parity check measures it).
    """
    positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    return model(input_ids=input_ids, position_ids=positions, attention_mask=padded_attention_mask(attention_mask))


class VariantUnavailable(RuntimeError):
    """megatron-core cannot build or run this Qwen3.5 variant here; the message holds its real error."""


def variant_override(variant: str, hf_kind_config: dict) -> dict:
    """The config override that makes `variant` out of the zoo's (already merged) text config."""
    if variant == "full-attention":
        return {"layer_types": ["full_attention"] * int(hf_kind_config["num_hidden_layers"])}
    if variant == "hybrid":
        return {}
    raise ValueError(f"unknown variant {variant!r}; expected full-attention or hybrid")


def build_hf_variant(variant: str, model_config=None, seed: int = 0, model_path=None):
    """The Hugging Face Qwen3.5 text model for `variant`, from the zoo (plus `model_config`) or a checkpoint."""
    import json
    from pathlib import Path

    from ..models import build_model, default_config

    if model_path is not None:
        model = build_model("text", seed=seed, model_path=model_path)
        kinds = layer_kinds(model.config)
        if variant == "full-attention" and any(kind != "full_attention" for kind in kinds):
            raise VariantUnavailable(f"checkpoint {model_path} has layer_types {kinds}: not a full-attention model")
        return model
    override = model_config
    if override is not None and not isinstance(override, dict):
        override = json.loads(Path(override).read_text())
    override = dict(override or {})
    merged = {**default_config("text"), **override}  # layer_types and num_hidden_layers are top-level keys
    return build_model("text", {**override, **variant_override(variant, merged)}, seed=seed)


def build_megatron_variant(hf_config, sizes: ParallelSizes, dtype=torch.float32):
    """`build_gpt_model`, with megatron-core's own refusal of a variant turned into VariantUnavailable."""
    try:
        return build_gpt_model(hf_config, sizes, dtype)
    except (AssertionError, ImportError, NotImplementedError) as exc:
        raise VariantUnavailable(f"megatron-core cannot build layer_types {layer_kinds(hf_config)}: "
                                 f"{type(exc).__name__}: {exc}") from exc


def gated_delta_net_probe(hf_config, sizes: ParallelSizes) -> str | None:
    """Build one megatron-core GatedDeltaNet layer from local modules (no Transformer Engine) and
    run it on a tiny input; the error it raises, or None when it runs. Evidence for the hybrid limit."""
    from megatron.core.models.backends import LocalSpecProvider
    from megatron.core.process_groups_config import ProcessGroupCollection
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet, GatedDeltaNetSubmodules

    local = LocalSpecProvider()
    try:
        config = transformer_config(hf_config, sizes, deterministic_mode=True,
                                    linear_conv_kernel_dim=hf_config.linear_conv_kernel_dim,
                                    linear_key_head_dim=hf_config.linear_key_head_dim,
                                    linear_value_head_dim=hf_config.linear_value_head_dim,
                                    linear_num_key_heads=hf_config.linear_num_key_heads,
                                    linear_num_value_heads=hf_config.linear_num_value_heads)
        layer = GatedDeltaNet(config, GatedDeltaNetSubmodules(in_proj=local.column_parallel_linear(),
                                                              out_norm=ZeroCenteredRMSNorm,
                                                              out_proj=local.row_parallel_linear()),
                              layer_number=1, pg_collection=ProcessGroupCollection.use_mpu_process_groups())
        layer(torch.zeros(4, 1, hf_config.hidden_size), attention_mask=None)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
