"""Pre-flight verdicts as cell results, beside a matrix's runner results and never among them.

    DIR/preflight/cells/<cell-id>.json        a CellResult: each of the cell's checks awaits a runner (skip),
                                              or the cell cannot be installed (error, class test)
    DIR/preflight/cells/<cell-id>/lock.txt    the resolved lock for the runner's platform and Python
    DIR/preflight/preflight.json              every cell's verdict, for the nightly's dispatch

A runner run reads and writes only DIR/cells/, so these results never stop a cell from running; the report
shows them for the cells that have no runner result yet (harness/results/sources.py reads them). The nightly dispatches
accelerator jobs only for cells that can install: `installable_jobs` is its job matrix without the cells whose
pre-flight verdict says they cannot (their pre-flight result stands in the report instead).
"""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from harness import checks
from harness.matrix import Cell
from harness.results import install_verdict
from harness.results.records import CellResult, CheckResult, Status, now, write_json_atomic, write_text_atomic

from .resolve import CONFLICT, DISPATCHED, Resolution, Target

FOLDER = "preflight"
SUMMARY = "preflight.json"
RUNNER_WORDS = {"cuda": "GPU runner", "npu": "Ascend runner"}
# The one job of a matrix with no job left to dispatch: GitHub refuses an empty job matrix.
PLACEHOLDER = {"session": "", "matrix": "", "cell": "", "device": "", "runner": "ubuntu-latest", "image": ""}


def origin_line(date: str) -> str:
    """Where the row's results come from, for the report (the result's environment["origin"])."""
    return f"CPU pre-flight on {date}: an install verdict only, no check has run on a runner yet"


def _check_result(name: str, cell: Cell, resolution: Resolution) -> CheckResult:
    if cell.axes["backend"] not in checks.CHECKS[name].backends:
        return CheckResult(name, Status.SKIP, f"not applicable to backend {cell.axes['backend']}")
    metrics = {"preflight": resolution.verdict}
    if resolution.verdict in DISPATCHED:
        runner = RUNNER_WORDS.get(cell.axes["device"], "runner")
        return CheckResult(name, Status.SKIP, f"awaits a {runner}; CPU pre-flight: {resolution.verdict}: "
                           f"{resolution.reason}", metrics=metrics)
    # Not installable: the same install verdict a runner's failed setup carries, so the report counts the row as
    # "cannot be installed together" or "not installable on this runner" (never "broken"), and as not having run
    # the check (so it neither makes nor breaks a standing finding).
    # The reason in the runner's words ("vllm 0.32.0 requires transformers<5.20.0; the row pins 5.23.0") where
    # the resolver's sentence reads as that kind, else the sentence itself.
    kind = install_verdict.CONFLICT if resolution.verdict == CONFLICT else install_verdict.RUNNER
    found = install_verdict.classify(resolution.reason)
    if found is None or found.kind != kind:
        found = install_verdict.InstallVerdict(kind, resolution.reason)
    return CheckResult(name, Status.ERROR, f"{resolution.verdict} (CPU pre-flight): {resolution.reason}",
                       metrics={**metrics, "install": found.to_dict()}, failure_class=found.failure_class)


def cell_result(matrix_name: str, cell: Cell, resolution: Resolution, target: Target, lock: str | None) -> CellResult:
    stamp = now()
    result = CellResult(matrix_name, cell.id, dict(cell.axes), list(cell.tags),
                        [_check_result(name, cell, resolution) for name in cell.checks], lock=lock,
                        started=stamp, finished=stamp, duration=resolution.seconds)
    result.environment = {"preflight": resolution.verdict, "origin": origin_line(stamp[:10]),
                          "target": str(target), **cell.install_record()}
    if resolution.built:
        result.environment["built_on_runner"] = list(resolution.built)
    return result


def write(out_dir: Path, matrix_name: str, done: list[tuple[Cell, Target, Resolution]]) -> Path:
    """Write each cell's result and lock, then the summary; returns the summary's path."""
    base = Path(out_dir) / FOLDER
    summary = []
    for cell, target, resolution in done:
        lock = None
        if resolution.lock:
            lock = f"{FOLDER}/cells/{cell.id}/lock.txt"
            write_text_atomic(Path(out_dir) / lock, resolution.lock)
        write_json_atomic(base / "cells" / f"{cell.id}.json",
                          cell_result(matrix_name, cell, resolution, target, lock).to_dict())
        summary.append({"cell": cell.id, "verdict": resolution.verdict, "reason": resolution.reason,
                        "built": resolution.built, "platform": target.platform, "python": target.python,
                        "lock": lock, "packages": len(resolution.lock.splitlines())})
    path = base / SUMMARY
    fresh = {entry["cell"] for entry in summary}
    kept = [entry for entry in read_summary(path) if entry.get("cell") not in fresh]  # a run of some cells
    write_json_atomic(path, {"matrix": matrix_name, "date": dt.date.today().isoformat(),
                             "cells": sorted(kept + summary, key=lambda entry: str(entry.get("cell")))})
    return path


def read_summary(path: Path) -> list[dict]:
    """The cells of a summary file; [] when it is absent or unreadable (no verdict: nothing is held back)."""
    try:
        cells = json.loads(Path(path).read_text(encoding="utf-8")).get("cells")
    except (OSError, ValueError, AttributeError):
        return []
    return [c for c in cells if isinstance(c, dict)] if isinstance(cells, list) else []


def held_back(results_root: Path, matrix_name: str) -> dict[str, str]:
    """Cell id -> verdict, for the cells of a matrix that the pre-flight found cannot be installed."""
    summary = read_summary(Path(results_root) / matrix_name / FOLDER / SUMMARY)
    return {str(c["cell"]): str(c.get("verdict")) for c in summary
            if "cell" in c and c.get("verdict") not in DISPATCHED}


def installable_jobs(jobs: dict, results_root: Path) -> tuple[dict, list[str]]:
    """(`jobs` without the held-back cells, one line per cell left out). A matrix never pre-flighted keeps
    every job: no verdict is no reason to skip a cell."""
    held: dict[str, dict[str, str]] = {}
    kept, dropped = [], []
    for job in jobs.get("include", []):
        name = job.get("matrix", "")
        if name and name not in held:
            held[name] = held_back(results_root, name)
        verdict = held.get(name, {}).get(job.get("cell", ""))
        if verdict:
            dropped.append(f"{job['cell']}: {verdict} (pre-flight), not dispatched")
        else:
            kept.append(job)
    kept = [job for job in kept if job.get("session")]
    return {"include": kept or [dict(PLACEHOLDER)]}, dropped
