"""Standing findings, and failures that are the same in every row.

A standing finding is a difference with a named upstream component that no row can change (the trainer's tool
parser, which follows verl's, against vLLM's parser: the same cases differ in every vLLM release crossed). The
report states it once, with its cases, instead of calling every row "broken". It is decided per sub-verdict, in
one column (backend, model, check), and a failing sub-verdict is one only when all of these hold:

- the matrix declares that verdict a comparison against a named upstream component, for every cell that ran the
  check (`[[standing]]`, harness/matrix/rules.py StandingRule; the report reads each cell's matrix file);
- its status is `fail` (an `affected` one is no failure: its row reads "works with the trainer's patches" as it
  is); a crash, an error or a timeout never is one, and neither is a failure raised in this project's code
  (failure_text.raised_here);
- it lists its cases (`metrics["mismatches"]`, each with a "case"), and at least one case fails in every cell
  that ran the check, in at least MIN_ROWS rows: those cases are the finding, shown side by side.

A row that fails more cases than those shows its own result (`beyond`), while the rows that fail only the
standing cases do not turn "broken" for it.

Any other failure the same in every row that runs the check (the same status and, with versions (X.Y.Z) masked,
the same message, or the same listed cases) is no standing finding: every such row is broken, and its reason says
"broken in every row" (`everywhere`), naming the file of this project that raised it, where one did. A cell that
did not run the check (skipped, or not installed) says nothing either way.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harness.matrix.rules import StandingRule
from harness.results.records import CellResult, CheckResult, Status, did_not_run

from .failure_text import raised_here

MIN_ROWS = 2
CASES_LIMIT = 20  # cases shown per finding
_VERSION = re.compile(r"\d+\.\d+\.\d+[\w.+-]*")
# Cases keep their newlines (they are multi-line model outputs); other controls, bidi overrides and lone
# surrogates go, as safe_text.clean_text removes them from every other text.
_STRIP = {c: None for c in [*range(9), *range(11, 32), 127, *range(0x80, 0xA0), *range(0x202A, 0x202F),
                            *range(0x2066, 0x206A), *range(0xD800, 0xE000)]}
_FAIL = Status.FAIL.value

STANDING_INTRO = ("Each is a comparison the matrix declares to be against a named upstream component, and the same "
                  "cases fail in every cell that runs it, so it is no row's own: stated once here, not as a broken "
                  "row. A passing range still counts it as failing.")
# Matrix name -> its [[standing]] rules (pipeline.standing_rules reads them from the matrix files).
Declarations = Mapping[str, Sequence[StandingRule]]


@dataclass
class StandingFinding:
    backend: str
    model: str
    check: str
    verdict: str  # the sub-verdict's name
    status: str
    message: str  # from the run (the first cell's), as recorded
    cells: list[str]  # every cell that ran the check
    ours: str = ""  # what the verdict compares, as the matrix names it
    upstream: str = ""  # the upstream component it compares against, as the matrix names it
    cases: list[dict[str, str]] = field(default_factory=list)  # {"case", "input", side: output...}
    log: str | None = None  # the first cell's log

    @property
    def label(self) -> str:
        return f"{self.check}" + (f" {self.verdict}" if self.verdict else "")

    @property
    def compared(self) -> str:
        """"Compares the trainer's parser against vLLM's qwen3_coder tool parser, as the matrix declares"."""
        return f"Compares {self.ours} against {self.upstream}, as the matrix declares"


@dataclass
class Standing:
    """What standing_findings found in a report's cells."""

    findings: list[StandingFinding] = field(default_factory=list)
    covered: set[tuple[str, str]] = field(default_factory=set)  # (cell id, check): failing by standing findings only
    beyond: dict[tuple[str, str], str] = field(default_factory=dict)  # entry -> "sub-verdict: case, case" beyond them
    everywhere: set[tuple[str, str]] = field(default_factory=set)  # entries failing the same way in every row


@dataclass(frozen=True, slots=True)
class _Part:
    status: str
    message: str  # versions masked
    cases: tuple[str, ...] | None
    raised_here: str | None


def _mask(text: str) -> str:
    return _VERSION.sub("X.Y.Z", text)


def _cases(metrics: dict) -> tuple[str, ...] | None:
    """The case names a sub-verdict lists in its mismatches, in their order; None where it lists none."""
    listed = metrics.get("mismatches") if isinstance(metrics, dict) else None
    if not isinstance(listed, list) or not listed:
        return None
    names = [m.get("case") for m in listed if isinstance(m, dict)]
    return tuple(names) if names and all(isinstance(n, str) for n in names) else None


def _part(status: Status, message: str, metrics: dict) -> _Part:
    traceback = metrics.get("traceback") if isinstance(metrics, dict) else None
    return _Part(status.value, _mask(message), _cases(metrics), raised_here(traceback, message))


