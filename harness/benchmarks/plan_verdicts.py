"""The launch-plans check's verdicts in a matrix bench's Megatron cells, kept with the bench's figures.

docs/launch-plans.md shows, for each shipped plan, whether it would start against each megatron-core release
of the matrix: that table is generated from what this module keeps (harness/docsgen/plans.py), never written by
hand. Kept per megatron-core release, from the cell of that release with the newest transformers (the cell's id
says which), with each verdict's status, message and memory per device as the check recorded them.
"""
from __future__ import annotations

from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.results.records import load_cell

CHECK = "launch-plans"


def _newer(a: str, b: str) -> bool:
    try:
        return Version(a) > Version(b)
    except InvalidVersion:  # a git revision: kept only where nothing else is there
        return False


def from_cells(cells_dir: Path) -> dict:
    """{megatron-core release: {"cell", "transformers", "status", "verdicts": {plan: {...}}}} of the cells in
    `cells_dir` where the check ran with megatron-core (a reused result counts: the same run's verdicts)."""
    kept: dict[str, dict] = {}
    for path in sorted(Path(cells_dir).glob("*.json")):
        cell = load_cell(path)
        release, transformers = cell.axes.get("megatron_core"), cell.axes.get("transformers", "")
        result = next((c for c in cell.checks if c.check == CHECK), None)
        if not release or result is None or not result.verdicts:
            continue
        held = kept.get(release)
        if held is not None and not _newer(transformers, held["transformers"]):
            continue
        kept[release] = {"cell": cell.cell_id, "transformers": transformers, "status": result.status.value,
                         "reused_from": result.reused_from,
                         "verdicts": {v.name: {"status": v.status.value, "message": v.message,
                                               "memory_gib": (v.metrics or {}).get("memory_gib", {}).get("total")}
                                      for v in result.verdicts}}
    return kept
