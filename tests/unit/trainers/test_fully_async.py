"""trainers.fully_async: its options checked (the parts: tests/unit/trainers/fully_async/)."""
from trainers.fully_async import option_problems


def test_options_are_validated():
    assert option_problems("fully-async", 2, 2.0) == []
    assert len(option_problems("async", -1, 0.0)) == 3
