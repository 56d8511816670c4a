"""A pytest plugin the verl-tests check loads into verl's suite (`-p`): each test's and each file's outcome as
one JSON line, written as it comes, so a run cut short still leaves what it did; and, from each process at its
end, the file `import verl` loaded (the check holds that to the installed release) and the modules it holds.

The collector is paused while pytest collects the suite (its imports: verl, torch, transformers), and what is alive
then is frozen before the tests run (gc.freeze), as the check server does with its preload: the collections that the
imports' allocation triggered, and then every collection during the tests, walked that whole heap. Measured in a verl
0.9.1 row on one core: 24-38 s of CPU for the check without this, 13-15 s with it, every verdict and count the same.
A test sees the collector as it would in a plain run, enabled, with its thresholds; only what import time left alive is
never collected, and gc.get_objects() does not list it.

Under pytest-xdist each worker runs from a folder of its own, which mirrors the suite's folder with links: verl's CI
runs these tests one at a time, and some write fixed names into the working folder (tests/test_protocol_on_cpu.py and
tests/test_protocol_v2_on_cpu.py both save and load `test_data.pt`), so two workers sharing one folder failed each
other's tests, a failure that is not verl's. (The check also keeps a file's tests in one worker, in order.)

Standalone on purpose: it is copied next to the suite and imports only the standard library (pytest calls it).
Under pytest-xdist the workers' reports reach the controller, which alone writes them.
"""
from __future__ import annotations

import gc
import json
import os
import sys

VARIABLE = "HARNESS_VERL_TESTS_REPORTS"
TEXT_LIMIT = 4000
WORKERS_FOLDER = ".xdist-workers"  # in the suite's folder: one working folder per worker


def pytest_load_initial_conftests(early_config, parser, args) -> None:
    """Before pytest imports the suite's first conftest (a `-p` plugin gets this call; importing this module does
    nothing: the harness imports it too)."""
    gc.disable()


def pytest_configure(config) -> None:
    """In an xdist worker, before it collects: into its own working folder (see above). Collection is unaffected:
    pytest resolves the command line's paths against the folder it was started in."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    root = os.getcwd()
    own = os.path.join(root, WORKERS_FOLDER, worker)
    os.makedirs(own, exist_ok=True)
    for name in os.listdir(root):
        link = os.path.join(own, name)
        if name != WORKERS_FOLDER and not os.path.lexists(link):
            os.symlink(os.path.join(root, name), link)
    os.chdir(own)


def pytest_collection_finish(session) -> None:
    gc.freeze()
    gc.enable()


def pytest_unconfigure(config) -> None:  # a run that ended before its collection did (a usage error)
    gc.enable()


def _write(record: dict) -> None:
    path = os.environ.get(VARIABLE)
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())  # one write: lines of processes never interleave
    finally:
        os.close(fd)


def _controller() -> bool:
    return not os.environ.get("PYTEST_XDIST_WORKER")


def _text(report) -> str:
    try:
        return str(report.longreprtext or "")[-TEXT_LIMIT:]
    except Exception:  # noqa: BLE001 - a report whose representation fails still counts
        return ""


def pytest_runtest_logreport(report) -> None:
    if _controller() and report.outcome != "rerun":  # pytest-rerunfailures' earlier tries: the last one counts
        _write({"kind": "test", "nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
                "xfail": hasattr(report, "wasxfail"), "text": _text(report) if report.outcome != "passed" else ""})


def pytest_collectreport(report) -> None:
    if _controller() and report.outcome != "passed":
        _write({"kind": "collect", "nodeid": report.nodeid, "outcome": report.outcome, "text": _text(report)})


def pytest_sessionfinish(session) -> None:
    module = sys.modules.get("verl")
    if module is not None and getattr(module, "__file__", None):
        _write({"kind": "verl", "file": os.path.realpath(module.__file__), "pid": os.getpid()})
    # What this process holds: pytest's assertion rewriter imports the plugins and the suite's modules itself,
    # ahead of the import recorder, which therefore never sees them.
    _write({"kind": "modules", "names": sorted({name.partition(".")[0] for name in list(sys.modules)})})
