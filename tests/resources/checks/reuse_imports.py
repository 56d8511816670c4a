"""A check that looks up mbridge in its own process: its result depends on mbridge's version.
Registered through HARNESS_EXTRA_CHECKS by tests/e2e/test_reuse_run.py."""
import importlib.util
import os

from harness.results.records import CheckResult, Status


def run(options):
    found = importlib.util.find_spec("mbridge") is not None
    return CheckResult("imports", Status.PASS, f"mbridge found: {found}", metrics={"pid": os.getpid()})
