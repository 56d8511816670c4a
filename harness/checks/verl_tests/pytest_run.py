"""One pytest run of verl's suite in the row's interpreter, and its outcome per test file.

pytest runs in the folder source.prepare made, with pytest-xdist's workers, a per-test timeout, the reporter
plugin (reporter.py) and the tools' overlay on its path, the project itself not (the suite's `tests` package
must be verl's). Every process of the run records its imports, as every process of a check does, into a
folder of its own; the records, with the modules each process held at its end (pytest's assertion rewriter
imports plugins ahead of the recorder), are then handed to the check's record without the suite's own `tests`
package, which the release (recorded through `verl`) decides, so a result is reused exactly where the row's
distributions are the same (harness/execution/reuse.py).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.envs.cellenv import die_with_parent
from harness.envs.importrecord import HEADER, INCOMPLETE, VARIABLE

from . import reporter

PLUGIN = "_harness_verl_tests_reporter"
SUITE_PACKAGES = frozenset({"tests", "conftest"})  # the suite's own code, decided by the release
_MISSING = re.compile(r"No module named '([^']+)'")
# The caller's pytest settings and state (PYTEST_ADDOPTS, and an outer xdist worker's PYTEST_XDIST_WORKER, which
# would tell the reporter it is a worker) are not the suite's.
_DROPPED = "PYTEST_"


@dataclass
class FileOutcome:
    passed: int = 0
    failed: int = 0
    errored: int = 0
    skipped: int = 0
    failures: list[dict[str, str]] = field(default_factory=list)  # {"case": test, "first assertion line": ...}
    collect: str = ""  # why the file could not be collected, "" when it was
    missing_module: str = ""  # the module whose absence stopped its collection
    skip_reason: str = ""  # the file skipped itself at import (pytest.importorskip and the like)

    @property
    def ran(self) -> int:
        return self.passed + self.failed + self.errored


@dataclass
class SuiteRun:
    files: dict[str, FileOutcome]
    verl_loaded: list[str]  # the files `import verl` loaded, one per process that imported it
    returncode: int
    seconds: float
    output_tail: str


def first_line(text: str) -> str:
    """The first assertion line of a failure's text (pytest's `E   ` lines), else its last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("E "):
            return line[2:].strip()[:300]
    return lines[-1][:300] if lines else ""


def _file_of(nodeid: str, files: list[str]) -> list[str]:
    """The chosen files a report's node id covers: its own file, or every file under a folder (a conftest's or
    package's collection error)."""
    path = nodeid.split("::", 1)[0]
    if path in files:
        return [path]
    prefix = path.rstrip("/") + "/"
    return [f for f in files if f.startswith(prefix)] if path else list(files)


def outcomes(records: list[dict], files: list[str]) -> dict[str, FileOutcome]:
    """Per chosen file: its tests' outcomes (a test's setup or teardown failing counts as errored), its failures'
    first lines, and why it could not be collected."""
    per = {f: FileOutcome() for f in files}
    tests: dict[str, dict[str, dict]] = {}
    for record in records:
        if record.get("kind") == "test":
            tests.setdefault(record["nodeid"], {})[record["when"]] = record
        elif record.get("kind") == "collect":
            text = record.get("text", "")
            for path in _file_of(record["nodeid"], files):
                entry = per[path]
                if record["outcome"] == "skipped":
                    entry.skip_reason = first_line(text) or "skipped at import"
                elif not entry.collect:
                    missing = _MISSING.search(text)
                    entry.missing_module = missing.group(1) if missing else ""
                    entry.collect = f"missing module {entry.missing_module}" if missing else first_line(text)
    for nodeid, phases in tests.items():
        path = nodeid.split("::", 1)[0]
        if path not in per:
            continue
        entry, name = per[path], nodeid.split("::", 1)[-1]
        failed = next((r for r in phases.values() if r["outcome"] == "failed"), None)
        if failed is not None and failed["when"] == "call" and not failed.get("xfail"):
            entry.failed += 1
            entry.failures.append({"case": name, "first assertion line": first_line(failed.get("text", ""))})
        elif failed is not None:
            entry.errored += 1
            entry.failures.append({"case": name, "first assertion line":
                                   f"error in {failed['when']}: {first_line(failed.get('text', ''))}"})
        elif any(r["outcome"] == "skipped" for r in phases.values()):
            entry.skipped += 1
        elif "call" in phases:
            entry.passed += 1
    return per


