"""Micro-batching of batches that carry jagged per-sample tensors (mRoPE position ids, token ids).

A batch is a TensorDict with batch size (B,) holding:
- jagged NestedTensors with one ragged (sequence) dimension per sample: token ids (L_i,) as a
  (B, j) tensor, mRoPE position ids (3 or 4, L_i) as a (B, 3, j) tensor, or (L_i, 3 or 4) as a
  (B, j, 3) tensor;
- regular tensors (B, ...) and non-tensor data (NonTensorData / NonTensorStack).

torch's and tensordict's own operations on such tensors are fragile and version-dependent
(harness check `nested-chunking` records them): chunk/split refuse a ragged dim that is not dim 1,
the constructor picks the component dim as ragged when all lengths are equal, a consolidate() or
pickle round trip can reset the ragged dim (tensordict 0.10) or drop `max_seqlen`, and
`to_padded_tensor` then truncates or over-pads. So this module never relies on them: it reads each
sample out of values/offsets itself, along the values dim the offsets really fit, decides each
key's sequence dim from the data (see `sequence_dims`), checks the samples agree across keys, and
rebuilds every chunk explicitly with that ragged dim and `max_seqlen` set.
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import NonTensorStack, TensorDict

__all__ = ["build_batch", "chunk_tensordict", "nested_from_samples", "nested_samples", "sequence_dims",
           "split_sizes", "to_padded"]


def split_sizes(batch: int, chunks: int) -> list[int]:
    """Exactly `chunks` sizes summing to `batch`, differing by at most one, larger ones first
    (torch.tensor_split's rule: every data-parallel rank or accumulation step gets a micro-batch)."""
    if chunks < 1 or chunks > batch:
        raise ValueError(f"cannot split a batch of {batch} into {chunks} non-empty chunks")
    base, extra = divmod(batch, chunks)
    return [base + 1 if i < extra else base for i in range(chunks)]


def nested_from_samples(samples: Sequence[torch.Tensor], seq_dim: int | None = None) -> torch.Tensor:
    """A contiguous jagged NestedTensor from per-sample tensors that differ only along `seq_dim`:
    ragged dim seq_dim + 1, explicit offsets and min/max_seqlen (never left for torch to guess).
    `seq_dim` defaults to the one dim the samples differ in, else their last dim."""
    if not samples:
        raise ValueError("no samples")
    dim = sequence_dims({"samples": list(samples)})["samples"] if seq_dim is None else seq_dim % samples[0].dim()
    _check_same_except(samples, dim)
    lengths = [int(s.shape[dim]) for s in samples]
    values = torch.cat([s.contiguous() for s in samples], dim=dim)
    offsets = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int64, device=values.device)
    try:
        nested = torch.nested.nested_tensor_from_jagged(values, offsets, jagged_dim=dim + 1,
                                                        min_seqlen=min(lengths), max_seqlen=max(lengths))
    except TypeError as exc:  # without max_seqlen, to_padded_tensor may truncate: refuse, never guess
        raise RuntimeError(f"torch {torch.__version__} cannot record max_seqlen on a jagged tensor "
                           "(torch >= 2.5 needed)") from exc
    ragged = getattr(nested, "_ragged_idx", dim + 1)
    if ragged != dim + 1 or not torch.equal(nested.offsets(), offsets):
        raise RuntimeError(f"torch built ragged dim {ragged}, expected {dim + 1}")
    return nested


