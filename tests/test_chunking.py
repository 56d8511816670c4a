"""trainers.data: micro-batch chunking of batches with jagged mRoPE position ids, against a padded
reference built here by plain loops, on every known failure family and a few combinations."""
from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")

from tensordict import NonTensorStack, TensorDict

from trainers.data import (
    build_batch,
    chunk_tensordict,
    nested_from_samples,
    nested_samples,
    split_sizes,
    to_padded,
)

PAD = -7


def make_samples(lengths, components=3):
    ids = [torch.arange(n) + 1000 * i for i, n in enumerate(lengths)]
    pos = [torch.arange(components * n).reshape(components, n) + 1000 * i for i, n in enumerate(lengths)]
    return ids, pos


def padded_reference(samples):
    longest = max(s.shape[-1] for s in samples)
    out = torch.full((len(samples), *samples[0].shape[:-1], longest), PAD, dtype=samples[0].dtype)
    for i, s in enumerate(samples):
        for j in range(s.shape[-1]):
            out[i, ..., j] = s[..., j]
    return out


def upstream_nested(samples, producer):
    """Nested tensors built the ways pipelines build them, including the fragile ones."""
    if producer == "as_nested":
        return torch.nested.as_nested_tensor(samples, layout=torch.jagged)
    values = torch.cat(samples, dim=-1)
    offsets = torch.tensor([0] + torch.tensor([s.shape[-1] for s in samples]).cumsum(0).tolist())
    return torch.nested.nested_tensor_from_jagged(values, offsets, jagged_dim=samples[0].dim())


def upstream_batch(lengths, producer="as_nested", transform="", components=3):
    ids, pos = make_samples(lengths, components)
    td = TensorDict({"input_ids": upstream_nested(ids, producer), "position_ids": upstream_nested(pos, producer),
                     "advantages": torch.arange(len(lengths), dtype=torch.float32)}, batch_size=[len(lengths)])
    td.set("uid", NonTensorStack.from_list([f"u{i}" for i in range(len(lengths))]))
    if "consolidate" in transform:
        td = td.consolidate()
    if "pickle" in transform:
        td = pickle.loads(pickle.dumps(td))
    return td, ids, pos


def assert_chunks_exact(chunks, ids, pos, count):
    assert len(chunks) == count
    start = 0
    for chunk in chunks:
        n = int(chunk.batch_size[0])
        for key, samples in (("input_ids", ids[start:start + n]), ("position_ids", pos[start:start + n])):
            nt = chunk.get(key)
            assert nt.is_nested and nt.layout == torch.jagged
            assert nt._ragged_idx == samples[0].dim(), f"{key}: ragged dim {nt._ragged_idx}"
            assert torch.equal(torch.nested.to_padded_tensor(nt, PAD), padded_reference(samples))
            assert [t.tolist() for t in nt.unbind()] == [s.tolist() for s in samples]
            assert torch.equal(nt.values(), torch.cat(samples, dim=-1))
        assert torch.equal(chunk.get("advantages"), torch.arange(start, start + n, dtype=torch.float32))
        assert chunk.get("uid").tolist() == [f"u{i}" for i in range(start, start + n)]
        start += n
    assert start == len(ids)


