"""The test session keeps what the code under test writes to the temporary folder in a folder of its own."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.checks import CheckOptions


def test_a_check_s_default_work_folder_and_a_child_s_temporary_files_stay_in_the_session_s_folder(
        session_temporary_folder, tmp_path):
    assert CheckOptions().work_dir.parent == session_temporary_folder  # not the machine's /tmp
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.mkdtemp())"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(child).parent == session_temporary_folder and os.environ["TMPDIR"] == str(session_temporary_folder)
    assert len(str(session_temporary_folder)) < 40  # short: socket paths made in it must stay under 108 bytes
    assert not tmp_path.is_relative_to(session_temporary_folder)  # pytest's own folders are kept as pytest keeps them
