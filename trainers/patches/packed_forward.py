"""Packed (remove-padding) forward that keeps sequences apart in Qwen3.5's Gated DeltaNet layers.

A packed batch is one row holding several sequences back to back, with position ids that
restart at 0 for each and `cu_seqlens` marking the boundaries. Gated DeltaNet is recurrent:
its causal conv1d and its delta-rule state run straight across the row unless told where a
sequence ends. Stock transformers without flash-linear-attention / causal-conv1d (measured on
CPU with this module's check):
  - 5.2.0, 5.3.0, 5.8.1, 5.9.0: `cu_seq_lens_*` / `seq_idx` are ignored and state leaks silently;
  - 5.23.0: the torch fallback refuses those kwargs (ValueError);
  - all of them: restarting position ids alone leak silently.
The patch runs the stock layer once per segment (split at cu_seqlens, concatenate), so no
state crosses a boundary, on every version and with or without the kernels.

Full attention needs no patch: stock `create_causal_mask` builds a block-diagonal causal mask
from position ids that restart, provided there is no 2-D attention mask and no cache.
`forward_packed` guarantees both.

Boundaries reach the layer as the `cu_seq_lens_q` kwarg where the decoder layer forwards its
kwargs to the linear-attention layer (5.9.0 and later), and otherwise through
`packed_segments(cu_seqlens)`, a context variable (up to 5.8 the decoder layer passes that layer
nothing else). `forward_packed` sets both. Keep the context open over backward too when gradient
checkpointing recomputes the layers. The layer's signature differs between releases (5.3 has
`cache_position`, 5.23 takes `**kwargs`), so arguments are bound by name against the stock one.
"""
from __future__ import annotations

import contextlib
import contextvars
import inspect
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from packaging.specifiers import SpecifierSet

from .base import DelegatingPatch, Patch

# Keyword arguments that describe packing; the stock layer must not see them (5.23 raises on them).
PACKED_KWARGS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx", "cu_seqlens")

_SEGMENTS: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar("packed_cu_seqlens", default=None)