def nested_samples(nested: torch.Tensor, lengths: Sequence[int] | None = None) -> list[torch.Tensor]:
    """The per-sample tensors of a nested tensor, read from values/offsets, not from unbind().

    The ragged dim recorded on the tensor is tried first; when the offsets do not fit it (a
    round trip reset it), the values dim they do fit is used. `lengths`, when given, are the
    expected sequence lengths: some dim of the samples must hold them.
    """
    if not (isinstance(nested, torch.Tensor) and nested.is_nested):
        raise TypeError(f"expected a nested tensor, got {type(nested).__name__}")
    if nested.layout != torch.jagged:  # strided layout stores each sample separately
        samples = list(nested.unbind())
        sequence_dims({"samples": samples}, lengths)
        return samples
    values = nested.values()
    offsets = [int(v) for v in nested.offsets().tolist()]
    held = nested.lengths()
    sizes = [int(v) for v in held.tolist()] if held is not None else [b - a for a, b in itertools.pairwise(offsets)]
    end = max((s + n for s, n in zip(offsets, sizes)), default=0)
    claimed = getattr(nested, "_ragged_idx", 1) - 1  # dim of `values` the tensor says is ragged
    problems = []
    for dim in [claimed] + [d for d in range(values.dim()) if d != claimed]:
        if not 0 <= dim < values.dim():
            continue
        if values.shape[dim] < end or (held is None and values.shape[dim] != end):
            problems.append(f"values dim {dim} has {values.shape[dim]} entries, offsets need {end}")
            continue
        samples = [values.narrow(dim, s, n) for s, n in zip(offsets, sizes)]
        try:
            sequence_dims({"samples": samples}, lengths)
        except ValueError as exc:
            problems.append(f"values dim {dim}: {exc}")
            continue
        return samples
    raise ValueError(f"cannot read samples from nested tensor of shape {tuple(values.shape)} "
                     f"(values) with offsets {offsets}: {'; '.join(problems)}")


def sequence_dims(entries: Mapping[Any, Sequence[torch.Tensor]],
                  lengths: Sequence[int] | None = None) -> dict[Any, int]:
    """Each entry's sequence dim (a dim of its samples), decided from the data, in this order:
    1. the one dim the samples differ in (for a jagged tensor: the values dim its offsets fit),
       or the only dim of 1-D samples;
    2. when all samples have one shape: the dim whose sizes equal `lengths` or the lengths of the
       keys settled by rule 1 (token ids tell (3, 4) position id samples are (3, L) and not (L, 4));
    3. still undecided (every L equals the component count, or nothing to compare with): the last
       dim, this module's canonical layout. Values and padding are the same either way then.
    Raises ValueError when samples differ in two dims or the keys disagree on the lengths."""
    dims: dict[Any, int] = {}
    for key, samples in entries.items():
        if not samples:
            raise ValueError(f"{key!r} has no samples")
        varying = [d for d in range(samples[0].dim()) if len({s.shape[d] for s in samples}) > 1]
        if len(varying) > 1 or any(s.dim() != samples[0].dim() or s.dim() < 1 for s in samples):
            raise ValueError(f"samples of {key!r} differ in more than one dim: {[tuple(s.shape) for s in samples]}")
        if varying or samples[0].dim() == 1:
            dims[key] = varying[0] if varying else 0
    reference = _agreed_lengths(entries, dims, lengths)
    for key, samples in entries.items():
        if key in dims:
            continue
        candidates = [d for d in range(samples[0].dim())
                      if reference is None or [int(s.shape[d]) for s in samples] == reference]
        if not candidates:
            raise ValueError(f"no dim of {key!r} {tuple(samples[0].shape)} holds the sequence lengths {reference}")
        dims[key] = candidates[-1]
        reference = reference or [int(s.shape[dims[key]]) for s in samples]
    _agreed_lengths(entries, dims, lengths)
    return dims


def to_padded(data: torch.Tensor | Sequence[torch.Tensor], padding: float = 0,
              lengths: Sequence[int] | None = None) -> torch.Tensor:
    """Dense (B, *S) from a nested tensor or a list of samples, padded at the end of the sequence
    dim. Unlike torch.nested.to_padded_tensor it never truncates or over-pads."""
    samples = nested_samples(data, lengths) if isinstance(data, torch.Tensor) else list(data)
    if not samples:
        raise ValueError("no samples")
    dim = sequence_dims({"data": samples}, lengths)["data"]
    shape = list(samples[0].shape)
    shape[dim] = max(int(s.shape[dim]) for s in samples)
    out = samples[0].new_full((len(samples), *shape), padding)
    for i, sample in enumerate(samples):
        out[i].narrow(dim, 0, sample.shape[dim]).copy_(sample)
    return out


