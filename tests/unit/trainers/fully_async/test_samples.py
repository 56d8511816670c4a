"""trainers.fully_async.samples: the bounded queue between the rollout producer and the trainer: never
unbounded, a fast producer waits at the bound, a failed producer is raised in the trainer."""
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from trainers.fully_async.samples import BoundedSampleQueue, ProducerFailed  # noqa: E402


def test_an_unbounded_queue_is_refused():
    for capacity in (None, 0, -1):
        with pytest.raises(ValueError, match="bounded"):
            BoundedSampleQueue(capacity)


def test_a_fast_producer_blocks_at_the_bound():
    samples, stop = BoundedSampleQueue(2), threading.Event()
    produced = []

    def produce():
        for item in range(6):
            if samples.put(item, stop):
                produced.append(item)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    time.sleep(0.3)
    assert produced == [0, 1] and samples.depth() == 2  # the third put waits for room
    got = [samples.get(thread.is_alive) for _ in range(6)]
    thread.join(5)
    assert got == list(range(6)) and samples.max_depth <= 2
    samples.put(6, stop)
    samples.put(7, stop)
    stop.set()
    assert samples.put(8, stop) is False  # full and stopping: the producer gives up, never grows it


def test_a_failed_producer_is_raised_in_the_trainer():
    samples = BoundedSampleQueue(1)
    samples.put(RuntimeError("engine died"), threading.Event())
    with pytest.raises(ProducerFailed, match="engine died"):
        samples.get(lambda: True)
    with pytest.raises(ProducerFailed, match="without a sample"):
        samples.get(lambda: False)
