"""Where a matrix run's time went, read from its results directory before and after the run.

Summed over the cells the run actually ran (a cell whose file kept its start time was reused whole):
each phase a cell records in `phases` (environment, capture, imports), each check's duration by name
(only checks run here: a result reused from another cell or kept from the directory's earlier run
cost nothing now, and is counted instead), and the rest of each cell's time as "other" (capture and
imports overlap, so "other" subtracts the longer of the two; an environment installed ahead of its cell is summed
as `environment_ahead`, outside the cell's time). The files are read as plain JSON, so a
harness that does not record phases or reuse yet is measured too (its environment and capture time then
shows as "other"). With cells in parallel the sums exceed the wall time. Each cell run's own seconds are listed
too, longest first, and each Megatron cell's parts side by side (`megatron_cells`: its phases and checks, the
Megatron-Bridge row's beside the others, and `megatron_bridge_cell`: its seconds against the longest other's, the speed
target that compares them). Cells whose environment could not be
installed (every check an install verdict) are counted apart: they cost seconds, not a run of their checks. Those
that only this runner could not install (`not_installed_here`: every check "install-runner", such as a git source
on a runner without network to it) are named too: a runner that can install them runs their checks, so its matrix
takes longer than this run by their time; the others (conflicting pins) are not installed anywhere.
"""
from __future__ import annotations

import json
from pathlib import Path

from harness.results.install_verdict import FAILURE_CLASS, RUNNER, is_install_class

RUNNER_LIMIT = FAILURE_CLASS[RUNNER]  # "not installable on this runner" (no network to a git source, a pip cap)

# Phases that run at the same time (the check server imports while the environment is captured): the
# cell time they cover together is the longest of them, not their sum.
CONCURRENT = ("capture", "imports")
# Phases spent before the cell started (its environment installed ahead of it: execution/ahead.py): summed like
# the others, but no part of the cell's own time.
BEFORE = ("environment_ahead",)


def _covered(recorded: dict[str, float]) -> float:
    """Cell seconds the recorded phases cover."""
    apart = sum(v for k, v in recorded.items() if k not in CONCURRENT and k not in BEFORE)
    return apart + max((v for k, v in recorded.items() if k in CONCURRENT), default=0.0)


def snapshot(out_dir: Path) -> dict[str, dict]:
    """{cell id: cell file as JSON} of a results directory as it is now; empty when it has none."""
    cells = {}
    for path in sorted((Path(out_dir) / "cells").glob("*.json")):
        if path.name.startswith("."):
            continue  # an atomic write's temporary file
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue  # unreadable: the verdict comparison names it
        cells[str(data.get("cell_id", path.stem))] = data
    return cells


def _count_check(tally: dict[str, dict], name: str, kind: str, seconds: float = 0.0) -> None:
    entry = tally.setdefault(name, {"seconds": 0.0, "ran": 0, "reused": 0, "kept": 0})
    entry[kind] += 1
    entry["seconds"] = round(entry["seconds"] + seconds, 3)


def breakdown(before: dict[str, dict], after: dict[str, dict]) -> dict:
    """The per-phase sums of one run, from the directory's cells before and after it."""
    phases: dict[str, float] = {}
    checks: dict[str, dict] = {}
    cells_run = cells_kept = 0
    not_installed = []  # cells run whose environment could not be installed: no check ran, the time is not theirs
    not_installed_here = []  # of those, the ones only this runner could not install: elsewhere they run, and cost
    cell_seconds: dict[str, float] = {}  # each cell run, longest first: where to look next
    megatron: dict[str, dict] = {}  # each Megatron cell run: its parts
    for cell_id, cell in sorted(after.items()):
        earlier = before.get(cell_id) or {}
        if earlier and earlier.get("started") == cell.get("started"):
            cells_kept += 1
            for check in cell.get("checks") or []:
                _count_check(checks, check["check"], "kept")
            continue
        cells_run += 1
        if cell.get("checks") and all(is_install_class(c.get("failure_class")) for c in cell["checks"]):
            not_installed.append(cell_id)
            if all(c.get("failure_class") == RUNNER_LIMIT for c in cell["checks"]):
                not_installed_here.append(cell_id)
        cell_seconds[cell_id] = round(float(cell.get("duration") or 0), 1)
        recorded = {k: float(v or 0) for k, v in (cell.get("phases") or {}).items()}
        for name, seconds in recorded.items():
            phases[name] = round(phases.get(name, 0.0) + seconds, 3)
        old = {c["check"]: c for c in earlier.get("checks") or []}
        in_checks, ran_here, reused_here = 0.0, {}, []
        for check in cell.get("checks") or []:
            name = check["check"]
            if old.get(name) == check:
                _count_check(checks, name, "kept")
            elif check.get("reused_from"):
                reused_here.append(name)
                _count_check(checks, name, "reused")
            else:
                seconds = float(check.get("duration") or 0)
                in_checks += seconds
                ran_here[name] = round(seconds, 2)
                _count_check(checks, name, "ran", seconds)
        other = max(float(cell.get("duration") or 0) - _covered(recorded) - in_checks, 0.0)
        phases["other"] = round(phases.get("other", 0.0) + other, 3)
        axes = cell.get("axes") or {}
        if axes.get("backend") == "megatron" and cell_id not in not_installed:
            megatron[cell_id] = {"seconds": cell_seconds[cell_id], "megatron_bridge": axes.get("megatron_bridge"),
                                 "phases": {**{k: round(v, 2) for k, v in recorded.items()}, "other": round(other, 2)},
                                 "checks": ran_here, "reused": reused_here}
    return {"cells_run": cells_run, "cells_kept": cells_kept, "cells_not_installed": len(not_installed),
            "not_installed": not_installed, "cells_not_installed_here": len(not_installed_here),
            "not_installed_here": not_installed_here, "phases_s": phases, "checks": checks,
            "checks_reused": sum(c["reused"] for c in checks.values()),
            "cells_s": dict(sorted(cell_seconds.items(), key=lambda item: -item[1])),
            "megatron_cells": dict(sorted(megatron.items(), key=lambda item: -item[1]["seconds"])),
            "megatron_bridge_cell": megatron_bridge_against_others(megatron)}


def megatron_bridge_against_others(megatron_cells: dict) -> dict | None:
    """The Megatron-Bridge cell's seconds against the longest other Megatron cell's, from a run's `megatron_cells`
    (the speed target: no longer than any other Megatron cell); None where the run has no such pair."""
    cells = {cell: entry for cell, entry in (megatron_cells or {}).items() if isinstance(entry, dict)}
    bridge = [(cell, entry["seconds"]) for cell, entry in cells.items() if entry.get("megatron_bridge")]
    others = [(cell, entry["seconds"]) for cell, entry in cells.items() if not entry.get("megatron_bridge")]
    if not bridge or not others:
        return None
    (cell, seconds), (other, longest) = max(bridge, key=lambda i: i[1]), max(others, key=lambda i: i[1])
    return {"cell": cell, "seconds": seconds, "longest_other": other, "longest_other_s": longest,
            "met": seconds <= longest}
