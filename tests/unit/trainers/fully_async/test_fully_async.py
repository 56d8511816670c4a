"""The fully-async parts on their own: the bounded queue, the weight publisher, the staleness
schedule, the overlap arithmetic and the patch agreement."""
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from trainers.fully_async import option_problems  # noqa: E402
from trainers.fully_async.busy import overlap_length, union_length  # noqa: E402
from trainers.fully_async.driver import staleness_distribution  # noqa: E402
from trainers.fully_async.patch_agreement import PatchMismatch, check_agreement  # noqa: E402
from trainers.fully_async.producer import behaviour_version  # noqa: E402
from trainers.fully_async.samples import BoundedSampleQueue, ProducerFailed  # noqa: E402
from trainers.fully_async.weights import WeightPublisher  # noqa: E402


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


def test_publisher_hands_out_exact_versions_as_copies():
    publisher, stop = WeightPublisher(keep=2), threading.Event()
    assert publisher.wait_for(0, stop) is None  # the engine's own initial weights
    weights = {"w": torch.zeros(2)}
    publisher.publish(1, weights)
    weights["w"] += 5  # the trainer keeps updating its tensors in place
    assert torch.equal(publisher.wait_for(1, stop)["w"], torch.zeros(2))
    publisher.publish(2, {"w": torch.ones(2)})
    publisher.publish(3, {"w": torch.full((2,), 3.0)})
    with pytest.raises(ValueError, match="dropped"):
        publisher.wait_for(1, stop)  # only the newest `keep` versions are held
    with pytest.raises(ValueError):
        publisher.publish(3, {"w": torch.ones(2)})
    stop.set()
    assert publisher.wait_for(7, stop) is None  # not published yet and stopping: no hang


def test_staleness_schedule_is_a_fixed_lag():
    assert [behaviour_version(step, 2) for step in range(6)] == [0, 0, 0, 1, 2, 3]
    assert [behaviour_version(step, 0) for step in range(3)] == [0, 1, 2]  # K=0 is the sync schedule
    records = [{"staleness": min(step, 2)} for step in range(6)]
    assert staleness_distribution(records) == {"0": 1, "1": 1, "2": 4}


def test_union_and_overlap_lengths():
    assert union_length([(0, 2), (1, 3), (5, 6)]) == 4
    assert overlap_length([(0, 2), (4, 6)], [(1, 5)]) == 2
    assert overlap_length([(0, 1)], [(1, 2)]) == 0


def test_patch_disagreement_names_the_difference_in_one_line():
    check_agreement(["a:x", "b:y"], {"hf-0": ["b:y", "a:x"]})
    with pytest.raises(PatchMismatch) as caught:
        check_agreement(["a:x", "b:y"], {"hf-0": ["a:x"]})
    message = str(caught.value)
    assert "\n" not in message and "hf-0 lacks b:y" in message
    with pytest.raises(PatchMismatch, match="has c:z the trainer does not"):
        check_agreement(["a:x"], {"hf-0": ["a:x", "c:z"]})


def test_options_are_validated():
    assert option_problems("fully-async", 2, 2.0) == []
    assert len(option_problems("async", -1, 0.0)) == 3


def test_the_trainers_side_is_its_selection_minus_what_does_not_apply_here():
    from trainers.fully_async.patch_agreement import intended_patches
    from trainers.patches import training

    selection = [patch.name for patch in training.selected("cpu")]
    patches = training.TrainingPatches(not_applicable={selection[0]: "target gone"})
    assert intended_patches(patches, "cpu") == sorted(selection[1:])  # applied by it or before it: both count
    assert intended_patches(None, "cpu") == []  # a trainer without a patch set


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


def test_a_publisher_matches_fingerprints_to_every_version_it_published():
    publisher = WeightPublisher(keep=1, fingerprint_of=lambda state: f"fp{int(state['w'][0])}")
    publisher.set_initial_fingerprint("fp0")
    for version, value in ((1, 1.0), (2, 2.0), (3, 1.0)):
        publisher.publish(version, {"w": torch.full((1,), value)})
    assert publisher.versions_with("fp0") == [0]  # dropped states keep their fingerprints
    assert publisher.versions_with("fp1") == [1, 3] and publisher.versions_with("fp9") == []
