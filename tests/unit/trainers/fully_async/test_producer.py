"""trainers.fully_async.producer: the staleness schedule (a fixed lag) and the version a sample records."""
import pytest

torch = pytest.importorskip("torch")

from trainers.fully_async.producer import behaviour_version  # noqa: E402
from trainers.fully_async.samples import BoundedSampleQueue  # noqa: E402
from trainers.fully_async.weights import WeightPublisher  # noqa: E402


def test_staleness_schedule_is_a_fixed_lag():
    assert [behaviour_version(step, 2) for step in range(6)] == [0, 0, 0, 1, 2, 3]
    assert [behaviour_version(step, 0) for step in range(3)] == [0, 1, 2]  # K=0 is the sync schedule


def _producer_on_a_real_engine(sync_does_nothing: bool):
    """A producer over a real Hugging Face engine and publisher; version 1 published, batch 2 produced at
    staleness 1 (the schedule asks for version 1). The sample, and the engine."""
    from qwen35_helpers import qwen35_or_skip

    qwen35_or_skip()
    from trainers.fully_async.busy import BusyClock
    from trainers.fully_async.producer import RolloutProducer
    from trainers.models import build_model
    from trainers.rollout.hf import HFRollout

    engine = HFRollout(build_model("text", seed=0))
    if sync_does_nothing:
        engine.sync_weights = lambda state: None

    class Trainer:
        rollout = engine

        def rollout_step(self, step):
            batch = engine.generate([[1, 2, 3]], max_new_tokens=2, temperature=1.0, seed=step)
            return batch, torch.zeros(1), torch.zeros(1)

    publisher, samples = WeightPublisher(keep=2, fingerprint_of=engine.fingerprint_of), BoundedSampleQueue(1)
    producer = RolloutProducer(Trainer(), publisher, samples, BusyClock(), staleness=1, steps=3, device_type="cpu")
    publisher.set_initial_fingerprint(engine.held_fingerprint())
    publisher.publish(1, {k: v + 0.01 for k, v in build_model("text", seed=0).state_dict().items()})
    assert producer._produce(2)
    return samples.get(lambda: True), engine


def test_a_sample_records_the_version_its_engine_holds():
    sample, engine = _producer_on_a_real_engine(sync_does_nothing=False)
    assert (sample.step, sample.scheduled_version, sample.version, sample.matched_versions) == (2, 1, 1, [1])
    assert sample.fingerprint == engine.held_fingerprint()


def test_an_engine_whose_sync_does_nothing_is_seen_holding_the_old_version():
    sample, _ = _producer_on_a_real_engine(sync_does_nothing=True)
    assert (sample.scheduled_version, sample.version, sample.matched_versions) == (1, 0, [0])
