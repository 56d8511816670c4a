"""A check that imports no third-party distribution: its result holds in any cell with the same options.
Registered through HARNESS_EXTRA_CHECKS by tests/test_reuse_run.py."""
import os

from harness.results.records import CheckResult, Status


def run(options):
    return CheckResult("plain", Status.PASS, "nothing to import", metrics={"pid": os.getpid()})