def _read_lines(path: Path) -> list[dict]:
    records = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut by a killed process
    return records


def hand_over_records(private: Path, public: Path, held: set[str] = frozenset()) -> None:
    """The suite's import records, into the check's record folder, less the suite's own packages; a record
    that cannot be trusted whole stays untrusted there (the result is then not reused). `held`: the modules the
    run's processes held at their end (the reporter's), which the records lack where pytest's assertion rewriter
    imported them (plugins such as xdist)."""
    if held:
        kept = sorted(held - SUITE_PACKAGES)
        (public / "verl-tests-held.imports").write_text("\n".join([HEADER, *kept]) + "\n", encoding="utf-8")
    for path in sorted(private.glob("*.imports")):
        lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
        whole = lines[0] == HEADER and lines[-1] == "" and not any(line.startswith(INCOMPLETE) for line in lines)
        kept = [line for line in lines[1:] if line and line not in SUITE_PACKAGES] if whole else \
            [f"{INCOMPLETE} verl-tests {path.name}"]
        target = public / f"verl-tests-{path.name}"
        target.write_text("\n".join([HEADER, *kept]) + "\n", encoding="utf-8")


def command(files: list[str], workers: int, timeout: float | None, python: str | None = None,
            basetemp: Path | None = None) -> list[str]:
    """pytest's command line. `basetemp`: the tests' temporary folders there, not in the machine's shared
    pytest-of-<user>, where pytest removes all but the newest three runs' folders, other pytest runs' included
    (measured: 7 s of one cell's run spent deleting a test session's folders)."""
    argv = [python or sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", PLUGIN, "-q",
            "--continue-on-collection-errors", "-o", "console_output_style=classic"]
    if basetemp is not None:
        argv += ["--basetemp", str(basetemp)]
    if workers > 1:  # a file's tests in one worker, in order, as verl's serial CI runs them (reporter.py: own folder)
        argv += ["-n", str(workers), "--dist", "loadfile"]
    if timeout is not None:
        argv += ["--timeout", str(int(timeout))]
    return [*argv, *files]


def run_suite(root: Path, files: list[str], workers: int, timeout: float | None, overlay: Path | None = None,
              environ: dict[str, str] | None = None, log: Path | None = None) -> SuiteRun:
    """pytest on `files` (paths relative to `root`) in this interpreter; reads its reports back."""
    environ = dict(os.environ if environ is None else environ)
    with tempfile.TemporaryDirectory(prefix="verl-tests-run-") as tmp:
        plugins, records = Path(tmp, "plugins"), Path(tmp, "imports")
        plugins.mkdir()
        records.mkdir()
        shutil.copyfile(reporter.__file__, plugins / f"{PLUGIN}.py")
        reports = Path(tmp, "reports.jsonl")
        env = {k: v for k, v in environ.items() if not k.startswith(_DROPPED)}
        env.update({"PYTHONPATH": os.pathsep.join(str(p) for p in (overlay, plugins) if p),
                    reporter.VARIABLE: str(reports), "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"})
        public = environ.get(VARIABLE)
        if public:
            env[VARIABLE] = str(records)
        start = time.perf_counter()
        with open(log or os.devnull, "w", encoding="utf-8") as out:
            done = subprocess.run(command(files, workers, timeout, basetemp=Path(tmp, "basetemp")), cwd=root,
                                  env=env, stdout=out, stderr=subprocess.STDOUT, check=False,
                                  preexec_fn=die_with_parent)
        seconds = round(time.perf_counter() - start, 1)
        found = _read_lines(reports)
        if public:
            held = {name for r in found if r.get("kind") == "modules" for name in r.get("names", [])}
            hand_over_records(records, Path(public), held if any(records.iterdir()) else set())
    tail = ""
    if log is not None and log.is_file():
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:])
    verl_loaded = sorted({r["file"] for r in found if r.get("kind") == "verl"})
    return SuiteRun(outcomes(found, files), verl_loaded, done.returncode, seconds, tail)
