"""A bounded queue of rollout samples, each tagged with the weight version that generated it.

Bounded on purpose: an unbounded queue lets the producer run arbitrarily far ahead, so memory
grows and samples go stale without limit. A capacity below 1 (or none) is refused, and the
deepest the queue ever got is kept, so a run can show it stayed within its bound.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class VersionedSample:
    step: int  # the batch index (its prompts and row seeds)
    # The weight version the engine held when it generated the batch, from the fingerprint of its weights;
    # None when that fingerprint matched no published version or several.
    version: int | None
    batch: Any  # RolloutBatch
    rewards: Any  # (rows,) tensor
    advantages: Any  # (rows,) tensor
    rollout_seconds: float
    scheduled_version: int | None = None  # the version the staleness rule asked for
    fingerprint: str | None = None  # the engine's fingerprint of the weights it held
    matched_versions: list[int] = field(default_factory=list)  # the published versions with that fingerprint


class ProducerFailed(RuntimeError):
    """The rollout producer raised; its exception is the cause."""


class BoundedSampleQueue:
    def __init__(self, capacity: int | None):
        if capacity is None or capacity < 1:
            raise ValueError(f"the sample queue must be bounded (capacity >= 1), got {capacity!r}")
        self.capacity = capacity
        self._queue: queue.Queue = queue.Queue(maxsize=capacity)
        self._lock = threading.Lock()
        self.max_depth = 0

    def depth(self) -> int:
        return self._queue.qsize()

    def put(self, item: VersionedSample | BaseException, stop: threading.Event, poll: float = 0.05) -> bool:
        """Block while full; False when `stop` was set before there was room."""
        while not stop.is_set():
            try:
                self._queue.put(item, timeout=poll)
            except queue.Full:
                continue
            with self._lock:
                self.max_depth = max(self.max_depth, self._queue.qsize())
            return True
        return False

    def get(self, alive, poll: float = 0.05) -> VersionedSample:
        """The next sample; raises ProducerFailed when the producer sent its exception or `alive()`
        turned false with the queue empty."""
        while True:
            try:
                item = self._queue.get(timeout=poll)
            except queue.Empty:
                if not alive():
                    raise ProducerFailed("the rollout producer stopped without a sample") from None
                continue
            if isinstance(item, BaseException):
                raise ProducerFailed(f"the rollout producer failed: {type(item).__name__}: {item}") from item
            return item
