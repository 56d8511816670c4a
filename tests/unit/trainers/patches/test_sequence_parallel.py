"""trainers.patches.sequence_parallel's pieces that need no process group: the shards and the packed row's
block-diagonal causal mask. The 2-rank forward runs in tests/e2e/test_packed_sp_ranks.py."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainers.patches.sequence_parallel import block_causal_mask, shard_bounds  # noqa: E402


def test_the_ranks_take_contiguous_equal_shards_in_order():
    assert [shard_bounds(24, 2, rank) for rank in range(2)] == [(0, 12), (12, 24)]


def test_a_row_that_does_not_split_evenly_is_refused_with_its_sizes():
    with pytest.raises(ValueError, match="row of 25 tokens does not split into 2"):
        shard_bounds(25, 2, 0)


def test_the_mask_is_causal_within_each_sequence_and_closed_across_them():
    mask = block_causal_mask(torch.tensor([0, 2, 5], dtype=torch.int32), torch.ones((), dtype=torch.bool))
    expected = torch.tensor([[1, 0, 0, 0, 0],
                             [1, 1, 0, 0, 0],
                             [0, 0, 1, 0, 0],
                             [0, 0, 1, 1, 0],
                             [0, 0, 1, 1, 1]], dtype=torch.bool)
    assert mask.shape == (1, 1, 5, 5) and torch.equal(mask[0, 0], expected)


def test_a_float_mask_is_zero_where_attended_and_the_dtypes_minimum_elsewhere():
    allowed = block_causal_mask(torch.tensor([0, 2, 5]), torch.ones((), dtype=torch.bool))
    mask = block_causal_mask(torch.tensor([0, 2, 5]), torch.zeros((), dtype=torch.float32))
    assert mask.dtype == torch.float32
    assert torch.equal(mask[allowed], torch.zeros(int(allowed.sum())))
    assert bool((mask[~allowed] == torch.finfo(torch.float32).min).all())
