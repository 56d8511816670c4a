"""User-facing errors, each with its own exit status. Tracebacks only with HARNESS_DEBUG=1."""
from __future__ import annotations

# Exit statuses that are not errors: every verb ends with DONE when it did its work (check failures are in
# the report, not the status); Ctrl-C or SIGTERM ends a run with INTERRUPTED, finished cell files kept.
DONE = 0
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
