"""Carry the last published results into a partial run's results, so a nightly run of some cells (a manual
run with `--tags`) publishes, and keeps for the next night, the whole table rather than that subset.

A cell this run did not run is copied from the previous results (its result file and its directory of logs
and lock), and run.json gets a note naming the carried cells, so the report says which results are older.
A cell this run did run is never touched. Only a file that loads as a cell result is carried.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from harness.errors import InputError
from harness.results.records import load_cell, write_json_atomic

NOTE = "Carried from the previous published results, not rerun by this partial run"


def carry(previous: Path, results: Path) -> list[str]:
    """Copy into `results` the cells of `previous` it lacks; their ids, sorted."""
    source, target = Path(previous) / "cells", Path(results) / "cells"
    if not source.is_dir():
        raise InputError(f"{previous}: no cells/ directory to carry from")
    target.mkdir(parents=True, exist_ok=True)
    carried = []
    for path in sorted(source.glob("*.json")):
        if (target / path.name).exists() or path.is_symlink():
            continue
        try:
            cell = load_cell(path)
        except (ValueError, KeyError, TypeError, OSError):
            continue  # not a cell result: the report of the previous run already named it as a problem
        if f"{cell.cell_id}.json" != path.name:
            continue
        own = source / cell.cell_id
        if own.is_dir() and not own.is_symlink():
            shutil.copytree(own, target / cell.cell_id, symlinks=True, dirs_exist_ok=True)
        shutil.copy2(path, target / path.name)  # the result last: a copy cut short leaves no half cell
        carried.append(cell.cell_id)
    if carried:
        _note(Path(results) / "run.json", carried)
    return carried


def _note(run_json: Path, carried: list[str]) -> None:
    try:
        info = json.loads(run_json.read_text(encoding="utf-8")) if run_json.exists() else {}
    except (OSError, json.JSONDecodeError):
        info = {}
    if not isinstance(info, dict):
        info = {}
    notes = info.get("notes") if isinstance(info.get("notes"), list) else []
    info["notes"] = [*notes, {"text": f"{NOTE} ({len(carried)} cells)", "cells": carried}]
    write_json_atomic(run_json, info)
