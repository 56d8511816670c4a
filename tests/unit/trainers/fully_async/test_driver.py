"""trainers.fully_async.driver: the staleness distribution a run reports."""
import pytest

pytest.importorskip("torch")

from trainers.fully_async.driver import staleness_distribution  # noqa: E402


def test_the_staleness_distribution_counts_each_lag():
    records = [{"staleness": min(step, 2)} for step in range(6)]
    assert staleness_distribution(records) == {"0": 1, "1": 1, "2": 4}
