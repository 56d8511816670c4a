"""The failure families of check `nested-chunking`, their inputs, and the probes of torch's and
tensordict's own operations on them (what the installed versions do).

Every probe is judged by VALUES against a padded reference built from the per-sample tensors,
never by error text: an outcome is "ok", "raises:<ExceptionClass>", or "wrong:<what>" where
<what> is "ragged-dim" (the tensor's ragged dim is not the sequence dim), "truncated" (samples
or padding shorter than the reference), "over-padded" (right data, padded wider than the longest
sample), "shape", "values", "layout", "unreadable" (metadata a consumer cannot read) or "batch".
"""
from __future__ import annotations

import itertools
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

PAD = -1  # sample values are >= 0, so padding can never pass for data
COMPONENTS = 3  # mRoPE position ids per sample: (3, L_i)
OK = "ok"


@dataclass(frozen=True)
class Family:
    name: str
    summary: str
    refs: str  # upstream reports of this failure family
    key: str  # the entry the upstream probes look at
    lengths: tuple[int, ...]
    producer: str  # "as_nested" (torch's constructor) or "from_jagged_no_max"
    transform: str = ""  # "", "pickle" or "consolidate+pickle"


# Lengths 5,5 put two equal-length samples in the first micro-batch (verl #6073).
MIXED = (5, 5, 3, 7)
FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("mixed-lengths", "(B, j) token ids of mixed lengths: the ordinary ragged-dim-1 case",
           "tensordict #1338", "input_ids", MIXED, "as_nested"),
    Family("ragged-middle", "(B, 3, j) mRoPE ids: ragged dim is not dim 1; chunk/split/slice may refuse it",
           "verl #4737, pytorch #153238", "position_ids", MIXED, "as_nested"),
    Family("equal-lengths", "(B, 3, j) with all lengths equal: the constructor may make the 3 ragged",
           "verl #6073, #7899", "position_ids", (4, 4, 4, 4), "as_nested"),
    Family("pickle-round-trip", "(B, 3, j) after a pickle round trip (of the tensor; of the TensorDict)",
           "verl #6531", "position_ids", MIXED, "as_nested", "pickle"),
    Family("consolidate-round-trip", "(B, 3, j) after TensorDict.consolidate() and a pickle round trip",
           "verl #6531, tensordict #1676", "position_ids", MIXED, "as_nested", "consolidate+pickle"),
    Family("no-max-seqlen", "(B, 3, j) from nested_tensor_from_jagged without max_seqlen",
           "pytorch #153238, verl #7899", "position_ids", MIXED, "from_jagged_no_max"),
)}


def reference_samples(family: Family) -> dict[str, Any]:
    """The ground truth of a family's batch: per-sample tensors, a dense and a non-tensor entry."""
    input_ids = [torch.arange(n) + 100 * i for i, n in enumerate(family.lengths)]
    position_ids = [torch.arange(COMPONENTS * n).reshape(COMPONENTS, n) + 100 * i
                    for i, n in enumerate(family.lengths)]
    batch = len(family.lengths)
    return {"input_ids": input_ids, "position_ids": position_ids,
            "advantages": torch.arange(batch, dtype=torch.float32) / 4, "uid": [f"uid-{i}" for i in range(batch)]}


def produce(samples: Sequence[torch.Tensor], producer: str) -> torch.Tensor:
    """A nested tensor built the way upstream pipelines build one (deliberately not the trainer's way)."""
    if producer == "as_nested":
        return torch.nested.as_nested_tensor(list(samples), layout=torch.jagged)
    if producer == "from_jagged_no_max":
        values = torch.cat(list(samples), dim=-1)
        offsets = torch.tensor([0, *torch.tensor([s.shape[-1] for s in samples]).cumsum(0).tolist()])
        return torch.nested.nested_tensor_from_jagged(values, offsets, jagged_dim=samples[0].dim())
    raise ValueError(f"unknown producer {producer!r}")


