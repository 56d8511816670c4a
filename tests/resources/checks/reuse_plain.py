"""A check that imports no third-party distribution: its result holds in any cell with the same options.
Registered through HARNESS_EXTRA_CHECKS by tests/e2e/test_reuse_run.py."""
import os
import time

from harness.results.records import CheckResult, Status


def run(options):
    time.sleep(float(os.environ.get("REUSE_PLAIN_SECONDS", "0")))  # long enough for a neighbour cell to catch up
    return CheckResult("plain", Status.PASS, "nothing to import", metrics={"pid": os.getpid()})
