"""Fit the chunk of transformers' pure-torch Gated DeltaNet to short sequences.

Without the flash-linear-attention kernels (every CPU run, and accelerators without `fla`),
Qwen3.5's linear-attention layers call `torch_chunk_gated_delta_rule`, which pads every
sequence to a multiple of 64 tokens and solves 64x64 triangular systems per chunk. RL rollouts
of short prompts are often far shorter than that: a 14-token sequence does 64x64 work. The
chunked algorithm gives the same result for any chunk size (the chunks only split the same
recurrence differently), so this patch passes the smallest power of two that holds the
sequence, between `MIN_CHUNK` and the stock 64; longer sequences keep the stock chunk.

Where `fla` is installed its kernels choose their own tiling and the patch does not apply.
Transformers 5.2-5.9 bind the function to each layer when the layer is built, so the patch is
applied before the model is built (the trainers do).
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


def _make_fitted(stock: Callable[..., Any]) -> Callable[..., Any]:
    def chunk_gated_delta_rule(query, key, value, *args, chunk_size: int = STOCK_CHUNK, **kwargs):
        # query: (batch, sequence, heads, head_dim) in every release that has Qwen3.5.
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
