"""Building a Report from cell results: one entry per (cell, check), one row per version combination.

The same cells always give the same report. Each text from a result file is cleaned here
(safe_text.clean_text); the values thousands of cells repeat (versions, platforms, messages) are cleaned once
and remembered.

The report is built, and rendered, without the cyclic garbage collector scanning it (`gc_paused`). A
10,000-cell report is about 100,000 small objects without cycles (entries, rows, plot series) next to the
loaded cell results. Made with the collector on, they trigger full scans of that whole heap which find
nothing: a quarter of the time to render the report. Reference counting frees them as usual.
"""
from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from shlex import quote
from typing import Any

from harness.results.install_verdict import of_check
from harness.results.records import CellResult, CheckResult, Status, did_not_run
from harness.results.sources import AWAITS, CPU_SIDE_KEY, CPU_SIDE_LABELS, cpu_side_origin

from . import verl_baseline, verl_rows
from .failure_text import INSTALL_MESSAGE_LIMIT, findings, is_install_failure, raised_here
from .html.plots import convergence_series
from .model import COLUMN_AXES, PACKAGE_AXES, ROW_AXES, Column, Entry, Report, Row, VerdictEntry
from .order import column_order, version_key
from .ranges import pass_ranges
from .safe_text import MESSAGE_LIMIT, PLAIN_LINK, Cleaned, clean_text, safe_link
from .standing_findings import Declarations, standing_findings


def repro_command(cell_id: str, check: str, results_dir: str | None = None) -> str:
    """The `repro` command (harness/rerun/repro.py) the report shows for one entry, quoted for a POSIX shell as
    shlex.join would."""
    # Only the two words from the results need quoting; shlex.quote returns a plain word unchanged after one
    # search (the report builds tens of thousands of these commands).
    text = f"python -m harness repro {quote(cell_id)} --check {quote(check)}"
    return f"{text} --dir {quote(results_dir)}" if results_dir else text


def cpu_side_command(matrix: str, cell_id: str) -> str:
    """What reruns a verdict of the CPU pre-flight on a cell's exact wheels: that pre-flight again, for the cell
    (the same install and the same CPU-only settings), not `repro`, which would run the check on its device."""
    return f"python -m harness cpu-side {quote(f'matrices/{matrix}.toml')} --cells {quote(cell_id)}"


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the body with the collector off, then put what it made straight in the oldest generation."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            # Otherwise the next collection scans every object just made, once more for nothing.
            # freeze + unfreeze moves them without a scan; skipped if the program froze objects itself.
            if not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def reused_mark(cell_id: str) -> tuple[str, str | None]:
    """The cell a reused result came from, and a safe link to that cell's result file."""
    return clean_text(cell_id, 200), safe_link(f"cells/{cell_id}.json")


def _verdicts(check: CheckResult) -> tuple[VerdictEntry, ...]:
    return tuple([VerdictEntry(clean_text(v.name, 100), v.status, clean_text(v.message), bool(v.emulated),
                               findings(v.metrics, clean_text) if "mismatches" in v.metrics else ())
                  for v in check.verdicts])


def _known_failure(data: Any) -> dict[str, str] | None:
    if not isinstance(data, dict):
        return None
    kept = {key: clean_text(data.get(key, ""), 300) for key in ("reason", "link", "expires")}
    if data.get("state"):  # "expired", or "stale: the check no longer fails"
        kept["state"] = clean_text(data["state"], 100)
    return kept


_NO_REPRO = (Status.PASS, Status.SKIP)
# An install-only pre-flight's skip (harness/preflight/store.py): the check awaits a runner, as a CPU-side one does.
_AWAITS = CPU_SIDE_LABELS[AWAITS]


