"""An environment's code read into the page cache before, or while, its check server imports it.

A cell environment's files are links into uv's cache. Where that cache was filled earlier (a runner that keeps it,
a machine rebooted since), none of it is in memory, and the check server's first `import torch` pages in
gigabytes of shared libraries a few pages at a time: measured on the development machine (2 cores, torch 2.14.1's
CUDA build), importing torch and transformers took 18.3 s of wall time cold against 3.6 s warm, for 4.9 s of CPU.
Asking the kernel to read every shared library and Python file of the environment first (posix_fadvise
WILLNEED, whole files in large sequential requests) took 3.7 s of wall time and 0.4 s of CPU, and the import then
4.9 s.

It runs in a thread of its own (`Background`), started when the install ends (execution/cell.install_environment),
and stopped at the cell's end; the cell never waits for it. Where the environment is installed ahead of its cell
(execution/ahead.py), the installing thread waits for it before the next install (so read-aheads do not pile up
beside the cells' imports), usually before the cell starts: those seconds pass while other cells compute. Where a
cell is waiting for its environment, or installs its own, waiting for every file costs it more than its import
needs. Measured on the development machine: importing torch, transformers and the Qwen3.5 modelling in a verl
environment (torch 2.11's CUDA build) read 1.3 of the 5.0 GB read ahead, since the CUDA libraries are mapped but
mostly never touched on a CPU; a matrix run's first cell, which installs its own, spent 16.7 s of its own time
reading ahead before its check server started, and its second, waiting for the install ahead of it, 10.7 s. So the
import runs beside the read-ahead, paging in what it needs at once while the rest streams in. (A read-ahead in the
background for every cell, not waited for by the installing thread, was run once: a cell imported in 35.5 s against
13.7 s the run before, with read-aheads of the same Python's torch beside its import.) Files already in memory cost
a system call each (0.1 to 0.5 s for an environment in a matrix run). Outcomes do not change: the kernel only reads
what is there earlier; where it cannot (no posix_fadvise, an unreadable file) nothing is read ahead.

A cell on any device but CUDA leaves NVIDIA's CUDA libraries out (`cuda_only`: the nvidia-* wheels, all under
site-packages/nvidia, and torch's own CUDA halves, libtorch_cuda*.so and libc10_cuda.so). `import torch` maps them
but runs none of their code on a CPU: measured in the vLLM 0.32 environment (torch 2.13.0's CUDA build), with the
guest's page cache emptied, importing torch, transformers, the Qwen3.5 modelling and vLLM brought 659 MiB of nvidia's
2,696 MiB into memory and 89 of libtorch_cuda's 448, and left 29 of nvidia's 45 libraries untouched (cuDNN's engines,
cusolverMg, nvrtc's alternative). What the loader does read of them the import pages in itself. Read ahead whole,
they were 3.1 of the 5.3 GiB the read-ahead asked for (0.7 GiB of them touched), and on a cold disk those reads
queue ahead of the import's own. The saving on a cold run was not measured apart: a cold disk could not be made on
demand (emptying this machine's page cache leaves the host's).
"""
from __future__ import annotations

import os
import threading
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
    stopped: bool = False  # the cell ended first: the files not reached were left to the import

    def line(self) -> str:
        line = f"[harness] read ahead {self.files} files of the environment in {self.seconds:.1f} s"
        return line + (", stopped at the cell's end" if self.stopped else "")


def wanted(name: str) -> bool:
    return name.endswith(_SUFFIXES) or ".so." in name


def cuda_only(relative: str) -> bool:
    """Whether a file (its path under site-packages, '/'-separated) holds only NVIDIA's CUDA code: the nvidia-*
    wheels' libraries, torch's libtorch_cuda*.so and libc10_cuda.so."""
    top, _, rest = relative.partition("/")
    name = rest.rsplit("/", 1)[-1]
    return top == "nvidia" or (top == "torch" and rest.startswith("lib/")
                               and name.startswith(("libtorch_cuda", "libc10_cuda")))


def _files(folder: str, cuda: bool = True) -> Iterable[str]:
    for root, dirs, names in os.walk(folder):  # unreadable folders are skipped; links to folders are not followed
        if not cuda:
            relative = os.path.relpath(root, folder).replace(os.sep, "/")
            if relative == "nvidia" or relative.startswith("nvidia/"):
                dirs[:] = []  # nothing under it is read ahead: no walk either
                continue
            names = [n for n in names if not cuda_only(f"{relative}/{n}" if relative != "." else n)]
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


def read_ahead(folders: Iterable[Path], stop: threading.Event | None = None, device: str = "cuda") -> ReadAhead:
    """Ask the kernel to read every wanted file under `folders` into memory, until `stop` is set; how many it was
    asked for. On a `device` other than cuda, CUDA's own libraries are left out (`cuda_only`)."""
    started = time.perf_counter()
    if not hasattr(os, "posix_fadvise"):  # not Linux: the first import reads as it goes
        return ReadAhead(0, 0.0)
    count = 0
    for path in (path for folder in folders for path in _files(str(folder), cuda=device == "cuda")):
        if stop is not None and stop.is_set():
            return ReadAhead(count, round(time.perf_counter() - started, 2), stopped=True)
        count += _advise(path)
    return ReadAhead(count, round(time.perf_counter() - started, 2))


class Background:
    """`read_ahead` in a daemon thread of its own, from its construction until `stop`. The system calls release
    the interpreter lock, so the thread that started it goes on at once."""

    def __init__(self, folders: Iterable[Path], device: str = "cuda"):
        self._stop = threading.Event()
        self._done: ReadAhead | None = None
        self._thread = threading.Thread(target=self._run, args=(list(folders), device), name="read-ahead",
                                        daemon=True)
        self._thread.start()

    def _run(self, folders: list[Path], device: str) -> None:
        try:
            self._done = read_ahead(folders, self._stop, device)
        except OSError:  # the read-ahead only ever saves time: an error of its own reads nothing more
            self._done = ReadAhead(0, 0.0)

    def wait(self) -> None:
        """Until every file has been asked for, or `stop`."""
        self._thread.join()

    def stop(self) -> ReadAhead:
        """Stop reading (after the file at hand) and say what was read ahead."""
        self._stop.set()
        self._thread.join()
        return self._done if self._done is not None else ReadAhead(0, 0.0)