FAMILIES = {
    "mixed-lengths": {"lengths": (5, 5, 3, 7)},
    "equal-lengths": {"lengths": (4, 4, 4, 4)},
    "pickle-round-trip": {"lengths": (5, 5, 3, 7), "transform": "pickle"},
    "consolidate-round-trip": {"lengths": (5, 5, 3, 7), "transform": "consolidate+pickle"},
    "consolidate-only": {"lengths": (5, 5, 3, 7), "transform": "consolidate"},
    "no-max-seqlen": {"lengths": (5, 5, 3, 7), "producer": "from_jagged_no_max"},
    "equal-consolidate-round-trip": {"lengths": (6, 6, 6, 6), "transform": "consolidate+pickle"},
    "equal-pickle": {"lengths": (3, 3, 3, 3), "transform": "pickle"},  # length == component count
    "four-components": {"lengths": (2, 9, 4, 4, 1, 8), "components": 4},
    "four-components-equal": {"lengths": (4, 4, 4, 4), "components": 4, "transform": "consolidate+pickle"},
    "single-sample": {"lengths": (6,)},
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_chunk_tensordict_matches_padded_reference(family):
    spec = dict(FAMILIES[family])
    td, ids, pos = upstream_batch(**spec)
    for count in range(1, len(ids) + 1):
        assert_chunks_exact(chunk_tensordict(td, count), ids, pos, count)


def test_split_sizes_gives_exactly_the_requested_chunks():
    assert split_sizes(4, 3) == [2, 1, 1]
    assert split_sizes(8, 4) == [2, 2, 2, 2]
    assert split_sizes(5, 1) == [5]
    for bad in (0, 6):
        with pytest.raises(ValueError):
            split_sizes(5, bad)


def test_nested_from_samples_is_canonical_even_for_equal_lengths():
    _, pos = make_samples((4, 4, 4))
    nt = nested_from_samples(pos)
    assert nt._ragged_idx == 2 and tuple(nt.values().shape) == (3, 12)
    assert torch.equal(torch.nested.to_padded_tensor(nt, PAD), padded_reference(pos))
    with pytest.raises(ValueError):
        nested_from_samples([torch.zeros(3, 2), torch.zeros(4, 2)])


def test_nested_samples_repairs_a_reset_ragged_dim():
    # ragged@1 layout (values (B*C, L), offsets over the component dim) with the ragged dim then
    # overwritten to 2, as a blind fix-up does (verl #7899): values dim 1 cannot hold the offsets.
    _, pos = make_samples((4, 4, 4))
    flipped = torch.nested.nested_tensor_from_jagged(torch.cat(pos, dim=0), torch.tensor([0, 3, 6, 9]))
    flipped._ragged_idx = 2
    assert [s.tolist() for s in nested_samples(flipped)] == [s.tolist() for s in pos]


def test_nested_samples_checks_expected_lengths():
    _, pos = make_samples((2, 5))
    with pytest.raises(ValueError):
        nested_samples(nested_from_samples(pos), lengths=[2, 4])


def test_chunk_tensordict_rejects_keys_that_disagree_on_lengths():
    ids, _ = make_samples((2, 5))
    _, pos = make_samples((3, 5))
    td = build_batch({"input_ids": ids, "position_ids": pos})
    with pytest.raises(ValueError):
        chunk_tensordict(td, 2)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_chunk_tensordict_handles_nested_keys_and_strided_nested_tensors():
    ids, pos = make_samples((3, 1, 4, 2))
    td = build_batch({"input_ids": ids}, dense={"advantages": torch.arange(4.0)}, non_tensor={"uid": list("abcd")})
    td.set(("multimodal", "position_ids"), torch.nested.nested_tensor(pos, layout=torch.strided))
    chunks = chunk_tensordict(td, 2)
    assert torch.equal(torch.nested.to_padded_tensor(chunks[1].get(("multimodal", "position_ids")), PAD),
                       padded_reference(pos[2:]))
    assert chunks[1].get("uid").tolist() == ["c", "d"]


def test_build_batch_and_to_padded_never_truncate():
    ids, pos = make_samples((5, 2, 7))
    td = build_batch({"input_ids": ids, "position_ids": pos}, dense={"advantages": torch.zeros(3)},
                     non_tensor={"uid": ["a", "b", "c"]})
    assert torch.equal(to_padded(td.get("position_ids"), PAD), padded_reference(pos))
    assert torch.equal(to_padded(pos, PAD), padded_reference(pos))
    # torch's to_padded_tensor truncates this tensor or not depending on the version; ours must not.
    assert torch.equal(to_padded(upstream_nested(pos, "from_jagged_no_max"), PAD), padded_reference(pos))
    with pytest.raises(ValueError):
        build_batch({"input_ids": ids}, dense={"advantages": torch.zeros(4)})
