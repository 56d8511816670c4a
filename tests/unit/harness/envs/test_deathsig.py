"""harness.envs.deathsig: a child asks for its parent-death signal without looking anything up (no dlopen in a forked
child, where another thread's loader lock could hold it forever), and gets the signal asked for."""
import ctypes
import signal
import subprocess
import sys

import pytest

from harness.envs import cellenv, deathsig

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
READ_SIGNAL = ("import ctypes; s = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(s)); "  # PR_GET_PDEATHSIG
               "print(s.value)")


def test_the_child_gets_the_signal_without_looking_up_prctl(monkeypatch):
    def no_lookup(*args, **kwargs):
        raise AssertionError("ctypes.CDLL called in the child")

    monkeypatch.setattr(ctypes, "CDLL", no_lookup)  # the child is forked from this process: it inherits the patch
    done = subprocess.run([sys.executable, "-c", READ_SIGNAL], capture_output=True, text=True, check=True,
                          preexec_fn=cellenv.die_with_parent)
    assert done.stdout.strip() == str(int(signal.SIGKILL))
    done = subprocess.run([sys.executable, "-c", READ_SIGNAL], capture_output=True, text=True, check=True,
                          preexec_fn=lambda: deathsig.on_parent_death(signal.SIGTERM))
    assert done.stdout.strip() == str(int(signal.SIGTERM))