def family_tensordict(family: Family, reference: dict[str, Any]):
    """The family's batch as a TensorDict, after the family's round trip (raises if that fails)."""
    from tensordict import NonTensorStack, TensorDict

    td = TensorDict({"input_ids": produce(reference["input_ids"], family.producer),
                     "position_ids": produce(reference["position_ids"], family.producer),
                     "advantages": reference["advantages"].clone()}, batch_size=[len(family.lengths)])
    td.set("uid", NonTensorStack.from_list(list(reference["uid"])))
    if family.transform == "pickle":
        td = pickle.loads(pickle.dumps(td))
    elif family.transform == "consolidate+pickle":
        td = pickle.loads(pickle.dumps(td.consolidate()))
    return td


def family_tensor(family: Family, reference: dict[str, Any]) -> torch.Tensor | None:
    """The family's nested tensor for the raw-torch level; None where the family is tensordict-only."""
    if family.transform == "consolidate+pickle":
        return None
    nested = produce(reference[family.key], family.producer)
    return pickle.loads(pickle.dumps(nested)) if family.transform == "pickle" else nested


# ---- judging results by values -------------------------------------------------------------

def padded(samples: Sequence[torch.Tensor]) -> torch.Tensor:
    longest = max(int(s.shape[-1]) for s in samples)
    out = samples[0].new_full((len(samples), *samples[0].shape[:-1], longest), PAD)
    for i, s in enumerate(samples):
        out[i, ..., : s.shape[-1]] = s
    return out


def judge_dense(got: Any, expected: torch.Tensor) -> str:
    if not isinstance(got, torch.Tensor) or got.is_nested:
        return "wrong:shape"
    if got.shape == expected.shape:
        return OK if torch.equal(got, expected) else "wrong:values"
    if got.dim() != expected.dim():
        return "wrong:shape"
    if all(g <= e for g, e in zip(got.shape, expected.shape)):
        return "wrong:truncated"
    if all(g >= e for g, e in zip(got.shape, expected.shape)):
        # Padded wider than the longest sample (max_seqlen unknown to torch): data right, shape not.
        region = got[tuple(slice(0, e) for e in expected.shape)]
        return "wrong:over-padded" if torch.equal(region, expected) else "wrong:values"
    return "wrong:shape"


def judge_samples(got: Sequence[Any], expected: Sequence[torch.Tensor]) -> str:
    if len(got) != len(expected):
        return "wrong:batch"
    return first_problem(judge_dense(g, e) for g, e in zip(got, expected))


def literal_samples(nested: torch.Tensor) -> list[torch.Tensor]:
    """The samples exactly as the tensor's own metadata describes them (its ragged dim, offsets,
    lengths): what a consumer of values()/offsets() gets. Raises when the metadata is inconsistent."""
    values, offsets, lengths = nested.values(), nested.offsets().tolist(), nested.lengths()
    sizes = lengths.tolist() if lengths is not None else [b - a for a, b in itertools.pairwise(offsets)]
    dim = nested._ragged_idx - 1
    if lengths is None and values.shape[dim] != offsets[-1]:
        raise ValueError("offsets do not span the ragged dim of values")
    return [values.narrow(dim, int(s), int(n)) for s, n in zip(offsets[:-1], sizes)]


def judge_nested(got: Any, expected: Sequence[torch.Tensor], strict: bool = False) -> str:
    """A nested tensor against its reference samples: ragged dim, samples read from its metadata,
    and torch's own to_padded_tensor. `strict` also demands the canonical packed layout
    (contiguous, values == cat(samples), offsets == cumsum(lengths)), as the trainer guarantees."""
    if not (isinstance(got, torch.Tensor) and got.is_nested and got.layout == torch.jagged):
        return "wrong:not-jagged"
    if getattr(got, "_ragged_idx", None) != expected[0].dim():
        return "wrong:ragged-dim"
    try:
        samples = literal_samples(got)
    except Exception:  # noqa: BLE001 - metadata a consumer cannot read is the finding
        return "wrong:unreadable"
    verdict = judge_samples(samples, expected)
    if verdict != OK:
        return verdict
    if strict:
        packed = torch.cat(list(expected), dim=-1)
        offsets = [0, *torch.tensor([s.shape[-1] for s in expected]).cumsum(0).tolist()]
        if got.lengths() is not None or got.offsets().tolist() != offsets or not torch.equal(got.values(), packed):
            return "wrong:layout"
    try:
        dense = torch.nested.to_padded_tensor(got, PAD)
    except Exception as exc:  # noqa: BLE001
        return f"wrong:to_padded-raises:{type(exc).__name__}"
    return judge_dense(dense, padded(expected))


