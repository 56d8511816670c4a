"""A check that leaves a file in its temporary folder, as verl's lock files and torchrun's folders are left, and
records, in the folder TEMP_PROBE_DIR names, where that folder was and which torch.compile settings it was given.
Registered through HARNESS_EXTRA_CHECKS by tests/unit/harness/execution/test_cell_temporary_folder.py."""
import json
import os
import tempfile
from pathlib import Path

from harness.results.records import CheckResult, Status


def run(options):
    handle, left = tempfile.mkstemp(prefix="left-behind-")
    os.close(handle)
    seen = {"tempdir": tempfile.gettempdir(), "left": left, "inductor": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
            "headers": os.environ.get("TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS")}
    (Path(os.environ["TEMP_PROBE_DIR"]) / f"{os.getpid()}.json").write_text(json.dumps(seen))
    return CheckResult("temp-probe", Status.PASS, f"temporary folder {seen['tempdir']}")
