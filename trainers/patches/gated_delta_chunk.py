"""Fit the chunk of transformers' pure-torch Gated DeltaNet to short sequences.

Without the flash-linear-attention kernels (every CPU run, and accelerators without `fla`),
Qwen3.5's linear-attention layers call `torch_chunk_gated_delta_rule`, which pads every
sequence to a multiple of 64 tokens and solves 64x64 triangular systems per chunk. RL rollouts
of short prompts are often far shorter than that: a 14-token sequence does 64x64 work. The
chunked algorithm gives the same result for any chunk size (the chunks only split the same
recurrence differently), so this patch passes the smallest power of two that holds the
sequence, between `MIN_CHUNK` and the stock 64; longer sequences keep the stock chunk.

A float32 sequence that fits in one stock chunk and starts from no state (every training forward,
and a prompt's prefill) takes the one-chunk form of the same algorithm (`one_chunk_rule`): the
chunk is the sequence itself, so nothing is padded, and the half of the algorithm that reads the
previous chunks' state, a zero state here, is skipped (one of the two triangular solves, three
batched matmuls and the chunk loop, forward and backward): about 0.7 of the stock rule's time on
the tiny model's training shape. Its output and final state are the stock rule's up to rounding
(patch-parity compares them, with every input's gradient).

Where `fla` is installed its kernels choose their own tiling and the patch does not apply.
Transformers 5.2-5.9 bind the function to each layer when the layer is built, so the patch is
applied before the model is built (the trainers do).
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from packaging.specifiers import SpecifierSet

from .base import DelegatingPatch, NotApplicable, Patch

STOCK_CHUNK = 64
MIN_CHUNK = 16  # below this the per-chunk Python loop costs more than the padding saves


def fitted_chunk_size(sequence_length: int, stock: int = STOCK_CHUNK) -> int:
    """The smallest power of two >= sequence_length, kept within [MIN_CHUNK, stock]."""
    size = MIN_CHUNK
    while size < sequence_length and size < stock:
        size *= 2
    return min(size, stock)


def l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + 1e-6)  # transformers' l2norm, eps 1e-6


def one_chunk_rule(query, key, value, g, beta, output_final_state: bool = False,
                   use_qk_l2norm_in_kernel: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The chunked gated delta rule for a sequence that is one chunk and starts from a zero state.

    query, key (batch, length, key heads, key dim); value (batch, length, value heads, value dim); g (log
    decay), beta (batch, length, value heads). Within the chunk the delta rule's corrections u solve the
    unit lower-triangular system (I + strict_lower(beta_i k_i.k_j decay_ij)) u = beta v; the output is the
    causal, decayed q.k attention over u, and the final state the sum of each key, decayed to the end, times u.
    """
    heads, key_dim = value.shape[2], key.shape[-1]
    q, k = query.float(), key.float()
    if k.shape[2] != heads:  # grouped value heads: each key head serves consecutive value heads
        q, k = q.repeat_interleave(heads // k.shape[2], dim=2), k.repeat_interleave(heads // k.shape[2], dim=2)
    q, k, v = (x.transpose(1, 2) for x in (q, k, value.float()))  # (batch, heads, length, dim)
    beta, decay = beta.float().transpose(1, 2)[..., None], g.float().transpose(1, 2).cumsum(-1)
    if use_qk_l2norm_in_kernel:
        q, k = l2norm(q), l2norm(k)
    q = q * key_dim ** -0.5
    length = q.shape[2]
    later = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
    pairwise = (decay[..., :, None] - decay[..., None, :]).masked_fill(later, float("-inf")).exp()
    k_t = k.transpose(-1, -2)
    system = ((k * beta) @ k_t) * pairwise
    corrections = torch.linalg.solve_triangular(system, v * beta, upper=False, unitriangular=True)
    out = (((q @ k_t) * pairwise) @ corrections).transpose(1, 2).to(query.dtype)
    if not output_final_state:
        return out, None
    to_end = (decay[..., -1:] - decay).exp()[..., None]
    return out, (k * to_end).transpose(-1, -2) @ corrections


def _make_fitted(stock: Callable[..., Any]) -> Callable[..., Any]:
    def chunk_gated_delta_rule(query, key, value, *args, chunk_size: int = STOCK_CHUNK, **kwargs):
        # query: (batch, sequence, heads, head_dim) in every release that has Qwen3.5.
        if (not args and "g" in kwargs and "beta" in kwargs and kwargs.get("initial_state") is None
                and kwargs.get("cu_seqlens") is None and query.dtype == torch.float32
                and query.shape[1] <= chunk_size):
            return one_chunk_rule(query, key, value, kwargs["g"], kwargs["beta"],
                                  kwargs.get("output_final_state", False), kwargs.get("use_qk_l2norm_in_kernel", False))
        return stock(query, key, value, *args, chunk_size=fitted_chunk_size(query.shape[1], chunk_size), **kwargs)

    chunk_gated_delta_rule.__wrapped__ = stock
    chunk_gated_delta_rule.__doc__ = "Stock torch_chunk_gated_delta_rule with a chunk fitted to the sequence."
    return chunk_gated_delta_rule


@dataclass
class TorchGatedDeltaPatch(DelegatingPatch):
    """A patch of transformers' pure-torch Gated DeltaNet, which runs only where flash-linear-attention is absent."""

    def check_applicable(self) -> None:
        super().check_applicable()
        if importlib.util.find_spec("fla") is not None:
            raise NotApplicable(f"{self.name}: flash-linear-attention is installed; its kernels are used")


PATCHES: list[Patch] = [
    TorchGatedDeltaPatch(
        name=f"gated-delta-chunk:{module}",
        target=f"transformers.models.{module}.modeling_{module}:torch_chunk_gated_delta_rule",
        replacement=None,
        make=_make_fitted,
        versions=SpecifierSet(">=5.2"),
        description="pure-torch Gated DeltaNet: chunk fitted to short sequences instead of padding to 64",
    )
    for module in ("qwen3_5", "qwen3_5_moe")
]
