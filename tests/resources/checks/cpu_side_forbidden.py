"""A check that must never run in the CPU pre-flight (it is registered as needing an accelerator): if started, it
leaves a file in the folder CPU_SIDE_PROBE_DIR names and fails. Registered through HARNESS_EXTRA_CHECKS by
tests/unit/harness/preflight/test_cpu_side.py."""
import os
from pathlib import Path

from harness.results.records import CheckResult, Status


def run(options):
    (Path(os.environ["CPU_SIDE_PROBE_DIR"]) / "accelerator-check-ran").write_text("started on the CPU side")
    return CheckResult("gpu-probe", Status.FAIL, "an accelerator check was started by the CPU pre-flight")
