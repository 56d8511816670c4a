"""The nightly dispatches accelerator jobs only for cells that can install: a job matrix without the cells
whose pre-flight verdict says they cannot (their pre-flight result stands in the report instead)."""
from __future__ import annotations

from pathlib import Path

from . import verdicts
from .store import FOLDER, SUMMARY, read_summary

PLACEHOLDER = {"session": "", "matrix": "", "cell": "", "device": "", "runner": "ubuntu-latest", "image": ""}


def held_back(results_root: Path, matrix_name: str) -> dict[str, str]:
    """Cell id -> verdict, for the cells of a matrix that the pre-flight found cannot be installed."""
    summary = read_summary(Path(results_root) / matrix_name / FOLDER / SUMMARY)
    return {str(c["cell"]): str(c.get("verdict")) for c in summary
            if "cell" in c and c.get("verdict") not in verdicts.DISPATCHED}


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
