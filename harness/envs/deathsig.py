"""A child that dies with the process that started it: Linux's prctl(PR_SET_PDEATHSIG), asked for in the child
(a subprocess's preexec_fn, a forked rank) before anything else runs there.

libc's prctl is looked up here, once, in the parent: looking it up in the child (ctypes.CDLL) calls dlopen,
which can wait forever on the dynamic loader's lock where another thread of the parent held it at the fork (the
harness starts children from several threads at once: cells side by side). The child then only calls it.
"""
from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def on_parent_death(sig: int = signal.SIGKILL) -> None:
    """In a child: have the kernel send `sig` when its parent dies (nothing off Linux)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, int(sig))
