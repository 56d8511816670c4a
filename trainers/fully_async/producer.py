"""The rollout producer: a thread that keeps generating batches while the trainer updates.

It drives the trainer's own engine (`trainer.rollout`: a separate copy of the policy, a Hugging
Face model or a vLLM engine in its own processes) and the trainer's `rollout_step`, which touches
only the engine, the task and the prompts, never the trained model or a process group. Before
batch i it waits for weight version behaviour_version(i) and loads it into the engine itself, so
the trainer never waits for a sync. Then it asks the engine for a fingerprint of the weights it holds
(`held_fingerprint`, trainers/rollout/fingerprint.py) and matches it against the published versions'
fingerprints: each sample records the versions that match (one, when all is well) next to the version the
schedule asked for. An engine whose sync did nothing still holds the old version, and the sample says so.
On CPU, torch ops release the GIL, so generation and the update run in parallel where they are inside ops.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future

from .busy import BusyClock
from .patch_agreement import patches_in_effect
from .samples import BoundedSampleQueue, VersionedSample
from .weights import WeightPublisher


def behaviour_version(step: int, staleness: int) -> int:
    """The weight version batch `step` is generated with: exactly `staleness` behind the update
    that consumes it (fewer in the first steps). A fixed lag makes a run's samples independent of
    timing and machine load, so its reward curve can be compared with a reference."""
    return max(0, step - staleness)


class RolloutProducer(threading.Thread):
    def __init__(self, trainer, publisher: WeightPublisher, samples: BoundedSampleQueue, clock: BusyClock,
                 staleness: int, steps: int, device_type: str, name: str = "hf-0"):
        super().__init__(name=f"rollout-{name}", daemon=True)
        self.trainer, self.publisher, self.samples, self.clock = trainer, publisher, samples, clock
        self.staleness, self.steps, self.device_type, self.producer_name = staleness, steps, device_type, name
        self.stop_event, self.go = threading.Event(), threading.Event()
        self.patch_report: Future = Future()
        self.synced_version = 0  # the version last handed to the engine's sync (the engine starts with 0)

    def run(self) -> None:
        try:
            self._set_threads()
            # Before any sync: the engine's starting copy is version 0 (read here, in the engine's own thread).
            self.publisher.set_initial_fingerprint(self.trainer.rollout.held_fingerprint())
            # Reported from the producer's own thread (for a producer process, from that process).
            self.patch_report.set_result(patches_in_effect(self.device_type))
            self.go.wait()
            for step in range(self.steps):
                if self.stop_event.is_set() or not self._produce(step):
                    return
        except BaseException as exc:  # handed to the trainer's thread, which raises it
            if not self.patch_report.done():
                self.patch_report.set_exception(exc)
            self.samples.put(exc, self.stop_event)

    def _set_threads(self) -> None:
        if self.device_type == "cpu":
            import torch

            torch.set_num_threads(1)

    def _produce(self, step: int) -> bool:
        version = behaviour_version(step, self.staleness)
        state = self.publisher.wait_for(version, self.stop_event)
        if self.stop_event.is_set():
            return False
        started = time.perf_counter()
        with self.clock.busy("rollout"):
            if version != self.synced_version:
                self.trainer.rollout.sync_weights(state)
                self.synced_version = version
            held = self.trainer.rollout.held_fingerprint()  # what generates this batch, not what was asked for
            batch, rewards, advantages = self.trainer.rollout_step(step)
        matched = self.publisher.versions_with(held)
        sample = VersionedSample(step, matched[0] if len(matched) == 1 else None, batch, rewards, advantages,
                                 time.perf_counter() - started, scheduled_version=version, fingerprint=held,
                                 matched_versions=matched)
        return self.samples.put(sample, self.stop_event)

    def stop(self, timeout: float = 60.0) -> None:
        self.stop_event.set()
        self.go.set()
        if self.is_alive():
            self.join(timeout)
