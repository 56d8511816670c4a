"""The rollout producer: a thread that keeps generating batches while the trainer updates.

It drives the trainer's own engine (`trainer.rollout`: a separate copy of the policy, a Hugging
Face model or a vLLM engine in its own processes) and the trainer's `rollout_step`, which touches
only the engine, the task and the prompts, never the trained model or a process group. Before
batch i it waits for weight version behaviour_version(i) and loads it into the engine itself, so
the trainer never waits for a sync; each sample records the version its engine held (read from the
loaded state, `PublishedState.version`) next to the version the schedule asked for. On CPU, torch
ops release the GIL, so generation and the update run in parallel where they are inside ops.
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
        self.loaded_version = 0  # the engine starts with the initial weights

    def run(self) -> None:
        try:
            self._set_threads()
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
            if version != self.loaded_version:
                self.trainer.rollout.sync_weights(state)
                # The version the state says it is, not the one asked for: what the engine now holds.
                self.loaded_version = state.version
            batch, rewards, advantages = self.trainer.rollout_step(step)
        sample = VersionedSample(step, self.loaded_version, batch, rewards, advantages,
                                 time.perf_counter() - started, scheduled_version=version)
        return self.samples.put(sample, self.stop_event)

    def stop(self, timeout: float = 60.0) -> None:
        self.stop_event.set()
        self.go.set()
        if self.is_alive():
            self.join(timeout)