def _parts(check: CheckResult) -> dict[str, _Part]:
    """The failing parts of a check: sub-verdict name -> its part, and "" for the check itself where it has no
    failing sub-verdict or did not end as a plain `fail` (a crash or an error is the check's, whatever its
    sub-verdicts say)."""
    if not check.status.is_failure:
        return {}
    parts = {v.name: _part(v.status, v.message, v.metrics) for v in check.verdicts if v.status.is_failure}
    if not parts or check.status is not Status.FAIL:
        parts[""] = _part(check.status, check.message, check.metrics)
    return parts


def _shared(values: list[_Part | None]) -> tuple[tuple[str, ...] | None, list[bool]] | None:
    """For one part as every cell has it: (the cases failing in all of them, or None where compared by message;
    whether each cell fails nothing more), or None where nothing of it is the same in every cell."""
    if any(v is None for v in values) or len({v.status for v in values}) != 1:
        return None
    listed = [v.cases for v in values]
    if all(cases is not None for cases in listed):
        common = tuple(c for c in listed[0] if all(c in cases for cases in listed[1:]))
        return (common, [set(cases) == set(common) for cases in listed]) if common else None
    if len({v.message for v in values}) == 1:
        return None, [True] * len(values)
    return None


def declared(declarations: Declarations | None, cell: CellResult, check: str, verdict: str) -> StandingRule | None:
    """The [[standing]] rule of the cell's matrix that covers this verdict of `check` in this cell, if any."""
    rules = (declarations or {}).get(cell.matrix, ())
    return next((rule for rule in rules if rule.covers(check, verdict, cell.axes)), None)


def _cases_shown(check: CheckResult, verdict: str, cases: tuple[str, ...]) -> list[dict[str, str]]:
    """Side-by-side cases from the sub-verdict's metrics (a `mismatches` list), as short texts: only `cases`."""
    metrics = next((v.metrics for v in check.verdicts if v.name == verdict), {})
    listed = [m for m in (metrics.get("mismatches") or []) if isinstance(m, dict) and m.get("case") in cases]
    return [{str(k)[:60].translate(_STRIP): (v if isinstance(v, str) else json.dumps(
        v, ensure_ascii=False, default=str))[:2000].translate(_STRIP) for k, v in mismatch.items()}
        for mismatch in listed[:CASES_LIMIT]]


def _finding(backend: str, model: str, name: str, key: str, cases: tuple[str, ...],
             ran: list[tuple[tuple, CellResult, CheckResult]], rule: StandingRule) -> StandingFinding:
    _, _, first = ran[0]
    source = next(v for v in first.verdicts if v.name == key)
    message = source.message
    if set(cases) != set(_cases(source.metrics) or ()):
        message = f"the same cases fail in every row that runs the check ({len(cases)}): {', '.join(cases)}"
    return StandingFinding(backend, model, name, key, _FAIL, message, sorted(cell.cell_id for _, cell, _ in ran),
                           rule.ours, rule.upstream, _cases_shown(first, key, cases), first.log)


def standing_findings(kept: list[tuple[tuple, CellResult]], declarations: Declarations | None = None) -> Standing:
    """The standing findings of a report's cells (`kept`: ((row key, backend, model), cell) pairs) under the
    matrices' `declarations`, the entries they cover or that fail beyond them, and the entries whose failure is
    the same in every row but no standing finding."""
    columns: dict[tuple[str, str, str], list[tuple[tuple, CellResult, CheckResult]]] = {}
    for (row_key, backend, model), cell in kept:
        for check in cell.checks:
            if not did_not_run(check):
                columns.setdefault((backend, model, check.check), []).append((row_key, cell, check))
    out = Standing()
    for (backend, model, name), ran in columns.items():
        if len({row_key for row_key, _, _ in ran}) < MIN_ROWS:
            continue
        parts = [_parts(check) for _, _, check in ran]
        shared = {key: found for key in parts[0] if (found := _shared([p.get(key) for p in parts]))}
        if not shared:
            continue
        # A check that crashed, errored or timed out anywhere has no standing part, whatever its sub-verdicts said.
        plain_fails = all(check.status is Status.FAIL for _, _, check in ran)
        standing = {}  # sub-verdict -> the rule of the first cell: declared, a fail, with cases, not raised here
        for key, (cases, _) in shared.items():
            rules = [declared(declarations, cell, name, key) for _, cell, _ in ran]
            if plain_fails and key and cases and all(rules) and parts[0][key].status == _FAIL \
                    and not any(p[key].raised_here for p in parts):
                standing[key] = rules[0]
                out.findings.append(_finding(backend, model, name, key, cases, ran, rules[0]))
        for i, ((_, cell, _), p) in enumerate(zip(ran, parts)):
            entry = (cell.cell_id, name)
            if not all(key in shared for key in p):
                continue  # it fails something not every row fails: its own result
            if all(key in standing for key in p):
                extra = [f"{key}: {', '.join(c for c in p[key].cases if c not in shared[key][0])}" for key in p
                         if not shared[key][1][i]]
                if extra:
                    out.beyond[entry] = "; ".join(extra)
                else:
                    out.covered.add(entry)
            elif all(shared[key][1][i] for key in p):
                out.everywhere.add(entry)
    return out
