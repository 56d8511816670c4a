"""The import recorder (harness/envs/importrecord.py) in real processes.

Plain processes: what a process imports, what a forked child imports, and what a process killed by a signal
had imported all reach the record; without the variable nothing is recorded.

Under a fork server: a forked check counts what its own code asks for and, for each preloaded package it
touches, what that package asked for in the server (transitively), not everything the server holds. Small
packages written here: `light` and `heavy` are preloaded in that order by `driver` (`heavy` imports `light`,
reads metadata and one entry-point group, sets a submodule up lazily and puts a module into sys.modules without
importing it), `bridge` reaches `heavy`."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.envs import importrecord
from harness.execution.module_providers import read_record

ROOT = Path(__file__).resolve().parents[4]
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the check server forks (Linux)")

PACKAGES = {
    "light_dep.py": "",
    "light/__init__.py": "import light_dep\n",
    "heavy_dep.py": "",
    "heavy_sub_dep.py": "",
    "heavy_late_dep.py": "",
    "heavy/_sub.py": "import heavy_sub_dep\nthing = 1\n",
    "heavy/__init__.py": textwrap.dedent("""\
        import importlib, importlib.metadata
        import sys, types
        import heavy_dep
        sys.modules["heavy_injected"] = types.ModuleType("heavy_injected")  # no import: charged to the step
        import light  # preloaded before: an edge, not a new module
        try:
            importlib.metadata.version("heavy-optional")
        except importlib.metadata.PackageNotFoundError:
            pass
        importlib.metadata.entry_points(group="heavy.backends")  # its plugins, as torch reads its device backends

        def __getattr__(name):  # lazy, as transformers' modules are: imported at first attribute access
            if name == "thing":
                return importlib.import_module("._sub", __name__).thing
            if name == "late":
                return importlib.import_module("heavy_late_dep")
            raise AttributeError(name)
        """),
    "bridge.py": "from heavy import thing\n",
    "fresh_dep.py": "",
    "driver.py": textwrap.dedent("""\
        import sys

        def preload():  # the server's own module asks for the packages: that must not charge them to it
            for module in ("light", "heavy", "bridge"):
                assert sys.modules["_harness_import_record"].RECORDER.preload(module)
        """),
}

SERVER = """
import os, sys
import _harness_import_record as recorder
import driver
driver.preload()
import heavy
heavy.thing  # set up at preload: the child reaches it without an import
assert not recorder.RECORDER.preload("not_installed")
pid = os.fork()
if pid == 0:
    os.environ.pop(recorder.GRAPH_VARIABLE)
    recorder.start(sys.argv[1])
    exec(sys.argv[2])
    if len(sys.argv) > 3:  # a process the check forks (its ranks) records itself too
        if os.fork() == 0:
            exec(sys.argv[3])
            os._exit(0)
        os.wait()
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""

HEAVY = {"heavy", "heavy_dep", "heavy_sub_dep", "heavy_injected", "dist:heavy-optional", "entry-points:heavy.backends"}
LIGHT = {"light", "light_dep"}


def _record(tmp_path: Path, server: str, args: list[str]) -> set[str]:
    """The record of the check that `server` (a script, given the record folder and `args`) forks, with the
    packages above importable."""
    for name, text in PACKAGES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    shutil.copy(importrecord.__file__, tmp_path / f"{importrecord.INSTALLED_AS}.py")
    records = tmp_path / "rec"
    records.mkdir()
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), importrecord.GRAPH_VARIABLE: "1"}
    argv = [sys.executable, "-c", f"import {importrecord.INSTALLED_AS}\n{server}", str(records), *args]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    names = read_record(records)
    assert names is not None
    return names


def _check(tmp_path: Path, code: str, grandchild: str | None = None) -> set[str]:
    """The record of a check running `code`, forked from a server that preloaded light, heavy and bridge."""
    return _record(tmp_path, SERVER, [code] + ([grandchild] if grandchild else []))


def test_a_check_that_touches_one_preloaded_package_counts_it_and_what_it_pulled_in_not_the_others(tmp_path):
    names = _check(tmp_path, "import driver, light")  # the server's driver too, as a check imports its entry point
    assert LIGHT <= names and not names & HEAVY and "bridge" not in names
    assert {"os", "sys"} <= names  # what interpreter start-up held counts for every check


def test_a_preloaded_package_counts_with_what_it_imported_read_and_set_up_lazily(tmp_path):
    names = _check(tmp_path, "from heavy import thing")  # already imported: only the hook sees it
    assert HEAVY | LIGHT <= names  # light: heavy imported it, though it was loaded before heavy
    assert "dist:*" not in names  # heavy's entry-point group counts, not every distribution


