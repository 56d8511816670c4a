"""Result records: one `Status` enum, one `CheckResult`, one `CellResult` with its `Source`; their files are written
whole (harness.files, re-exported here for the writers of results).

Everything the harness reports is built from these records; the JSON files under a report
directory are their `to_dict()` form, tagged with `SCHEMA_VERSION`.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.files import write_json_atomic, write_text_atomic  # noqa: F401 - the results' writers

from .install_verdict import of_check

SCHEMA_VERSION = 1


def cell_path(out_dir: Path, cell_id: str) -> Path:
    """Where a cell's result file lives under a report directory."""
    return out_dir / "cells" / f"{cell_id}.json"


def now() -> str:
    """A result's timestamp: UTC, to the second."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Status(str, enum.Enum):  # noqa: UP042 - StrEnum would change str(Status.X), which messages use
    PASS = "pass"
    FAIL = "fail"
    AFFECTED = "affected"  # a known upstream bug reproduced: recorded, not a harness failure
    SKIP = "skip"
    XFAIL = "xfail"  # failed, and declared as a known failure in the matrix file
    TIMEOUT = "timeout"
    CRASH = "crash"
    ERROR = "error"

    @property
    def is_failure(self) -> bool:
        """True where a person must act: the check found a problem or did not finish."""
        return self in (Status.FAIL, Status.TIMEOUT, Status.CRASH, Status.ERROR)


class Source(str, enum.Enum):  # noqa: UP042 - as Status
    """Who wrote a cell result; each source has its folder under a report directory (sources.py)."""

    RUNNER = "runner"  # a runner of the matrix
    PREFLIGHT = "preflight"  # the CPU pre-flight: an install verdict and lock, no check run
    CPU_SIDE = "cpu-side"  # the CPU-side run on the cell's exact wheels: the checks that need no accelerator
    OFFLINE_BOX = "offline-box"  # an air-gapped box's accelerator evidence run (`run --here`)


# install-conflict and install-runner: the cell's environment could not be installed (install_verdict.py).
FAILURE_CLASSES = ("test", "infra", "timeout", "crash", "install-conflict", "install-runner")
NOT_RUN_CLASSES = frozenset(("infra", "install-conflict", "install-runner"))


def did_not_run(result: CheckResult) -> bool:
    """True for a check that never ran: skipped, or its cell could not be set up. Nothing it says is about the
    check, so a known failure neither applies to it nor goes stale by it."""
    if result.status is Status.SKIP:
        return True
    return result.status is Status.ERROR and (result.failure_class in NOT_RUN_CLASSES or of_check(result) is not None)


def classify(status: Status, infra: bool = False) -> str | None:
    """The failure class of an outcome: who has to act on it. None for pass, affected and skip."""
    if status is Status.TIMEOUT:
        return "timeout"
    if status is Status.CRASH:
        return "crash"
    if infra:
        return "infra"
    if status in (Status.FAIL, Status.ERROR, Status.XFAIL):
        return "test"
    return None


@dataclass
class Verdict:
    """One named sub-result of a check (for example the upstream and trainer offload verdicts)."""

    name: str
    status: Status
    message: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    emulated: bool = False  # the verdict comes from an emulation, not real hardware

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status.value, "message": self.message,
                "metrics": self.metrics, "emulated": self.emulated}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        return cls(name=str(data["name"]), status=Status(data["status"]), message=str(data.get("message", "")),
                   metrics=dict(data.get("metrics") or {}), emulated=bool(data.get("emulated", False)))


@dataclass
class CheckResult:
    """What one check found in one cell: a status, the numbers behind it, and where its log is."""

    check: str
    status: Status
    message: str = ""
    duration: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    log: str | None = None  # relative to the report directory
    known_failure: dict[str, Any] | None = None  # the matrix entry that turned a failure into xfail
    original_status: Status | None = None  # the status before a known failure was applied
    failure_class: str | None = None  # test | infra | timeout | crash, for every non-pass outcome
    attempts: list[dict[str, Any]] = field(default_factory=list)  # earlier tries: status and reason
    flaky: bool = False  # failed, then passed on a retry: never shown as a plain pass
    # Reuse (harness/execution/reuse.py): the top-level modules the check's processes imported, by what
    # provided them (stdlib, distribution==version, file:hash or absent -> space-separated names), the
    # distributions among them, the fingerprint a cell must match to reuse this result, and the cell that
    # ran it when it was reused.
    modules: dict[str, str] = field(default_factory=dict)
    loaded: dict[str, str] = field(default_factory=dict)
    fingerprint: str = ""
    reused_from: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["status"] = self.status.value
        data["original_status"] = self.original_status.value if self.original_status else None
        data["verdicts"] = [v.to_dict() for v in self.verdicts]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        original = data.get("original_status")
        return cls(
            check=str(data["check"]),
            status=Status(data["status"]),
            message=str(data.get("message", "")),
            duration=float(data.get("duration", 0.0)),
            metrics=dict(data.get("metrics") or {}),
            verdicts=[Verdict.from_dict(v) for v in data.get("verdicts") or []],
            log=data.get("log"),
            known_failure=data.get("known_failure"),
            original_status=Status(original) if original else None,
            failure_class=data.get("failure_class"),
            attempts=list(data.get("attempts") or []),
            flaky=bool(data.get("flaky", False)),
            modules={str(k): str(v) for k, v in (data.get("modules") or {}).items()},
            loaded={str(k): str(v) for k, v in (data.get("loaded") or {}).items()},
            fingerprint=str(data.get("fingerprint") or ""),
            reused_from=data.get("reused_from"),
        )


@dataclass
class CellResult:
    """Everything recorded for one matrix cell: its axes, environment, lock and check results."""

    matrix: str
    cell_id: str
    axes: dict[str, str]
    tags: list[str] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    lock: str | None = None  # relative to the report directory
    setup_log: str | None = None
    started: str = ""
    finished: str = ""
    duration: float = 0.0
    # Seconds per phase: environment (build and lock), capture (environment capture), imports (the
    # check server's one import of the heavy packages; 0 when the checks ran in fresh interpreters).
    phases: dict[str, float] = field(default_factory=dict)
    # Stamped by sources.load_results: the file's own, else its folder's. Written only when set: the writers
    # leave it out, and the folder they write to says it.
    source: Source | None = None

    def check(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.check == name), None)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["checks"] = [c.to_dict() for c in self.checks]
        if self.source is None:
            del data["source"]
        else:
            data["source"] = self.source.value
        return {"schema_version": SCHEMA_VERSION, **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CellResult:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"schema_version {version!r}, expected {SCHEMA_VERSION}")
        return cls(
            matrix=str(data["matrix"]),
            cell_id=str(data["cell_id"]),
            axes={str(k): str(v) for k, v in dict(data["axes"]).items()},
            tags=[str(t) for t in data.get("tags") or []],
            checks=[CheckResult.from_dict(c) for c in data.get("checks") or []],
            environment=dict(data.get("environment") or {}),
            lock=data.get("lock"),
            setup_log=data.get("setup_log"),
            started=str(data.get("started", "")),
            finished=str(data.get("finished", "")),
            duration=float(data.get("duration", 0.0)),
            phases={str(k): float(v) for k, v in dict(data.get("phases") or {}).items()},
            source=Source(data["source"]) if data.get("source") else None,
        )


STALE_AFTER_S = 600.0  # a temporary file lives for one write; one this old lost its writer


def sweep_stale_temporaries(directory: Path, older_than_s: float = STALE_AFTER_S) -> list[Path]:
    """Remove the temporary files write_text_atomic left in a results directory (its top level, where the run
    and report files are, and its cells/ tree) when its process was killed mid-write (SIGKILL runs no
    cleanup), if older than `older_than_s`: a write under way, such as a report written beside a run, is left
    alone, and so is anything elsewhere (an environment root inside the directory, say). Returns what was
    removed."""
    removed, cutoff = [], time.time() - older_than_s
    directory = Path(directory)
    for path in [*directory.glob(".*.tmp"), *(directory / "cells").rglob(".*.tmp")]:
        try:
            if path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink()
                removed.append(path)
        except OSError:  # gone already, or not ours to remove
            pass
    return removed


def load_cell(path: Path) -> CellResult:
    """Read one cell file; raises ValueError naming the file when it is corrupt. A known failure
    holds only until its expiry date, whenever the result was written: an expired one is undone here."""
    try:
        cell = CellResult.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        cell.checks = [expire_known_failure(c) for c in cell.checks]
        return cell
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path}: not a readable cell result ({exc})") from exc


_EXPIRED_NOTE = re.compile(r" \[known failure expired on \d{4}-\d{2}-\d{2}: [^\]]*\]$")


def expired_note(expires: str, link: str) -> str:
    """What an expired known failure adds to a result's message."""
    return f" [known failure expired on {expires}: {link}]"


