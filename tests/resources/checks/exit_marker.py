"""A module that registers an atexit handler and prints without flushing: a check server that preloads it ends
without the interpreter's shutdown (no handler runs) and still flushes what was printed."""
import atexit
import os
import sys


def _at_exit() -> None:
    with open(os.environ["EXIT_MARKER"], "w") as handle:
        handle.write("the interpreter's shutdown ran\n")


atexit.register(_at_exit)
sys.stdout.write("printed by exit_marker at import\n")  # buffered: the server's stdout is a file, not a terminal
