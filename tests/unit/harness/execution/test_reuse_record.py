"""The import recorder in real processes: what a process imports, what a forked child imports, and what a
process killed by a signal had imported all reach the record; without the variable nothing is recorded."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from harness.envs import importrecord
from harness.execution.loaded import read_record

ROOT = Path(__file__).resolve().parents[4]

CHILD = """
import os, signal, sys
import _harness_import_record
import json
if sys.argv[1] == "fork":
    pid = os.fork()
    if pid == 0:
        import csv
        os._exit(0)
    os.waitpid(pid, 0)
elif sys.argv[1] == "metadata":
    import importlib.metadata
    try:
        importlib.metadata.version("no-such-dist")
    except importlib.metadata.PackageNotFoundError:
        pass
    importlib.metadata.packages_distributions()
elif sys.argv[1] == "killed":
    import decimal
    os.kill(os.getpid(), signal.SIGKILL)
"""


FORK_SERVER = """
import os, sys
import json  # what a fork server imports for every check before it forks
pid = os.fork()
if pid == 0:
    os.environ[sys.argv[1]] = sys.argv[2]  # the check's own variables, set in the child
    from harness.execution.runner import record_this_process
    record_this_process()
    import csv
    os._exit(0)
os.waitpid(pid, 0)
"""


def _run(tmp_path, mode: str, record: bool = True, code: str = CHILD) -> subprocess.CompletedProcess:
    shutil.copy(importrecord.__file__, tmp_path / f"{importrecord.INSTALLED_AS}.py")
    (tmp_path / "rec").mkdir(exist_ok=True)
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    if record:
        env[importrecord.VARIABLE] = str(tmp_path / "rec")
    return subprocess.run([sys.executable, "-c", code, mode, str(tmp_path / "rec")], env=env, timeout=60,
                          check=False)


def test_a_process_records_what_it_imports_after_the_recorder_started(tmp_path):
    assert _run(tmp_path, "plain").returncode == 0
    names = read_record(tmp_path / "rec")
    assert {"json", "os", "sys"} <= names and "csv" not in names  # json after the start, os and sys before


def test_a_forked_child_records_into_its_own_file(tmp_path):
    assert _run(tmp_path, "fork").returncode == 0
    assert len(list((tmp_path / "rec").glob("*.imports"))) == 2
    assert "csv" in read_record(tmp_path / "rec")


def test_a_process_that_reads_distribution_metadata_records_which(tmp_path):
    assert _run(tmp_path, "metadata").returncode == 0
    assert {"dist:no-such-dist", "dist:*"} <= read_record(tmp_path / "rec")


def test_a_process_killed_by_a_signal_leaves_what_it_had_imported(tmp_path):
    assert _run(tmp_path, "killed").returncode == -signal.SIGKILL
    assert "decimal" in read_record(tmp_path / "rec")


def test_without_the_variable_nothing_is_recorded(tmp_path):
    assert _run(tmp_path, "plain", record=False).returncode == 0
    assert read_record(tmp_path / "rec") is None


def test_a_check_forked_from_a_server_records_itself_with_what_the_server_had_imported(tmp_path):
    assert _run(tmp_path, importrecord.VARIABLE, record=False, code=FORK_SERVER).returncode == 0
    (only,) = (tmp_path / "rec").glob("*.imports")  # the child's file; the server recorded nothing
    assert {"json", "csv"} <= read_record(tmp_path / "rec")  # preloaded modules count: the check may use them
