"""Versioned weights from the trainer to the rollout producers, without stopping the trainer.

The trainer publishes version n (its weights after n updates) as a detached copy; a producer asks
for the exact version its next batch must use and loads it into its own engine, in its own
thread. Only the newest `keep` versions are held: a producer never asks for an older one (see
driver.behaviour_version).
"""
from __future__ import annotations

import threading


class PublishedState(dict):
    """A published copy of the weights that carries its version, so whoever loads it can say
    which version its engine holds from the state itself, not from the schedule that asked for it."""

    def __init__(self, version: int, state: dict):
        super().__init__(state)
        self.version = version


class WeightPublisher:
    INITIAL = None  # version 0 is the engine's own starting copy: nothing to load

    def __init__(self, keep: int):
        if keep < 1:
            raise ValueError("keep at least one weight version")
        self.keep = keep
        self._versions: dict[int, dict | None] = {0: self.INITIAL}
        self._changed = threading.Condition()

    @property
    def latest(self) -> int:
        with self._changed:
            return max(self._versions)

    def publish(self, version: int, state: dict) -> None:
        """Store a copy of `state` as `version` (the trainer goes on updating its own tensors)."""
        copy = PublishedState(version, {name: tensor.detach().clone() for name, tensor in state.items()})
        with self._changed:
            if version <= max(self._versions):
                raise ValueError(f"version {version} published after {max(self._versions)}")
            self._versions[version] = copy
            for old in sorted(self._versions)[:-self.keep]:
                del self._versions[old]
            self._changed.notify_all()

    def wait_for(self, version: int, stop: threading.Event, poll: float = 0.05) -> PublishedState | None:
        """The state of exactly `version` once published (None for the engine's initial copy, and
        when `stop` is set first). Asking for a version already dropped is a bug: ValueError."""
        with self._changed:
            while version not in self._versions:
                if version < max(self._versions):
                    raise ValueError(f"weight version {version} was dropped (held: {sorted(self._versions)})")
                if stop.is_set():
                    return None
                self._changed.wait(poll)
            return self._versions[version]
