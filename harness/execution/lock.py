"""One run at a time per results directory.

Two runs writing one directory would each rewrite a cell's file from what they read before the other
wrote (one run's results lost) and write the same logs. A run holds an exclusive lock on
`DIR/.run.lock` for its whole length; a second run on the same directory stops at once (exit 7),
naming the holder. The lock is the kernel's (flock): a killed run releases it with its last breath,
so there is never a stale lock to remove by hand; the temporary files of a write it was killed in are
removed by the next run to take the lock (records.sweep_stale_temporaries). Runs one after the other
merge per check: each keeps the other's results (see records.kept_results).
"""
from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.errors import ResultsBusy
from harness.results.records import sweep_stale_temporaries

LOCK_NAME = ".run.lock"


@contextmanager
def results_lock(out_dir: Path) -> Iterator[None]:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise ResultsBusy(f"{out_dir}: another run (pid {holder}) is writing results here; wait for it to "
                              "finish, or pass another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        sweep_stale_temporaries(out_dir)  # what a run killed mid-write left; no run writes here but this one
        yield
    finally:
        os.close(fd)  # closing releases the lock
