"""trainers.fully_async.producer: the staleness schedule (a fixed lag) and the version a sample records."""
import pytest

torch = pytest.importorskip("torch")

from trainers.fully_async.producer import behaviour_version  # noqa: E402
from trainers.fully_async.samples import BoundedSampleQueue  # noqa: E402


def test_staleness_schedule_is_a_fixed_lag():
    assert [behaviour_version(step, 2) for step in range(6)] == [0, 0, 0, 1, 2, 3]
    assert [behaviour_version(step, 0) for step in range(3)] == [0, 1, 2]  # K=0 is the sync schedule


def test_a_sample_records_the_version_its_engine_loaded_not_the_one_scheduled():
    from trainers.fully_async.busy import BusyClock
    from trainers.fully_async.producer import RolloutProducer
    from trainers.fully_async.weights import PublishedState

    class Publisher:  # hands out version 3 whatever is asked: a broken publisher
        def wait_for(self, version, stop):
            return PublishedState(3, {"w": torch.zeros(1)})

    class Engine:
        loaded = None

        def sync_weights(self, state):
            self.loaded = state

    class Trainer:
        rollout = Engine()

        def rollout_step(self, step):
            return "batch", torch.zeros(2), torch.zeros(2)

    samples = BoundedSampleQueue(1)
    producer = RolloutProducer(Trainer(), Publisher(), samples, BusyClock(), staleness=1, steps=3, device_type="cpu")
    assert producer._produce(2)
    sample = samples.get(lambda: True)
    assert (sample.step, sample.scheduled_version, sample.version) == (2, 1, 3)
    assert Trainer.rollout.loaded.version == 3