def _entry(cell: CellResult, cell_id: str, lock: str | None, check: CheckResult, column: Column,
           messages: Cleaned) -> Entry:
    raw = check.log
    # safe_link's first test inline: most logs pass it, and then need no escaping in any format (see plain).
    plain_log = raw is None or (raw.__class__ is str and len(raw) <= 1000 and PLAIN_LINK.fullmatch(raw) is not None)
    log = raw if plain_log else safe_link(raw)
    # The empty tuple is shared: no new object for the many entries without rejected links or verdicts.
    rejected = () if (log or not check.log) and (lock or not cell.lock) else \
        tuple([clean_text(raw, 120) for raw, safe in ((check.log, log), (cell.lock, lock)) if raw and not safe])
    metrics = check.metrics
    emulated = metrics.get("emulated") is True
    has_curve = "reward_curve" in metrics
    verdicts = ()
    if check.verdicts:  # most checks have none: skip the generator work
        verdicts = _verdicts(check)
        emulated = emulated or any(v.emulated for v in verdicts)
        has_curve = has_curve or any("reward_curve" in v.metrics for v in check.verdicts)
    flaky, attempts, original = bool(check.flaky), len(check.attempts), check.original_status
    install = of_check(check) if check.status is Status.ERROR else None
    origin = cpu_side_origin(metrics) if CPU_SIDE_KEY in metrics else \
        _AWAITS if check.status is Status.SKIP and metrics.get("preflight") else None
    message, failure_class, known = check.message, check.failure_class, check.known_failure
    if install is not None:  # one line with the resolver's reason; the resolver's output is in the log
        message, failure_class, known = install.text(), install.failure_class, None
    elif known and did_not_run(check):  # a check that did not run can neither fail as known nor go stale
        known = None
    repro = "" if check.status in _NO_REPRO and not flaky else \
        cpu_side_command(cell.matrix, cell_id) if origin is not None else repro_command(cell_id, column.check)
    series = convergence_series([metrics, *(v.metrics for v in check.verdicts)]) if has_curve else None
    # Where this project's own code raised a failure, the harness is its cause, not the stack.
    cause = raised_here(metrics.get("traceback"), message) if install is None and check.status.is_failure else None
    rare = (not plain_log or verdicts or rejected or emulated or series or repro or flaky or attempts
            or original is not None or known or failure_class or check.reused_from or install or origin or cause)
    # An install failure keeps the resolver's reason whole (it is one line, and comes after uv's command).
    shown = clean_text(message, INSTALL_MESSAGE_LIMIT) if is_install_failure(message) else messages[message]
    return Entry(
        cell_id, column.check, check.status, shown, check.duration, log, lock, rejected,
        verdicts, emulated, _known_failure(known) if known else None, original,
        series, clean_text(failure_class, 20) if failure_class else None, flaky, attempts, None, repro,
        reused_mark(check.reused_from) if check.reused_from else None, not rare, install, origin=origin,
        raised_here=clean_text(cause, 200) if cause else "",
    )


def _environment(cell: CellResult, cleaned: Cleaned) -> dict[str, str]:
    """The parts of a cell's environment capture worth showing next to its row (`cleaned`: limit 200)."""
    shown = {}
    if cell.environment.get("origin"):  # where the row's results come from: the CPU pre-flight, an offline box
        shown["origin"] = clean_text(cell.environment["origin"], 300)
    accelerator = cell.axes.get("device", "cpu") != "cpu"
    # On an accelerator the row says which GPU, driver and torch build gave its results, and when.
    keys = ("python", "target", "os", "cpu", "cuda", *(("driver", "torch") if accelerator else ()), "cann",
            "devices", "image_digest")
    for key in keys:
        value = cell.environment.get(key)
        if isinstance(value, list):
            value = ", ".join(map(str, value))
        if value:
            shown[key] = cleaned[value] if isinstance(value, str) else clean_text(value, 200)
    resolved = cell.environment.get("resolved")
    if isinstance(resolved, list) and resolved:  # "transformers 5.24.0, newest on 2026-11-27" (matrix/newest.py)
        shown["resolved"] = clean_text("; ".join(f"{r.get('axis', '')} {r.get('text', '')}" for r in resolved
                                                 if isinstance(r, dict)), 300)
    if accelerator and cell.finished and not cell.environment.get("preflight"):
        shown["date"] = clean_text(cell.finished[:10], 10)  # when the accelerator ran it
    steps = cell.environment.get("install")
    if isinstance(steps, list) and steps:  # the row's install order: numbered, and longer than other values
        shown["install"] = clean_text(" ".join(f"{n}. {step}" for n, step in enumerate(steps, 1)), 1500)
    if verl_rows.AXIS in cell.axes:  # what is verl's code and what is this project's, and the range it crosses
        shown["verl"] = clean_text(verl_rows.code_split(c.check for c in cell.checks), 1500)
        outside = verl_rows.outside_text(cell.environment.get("outside_range"))
        if outside:
            shown["outside_range"] = clean_text(outside, 600)
    return shown


