"""User-facing errors, each with its own exit status, and the one place a process's entry point turns them
into one line and that status (`exit_status`). Tracebacks only with HARNESS_DEBUG=1."""
from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable

# Exit statuses that are not errors: every verb ends with DONE when it did its work (a run's check failures are
# in the report, not the status); `check` and `repro`, which run one check and print its result, end with
# CHECK_FAILED when it failed (fail, error, crash, timeout); Ctrl-C or SIGTERM ends a run with INTERRUPTED,
# finished cell files kept.
DONE = 0
CHECK_FAILED = 1
INTERRUPTED = 130


class HarnessError(Exception):
    exit_code = 1


class InputError(HarnessError):
    """Bad input: a malformed matrix file, an unknown axis, key, check or version; exit 2."""

    exit_code = 2


class EnvironmentMissing(HarnessError):
    """The machine lacks what was asked for (an accelerator, a tool); exit 3."""

    exit_code = 3


class ResultsError(HarnessError):
    """A report directory holds nothing readable, or a result file is unusable; exit 4."""

    exit_code = 4


class NewFailures(HarnessError):
    """Raised by `report --fail-on-new` when a run has new failures; exit 5."""

    exit_code = 5


class BaselineChanged(HarnessError):
    """Raised by `report --baseline FILE` when a verdict differs from the committed baseline; exit 6."""

    exit_code = 6


class ResultsBusy(HarnessError):
    """Another run is writing to the same results directory; exit 7."""

    exit_code = 7


class ArgumentParser(argparse.ArgumentParser):
    """argparse's own usage errors as InputError: one line, exit 2."""

    def error(self, message: str):
        raise InputError(f"{self.prog}: {message}")


def _interrupt_on_signals() -> None:
    """SIGTERM (a CI runner cancelling the job) ends the run like Ctrl-C: children are killed,
    finished cell files stay, and the next run finishes the remaining cells. SIGINT does so even when the
    run was started in the background by a non-interactive shell, which starts it with SIGINT ignored
    (Python then installs no handler of its own and a `kill -INT` would be lost)."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def exit_status(entry: Callable[[], int]) -> int:
    """Run a process's entry point (`python -m harness`, a check's process): its exit status, a HarnessError
    said in one line with its own status, and Ctrl-C or SIGTERM ending it with INTERRUPTED."""
    _interrupt_on_signals()
    try:
        return entry()
    except HarnessError as exc:
        if os.environ.get("HARNESS_DEBUG"):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return INTERRUPTED
