"""The project's Qwen3.5 layer specs for megatron-core, built from local modules only (no TE).

One spec per entry of the HF config's `layer_types`:
- full_attention: megatron-core's local GPT layer (SelfAttention with output gate and q/k norm);
- linear_attention: a TransformerLayer whose self-attention is megatron-core's own `GatedDeltaNet`
  (megatron/core/ssm/gated_delta_net.py) with column/row-parallel linears and a gated RMSNorm.
  megatron-core's helper for this layer (`get_gated_delta_net_module_spec`) asks for Transformer
  Engine's fused layernorm-linear; the layer itself does not need it.
The MLP is a dense SwiGLU for Qwen3.5 and megatron-core's `MoELayer` for Qwen3.5-MoE (TopKRouter,
SequentialMLP local experts: no grouped GEMM, SharedExpertMLP with its sigmoid gate).
Norms: Qwen3.5's decoder norms are zero-centred, `x * (1 + w)`, which megatron's torch norm refuses
(`ZeroCenteredRMSNorm`); its gated DeltaNet norm is a plain RMSNorm, `x * w` (`GatedRMSNorm`).
The MTP block (`mtp_block_spec`, where a checkpoint's MTP layers are loaded): megatron-core's own
MultiTokenPredictionLayer around a full-attention layer spec, its norms zero-centred as HF's MTP norms are.
"""
from __future__ import annotations

import functools

import torch


class _RMSNorm(torch.nn.Module):
    """RMS normalisation in float32 as HF computes it; subclasses apply the weight their way."""

    initial_weight = 1.0

    def __init__(self, config=None, hidden_size: int = 0, eps: float = 1e-6, **_unused):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.full((hidden_size,), self.initial_weight))

    def normed(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)


class ZeroCenteredRMSNorm(_RMSNorm):
    """Qwen3.5's decoder norms: a zero-initialised weight applied as (1 + w), in float32."""

    initial_weight = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.normed(x) * (1.0 + self.weight.float())).type_as(x)


class GatedRMSNorm(_RMSNorm):
    """GatedDeltaNet's `out_norm`: weight `w` times the normed input (HF's Qwen3_5RMSNormGated without
    the gate, which megatron-core's `_apply_gated_norm` applies after this norm)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * self.normed(x).type_as(x)


def padding_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, S) True at padding tokens, from Megatron's (B, 1, S, S) mask (True = not allowed):
    a causal mask always lets a real token see itself, so a masked diagonal marks padding."""
    return attention_mask[:, 0].diagonal(dim1=-2, dim2=-1)


@functools.cache
def masked_gated_delta_net():
    """megatron-core's GatedDeltaNet, with padding tokens' inputs zeroed first.

    megatron-core 0.16.1's GDN ignores `attention_mask` (a TODO in its forward); HF zeroes the
    hidden states of padding tokens before the layer (`apply_mask_to_padding_states`). With
    left padding and zero inputs the recurrent and conv states stay exactly zero, so real tokens
    see the same state as an unpadded row. Everything else is megatron-core's own forward.
    """
    from megatron.core.ssm.gated_delta_net import GatedDeltaNet

    class MaskedGatedDeltaNet(GatedDeltaNet):
        def forward(self, hidden_states, attention_mask, *args, **kwargs):
            if attention_mask is not None:
                keep = (~padding_from_mask(attention_mask)).t()  # (S, B); hidden_states is (S, B, H)
                if self.config.sequence_parallel:  # this rank holds one contiguous slice of the sequence
                    rows = hidden_states.shape[0]
                    keep = keep[self.pg_collection.tp.rank() * rows:(self.pg_collection.tp.rank() + 1) * rows]
                hidden_states = hidden_states * keep[..., None].to(hidden_states.dtype)
            return super().forward(hidden_states, attention_mask, *args, **kwargs)

    return MaskedGatedDeltaNet


def _base_layer_spec(num_experts: int | None):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    layer = get_gpt_layer_local_spec(num_experts=num_experts, moe_grouped_gemm=False, qk_layernorm=True,
                                     normalization="RMSNorm")
    layer.submodules.input_layernorm = ZeroCenteredRMSNorm
    layer.submodules.pre_mlp_layernorm = ZeroCenteredRMSNorm
    layer.submodules.self_attention.submodules.q_layernorm = ZeroCenteredRMSNorm
    layer.submodules.self_attention.submodules.k_layernorm = ZeroCenteredRMSNorm
    return layer


def gated_delta_net_spec():
    from megatron.core.models.backends import LocalSpecProvider
    from megatron.core.ssm.gated_delta_net import GatedDeltaNetSubmodules
    from megatron.core.transformer.spec_utils import ModuleSpec

    local = LocalSpecProvider()
    return ModuleSpec(module=masked_gated_delta_net(),
                      submodules=GatedDeltaNetSubmodules(in_proj=local.column_parallel_linear(),
                                                         out_norm=GatedRMSNorm,
                                                         out_proj=local.row_parallel_linear()))


def layer_spec(kind: str, num_experts: int | None = None):
    layer = _base_layer_spec(num_experts)
    if kind == "linear_attention":
        layer.submodules.self_attention = gated_delta_net_spec()
    elif kind != "full_attention":
        raise NotImplementedError(f"layer type {kind!r}: only linear_attention and full_attention are mapped")
    return layer


def block_spec(kinds: list[str], num_experts: int | None = None):
    """The decoder block: one layer spec per `layer_types` entry, then the final norm."""
    from megatron.core.transformer.transformer_block import TransformerBlockSubmodules

    return TransformerBlockSubmodules(layer_specs=[layer_spec(kind, num_experts) for kind in kinds],
                                      layer_norm=ZeroCenteredRMSNorm)


def mtp_block_spec(config, num_experts: int | None = None):
    """megatron-core's MTP block for `config.mtp_num_layers` layers, each a full-attention decoder layer (the
    MLP dense or MoE as the decoder's) between zero-centred norms and a local column-parallel `eh_proj`."""
    from megatron.core.models.backends import LocalSpecProvider
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_mtp_block_spec_for_backend

    class ZeroCenteredNorms(LocalSpecProvider):
        def layer_norm(self, rms_norm: bool = False, for_qk: bool = False, **_unused) -> type:
            return ZeroCenteredRMSNorm

    return get_gpt_mtp_block_spec_for_backend(config, layer_spec("full_attention", num_experts),
                                              backend=ZeroCenteredNorms())
