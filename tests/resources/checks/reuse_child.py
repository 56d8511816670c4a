"""A check whose only import of mbridge happens in a child process, as a torchrun rank's would: the
child's record must count. Registered through HARNESS_EXTRA_CHECKS by tests/e2e/test_reuse_run.py."""
import os
import subprocess
import sys

from harness.results.records import CheckResult, Status


def run(options):
    code = "import importlib.util; print(importlib.util.find_spec('mbridge') is not None)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    return CheckResult("child", Status.PASS, f"mbridge found by a child: {found}", metrics={"pid": os.getpid()})
