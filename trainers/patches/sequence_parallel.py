"""The trainer's sequence-parallel forward of a packed row: each rank holds a contiguous shard of the row.

Embeddings, norms, MLPs and the head run on the rank's shard. Each token mixer (Gated DeltaNet and full
attention) sees the whole row: a pre-hook gathers the shards' hidden states (and, for full attention, the rotary
embeddings and positions) and a post-hook keeps the rank's part of the mixer's output. The row's boundaries reach
the Gated DeltaNet layers through `packed_segments` (the trainer's packed-forward patch reads them there, on every
transformers release), and that is the point: a layer given the gathered row without them runs its recurrent
state across packed sequences (verl #6660, where Ulysses SP did not pass `cu_seqlens` to Qwen3.5's linear
attention). Full attention gets the row's block-diagonal causal mask, built here from the boundaries (the model
builds one from the shard's positions only). Forward only, with the packed-forward patch applied by the caller.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist

from .packed_forward import PACKED_KWARGS, PackedBatch, packed_segments


def shard_bounds(total: int, ranks: int, rank: int) -> tuple[int, int]:
    """This rank's [start, end) of a row of `total` tokens (which the ranks divide evenly)."""
    if total % ranks:
        raise ValueError(f"a packed row of {total} tokens does not split into {ranks} equal shards")
    size = total // ranks
    return rank * size, (rank + 1) * size


def block_causal_mask(cu_seqlens: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(1, 1, N, N) causal mask that keeps packed sequences apart, in `like`'s convention (bool: True attends;
    float: 0 attends, the dtype's minimum does not)."""
    bounds = [int(b) for b in cu_seqlens]
    lengths = torch.tensor(bounds[1:]) - torch.tensor(bounds[:-1])
    segment = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    allowed = (segment[:, None] == segment[None, :]) & torch.ones(bounds[-1], bounds[-1], dtype=torch.bool).tril()
    allowed = allowed.to(like.device)[None, None]
    if like.dtype == torch.bool:
        return allowed
    return torch.zeros(allowed.shape, dtype=like.dtype, device=like.device).masked_fill(~allowed,
                                                                                        torch.finfo(like.dtype).min)


def _gather(tensor: torch.Tensor, group, dim: int = 1) -> torch.Tensor:
    """The ranks' shards of `tensor` concatenated along the sequence dimension `dim`, in rank order."""
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, tensor.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


def _mixers(model) -> list[torch.nn.Module]:
    layers = model.get_decoder().layers
    return [getattr(layer, "linear_attn", None) or layer.self_attn for layer in layers]


@contextlib.contextmanager
def sequence_parallel(model, packed: PackedBatch, group=None, pass_boundaries: bool = True) -> Iterator[dict]:
    """Hooks on `model`'s token mixers for one forward of this rank's shard (`shard_inputs`). With
    `pass_boundaries=False` the Gated DeltaNet layers get the gathered row without its boundaries (the broken
    input of verl #6660: a check must see it fail); full attention keeps its block-diagonal mask."""
    rank, ranks = dist.get_rank(group), dist.get_world_size(group)
    start, end = shard_bounds(packed.input_ids.shape[1], ranks, rank)
    cu_seqlens = packed.cu_seqlens

    def before(module, args, kwargs):
        kwargs = dict(kwargs)
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        if "hidden_states" in kwargs:
            kwargs["hidden_states"] = _gather(hidden, group)
        else:  # releases whose decoder layer passes the mixer its arguments by position
            args = (_gather(hidden, group), *args[1:])
        for key in PACKED_KWARGS:  # the shard's own, if any: the gathered row's reach the mixers as below
            kwargs.pop(key, None)
        if kwargs.get("position_embeddings") is not None:
            kwargs["position_embeddings"] = tuple(_gather(t, group) for t in kwargs["position_embeddings"])
        if kwargs.get("position_ids") is not None:
            kwargs["position_ids"] = _gather(kwargs["position_ids"], group, dim=-1)  # (B, N) or mRoPE's (3, B, N)
        if "position_embeddings" in kwargs:  # full attention: the model's mask (or none, for a shard that does not
            # restart its positions) covers the shard only
            like = kwargs.get("attention_mask")
            if like is None:
                sdpa = getattr(model.config, "_attn_implementation", "sdpa") == "sdpa"
                like = torch.ones((), dtype=torch.bool) if sdpa else hidden.new_zeros(())
            kwargs["attention_mask"] = block_causal_mask(cu_seqlens, like)
        return args, kwargs

    def after(module, args, kwargs, output):
        if isinstance(output, tuple):
            return (output[0][:, start:end], *output[1:])
        return output[:, start:end]

    handles = []
    try:
        for mixer in _mixers(model):
            handles.append(mixer.register_forward_pre_hook(before, with_kwargs=True))
            handles.append(mixer.register_forward_hook(after, with_kwargs=True))
        context = packed_segments(cu_seqlens) if pass_boundaries else contextlib.nullcontext()
        with context:
            yield {"start": start, "end": end}
    finally:
        for handle in handles:
            handle.remove()


def shard_inputs(packed: PackedBatch, shard: dict) -> dict:
    """The model's inputs for this rank's shard: its tokens and their positions in their own sequences."""
    start, end = shard["start"], shard["end"]
    return {"input_ids": packed.input_ids[:, start:end], "position_ids": packed.position_ids[:, start:end],
            "use_cache": False}