@dataclass
class PackedBatch:
    """Sequences concatenated into one row: input_ids and position_ids (1, N), cu_seqlens (S+1,) int32."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int

    @property
    def lengths(self) -> list[int]:
        return (self.cu_seqlens[1:] - self.cu_seqlens[:-1]).tolist()

    def model_kwargs(self) -> dict[str, Any]:
        """The flash-attention style kwargs transformers uses for packed rows."""
        return {"position_ids": self.position_ids, "cu_seq_lens_q": self.cu_seqlens, "cu_seq_lens_k": self.cu_seqlens,
                "max_length_q": self.max_seqlen, "max_length_k": self.max_seqlen}

    def split(self, values: torch.Tensor, dim: int = 1) -> list[torch.Tensor]:
        return unpack(values, self.cu_seqlens, dim)


def pack_sequences(sequences: Sequence[torch.Tensor]) -> PackedBatch:
    """Concatenate 1-D token tensors into one packed row with restarting position ids."""
    if not sequences:
        raise ValueError("nothing to pack")
    lengths = [int(s.numel()) for s in sequences]
    if min(lengths) < 1:
        raise ValueError(f"empty sequence in {lengths}")
    device = sequences[0].device
    input_ids = torch.cat([s.reshape(-1) for s in sequences])[None]
    position_ids = torch.cat([torch.arange(n, device=device) for n in lengths])[None]
    cu_seqlens = torch.zeros(len(lengths) + 1, dtype=torch.int32, device=device)
    cu_seqlens[1:] = torch.tensor(lengths, device=device).cumsum(0)
    return PackedBatch(input_ids, position_ids, cu_seqlens, max(lengths))


def unpack(values: torch.Tensor, cu_seqlens: torch.Tensor, dim: int = 1) -> list[torch.Tensor]:
    """Split a packed tensor along `dim` at the boundaries (the inverse of the concatenation)."""
    bounds = [int(b) for b in cu_seqlens]
    return [values.narrow(dim, a, b - a) for a, b in itertools.pairwise(bounds)]


def cu_seqlens_from_seq_idx(seq_idx: torch.Tensor) -> torch.Tensor:
    """(1, N) segment index per token (as causal-conv1d takes it) -> (S+1,) boundaries."""
    flat = seq_idx.reshape(-1)
    starts = torch.nonzero(flat[1:] != flat[:-1]).reshape(-1) + 1
    edges = [0, *starts.tolist(), flat.numel()]
    return torch.tensor(edges, dtype=torch.int32, device=seq_idx.device)


@contextlib.contextmanager
def packed_segments(cu_seqlens: torch.Tensor) -> Iterator[None]:
    """Tell patched Gated DeltaNet layers where the packed sequences end (needed up to 5.8)."""
    token = _SEGMENTS.set(cu_seqlens)
    try:
        yield
    finally:
        _SEGMENTS.reset(token)


def forward_packed(model, packed: PackedBatch, **kwargs):
    """Run `model` on a packed row: no 2-D mask and no cache, so full attention stays block-diagonal."""
    if kwargs.get("attention_mask") is not None or kwargs.get("use_cache"):
        raise ValueError("a packed forward takes no attention_mask and no cache: both turn off packed masking")
    kwargs.pop("attention_mask", None)
    kwargs["use_cache"] = False
    with packed_segments(packed.cu_seqlens):
        return model(input_ids=packed.input_ids, **packed.model_kwargs(), **kwargs)


def _boundaries(arguments: dict[str, Any]) -> torch.Tensor | None:
    for key in ("cu_seq_lens_q", "cu_seqlens"):
        if arguments.get(key) is not None:
            return arguments[key]
    if arguments.get("seq_idx") is not None:
        return cu_seqlens_from_seq_idx(arguments["seq_idx"])
    return _SEGMENTS.get()


def _make_segmented_forward(stock: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(stock)
    var_kw = next((p.name for p in signature.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD), None)
    named = [p.name for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]

    def forward(self, hidden_states, *args, **kwargs):
        arguments = dict(signature.bind(self, hidden_states, *args, **kwargs).arguments)
        arguments.update(arguments.pop(var_kw, None) or {})
        cu_seqlens = _boundaries(arguments)
        if cu_seqlens is None:
            return stock(self, hidden_states, *args, **kwargs)
        batch, seq_len = hidden_states.shape[:2]
        bounds = [int(b) for b in cu_seqlens]
        if batch != 1 or bounds[0] != 0 or bounds[-1] != seq_len:
            raise ValueError(f"packed forward expects one row of {bounds[-1]} tokens starting at 0, "
                             f"got hidden states {tuple(hidden_states.shape)} and cu_seqlens {bounds}")
        mask = arguments.get("attention_mask")
        outputs = []
        for start, end in itertools.pairwise(bounds):
            segment = {k: v for k, v in arguments.items() if k not in PACKED_KWARGS and k != "self"}
            segment["hidden_states"] = hidden_states[:, start:end]
            # Recurrent state must start from zero per sequence: no cache in or out.
            segment["cache_params"] = None
            if "cache_position" in segment:
                segment["cache_position"] = None
            if isinstance(mask, torch.Tensor) and mask.dim() == 2:
                segment["attention_mask"] = mask[:, start:end]
            if var_kw is None:
                segment = {k: v for k, v in segment.items() if k in named}
            outputs.append(stock(self, **segment))
        return torch.cat(outputs, dim=1)

    forward._packed_segments = True
    forward.__wrapped__ = stock
    forward.__doc__ = "Stock Gated DeltaNet forward, run once per packed sequence when boundaries are given."
    return forward


_LAYERS = {"qwen3_5": "Qwen3_5GatedDeltaNet", "qwen3_5_moe": "Qwen3_5MoeGatedDeltaNet"}

PATCHES: list[Patch] = [
    DelegatingPatch(
        name=f"packed-forward:{cls}",
        target=f"transformers.models.{module}.modeling_{module}:{cls}.forward",
        replacement=None,
        make=_make_segmented_forward,
        versions=SpecifierSet(">=5.2"),
        description="Gated DeltaNet runs per packed sequence (split at cu_seqlens) so no state crosses a boundary",
    )
    for module, cls in _LAYERS.items()
]
