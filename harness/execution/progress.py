"""Progress of a matrix run: a bar on a terminal, plain lines in CI and in logs."""
from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter


class Progress:
    def __init__(self, total: int, stream=None, interactive: bool | None = None):
        self.total, self.done = total, 0
        self.stream = stream or sys.stderr
        if interactive is None:
            interactive = self.stream.isatty() and not os.environ.get("CI")
        self.interactive = interactive
        self.start = time.monotonic()
        self.lock = threading.Lock()

    def _bar(self) -> str:
        width = 24
        filled = int(width * self.done / max(self.total, 1))
        return f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total}"

    def started(self, cell_id: str, reused: bool = False) -> None:
        with self.lock:
            if self.interactive:
                self.stream.write(f"\r\033[K{self._bar()} {'reusing' if reused else 'running'} {cell_id}")
            elif not reused:
                self.stream.write(f"[{self.done}/{self.total} done] {cell_id}: running\n")
            self.stream.flush()

    def finished(self, cell_id: str, statuses) -> None:
        with self.lock:
            self.done += 1
            counts = Counter(s.value for s in statuses)
            summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no checks"
            elapsed = time.monotonic() - self.start
            line = f"[{self.done}/{self.total}] {cell_id}: {summary} ({elapsed:.0f} s elapsed)"
            self.stream.write(f"\r\033[K{line}\n" if self.interactive else f"{line}\n")
            self.stream.flush()