def build_batch(jagged: Mapping[str, Sequence[torch.Tensor]], dense: Mapping[str, torch.Tensor] | None = None,
                non_tensor: Mapping[str, Sequence[Any]] | None = None) -> TensorDict:
    """A batch TensorDict: `jagged` per-sample tensors become canonical jagged tensors (sequence
    dims from `sequence_dims`), `dense` tensors (B, ...) are kept, `non_tensor` lists become
    NonTensorStacks."""
    sizes = {len(v) for v in jagged.values()} | {int(v.shape[0]) for v in (dense or {}).values()}
    sizes |= {len(v) for v in (non_tensor or {}).values()}
    if len(sizes) != 1:
        raise ValueError(f"entries disagree on the batch size: {sorted(sizes)}")
    batch = sizes.pop()
    dims = sequence_dims({k: list(v) for k, v in jagged.items()}) if jagged else {}
    td = TensorDict({k: nested_from_samples(v, dims[k]) for k, v in jagged.items()}, batch_size=[batch])
    for key, value in (dense or {}).items():
        td.set(key, value)
    for key, value in (non_tensor or {}).items():
        td.set(key, NonTensorStack.from_list(list(value)))
    return td


def chunk_tensordict(td: TensorDict, chunks: int) -> list[TensorDict]:
    """Split a batch into exactly `chunks` micro-batches (sizes from `split_sizes`).

    Jagged entries are rebuilt per chunk from their samples with the sequence dim decided once for
    the whole batch (so every chunk has the same layout) and max_seqlen set; every jagged entry
    must agree on each sample's sequence length. Regular tensors and non-tensor data are sliced by
    tensordict, which handles them reliably.
    """
    if len(td.batch_size) != 1:
        raise ValueError(f"expected a batch size (B,), got {tuple(td.batch_size)}")
    batch = int(td.batch_size[0])
    sizes = split_sizes(batch, chunks)
    nested_keys = [key for key in td.keys(include_nested=True, leaves_only=True) if _is_nested(td.get(key))]
    per_key: dict[Any, list[torch.Tensor]] = {}
    for key in nested_keys:
        per_key[key] = nested_samples(td.get(key))
        if len(per_key[key]) != batch:
            raise ValueError(f"{key!r} holds {len(per_key[key])} samples for a batch of {batch}")
    dims = sequence_dims(per_key) if per_key else {}
    rest = td.exclude(*nested_keys) if nested_keys else td
    out = []
    for start, size in zip(itertools.accumulate([0, *sizes]), sizes):
        chunk = rest[start:start + size]
        for key, samples in per_key.items():
            chunk.set(key, nested_from_samples(samples[start:start + size], dims[key]))
        out.append(chunk)
    return out


def _agreed_lengths(entries: Mapping[Any, Sequence[torch.Tensor]], dims: Mapping[Any, int],
                    lengths: Sequence[int] | None) -> list[int] | None:
    """The per-sample sequence lengths `lengths` and all decided keys share (None if nothing is known)."""
    reference = None if lengths is None else [int(n) for n in lengths]
    reference_key = "the expected lengths"
    for key, dim in dims.items():
        got = [int(s.shape[dim]) for s in entries[key]]
        if reference is None:
            reference, reference_key = got, key
        elif got != reference:
            raise ValueError(f"sequence lengths of {key!r} {got} disagree with {reference_key!r} {reference}")
    return reference


def _check_same_except(samples: Sequence[torch.Tensor], dim: int) -> None:
    shapes = {tuple(s.shape[:dim]) + tuple(s.shape[dim + 1:]) for s in samples}
    if len(shapes) > 1 or len({s.dim() for s in samples}) > 1:
        raise ValueError(f"samples differ outside their sequence dim {dim}: {[tuple(s.shape) for s in samples]}")


def _is_nested(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_nested
