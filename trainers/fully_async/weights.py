"""Versioned weights from the trainer to the rollout producers, without stopping the trainer.

The trainer publishes version n (its weights after n updates) as a detached copy; a producer asks
for the exact version its next batch must use and loads it into its own engine, in its own
thread. Only the newest `keep` versions are held: a producer never asks for an older one (see
producer.behaviour_version). The fingerprint of every version ever published is kept (a short string
each), in the terms of the engine that loads them (`fingerprint_of`): a producer matches what its engine
holds against them, so the version a sample records is the one its engine had, whatever was asked for.
"""
from __future__ import annotations

import threading
from collections.abc import Callable


class PublishedState(dict):
    """A published copy of the weights that carries its version."""

    def __init__(self, version: int, state: dict):
        super().__init__(state)
        self.version = version


class WeightPublisher:
    INITIAL = None  # version 0 is the engine's own starting copy: nothing to load

    def __init__(self, keep: int, fingerprint_of: Callable[[dict], str] | None = None):
        """`fingerprint_of(state)`: the fingerprint an engine holding `state` reports (None: none kept)."""
        if keep < 1:
            raise ValueError("keep at least one weight version")
        self.keep, self.fingerprint_of = keep, fingerprint_of
        self._versions: dict[int, dict | None] = {0: self.INITIAL}
        self._fingerprints: dict[int, str] = {}
        self._changed = threading.Condition()

    @property
    def latest(self) -> int:
        with self._changed:
            return max(self._versions)

    def set_initial_fingerprint(self, fingerprint: str) -> None:
        """Version 0's fingerprint: the engine's starting copy, as the engine reads it before any sync."""
        with self._changed:
            self._fingerprints[0] = fingerprint

    def publish(self, version: int, state: dict) -> None:
        """Store a copy of `state` as `version` (the trainer goes on updating its own tensors)."""
        copy = PublishedState(version, {name: tensor.detach().clone() for name, tensor in state.items()})
        fingerprint = self.fingerprint_of(copy) if self.fingerprint_of is not None else None
        with self._changed:
            if version <= max(self._versions):
                raise ValueError(f"version {version} published after {max(self._versions)}")
            self._versions[version] = copy
            if fingerprint is not None:
                self._fingerprints[version] = fingerprint
            for old in sorted(self._versions)[:-self.keep]:
                del self._versions[old]
            self._changed.notify_all()

    def versions_with(self, fingerprint: str) -> list[int]:
        """Every published version (0 included) whose fingerprint is `fingerprint`: one when the engine holds
        a published version, none when it holds something else, several when versions cannot be told apart."""
        with self._changed:
            return sorted(v for v, known in self._fingerprints.items() if known == fingerprint)

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