def clear_known_failure(result: CheckResult) -> CheckResult:
    """The check's own result, before any known failure was applied to it (so it can be applied
    again from the matrix as it is now: an entry deleted or expired since no longer counts)."""
    if result.original_status is not None:
        result.status, result.original_status = result.original_status, None
    result.known_failure = None
    result.message = _EXPIRED_NOTE.sub("", result.message)
    return result


def expire_known_failure(result: CheckResult, today: dt.date | None = None) -> CheckResult:
    """An `xfail` whose known failure has expired becomes its original failure again."""
    known = result.known_failure
    if result.status is not Status.XFAIL or not known or result.original_status is None:
        return result
    try:
        expires = dt.date.fromisoformat(str(known.get("expires")))
    except ValueError:
        return result
    if (today or dt.date.today()) <= expires:
        return result
    clear_known_failure(result)
    result.message += expired_note(expires.isoformat(), str(known.get("link", "")))
    result.known_failure = {**known, "state": "expired"}
    return result


def kept_results(earlier: CellResult | None, wanted, redo: bool, install_key: str | None = None
                 ) -> dict[str, CheckResult]:
    """The earlier results a run keeps, by check: all but the wanted checks that are redone, and
    the wanted checks that failed for infrastructure reasons (a network or disk problem says nothing about the
    stack: tried again on every run). A check the runner could not install is kept while the cell's inputs and
    the runner are what they were (`install_key`, recorded with the verdict); `redo` tries it again."""
    kept = {c.check: c for c in (earlier.checks if earlier else [])}
    for name in wanted:
        if name in kept and (redo or kept[name].failure_class == "infra"
                             or (kept[name].failure_class == "install-runner"
                                 and (install_key is None or _install_key(kept[name]) != install_key))):
            del kept[name]
    return kept


def _install_key(result: CheckResult) -> str | None:
    install = result.metrics.get("install")
    return install.get("key") if isinstance(install, dict) else None


def combine_checks(wanted, kept: dict[str, CheckResult], fresh) -> list[CheckResult]:
    """A cell's checks after a run: each wanted check, kept from earlier or `fresh(name)`, in order;
    then the earlier results of the checks this run did not want."""
    return [kept.get(name) or fresh(name) for name in wanted] + [c for name, c in kept.items() if name not in wanted]
