"""A CPU layer spec with Transformer Engine's parameter layout, for Megatron-Bridge's Qwen3.5 provider.

Megatron-Bridge's Qwen3.5 providers (qwen35_bridge.py `provider_bridge`) build the decoder with
megatron-core's `get_transformer_block_with_experimental_attention_variant_spec`, whose backend helper
asserts `config.transformer_impl == "transformer_engine"` (megatron/core/models/gpt/
experimental_attention_variant_module_specs.py, `_get_backend_spec_provider`): every layer is a TE module,
and Transformer Engine has no CPU build. Its weight mappings name TE's fused layout: the input norm
inside `linear_qkv` / `in_proj` (`layer_norm_weight`), the dense MLP's pre-norm inside `linear_fc1`, and
zero-centred norms (`layernorm_zero_centered_gamma`).

This spec gives the same modules and parameter names from megatron-core's local layers: its
`SelfAttention`, `GatedDeltaNet` (the project's padding-masked subclass, layer_specs.py), local MLP and
MoE (SequentialMLP), with `CpuLayerNormColumnParallelLinear` (a ColumnParallelLinear that RMS-normalises
its input first; its name carries the `LayerNormColumnParallelLinear` that Megatron-Bridge's AutoMapping
reads to keep `layer_norm_weight` replicated) and an RMSNorm that honours the provider's zero-centred
gamma. The layer pattern comes from the provider's own config (`linear_attention_freq`, `moe_layer_freq`)
through megatron-core's pattern helpers. `mtp_block_spec` gives the provider's MTP block in the same layout
(its own, gpt_provider.py's, asks megatron-core for Transformer Engine's: provider.py). No weight is converted
here: Megatron-Bridge loads and exports.
"""
from __future__ import annotations

import functools

import torch

from trainers.megatron.layer_specs import masked_gated_delta_net


def rms_norm(x: torch.Tensor, weight: torch.Tensor, offset: float, eps: float) -> torch.Tensor:
    """RMS normalisation in float32 as HF computes it, scaled by `offset + weight` (offset 1: zero-centred)."""
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * (offset + weight.float())).type_as(x)


class CpuRMSNorm(torch.nn.Module):
    """RMSNorm in float32; `x * (1 + w)` where the config asks for zero-centred gamma, else `x * w`."""

    def __init__(self, config=None, hidden_size: int = 0, eps: float = 1e-6, **_unused):
        super().__init__()
        self.eps = eps
        self.offset = 1.0 if getattr(config, "layernorm_zero_centered_gamma", False) else 0.0
        self.weight = torch.nn.Parameter(torch.full((hidden_size,), 1.0 - self.offset))
        if getattr(config, "sequence_parallel", False):
            self.weight.sequence_parallel = True  # megatron-core all-reduces such gradients over TP

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.offset, self.eps)


@functools.cache
def layer_norm_column_linear():
    """megatron-core's ColumnParallelLinear with TE's fused input norm (`layer_norm_weight`)."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear

    class CpuLayerNormColumnParallelLinear(ColumnParallelLinear):
        def __init__(self, input_size, output_size, *, config, **kwargs):
            super().__init__(input_size, output_size, config=config, **kwargs)
            self.norm_offset = 1.0 if config.layernorm_zero_centered_gamma else 0.0
            self.norm_eps = config.layernorm_epsilon
            self.layer_norm_weight = torch.nn.Parameter(torch.full((input_size,), 1.0 - self.norm_offset))
            if config.sequence_parallel:
                self.layer_norm_weight.sequence_parallel = True

        def forward(self, input_, *args, **kwargs):
            normed = rms_norm(input_, self.layer_norm_weight, self.norm_offset, self.norm_eps)
            return super().forward(normed, *args, **kwargs)

    return CpuLayerNormColumnParallelLinear


@functools.cache
def _gated_delta_net():
    """The project's padding-masked GatedDeltaNet (megatron-core's GDN ignores attention_mask), under
    megatron-core's class name: Megatron-Bridge's AutoMapping picks a weight's TP split by that name."""
    masked = masked_gated_delta_net()
    return type("GatedDeltaNet", (masked,), {"__module__": __name__, "__doc__": masked.__doc__})


