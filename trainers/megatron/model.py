"""A Qwen3.5 text or MoE model as a megatron-core `GPTModel`, built from the Hugging Face config.

Only megatron-core's own modules are used (layer specs in layer_specs.py), so the model runs on
CPU. From the HF config:
- `layer_types`: linear_attention layers are megatron-core's `GatedDeltaNet`, full_attention
  layers its SelfAttention with an output gate (`attention_output_gate`), per-head q/k RMSNorm
  and partial rotary embeddings (`rotary_percent` = partial_rotary_factor);
- the MoE keys (Qwen3.5-MoE): megatron-core's MoELayer, softmax top-k router renormalised over
  the chosen experts (megatron's softmax after top-k), a shared expert with a sigmoid gate, no
  load-balancing loss (this harness compares forwards and trains a toy task).
GatedDeltaNet's gated delta rule: FLA's kernel where flash-linear-attention is installed,
otherwise megatron-core's pure-torch `torch_chunk_gated_delta_rule` (`deterministic_mode`),
with the two FLA names it imports supplied by fla_shim.py.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from trainers.errors import TrainerUnavailable

from .config import ParallelSizes
from .kernel_shim import fla_available
from .layer_specs import block_spec, mtp_block_spec


def layer_kinds(hf_config) -> list[str]:
    return list(getattr(hf_config, "layer_types", None) or ["full_attention"] * hf_config.num_hidden_layers)


def num_experts(hf_config) -> int | None:
    return getattr(hf_config, "num_experts", None) or None


def _linear_attention_options(hf_config) -> dict:
    if "linear_attention" not in layer_kinds(hf_config):
        return {}
    return {"linear_conv_kernel_dim": hf_config.linear_conv_kernel_dim,
            "linear_key_head_dim": hf_config.linear_key_head_dim,
            "linear_value_head_dim": hf_config.linear_value_head_dim,
            "linear_num_key_heads": hf_config.linear_num_key_heads,
            "linear_num_value_heads": hf_config.linear_num_value_heads,
            # the pure-torch gated delta rule and plain conv1d where FLA's kernels are absent
            "deterministic_mode": not fla_available()}


def _moe_options(hf_config) -> dict:
    experts = num_experts(hf_config)
    if experts is None:
        return {}
    return {"num_moe_experts": experts, "moe_router_topk": hf_config.num_experts_per_tok,
            "moe_ffn_hidden_size": hf_config.moe_intermediate_size,
            "moe_shared_expert_intermediate_size": hf_config.shared_expert_intermediate_size,
            "moe_shared_expert_gate": True, "moe_router_pre_softmax": False, "moe_router_dtype": "fp32",
            "moe_router_load_balancing_type": "none", "moe_aux_loss_coeff": 0.0,
            "moe_token_dispatcher_type": "allgather", "moe_grouped_gemm": False, "moe_permute_fusion": False}


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
        ffn_hidden_size=getattr(hf_config, "intermediate_size", None) or hf_config.moe_intermediate_size,
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
        # megatron-core refuses to train MoE under tensor parallelism without sequence parallelism
        sequence_parallel=bool(num_experts(hf_config)) and sizes.tp > 1,
        **{**_linear_attention_options(hf_config), **_moe_options(hf_config), **extra},
    )


def build_from_spec(config, hf_config, block_spec, pre_process: bool = True, post_process: bool = True,
                    mtp_block_spec=None):
    """The GPTModel for a config and block spec; `pre_process`/`post_process`: this pipeline stage
    holds the embedding / the final norm and output layer (the first / last stage); `mtp_block_spec`: its MTP
    block (None: none)."""
    from megatron.core.models.gpt import GPTModel

    partial, theta = _rope(hf_config)
    return GPTModel(config=config, transformer_layer_spec=block_spec, vocab_size=hf_config.vocab_size,
                    max_sequence_length=hf_config.max_position_embeddings, parallel_output=False,
                    share_embeddings_and_output_weights=bool(hf_config.tie_word_embeddings),
                    position_embedding_type="rope", rotary_percent=partial, rotary_base=theta,
                    pre_process=pre_process, post_process=post_process, mtp_block_spec=mtp_block_spec)


def build_gpt_model(hf_config, sizes: ParallelSizes, dtype=torch.float32, mtp_layers: int = 0):
    """The GPTModel for `layer_types` (and the MoE keys): megatron-core's own layers, one spec each; with
    `mtp_layers`, megatron-core's MTP block of that many layers (to hold a checkpoint's `mtp.*` tensors: its
    forward then wants labels, which megatron_logits does not pass)."""
    config = transformer_config(hf_config, sizes, dtype, **({"mtp_num_layers": mtp_layers} if mtp_layers else {}))
    mtp = mtp_block_spec(config, num_experts(hf_config)) if mtp_layers else None
    return build_from_spec(config, hf_config, block_spec(layer_kinds(hf_config), num_experts(hf_config)),
                           mtp_block_spec=mtp)


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
    length = input_ids.shape[1]
    multiple = model.config.tensor_model_parallel_size if model.config.sequence_parallel else 1
    extra = -length % multiple  # sequence parallelism splits the sequence evenly over TP ranks
    if extra:  # right padding: causal, so the real tokens never see it
        input_ids = torch.nn.functional.pad(input_ids, (0, extra))
        attention_mask = torch.nn.functional.pad(attention_mask, (0, extra))
    positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    logits = model(input_ids=input_ids, position_ids=positions, attention_mask=padded_attention_mask(attention_mask))
    return logits[:, :length]


class VariantUnavailable(TrainerUnavailable):
    """megatron-core cannot build or run this Qwen3.5 variant here; the message holds its real error."""


def variant_override(variant: str, hf_kind_config: dict) -> dict:
    """The config override that makes `variant` out of the zoo's (already merged) text config."""
    if variant == "full-attention":
        return {"layer_types": ["full_attention"] * int(hf_kind_config["num_hidden_layers"])}
    if variant == "hybrid":
        return {}
    raise ValueError(f"unknown variant {variant!r}; expected full-attention or hybrid")


def build_hf_variant(variant: str, model_config=None, seed: int = 0, model_path=None, kind: str = "text"):
    """The HF Qwen3.5 model (`kind` text or moe) for `variant`, from the zoo (plus `model_config`) or a checkpoint."""
    from ..models import build_model, default_config, read_override

    if model_path is not None:
        model = build_model(kind, seed=seed, model_path=model_path)
        kinds = layer_kinds(model.config)
        if variant == "full-attention" and any(kind != "full_attention" for kind in kinds):
            raise VariantUnavailable(f"checkpoint {model_path} has layer_types {kinds}: not a full-attention model")
        return model
    override = model_config
    if override is not None and not isinstance(override, dict):
        override = read_override(override)
    override = dict(override or {})
    merged = {**default_config(kind), **override}  # layer_types and num_hidden_layers are top-level keys
    return build_model(kind, {**override, **variant_override(variant, merged)}, seed=seed)


def build_megatron_variant(hf_config, sizes: ParallelSizes, dtype=torch.float32):
    """`build_gpt_model`, with megatron-core's own refusal of a variant turned into VariantUnavailable."""
    try:
        return build_gpt_model(hf_config, sizes, dtype)
    except (AssertionError, ImportError, NotImplementedError) as exc:
        raise VariantUnavailable(f"megatron-core cannot build layer_types {layer_kinds(hf_config)}: "
                                 f"{type(exc).__name__}: {exc}") from exc
