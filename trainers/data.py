"""Micro-batching of batches that carry jagged per-sample tensors (mRoPE position ids, token ids).

A batch is a TensorDict with batch size (B,) holding:
- jagged NestedTensors whose per-sample tensors have the sequence as their LAST dimension:
  mRoPE position ids (3 or 4, L_i) as a (B, 3, j) tensor, token ids (L_i,) as a (B, j) tensor;
- regular tensors (B, ...) and non-tensor data (NonTensorData / NonTensorStack).

torch's and tensordict's own operations on such tensors are fragile and version-dependent
(harness check `nested-chunking` records them): chunk/split refuse a ragged dim that is not dim 1,
the constructor picks the component dim as ragged when all lengths are equal, a consolidate() or
pickle round trip can lose the ragged dim or `max_seqlen`, and `to_padded_tensor` then truncates.
So this module never relies on them: it reads each sample out of values/offsets itself, choosing
the ragged dimension the metadata really describes, checks the samples agree across keys, and
rebuilds every chunk explicitly with the ragged dim last and `max_seqlen` set.
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import NonTensorStack, TensorDict

__all__ = ["build_batch", "chunk_tensordict", "nested_from_samples", "nested_samples", "split_sizes",
           "to_padded"]


def split_sizes(batch: int, chunks: int) -> list[int]:
    """Exactly `chunks` sizes summing to `batch`, differing by at most one, larger ones first
    (torch.tensor_split's rule: every data-parallel rank or accumulation step gets a micro-batch)."""
    if chunks < 1 or chunks > batch:
        raise ValueError(f"cannot split a batch of {batch} into {chunks} non-empty chunks")
    base, extra = divmod(batch, chunks)
    return [base + 1 if i < extra else base for i in range(chunks)]


def nested_from_samples(samples: Sequence[torch.Tensor]) -> torch.Tensor:
    """A contiguous jagged NestedTensor from per-sample tensors of shape (*S, L_i): shape (B, *S, j),
    ragged dim last, explicit offsets and min/max_seqlen (never left for torch to guess)."""
    if not samples:
        raise ValueError("no samples")
    head = tuple(samples[0].shape[:-1])
    for i, sample in enumerate(samples):
        if sample.dim() < 1 or tuple(sample.shape[:-1]) != head:
            raise ValueError(f"sample {i} has shape {tuple(sample.shape)}; expected (*{head}, L)")
    lengths = [int(s.shape[-1]) for s in samples]
    values = torch.cat([s.contiguous() for s in samples], dim=-1)
    offsets = torch.tensor([0, *_cumsum(lengths)], dtype=torch.int64, device=values.device)
    # jagged_dim counts the batch dim: the sample's last dim is dim len(head)+1 of the nested tensor.
    try:
        nested = torch.nested.nested_tensor_from_jagged(values, offsets, jagged_dim=len(head) + 1,
                                                        min_seqlen=min(lengths), max_seqlen=max(lengths))
    except TypeError as exc:  # without max_seqlen, to_padded_tensor may truncate: refuse, never guess
        raise RuntimeError(f"torch {torch.__version__} cannot record max_seqlen on a jagged tensor "
                           "(torch >= 2.5 needed)") from exc
    ragged = getattr(nested, "_ragged_idx", len(head) + 1)
    if ragged != len(head) + 1 or not torch.equal(nested.offsets(), offsets):
        raise RuntimeError(f"torch built ragged dim {ragged}, expected {len(head) + 1}")
    return nested


def nested_samples(nested: torch.Tensor, lengths: Sequence[int] | None = None) -> list[torch.Tensor]:
    """The per-sample tensors of a nested tensor, read from values/offsets, not from unbind().

    The ragged dim recorded on the tensor is tried first; when it is inconsistent with the offsets
    (a consolidate/pickle round trip can reset it), the one values dim the offsets do fit is used.
    `lengths`, when given, are the expected sequence lengths (last dim) and must match.
    """
    if not (isinstance(nested, torch.Tensor) and nested.is_nested):
        raise TypeError(f"expected a nested tensor, got {type(nested).__name__}")
    if nested.layout != torch.jagged:
        samples = list(nested.unbind())  # strided layout stores each sample separately
        _verify_samples(samples, lengths)
        return samples
    values = nested.values()
    offsets = [int(v) for v in nested.offsets().tolist()]
    starts = offsets[:-1]
    held = nested.lengths()
    sizes = [int(v) for v in held.tolist()] if held is not None else [b - a for a, b in itertools.pairwise(offsets)]
    end = max((s + n for s, n in zip(starts, sizes)), default=0)
    contiguous = held is None
    claimed = getattr(nested, "_ragged_idx", 1) - 1  # dim of `values` the tensor says is ragged
    candidates = [claimed] + [d for d in range(values.dim()) if d != claimed]
    problems = []
    for dim in candidates:
        if not 0 <= dim < values.dim():
            continue
        size = values.shape[dim]
        if size < end or (contiguous and size != end):
            problems.append(f"values dim {dim} has {size} entries, offsets need {end}")
            continue
        samples = [values.narrow(dim, s, n) for s, n in zip(starts, sizes)]
        try:
            _verify_samples(samples, lengths)
        except ValueError as exc:
            problems.append(f"values dim {dim}: {exc}")
            continue
        return samples
    raise ValueError(f"cannot read samples from nested tensor of shape {tuple(values.shape)} "
                     f"(values) with offsets {offsets}: {'; '.join(problems)}")


def to_padded(data: torch.Tensor | Sequence[torch.Tensor], padding: float = 0,
              lengths: Sequence[int] | None = None) -> torch.Tensor:
    """Dense (B, *S, max L) from a nested tensor or a list of (*S, L_i) samples, padded at the end
    of the last dim. Unlike torch.nested.to_padded_tensor it never truncates."""
    samples = nested_samples(data, lengths) if isinstance(data, torch.Tensor) else list(data)
    if not samples:
        raise ValueError("no samples")
    longest = max(int(s.shape[-1]) for s in samples)
    out = samples[0].new_full((len(samples), *samples[0].shape[:-1], longest), padding)
    for i, sample in enumerate(samples):
        out[i, ..., : sample.shape[-1]] = sample
    return out


def build_batch(jagged: Mapping[str, Sequence[torch.Tensor]], dense: Mapping[str, torch.Tensor] | None = None,
                non_tensor: Mapping[str, Sequence[Any]] | None = None) -> TensorDict:
    """A batch TensorDict: `jagged` per-sample (*S, L_i) tensors become canonical jagged tensors,
    `dense` tensors (B, ...) are kept, `non_tensor` per-sample lists become NonTensorStacks."""
    sizes = {len(v) for v in jagged.values()} | {int(v.shape[0]) for v in (dense or {}).values()}
    sizes |= {len(v) for v in (non_tensor or {}).values()}
    if len(sizes) != 1:
        raise ValueError(f"entries disagree on the batch size: {sorted(sizes)}")
    batch = sizes.pop()
    td = TensorDict({k: nested_from_samples(v) for k, v in jagged.items()}, batch_size=[batch])
    for key, value in (dense or {}).items():
        td.set(key, value)
    for key, value in (non_tensor or {}).items():
        td.set(key, NonTensorStack.from_list(list(value)))
    return td


def chunk_tensordict(td: TensorDict, chunks: int) -> list[TensorDict]:
    """Split a batch into exactly `chunks` micro-batches (sizes from `split_sizes`).

    Jagged entries are rebuilt per chunk from their samples (ragged dim last, max_seqlen set);
    every jagged entry must agree on each sample's sequence length. Regular tensors and non-tensor
    data are sliced by tensordict, which handles them reliably.
    """
    if len(td.batch_size) != 1:
        raise ValueError(f"expected a batch size (B,), got {tuple(td.batch_size)}")
    sizes = split_sizes(int(td.batch_size[0]), chunks)
    nested_keys = [key for key in td.keys(include_nested=True, leaves_only=True)
                   if _is_nested(td.get(key))]
    per_key: dict[Any, list[torch.Tensor]] = {}
    reference_lengths: list[int] | None = None
    reference_key = None
    for key in nested_keys:
        samples = nested_samples(td.get(key))
        if len(samples) != td.batch_size[0]:
            raise ValueError(f"{key!r} holds {len(samples)} samples for a batch of {td.batch_size[0]}")
        lengths = [int(s.shape[-1]) for s in samples]
        if reference_lengths is None:
            reference_lengths, reference_key = lengths, key
        elif lengths != reference_lengths:
            raise ValueError(f"sequence lengths of {key!r} {lengths} disagree with {reference_key!r} "
                             f"{reference_lengths}")
        per_key[key] = samples
    rest = td.exclude(*nested_keys) if nested_keys else td
    out = []
    start = 0
    for size in sizes:
        chunk = rest[start:start + size]
        for key, samples in per_key.items():
            chunk.set(key, nested_from_samples(samples[start:start + size]))
        out.append(chunk)
        start += size
    return out


def _is_nested(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_nested


def _cumsum(values: Sequence[int]) -> list[int]:
    total, out = 0, []
    for v in values:
        total += v
        out.append(total)
    return out


def _verify_samples(samples: Sequence[torch.Tensor], lengths: Sequence[int] | None) -> None:
    """All samples share the non-sequence dims; their sequence lengths match `lengths` if given."""
    heads = {tuple(s.shape[:-1]) for s in samples}
    if len(heads) > 1 or any(s.dim() < 1 for s in samples):
        raise ValueError(f"samples disagree on their non-sequence dims: {sorted(heads)}")
    if lengths is not None and [int(s.shape[-1]) for s in samples] != [int(n) for n in lengths]:
        raise ValueError(f"sample lengths {[int(s.shape[-1]) for s in samples]} are not {list(lengths)}")
