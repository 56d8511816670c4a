"""trainers.fully_async.weights: the publisher hands out exact versions, as copies, and only the newest it
keeps; it matches an engine's fingerprint to every version it published."""
import threading

import pytest

torch = pytest.importorskip("torch")

from trainers.fully_async.weights import WeightPublisher  # noqa: E402


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


def test_a_publisher_matches_fingerprints_to_every_version_it_published():
    publisher = WeightPublisher(keep=1, fingerprint_of=lambda state: f"fp{int(state['w'][0])}")
    publisher.set_initial_fingerprint("fp0")
    for version, value in ((1, 1.0), (2, 2.0), (3, 1.0)):
        publisher.publish(version, {"w": torch.full((1,), value)})
    assert publisher.versions_with("fp0") == [0]  # dropped states keep their fingerprints
    assert publisher.versions_with("fp1") == [1, 3] and publisher.versions_with("fp9") == []