def test_a_package_reached_through_another_preloaded_module_counts(tmp_path):
    assert HEAVY | LIGHT | {"bridge"} <= _check(tmp_path, "import importlib; importlib.import_module('bridge')")


def test_what_the_check_itself_imports_reads_or_loads_lazily_counts(tmp_path):
    code = ("import importlib.metadata, importlib.util, fresh_dep\n"
            "importlib.util.find_spec('bridge')\n"
            "try:\n    importlib.metadata.version('check-optional')\nexcept importlib.metadata.PackageNotFoundError:\n"
            "    pass\n")
    names = _check(tmp_path, code)
    assert {"fresh_dep", "dist:check-optional", "bridge"} | HEAVY <= names  # find_spec of a preloaded module


def test_an_import_done_lazily_at_attribute_access_in_the_check_counts(tmp_path):
    assert "heavy_late_dep" in _check(tmp_path, "import heavy\nheavy.late")


def test_a_process_the_check_forks_records_itself_with_what_the_check_asked_for(tmp_path):
    names = _check(tmp_path, "import light", grandchild="import heavy")
    assert len(list((tmp_path / "rec").glob("*.imports"))) == 2
    assert LIGHT | HEAVY <= names


def test_a_recorder_without_the_graph_counts_everything_the_server_held(tmp_path):
    """The fallback (an environment whose recorder predates the graph): over-counting, never under."""
    names = _check(tmp_path, "import sys; sys.modules['_harness_import_record'].RECORDER.forked = False\n"
                             "sys.modules['_harness_import_record'].RECORDER.fd = -1\n"
                             "sys.modules['_harness_import_record'].RECORDER.directory = ''\n"
                             "sys.modules['_harness_import_record'].start(sys.argv[1])")
    assert HEAVY - {"dist:heavy-optional", "entry-points:heavy.backends"} | LIGHT | {"bridge"} <= names


TIER_SERVER = """
import os, sys
import _harness_import_record as recorder
import driver
assert recorder.RECORDER.preload("light")
tier = os.fork()
if tier == 0:  # a tier (forkserver): a server's child that imports heavy on top and forks checks itself
    if sys.argv[3] == "graphing":
        recorder.RECORDER.keep_graphing()
    assert recorder.RECORDER.preload("heavy")
    pid = os.fork()
    if pid == 0:
        os.environ.pop(recorder.GRAPH_VARIABLE)
        recorder.start(sys.argv[1])
        exec(sys.argv[2])
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    os._exit(os.waitstatus_to_exitcode(status))
_, status = os.waitpid(tier, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _tier_check(tmp_path: Path, code: str, graphing: bool = True) -> set[str]:
    """The record of a check running `code`, forked from a tier that imported heavy, forked from a server that
    preloaded light."""
    return _record(tmp_path, TIER_SERVER, [code, "graphing" if graphing else "as-forked"])


def test_a_check_forked_from_a_tier_counts_the_tiers_package_only_where_it_touches_it(tmp_path):
    touching = _tier_check(tmp_path / "a", "from heavy import thing")
    assert HEAVY | LIGHT <= touching
    other = _tier_check(tmp_path / "b", "import light")
    assert LIGHT <= other and not other & HEAVY


def test_a_tier_that_stopped_graphing_would_charge_its_imports_to_every_check(tmp_path):
    """Why the tier calls keep_graphing: the fork made it a check's recorder, which counts what it asks for."""
    assert {"heavy", "heavy_dep"} <= _tier_check(tmp_path, "import light", graphing=False)


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
elif sys.argv[1] == "entry-points":
    import importlib.metadata
    importlib.metadata.entry_points(group="harness.test group")  # as torch reads its device backends
elif sys.argv[1] == "all-entry-points":
    import importlib.metadata
    importlib.metadata.entry_points()  # every group: the whole listing counts
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
    from harness.execution.module_providers import record_this_process
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


def test_a_listing_read_only_for_one_entry_point_group_records_that_group_not_every_distribution(tmp_path):
    assert _run(tmp_path, "entry-points").returncode == 0
    names = read_record(tmp_path / "rec")
    assert "entry-points:harness.test group" in names and "dist:*" not in names


def test_a_listing_of_every_entry_point_records_every_distribution(tmp_path):
    assert _run(tmp_path, "all-entry-points").returncode == 0
    names = read_record(tmp_path / "rec")
    assert "dist:*" in names and not any(name.startswith("entry-points:") for name in names)


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