def judge_pieces(pieces: Sequence[Any], expected: Sequence[torch.Tensor], get: Callable[[Any], Any],
                 size: Callable[[Any], int]) -> str:
    """Pieces of a chunk/split, each judged against the matching run of reference samples."""
    results, start = [], 0
    for piece in pieces:
        n = size(piece)
        results.append(judge_nested(get(piece), expected[start:start + n]) if n else "wrong:batch")
        start += n
    return first_problem(results) if start == len(expected) else "wrong:batch"


def first_problem(outcomes) -> str:
    return next((o for o in outcomes if o != OK), OK)


def probe(action: Callable[[], str]) -> str:
    """One probe; an exception anywhere in it is its outcome (class name only, never the text)."""
    try:
        return action()
    except Exception as exc:  # noqa: BLE001 - every upstream failure is an outcome, not a crash
        return f"raises:{type(exc).__name__}"


# ---- the two upstream levels -------------------------------------------------------------

def torch_probes(nested: torch.Tensor, expected: list[torch.Tensor]) -> dict[str, str]:
    """Raw torch nested-tensor operations on the family's tensor."""
    batch, half = len(expected), len(expected) // 2
    return {
        "layout": probe(lambda: judge_nested(nested, expected)),
        "unbind": probe(lambda: judge_samples(list(nested.unbind()), expected)),
        "select": probe(lambda: judge_samples([nested[i] for i in range(batch)], expected)),
        "slice": probe(lambda: judge_nested(nested[0:half], expected[:half])),
        "chunk": probe(lambda: judge_pieces(nested.chunk(2), expected, lambda p: p, lambda p: p.shape[0])),
        "split": probe(lambda: judge_pieces(nested.split(half), expected, lambda p: p, lambda p: p.shape[0])),
        "to_padded": probe(lambda: judge_dense(torch.nested.to_padded_tensor(nested, PAD), padded(expected))),
    }


def tensordict_probes(td, key: str, expected: list[torch.Tensor]) -> dict[str, str]:
    """TensorDict operations on a batch holding the family's tensor under `key`."""
    half = len(expected) // 2
    order = list(range(len(expected)))[::-1]

    def size(part) -> int:
        return int(part.batch_size[0])

    return {
        "get": probe(lambda: judge_nested(td.get(key), expected)),
        "chunk": probe(lambda: judge_pieces(td.chunk(2), expected, lambda p: p.get(key), size)),
        "split": probe(lambda: judge_pieces(td.split(half), expected, lambda p: p.get(key), size)),
        "slice": probe(lambda: judge_nested(td[0:half].get(key), expected[:half])),
        "index": probe(lambda: judge_nested(td[torch.tensor(order)].get(key), [expected[i] for i in order])),
        "consolidate": probe(lambda: judge_nested(td.consolidate().get(key), expected)),
    }


def upstream_outcomes(family: Family) -> dict[str, dict[str, str] | None]:
    """What this torch and this tensordict do with the family's data: {level: {op: outcome}}."""
    reference = reference_samples(family)
    expected = reference[family.key]
    outcomes: dict[str, dict[str, str] | None] = {}
    try:
        nested = family_tensor(family, reference)
    except Exception as exc:  # noqa: BLE001
        outcomes["torch"] = {"produce": f"raises:{type(exc).__name__}"}
    else:
        outcomes["torch"] = None if nested is None else torch_probes(nested, expected)
    try:
        td = family_tensordict(family, reference)
    except ImportError:
        outcomes["tensordict"] = None
    except Exception as exc:  # noqa: BLE001
        outcomes["tensordict"] = {"produce": f"raises:{type(exc).__name__}"}
    else:
        outcomes["tensordict"] = tensordict_probes(td, family.key, expected)
    return outcomes
