"""What earlier runs said: last known good, carried across runs, and a committed baseline of verdicts.

Last known good: for each trainer (backend, model) and check, the newest version combination that passed,
with its date and lock, carried across runs in `history.json` (written atomically). "Newest" compares the
package versions axis by axis (order.known_good_key: transformers first, then torch, vLLM, tensordict, ...),
so a pass on newer pins replaces an older one, and a later failure of the newer pins does not erase what is
known to have worked.

The baseline: the pull-request workflow runs a slice of the CPU matrix and compares every (cell, check)
status with matrices/baselines/<name>.json. A change that the pull request does not also make to the baseline
fails the job (`harness report DIR --baseline FILE`, exit 6): a pin bump that breaks a check cannot pass
unnoticed, and one that fixes a check must say so by updating the file, written with
`harness report DIR --write-baseline FILE`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.errors import InputError
from harness.results.records import CellResult, Status, write_json_atomic, write_text_atomic

from .order import KNOWN_GOOD_ORDER, known_good_key

HISTORY_VERSION = 1
GOOD = (Status.PASS, Status.AFFECTED)  # affected: the trainer works; an upstream bug is recorded beside it


def load(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"history_version": HISTORY_VERSION, "last_known_good": {}}
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable history ({exc}); move it away to start a new one") from None
    if not isinstance(data, dict) or data.get("history_version") != HISTORY_VERSION:
        found = data.get("history_version") if isinstance(data, dict) else None
        raise ValueError(f"{path}: history_version {found!r}, expected {HISTORY_VERSION}")
    return data


def update(report_dir: Path, cells: list[CellResult], save: bool = True) -> dict:
    """Merge this run's passes into report_dir/history.json and return the history (without `save`, the file
    is left as it is: `report --format` prints and writes nothing)."""
    path = Path(report_dir) / "history.json"
    data = load(path)
    known: dict = data["last_known_good"]
    for cell in cells:
        lock_text = ""
        if cell.lock and (Path(report_dir) / cell.lock).is_file():
            lock_text = (Path(report_dir) / cell.lock).read_text(encoding="utf-8")
        for check in cell.checks:
            if check.status not in GOOD or check.flaky:
                continue
            entry_key = f"{cell.axes.get('backend', '?')}/{cell.axes.get('model', '?')}/{check.check}"
            versions = {a: cell.axes[a] for a in KNOWN_GOOD_ORDER if a in cell.axes}
            if "image" in cell.axes:
                versions["image"] = cell.axes["image"]
            old = known.get(entry_key)
            newer = old is None or known_good_key(versions) > known_good_key(old["versions"]) or (
                known_good_key(versions) == known_good_key(old["versions"]) and cell.finished >= old.get("date", ""))
            if newer:
                known[entry_key] = {"versions": versions, "cell": cell.cell_id, "matrix": cell.matrix,
                                    "date": cell.finished, "status": check.status.value, "lock": lock_text}
    if save:
        write_json_atomic(path, data)
    return data


def last_known_good_lines(history: dict) -> list[str]:
    """The history's last known good as report lines: "backend/model/check: versions (cell, date, lock size)"."""
    lines = []
    for key, entry in sorted(history.get("last_known_good", {}).items()):
        versions = ", ".join(f"{axis} {value}" for axis, value in entry.get("versions", {}).items())
        lines.append(f"{key}: {versions} (cell {entry.get('cell', '?')}, {entry.get('date', '?')}, "
                     f"{len(str(entry.get('lock', '')).splitlines())} pinned packages in its lock)")
    return lines


BASELINE_SCHEMA = "qwen35-verdict-baseline"
BASELINE_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Difference:
    cell_id: str
    check: str  # "" when the whole cell is new or missing
    expected: str  # a status, or "absent"
    actual: str

    def __str__(self) -> str:
        where = f"{self.cell_id} {self.check}".strip()
        return f"{where}: expected {self.expected}, got {self.actual}"


def verdicts_of(cells: list[CellResult]) -> dict[str, dict[str, str]]:
    """{cell id: {check: status}} of a run, in a fixed order."""
    return {cell.cell_id: {check.check: check.status.value for check in sorted(cell.checks, key=lambda c: c.check)}
            for cell in sorted(cells, key=lambda c: c.cell_id)}


def write_baseline(path: Path | str, cells: list[CellResult], command: str) -> None:
    matrices = sorted({cell.matrix for cell in cells})
    data = {"schema": BASELINE_SCHEMA, "schema_version": BASELINE_SCHEMA_VERSION, "matrix": ", ".join(matrices),
            "written_by": command, "cells": verdicts_of(cells)}
    write_text_atomic(Path(path), json.dumps(data, indent=1) + "\n")


def read_baseline(path: Path | str, matrices: set[str] | None = None) -> dict[str, dict[str, str]]:
    """The baseline's {cell id: {check: status}}; InputError naming the file and what is wrong: not a baseline,
    a status no check can have, or (given the results' `matrices`) written for another matrix."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"--baseline {path}: not a readable baseline ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict) or data.get("schema") != BASELINE_SCHEMA:
        raise InputError(f"--baseline {path}: not a verdict baseline (expected \"schema\": \"{BASELINE_SCHEMA}\")")
    if data.get("schema_version") != BASELINE_SCHEMA_VERSION:
        raise InputError(f"--baseline {path}: schema_version {data.get('schema_version')!r}; this harness reads "
                         f"{BASELINE_SCHEMA_VERSION}")
    cells = data.get("cells")
    if not isinstance(cells, dict) or not all(
            isinstance(checks, dict) and all(isinstance(s, str) for s in checks.values()) for checks in cells.values()):
        raise InputError(f"--baseline {path}: \"cells\" must map cell ids to {{check: status}}")
    known = {status.value for status in Status}
    for cell_id, checks in cells.items():
        for check, status in checks.items():
            if status not in known:
                raise InputError(f"--baseline {path}: cells.{cell_id}.{check}: unknown status {status!r}; expected "
                                 f"one of {', '.join(sorted(known))}")
    written_for = {name.strip() for name in str(data.get("matrix", "")).split(",") if name.strip()}
    if matrices and written_for and not written_for & matrices:
        raise InputError(f"--baseline {path}: written for matrix {', '.join(sorted(written_for))}; these results "
                         f"are of matrix {', '.join(sorted(matrices))}")
    return cells


def differences(expected: dict[str, dict[str, str]], cells: list[CellResult]) -> list[Difference]:
    """Every (cell, check) whose status is not the baseline's, and every cell only one side has."""
    actual = verdicts_of(cells)
    found = []
    for cell_id in sorted(set(expected) | set(actual)):
        if cell_id not in actual:
            found.append(Difference(cell_id, "", "in the baseline", "not run"))
        elif cell_id not in expected:
            found.append(Difference(cell_id, "", "not in the baseline", "run"))
        else:
            want, got = expected[cell_id], actual[cell_id]
            found += [Difference(cell_id, check, want.get(check, "absent"), got.get(check, "absent"))
                      for check in sorted(set(want) | set(got)) if want.get(check) != got.get(check)]
    return found
