"""One pytest run of a (stand-in) verl suite: outcomes per file, a broken helper turning a test red, collection
errors named, and the run's import records handed to the check's record without the suite's own package."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from verl_suite_helpers import BREAKER, fake_sdist, fake_verl

from harness.checks.verl_tests import pytest_run, source
from harness.envs import importrecord
from harness.execution.module_providers import read_record

FILES = ["tests/test_concat_on_cpu.py", "tests/test_math_on_cpu.py", "tests/test_needs_missing_on_cpu.py",
         "tests/utils/test_reads_source_on_cpu.py"]


@pytest.fixture
def suite(tmp_path) -> Path:
    site = fake_verl(tmp_path / "site")
    origin = source.Origin("sdist", "x", fake_sdist(tmp_path / "links"))
    return source.prepare(origin, site / "verl", tmp_path / "suite")


def test_each_file_gets_its_counts_and_a_missing_module_is_named(suite, tmp_path):
    done = pytest_run.run_suite(suite, FILES, workers=2, timeout=None, log=tmp_path / "log")
    files = done.files
    assert (files["tests/test_concat_on_cpu.py"].passed, files["tests/test_math_on_cpu.py"].passed) == (2, 2)
    assert files["tests/utils/test_reads_source_on_cpu.py"].passed == 1  # verl's files, read through the link
    missing = files["tests/test_needs_missing_on_cpu.py"]
    assert missing.missing_module == "no_such_module_for_verl_tests" and missing.ran == 0
    assert done.verl_loaded and all(Path(p).resolve() == (tmp_path / "site" / "verl" / "__init__.py").resolve()
                                    for p in done.verl_loaded)


def test_a_broken_verl_helper_fails_the_test_with_its_first_assertion_line(suite, tmp_path):
    (suite / "tests" / "conftest.py").write_text(textwrap.dedent(BREAKER))
    # Run from inside another pytest (an outer xdist worker, options of its own): none of that reaches the suite.
    outer = {**os.environ, "PYTEST_XDIST_WORKER": "gw7", "PYTEST_ADDOPTS": "-x"}
    done = pytest_run.run_suite(suite, FILES[:2], workers=1, timeout=None, environ=outer)
    concat = done.files["tests/test_concat_on_cpu.py"]
    assert (concat.passed, concat.failed) == (1, 1)  # the empty case still passes
    assert concat.failures == [{"case": "test_concat_keeps_order",
                                "first assertion line": "assert [2, 1] == [1, 2]"}]
    assert done.files["tests/test_math_on_cpu.py"].passed == 2 and done.returncode == 1


def test_the_runs_import_records_reach_the_checks_record_without_the_suites_own_package(suite, tmp_path):
    # The cell's .pth line, as a sitecustomize in the overlay: each process of the run records itself.
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    shutil.copyfile(importrecord.__file__, overlay / f"{importrecord.INSTALLED_AS}.py")
    (overlay / "sitecustomize.py").write_text(
        f"import os\nos.environ.get({importrecord.VARIABLE!r}) and __import__({importrecord.INSTALLED_AS!r})\n")
    public = tmp_path / "record"
    public.mkdir()
    pytest_run.run_suite(suite, FILES[:2], workers=2, timeout=None, overlay=overlay,
                         environ={**os.environ, importrecord.VARIABLE: str(public)})
    names = read_record(public)
    assert names is not None and {"pytest", "verl", "xdist"} <= names
    assert "tests" not in names  # decided by the release, which `verl` records
    assert len(list(public.glob("*.imports"))) >= 3  # the controller and both workers


def test_an_untrusted_record_stays_untrusted(tmp_path):
    private, public = tmp_path / "private", tmp_path / "public"
    private.mkdir()
    public.mkdir()
    (private / "1.imports").write_text(f"{importrecord.HEADER}\npytest\ntests\n")
    (private / "2.imports").write_text(f"{importrecord.HEADER}\ntorch")  # cut: no final newline
    pytest_run.hand_over_records(private, public)
    assert read_record(public) is None
    (public / "verl-tests-2.imports").unlink()
    assert read_record(public) == {"pytest"}


def test_outcomes_count_setup_errors_reruns_and_xfails_as_pytest_means_them():
    records = [
        {"kind": "test", "nodeid": "tests/a.py::t1", "when": "setup", "outcome": "failed", "text": "E   boom"},
        {"kind": "test", "nodeid": "tests/a.py::t2", "when": "call", "outcome": "skipped", "xfail": True},
        {"kind": "test", "nodeid": "tests/a.py::t3", "when": "call", "outcome": "passed"},
        {"kind": "test", "nodeid": "tests/a.py::t3", "when": "teardown", "outcome": "passed"},
        {"kind": "collect", "nodeid": "tests/sub", "outcome": "failed", "text": "E   SyntaxError: bad"},
        {"kind": "collect", "nodeid": "tests/b.py", "outcome": "skipped", "text": "Skipped: needs a GPU"},
    ]
    per = pytest_run.outcomes(records, ["tests/a.py", "tests/b.py", "tests/sub/c.py"])
    assert (per["tests/a.py"].errored, per["tests/a.py"].skipped, per["tests/a.py"].passed) == (1, 1, 1)
    assert per["tests/a.py"].failures[0]["first assertion line"] == "error in setup: boom"
    assert per["tests/sub/c.py"].collect == "SyntaxError: bad" and not per["tests/sub/c.py"].missing_module
    assert per["tests/b.py"].skip_reason == "Skipped: needs a GPU"


def test_the_command_runs_in_parallel_with_a_per_test_timeout_only_when_asked():
    argv = pytest_run.command(["tests/a.py"], workers=4, timeout=300, python="py")
    at = argv.index("-n")
    assert argv[:3] == ["py", "-m", "pytest"] and argv[at:at + 4] == ["-n", "4", "--dist", "loadfile"]
    assert "--timeout" in argv and "--continue-on-collection-errors" in argv and argv[-1] == "tests/a.py"
    assert "-n" not in pytest_run.command(["tests/a.py"], workers=1, timeout=None)


def test_the_suites_temporary_folders_stay_in_the_run_and_other_pytest_runs_folders_are_left_alone(tmp_path):
    """pytest keeps only the newest three numbered folders in the machine's pytest-of-<user> and removes the rest,
    whoever made them: the suite's temporary folders live in the run's own folder instead."""
    import getpass

    files = {"tests/test_tmp_on_cpu.py": """
        import os

        def test_writes_a_temporary_file(tmp_path):
            (tmp_path / "made").write_text(os.environ.get("TMPDIR", ""))
            print("TMP_PATH", tmp_path)
            assert not str(tmp_path).startswith(os.environ["TMPDIR"] + "/pytest-of-")
        """}
    site = fake_verl(tmp_path / "site")
    suite = source.prepare(source.Origin("sdist", "x", fake_sdist(tmp_path / "links", files)), site / "verl",
                           tmp_path / "suite")
    machine_tmp = tmp_path / "machine-tmp"
    others = machine_tmp / f"pytest-of-{getpass.getuser()}"
    for number in range(1, 6):  # the user's own earlier pytest runs
        (others / f"pytest-{number}" / "kept").mkdir(parents=True)
    log = tmp_path / "log"
    done = pytest_run.run_suite(suite, list(files), workers=1, timeout=None, log=log,
                                environ={**os.environ, "TMPDIR": str(machine_tmp)})
    assert done.files["tests/test_tmp_on_cpu.py"].passed == 1, log.read_text()
    assert sorted(p.name for p in others.iterdir()) == [f"pytest-{n}" for n in range(1, 6)]
    assert all((others / f"pytest-{n}" / "kept").is_dir() for n in range(1, 6))


@pytest.mark.parametrize("workers", [1, 2])
def test_the_suite_is_collected_with_the_collector_paused_and_runs_with_it_running(tmp_path, workers):
    """What collection imports is frozen, not walked by every later collection; the tests see the collector as in a
    plain run (enabled, Python's thresholds), in one process and in each xdist worker."""
    files = {"tests/conftest.py": """
        import gc

        COLLECTING_AT_IMPORT = gc.isenabled()
        """, **{f"tests/test_collector_{n}_on_cpu.py": """
        import gc
        import os

        from conftest import COLLECTING_AT_IMPORT

        def test_the_collector_runs_over_what_the_test_makes():
            assert COLLECTING_AT_IMPORT is False
            assert gc.isenabled() and repr(gc.get_threshold()) == os.environ["FRESH_THRESHOLDS"]
            assert gc.get_freeze_count() > 0
            cycle = []
            cycle.append(cycle)
            assert gc.is_tracked(cycle) and gc.collect() >= 0
        """ for n in (1, 2)}}
    site = fake_verl(tmp_path / "site")
    suite = source.prepare(source.Origin("sdist", "x", fake_sdist(tmp_path / "links", files)), site / "verl",
                           tmp_path / "suite")
    log = tmp_path / "log"
    fresh = subprocess.run([sys.executable, "-c", "import gc; print(repr(gc.get_threshold()))"], check=True,
                           capture_output=True, text=True).stdout.strip()  # this Python's own defaults
    done = pytest_run.run_suite(suite, [f for f in files if "test_collector" in f], workers=workers, timeout=None,
                                log=log, environ={**os.environ, "FRESH_THRESHOLDS": fresh})
    assert [done.files[f].passed for f in files if "test_collector" in f] == [1, 1], log.read_text()


def test_two_workers_writing_one_name_into_the_working_folder_do_not_see_each_others_file(tmp_path):
    """verl's tests/test_protocol_on_cpu.py and tests/test_protocol_v2_on_cpu.py both save and load `test_data.pt`
    in the working folder, and verl runs them one at a time: in two workers at once, one read the other's file and
    failed. Here b overwrites the name between a's write and a's read; each worker must read its own."""
    body = """
        import os
        import time
        from pathlib import Path

        SYNC = Path(os.environ["SYNC_DIR"])


        def _wait_for(name):
            deadline = time.time() + 30
            while not (SYNC / name).exists() and time.time() < deadline:
                time.sleep(0.02)
            assert (SYNC / name).exists(), f"{name} never came: the two files did not run at the same time"


        def test_writes_then_reads_its_own_file():
            if ME == "b":
                _wait_for("a-wrote")
            Path("test_data.pt").write_text(ME)
            (SYNC / f"{ME}-wrote").touch()
            if ME == "a":
                _wait_for("b-wrote")
            assert Path("test_data.pt").read_text() == ME
            (SYNC / f"{ME}-read").touch()
            _wait_for("b-read" if ME == "a" else "a-read")
        """
    files = {f"tests/test_{me}_on_cpu.py": f"ME = {me!r}\n" + textwrap.dedent(body) for me in "ab"}
    site = fake_verl(tmp_path / "site")
    suite = source.prepare(source.Origin("sdist", "x", fake_sdist(tmp_path / "links", files)), site / "verl",
                           tmp_path / "suite")
    (tmp_path / "sync").mkdir()
    log = tmp_path / "log"
    done = pytest_run.run_suite(suite, list(files), workers=2, timeout=None, log=log,
                                environ={**os.environ, "SYNC_DIR": str(tmp_path / "sync")})
    assert [done.files[f].passed for f in files] == [1, 1], log.read_text()
    assert not (suite / "test_data.pt").exists()  # each worker's copy stayed in its own folder
