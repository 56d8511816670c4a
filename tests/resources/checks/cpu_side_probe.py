"""A check that records, in the folder CPU_SIDE_PROBE_DIR names, the device and check part it was started with,
then passes: a test sees how the CPU pre-flight started it. Registered through HARNESS_EXTRA_CHECKS by
tests/unit/harness/preflight/test_cpu_side.py."""
import json
import os
from pathlib import Path

from harness.results.records import CheckResult, Status


def run(options):
    seen = {key: os.environ.get(key) for key in ("HARNESS_DEVICE", "HARNESS_CHECK_PART", "CUDA_VISIBLE_DEVICES")}
    folder = Path(os.environ["CPU_SIDE_PROBE_DIR"])
    (folder / f"ran-{len(list(folder.glob('ran-*')))}.json").write_text(json.dumps(seen))
    return CheckResult("cpu-probe", Status.PASS, f"ran on {seen['HARNESS_DEVICE']}")
