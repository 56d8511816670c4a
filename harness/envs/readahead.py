"""An environment's code read into the page cache before its check server imports it.

A cell environment's files are links into uv's cache. Where that cache was filled earlier (a runner that keeps it,
a machine rebooted since), none of it is in memory, and the check server's first `import torch` pages in
gigabytes of shared libraries a few pages at a time: measured on the development machine (2 cores, torch 2.14.1's
CUDA build), importing torch and transformers took 18.3 s of wall time cold against 3.6 s warm, for 4.9 s of CPU.
Asking the kernel to read every shared library and Python file of the environment first (posix_fadvise
WILLNEED, whole files in large sequential requests) took 3.7 s of wall time and 0.4 s of CPU, and the import then
4.9 s. Run at the end of the install (execution/cell.install_environment), in the thread that installs ahead of
the cell where it is installed ahead (execution/ahead.py), those seconds pass while other cells compute; a cell that
installs its own reads ahead at its start, still sooner than its imports would page the files in. Files already in
memory cost a system call each (0.1 to 0.5 s for an environment in a matrix run). Outcomes do not change: the kernel
only reads what is there earlier; where it cannot (no posix_fadvise, an unreadable file) nothing is read ahead.
"""
from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# What an import reads: shared libraries (`.so`, versioned `.so.N`), sources (a checked-hash .pyc reads its source
# to hash it) and bytecode.
_SUFFIXES = (".so", ".py", ".pyc")


@dataclass(frozen=True)
class ReadAhead:
    files: int
    seconds: float

    def line(self) -> str:
        return f"[harness] read ahead {self.files} files of the environment in {self.seconds:.1f} s"


def wanted(name: str) -> bool:
    return name.endswith(_SUFFIXES) or ".so." in name


def _files(folder: str) -> Iterable[str]:
    for root, _, names in os.walk(folder):  # unreadable folders are skipped; links to folders are not followed
        yield from (os.path.join(root, name) for name in names if wanted(name))


def _advise(path: str) -> bool:
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_WILLNEED)
        return True
    except OSError:
        return False
    finally:
        os.close(descriptor)


def read_ahead(folders: Iterable[Path]) -> ReadAhead:
    """Ask the kernel to read every wanted file under `folders` into memory; how many it was asked for."""
    started = time.perf_counter()
    if not hasattr(os, "posix_fadvise"):  # not Linux: the first import reads as it goes
        return ReadAhead(0, 0.0)
    count = sum(_advise(path) for folder in folders for path in _files(str(folder)))
    return ReadAhead(count, round(time.perf_counter() - started, 2))