@functools.cache
def backend():
    """megatron-core's local spec provider, with TE's fused-norm linear and the CPU RMSNorm."""
    from megatron.core.models.backends import LocalSpecProvider

    class CpuTELayout(LocalSpecProvider):
        def fuse_layernorm_and_linear(self) -> bool:
            return True

        def column_parallel_layer_norm_linear(self):
            return layer_norm_column_linear()

        def layer_norm(self, rms_norm: bool = False, for_qk: bool = False, has_residual: bool = False):
            return CpuRMSNorm

    return CpuTELayout()


def _attention(kind: str, config):
    from megatron.core.models.gpt.experimental_attention_variant_module_specs import get_gated_delta_net_module_spec
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    if kind == "linear_attention":
        spec = get_gated_delta_net_module_spec(config, backend=backend())
        spec.module = _gated_delta_net()
        return spec
    attention = get_gpt_layer_local_spec(qk_layernorm=True, normalization="RMSNorm").submodules.self_attention
    attention.submodules.linear_qkv = layer_norm_column_linear()
    attention.submodules.q_layernorm = CpuRMSNorm
    attention.submodules.k_layernorm = CpuRMSNorm
    return attention


def _layer(attention_kind: str, moe: bool, config):
    from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
    from megatron.core.models.gpt.gpt_layer_specs import get_mlp_module_spec_for_backend
    from megatron.core.transformer.identity_op import IdentityOp
    from megatron.core.transformer.spec_utils import ModuleSpec
    from megatron.core.transformer.transformer_layer import TransformerLayer, TransformerLayerSubmodules

    mlp = get_mlp_module_spec_for_backend(backend(), num_experts=config.num_moe_experts if moe else None,
                                          moe_grouped_gemm=False)
    return ModuleSpec(module=TransformerLayer, submodules=TransformerLayerSubmodules(
        input_layernorm=IdentityOp,  # inside linear_qkv / in_proj
        self_attention=_attention(attention_kind, config), self_attn_bda=get_bias_dropout_add,
        # a dense MLP's pre-norm is inside linear_fc1; MoE keeps its own, as in TE's layout
        pre_mlp_layernorm=CpuRMSNorm if moe else IdentityOp, mlp=mlp, mlp_bda=get_bias_dropout_add))


def block_spec(config, vp_stage=None):
    """The decoder block for a Megatron-Bridge provider's config (one pipeline stage: all layers)."""
    from megatron.core.models.gpt.experimental_attention_variant_module_specs import (
        get_linear_attention_pattern,
        get_moe_layer_pattern,
    )
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

    linear = get_linear_attention_pattern(config)
    moe = get_moe_layer_pattern(config) if config.num_moe_experts else [0] * config.num_layers
    kinds = ["linear_attention" if is_linear else "full_attention" for is_linear in linear]
    return TransformerBlockSubmodules(layer_specs=[_layer(kind, bool(m), config) for kind, m in zip(kinds, moe)],
                                      layer_norm=CpuRMSNorm)


def mtp_block_spec(config, vp_stage=None):
    """megatron-core's MTP block for a provider's config in this layout (None without MTP layers): each MTP layer
    the block's last decoder layer (full attention) between this layout's norms (`enorm`, `hnorm`,
    `final_layernorm`) and megatron-core's local column-parallel `eh_proj`, the parameter names TE's gives."""
    if not getattr(config, "mtp_num_layers", None):
        return None
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec_for_backend

    return get_gpt_mtp_block_spec_for_backend(config, block_spec(config), backend=backend(), vp_stage=vp_stage)


def project_name(name: str, te_names) -> tuple[str | None, float]:
    """(the name in this layout of the project layout's tensor `name`, or None; the offset to add to this
    layout's value to get the project's): the project's separate input / pre-MLP norms are the fused
    `layer_norm_weight`s here, and its plain GDN out_norm is zero-centred here (offset 1)."""
    prefix, _, tail = name.rpartition("input_layernorm.weight")
    if _ == "input_layernorm.weight" and not tail:
        candidates = [f"{prefix}self_attention.linear_qkv.layer_norm_weight",
                      f"{prefix}self_attention.in_proj.layer_norm_weight"]
    elif name.endswith("pre_mlp_layernorm.weight"):
        candidates = [name, name.replace("pre_mlp_layernorm.weight", "mlp.linear_fc1.layer_norm_weight")]
    else:
        candidates = [name]
    found = next((c for c in candidates if c in te_names), None)
    return found, (1.0 if name.endswith("self_attention.out_norm.weight") else 0.0)
