"""When rollout and update were busy, and the overlap: the fraction of wall time both were.

On 2 shared CPU cores the overlap is bounded by the GIL-holding Python parts of generation and
of the update (ops release the GIL, the code around them does not), so it is measured, not assumed.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager

Interval = tuple[float, float]


def union_length(intervals: list[Interval]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def overlap_length(a: list[Interval], b: list[Interval]) -> float:
    """Length of (union of a) intersected with (union of b)."""
    return union_length(a) + union_length(b) - union_length(a + b)


class BusyClock:
    def __init__(self):
        self.started = time.perf_counter()
        self._intervals: dict[str, list[Interval]] = {"rollout": [], "update": []}
        self._lock = threading.Lock()

    @contextmanager
    def busy(self, what: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self._intervals[what].append((start, time.perf_counter()))

    def summary(self) -> dict[str, float]:
        """Fractions of the wall time since start: rollout busy, update busy, both (the overlap)."""
        wall = max(time.perf_counter() - self.started, 1e-9)
        with self._lock:
            rollout, update = list(self._intervals["rollout"]), list(self._intervals["update"])
        return {"wall_seconds": wall, "rollout_busy_fraction": union_length(rollout) / wall,
                "update_busy_fraction": union_length(update) / wall,
                "overlap_fraction": overlap_length(rollout, update) / wall}