def build_report(cells: Iterable[CellResult], *, title: str = "", notes: Iterable[str] = (),
                 problems: Iterable[str] = (), changes: dict[tuple[str, str], str] | None = None,
                 last_known_good: Iterable[str] = (), declarations: Declarations | None = None) -> Report:
    """The support table of `cells`; the same cells (and the same [[standing]] `declarations` of their
    matrices, standing_findings.py) always give the same report."""
    with gc_paused():
        return _build_report(cells, title, notes, problems, changes, last_known_good, declarations)


def _build_report(cells: Iterable[CellResult], title: str, notes: Iterable[str], problems: Iterable[str],
                  changes: dict[tuple[str, str], str] | None, last_known_good: Iterable[str],
                  declarations: Declarations | None) -> Report:
    problems = [clean_text(p, 400) for p in problems]
    cells = sorted(cells, key=lambda c: (c.cell_id, c.finished))
    present = set().union(*(c.axes for c in cells))
    axes = [a for a in ROW_AXES if a in present] + sorted(present - set(ROW_AXES) - set(COLUMN_AXES))
    keys = [(tuple([cell.axes.get(a, "") for a in axes]), cell.axes.get("backend", ""), cell.axes.get("model", ""))
            for cell in cells]

    # One cell per (version combination, backend, model): a duplicate keeps the most recently finished.
    if len(set(keys)) == len(keys):
        kept = list(zip(keys, cells))  # no duplicates: already in cell_id order
    else:
        chosen: dict[tuple, CellResult] = {}
        for key, cell in sorted(zip(keys, cells), key=lambda kc: (kc[1].finished, kc[1].cell_id)):
            if key in chosen:
                problems.append(clean_text(f"cell {chosen[key].cell_id} has the same axes as {cell.cell_id}; "
                                           f"showing {cell.cell_id} (finished later)", 400))
            chosen[key] = cell
        kept = sorted(chosen.items(), key=lambda kc: kc[1].cell_id)

    found = standing_findings(kept, declarations)
    baselines = verl_baseline.compare(kept, found.covered, found.findings)  # verl's own tests
    standing_list = found.findings + baselines.findings
    standing, beyond = found.covered | baselines.covered, {**found.beyond, **baselines.beyond}
    everywhere = found.everywhere
    names: dict[tuple[str, str], set[str]] = {}
    for (_, backend, model), cell in kept:
        names.setdefault((backend, model), set()).update([check.check for check in cell.checks])
    column_keys = column_order((b, m, name) for (b, m), group in names.items() for name in group)
    columns = [Column(*(clean_text(x, 60) for x in k)) for k in column_keys]
    column_index: dict[tuple[str, str], dict[str, int]] = {group: {} for group in names}
    for i, (backend, model, name) in enumerate(column_keys):
        column_index[(backend, model)][name] = i

    rows: dict[tuple, Row] = {}
    counts = dict.fromkeys(Status, 0)
    not_installed: Counter = Counter()
    has_emulated = False
    # Messages repeat ("Qwen3.5 unavailable in this transformers version" in every cell of that version).
    axis_text, environment_text, messages = Cleaned(120), Cleaned(200), Cleaned(MESSAGE_LIMIT)
    for (row_key, backend, model), cell in kept:
        row = rows.get(row_key)
        if row is None:
            row = rows[row_key] = Row(tuple([axis_text[v] for v in row_key]), {}, [],
                                      _environment(cell, environment_text))
            if verl_rows.AXIS in cell.axes:
                pins, overrides = verl_rows.install_pins(cell)
                row.requirements = tuple(clean_text(p, 300) for p in pins)
                row.overrides = tuple(clean_text(o, 300) for o in overrides)
        cell_id, lock = clean_text(cell.cell_id, 300), safe_link(cell.lock)
        row.cells.append(cell_id)
        if not cell.checks:
            problems.append(clean_text(f"cell {cell.cell_id} recorded no check results"
                                       + (f" (setup log: {cell.setup_log})" if cell.setup_log else ""), 400))
        index_of, entries = column_index[(backend, model)], row.entries
        for check in cell.checks:
            index = index_of[check.check]
            if index in entries:
                problems.append(clean_text(f"cell {cell.cell_id} has two results for {check.check}; "
                                           "showing the first", 400))
                continue
            entry = entries[index] = _entry(cell, cell_id, lock, check, columns[index], messages)
            if changes is not None:
                entry.change = changes.get((cell.cell_id, check.check))
                entry.plain = entry.plain and not entry.change
            if standing and (cell.cell_id, check.check) in standing:
                entry.standing, entry.plain = True, False
            if (cell.cell_id, check.check) in beyond:
                entry.beyond_standing, entry.plain = clean_text(beyond[(cell.cell_id, check.check)], 400), False
            if everywhere and (cell.cell_id, check.check) in everywhere:
                entry.everywhere, entry.plain = True, False
            if (cell.cell_id, check.check) in baselines.against:
                entry.against_baseline, entry.plain = clean_text(baselines.against[(cell.cell_id, check.check)],
                                                                 600), False
            if entry.install is not None:
                not_installed[entry.install.label] += 1
            else:
                counts[entry.status] += 1
            has_emulated = has_emulated or entry.emulated

    for row in rows.values():  # in column order once here: the renderers then never sort a row
        row.entries = dict(sorted(row.entries.items()))
    # Rank each axis's values once; rows then sort by small integers instead of Version objects.
    ranks = []
    for position, axis in enumerate(axes):
        values = {k[position] for k in rows}
        key = (lambda v: (0 if v else 1, v)) if axis in ("device", "image") else version_key
        ranks.append({v: i for i, v in enumerate(sorted(values, key=key))})
    row_list = [rows[k] for k in sorted(rows, key=lambda k: tuple(r[v] for r, v in zip(ranks, k)))]
    change_counts = None
    if changes is not None:
        # New failures first: the rows that hold one move to the top, in their usual order.
        row_list.sort(key=lambda row: not any(e.change == "new failure" for e in row.entries.values()))
        change_counts = dict(Counter(e.change or "new entry" for row in row_list for e in row.entries.values()))
    return Report(
        title=clean_text(title or "Qwen3.5 RL-stack compatibility report", 200), axes=axes, columns=columns,
        rows=row_list, ranges=pass_ranges([cell for _, cell in kept], [a for a in PACKAGE_AXES if a in axes]),
        summary={s.value: counts[s] for s in Status},
        notes=[clean_text(n, 1000) for n in notes if str(n).strip()], problems=problems,
        cell_count=len(kept), has_emulated=has_emulated, changes=change_counts,
        last_known_good=[clean_text(line, 400) for line in last_known_good],
        standing=standing_list, not_installed=dict(not_installed),
    )
