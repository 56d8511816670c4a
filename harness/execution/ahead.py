"""Environments installed ahead of their cells: while cells run their checks, the next cells' environments are built.

Installing a cell's environment is mostly waiting: uv asks the package index about every pin (its cached pages
are revalidated), then links files. Measured on the development machine (2 cores): a plain FSDP row's install
takes about 1 s of wall time and 0.45 s of CPU, the Megatron-Bridge row's about 10 s (6 s of it resolving), and
in a cold CPU matrix run the cells spent 116 s of their time installing, their core mostly idle meanwhile. So one
thread, beside the cells, installs the environments of the cells that start next, in their start order, at most
`ahead` of them built and not yet started; a cell whose install has not begun when it starts installs its own, as
before, and this thread leaves it alone (`take` claims it). What an install leaves running (its environment's
read-ahead, envs/readahead.py) is waited for here (`settle`) before the next install begins, but after the cell has
its install: a cell that was waiting starts at once. The install is the cell's own
(cell.install_environment, with its retries and its install verdict), into the same folder and setup log; only
the bytecode seed waits for the cell's start, so that it links what the cells before it compiled
(envs/bytecode.py).

The thread holds no share of the run's budget (jobs.Budget): an install takes a fraction of a core, mostly while
the index answers.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future

# The phase a cell records for its install made here, before it started: not part of the cell's duration.
AHEAD_PHASE = "environment_ahead"
_CLAIMED = object()  # the cell started before its install here began: it installs its own


class InstallsAhead:
    """Builds `install(cell)` for `cells` (in the order they will start) in a thread of its own, at most `ahead`
    finished and not yet taken; `take` hands a cell its install (a Future), or None to install its own."""

    def __init__(self, cells: list, install: Callable[[object], object], ahead: int = 1,
                 settle: Callable[[object], None] | None = None):
        self._cells = list(cells)
        self._install = install
        self._settle = settle  # what an install left running, waited for here once its cell may start
        self._ahead = max(1, ahead)
        self._state: dict[str, object] = {}  # cell id -> Future (begun here) or _CLAIMED
        self._waiting_to_be_taken = 0
        self._closed = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="installs-ahead", daemon=True)

    def __enter__(self) -> InstallsAhead:
        if self._cells:
            self._thread.start()
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self.close(wait=kind is None)

    def take(self, cell) -> Future | None:
        """`cell`'s install begun ahead, or None: the caller installs it, and this thread never will."""
        with self._changed:
            state = self._state.get(cell.id, _CLAIMED)
            self._state[cell.id] = _CLAIMED  # handed out once: a second start of the cell installs its own
            if state is _CLAIMED:
                return None
            self._waiting_to_be_taken -= 1
            self._changed.notify_all()
            return state

    def close(self, wait: bool = True) -> None:
        """Begin no more installs; with `wait`, until the one under way (if any) has ended."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        if wait and self._thread.is_alive():
            self._thread.join()

    def _next(self):
        """The next cell to install here, counted as waiting to be taken; None once closed or done."""
        with self._changed:
            while not self._closed and self._waiting_to_be_taken >= self._ahead:
                self._changed.wait()
            if self._closed:
                return None, None
            while self._cells:
                cell = self._cells.pop(0)
                if cell.id not in self._state:  # not started yet: this thread installs it
                    future: Future = Future()
                    self._state[cell.id] = future
                    self._waiting_to_be_taken += 1
                    return cell, future
            return None, None

    def _loop(self) -> None:
        while True:
            cell, future = self._next()
            if cell is None:
                return
            future.set_running_or_notify_cancel()
            try:
                installed = self._install(cell)
            except BaseException as exc:  # noqa: BLE001 - the cell that takes it raises it, where it would have
                future.set_exception(exc)
                continue
            future.set_result(installed)
            if self._settle is not None:  # the cell may start now; the next install waits for this
                self._settle(installed)
