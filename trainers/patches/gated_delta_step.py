"""The one-token decode step of transformers' pure-torch Gated DeltaNet, in fewer ops.

Without flash-linear-attention, every decode step of a Qwen3.5 linear-attention layer calls
`torch_recurrent_gated_delta_rule` for one token with the cached state: a general loop over the
sequence that transposes and copies its five inputs, allocates an output to fill, and indexes
the one step out of them (about 35 small ops per layer and token). For one float32 token with a
state this patch does the same recurrence directly on the token's views (about 20): decay the
state, read it with the key, write the beta-scaled correction, read it with the query. The same
arithmetic in the same order, so the same result up to the rounding of one fused multiply-add
(patch-parity decodes with it against stock in every release). Anything else (a prompt, no
state, half precision, packed sequences) goes to the stock rule unchanged.

Transformers 5.2-5.9 bind the rule to each layer when the layer is built, so the patch is applied
before the model is built (the trainers do); from 5.16 the layer looks it up at call time.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from packaging.specifiers import SpecifierSet

from .base import Patch
from .gated_delta_chunk import TorchGatedDeltaPatch, l2norm


def make_decode_step(stock: Callable[..., Any]) -> Callable[..., Any]:
    def recurrent_gated_delta_rule(query, key, value, g, beta, initial_state=None, output_final_state=False,
                                   use_qk_l2norm_in_kernel=False, **kwargs):
        if (query.shape[1] != 1 or initial_state is None or query.dtype != torch.float32
                or kwargs.get("cu_seqlens") is not None):
            return stock(query, key, value, g=g, beta=beta, initial_state=initial_state,
                         output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                         **kwargs)
        q, k = query[:, 0], key[:, 0]  # (batch, key heads, key dim): the one token
        if use_qk_l2norm_in_kernel:
            q, k = l2norm(q), l2norm(k)
        heads = value.shape[2]
        if k.shape[1] != heads:  # grouped value heads: each key head serves consecutive value heads
            q, k = q.repeat_interleave(heads // k.shape[1], dim=1), k.repeat_interleave(heads // k.shape[1], dim=1)
        q = q * q.shape[-1] ** -0.5
        state = initial_state.float() * g[:, 0].float().exp()[..., None, None]  # (batch, heads, key dim, value dim)
        delta = (value[:, 0] - (state * k[..., None]).sum(dim=-2)) * beta[:, 0][..., None]
        state = torch.addcmul(state, k[..., None], delta[..., None, :])
        out = (state * q[..., None]).sum(dim=-2)[:, None]  # (batch, 1, heads, value dim)
        return out, state if output_final_state else None

    recurrent_gated_delta_rule.__wrapped__ = stock
    recurrent_gated_delta_rule.__doc__ = "Stock torch_recurrent_gated_delta_rule, one float32 token in fewer ops."
    return recurrent_gated_delta_rule


PATCHES: list[Patch] = [
    TorchGatedDeltaPatch(
        name=f"gated-delta-step:{module}",
        target=f"transformers.models.{module}.modeling_{module}:torch_recurrent_gated_delta_rule",
        replacement=None,
        make=make_decode_step,
        versions=SpecifierSet(">=5.2"),
        description="pure-torch Gated DeltaNet: a one-token decode step without the sequence loop's copies",
    )
    for module in ("qwen3_5", "qwen3_5_moe")
]
