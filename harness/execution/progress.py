"""Progress of a matrix run: a bar on a terminal, plain lines in CI and in logs.

Cells may run in several threads at once: every event is written as one whole string under one lock,
so lines never interleave; a plain line says one thing about one cell. On a terminal the bar (redrawn
in place) names every cell running now, and each finished cell gets a line of its own above it.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter

BAR_WIDTH = 24


class Progress:
    def __init__(self, total: int, stream=None, interactive: bool | None = None):
        self.total, self.done = total, 0
        self.stream = stream or sys.stderr
        if interactive is None:
            interactive = self.stream.isatty() and not os.environ.get("CI")
        self.interactive = interactive
        self.start = time.monotonic()
        self.lock = threading.Lock()
        self.running: dict[str, float] = {}  # cell id -> when it started

    def _bar(self, verb: str = "running") -> str:
        filled = int(BAR_WIDTH * self.done / max(self.total, 1))
        cells = ", ".join(self.running) or "-"
        return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {self.done}/{self.total} {verb} {cells}"

    def _write(self, text: str) -> None:
        self.stream.write(text)  # one write per event: a thread never sees half of another's line
        self.stream.flush()

    def started(self, cell_id: str, reused: bool = False) -> None:
        with self.lock:
            self.running[cell_id] = time.monotonic()
            if self.interactive:
                self._write(f"\r\033[K{self._bar('reusing' if reused else 'running')}")
            elif not reused:
                self._write(f"[{self.done}/{self.total} done] {cell_id}: running\n")

    def finished(self, cell_id: str, statuses) -> None:
        with self.lock:
            self.done += 1
            began = self.running.pop(cell_id, None)
            counts = Counter(s.value for s in statuses)
            summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no checks"
            now = time.monotonic()
            took = f"cell {now - began:.0f} s, " if began is not None else ""
            line = f"[{self.done}/{self.total}] {cell_id}: {summary} ({took}{now - self.start:.0f} s elapsed)"
            if self.interactive:
                self._write(f"\r\033[K{line}\n" + (self._bar() if self.running else ""))
            else:
                self._write(f"{line}\n")
