"""trainers.fully_async.busy: the overlap arithmetic of busy intervals."""
from trainers.fully_async.busy import overlap_length, union_length


def test_union_and_overlap_lengths():
    assert union_length([(0, 2), (1, 3), (5, 6)]) == 4
    assert overlap_length([(0, 2), (4, 6)], [(1, 5)]) == 2
    assert overlap_length([(0, 1)], [(1, 2)]) == 0
