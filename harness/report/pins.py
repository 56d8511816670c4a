"""The "use these pins" answer: per backend, without and with vLLM, the newest stack that passes every check.

A candidate is a grid line (row_verdicts.lines: one version combination on one backend and model) whose
verdict is `works` or `works with the trainer's patches`: no check failed, errored, crashed, timed out or is a
declared known failure, and at least one ran. "Newest" is order.newness_key: the engine packages first (vLLM,
then megatron-core, Megatron-Bridge and mbridge), then transformers, torch and tensordict, then Python; an
absent package is older than any version. The box carries the exact pins as a command to copy: a virtual
environment on the line's Python (when the matrix pinned one), then one install of every pinned package.
The first screen of report.html draws the boxes (html/first_screen.py), report.md lists them (markdown.py).

verl rows come first, one box per verl release (with its extra) and backend: a verl user finds their release
before anything else. Their stacks are not candidates for the other boxes, which speak for this project's trainer.
A verl box prefers a stack inside verl's declared range, and its command is the row's own install: its
requirements in the order the row installed them (`verl[cpu]==0.9.1` first), with the override file of the pins
outside verl's range where the row needed one (verl_rows.py).
"""
from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from harness.matrix.axes import EXTRA_AXES, PACKAGE_AXES, PYTHON_AXIS, VLLM_AXES

from . import verl_rows
from .model import Report
from .order import newness_key
from .row_verdicts import KIND_LABELS, KINDS, Line, lines

PASSING_KINDS = ("works", "patched")
EXTRA = next(e for e, axis in EXTRA_AXES.items() if axis == verl_rows.AXIS)  # "verl_extra"
BACKEND_TITLES = {"fsdp": "FSDP", "megatron": "Megatron"}


@dataclass(slots=True)
class PinsBox:
    title: str
    line: Line | None  # None: no stack of this kind passes every check
    tested: int  # lines of this kind in the report
    pins: list[tuple[str, str]]  # (distribution, version), in the report's axis order
    python: str
    other: list[tuple[str, str]]  # the line's other axes (device, mode, image): not installed, but part of it
    verdicts: list[tuple[str, int]] = field(default_factory=list)  # (verdict label, lines), the report's order
    requirements: tuple[str, ...] = ()  # a verl box: the row's install line, in its order (else built from `pins`)
    overrides: tuple[str, ...] = ()  # a verl box: its pins outside verl's declared range (uv's --override)
    outside: str = ""  # a verl box: "outside verl's declared range: ..." for those pins
    passing: int = 0  # lines of this kind that pass every check (works, or works with the trainer's patches)

    @property
    def chosen(self) -> str:
        """Which of the tested stacks the box holds, each count saying what it counts: 'the one of the 3 tested
        stacks that passes every check', 'the newest of the 2 stacks that pass every check (of 3 tested)'."""
        patches = " with the trainer's patches" if self.line is not None and self.line.verdict.kind != "works" \
            else ""
        if self.tested == 1:
            return f"the one tested stack, which passes every check{patches}"
        if self.passing == 1:
            return f"the one of the {self.tested} tested stacks that passes every check{patches}"
        if self.passing == self.tested:
            return f"the newest of the {self.tested} tested stacks, which all pass every check" + (
                f"; this one{patches}" if patches else "")
        return (f"the newest of the {self.passing} stacks that pass every check (of {self.tested} tested)"
                + (f"; this one{patches}" if patches else ""))

    @property
    def none_passes(self) -> str:
        """'None of the 50 stacks passes every check', or for one stack 'Its one stack does not pass every check'."""
        if self.tested == 1:
            return "Its one stack does not pass every check"
        return f"None of the {self.tested} stacks passes every check"

    @property
    def by_verdict(self) -> str:
        """'awaits a runner (CPU pre-flight only): 40; cannot be installed together: 10': why none passes."""
        return "; ".join(f"{label}: {count}" for label, count in self.verdicts)

    @property
    def command(self) -> str:
        steps = [f"uv venv --python {shlex.quote(self.python)}"] if self.python else []
        if self.overrides:  # the file uv's --override reads: written first, so the lines copy as they are
            steps.append(f"printf '%s\\n' {' '.join(map(shlex.quote, self.overrides))} > overrides.txt")
        words = map(shlex.quote, self.requirements or [f"{name}=={version}" for name, version in self.pins])
        steps.append("uv pip install " + ("--override overrides.txt " if self.overrides else "") + " ".join(words))
        return "\n".join(steps)


def _newness(report: Report, line: Line) -> tuple:
    axes = dict(zip(report.axes, report.rows[line.row].axes))
    return (newness_key(axes),
            axes.get("mode", "") in ("", "sync"),  # among equal versions, the plain loop
            -line.row)


def _title(backend: str, with_vllm: bool, device: str) -> str:
    name = BACKEND_TITLES.get(backend, backend or "no backend")
    return name + (" with vLLM" if with_vllm else "") + (f" on {device}" if device else "")


def pins_boxes(report: Report) -> list[PinsBox]:
    """The verl boxes (one per verl release, extra and backend), then one per (backend, with or without
    vLLM[, device when devices differ]) over the other lines."""
    verl_at = report.axes.index(verl_rows.AXIS) if verl_rows.AXIS in report.axes else None
    every = lines(report)
    verl = [ln for ln in every if verl_at is not None and report.rows[ln.row].axes[verl_at]]
    chosen = set(map(id, verl))
    return _verl_boxes(report, verl, verl_at) + _boxes(report, [ln for ln in every if id(ln) not in chosen])


def _kinds(report: Report, members: list[Line]) -> dict[tuple, list[Line]]:
    """(backend, with vLLM, device when devices differ) -> its lines."""
    vllm_positions = [p for p, axis in enumerate(report.axes) if axis in VLLM_AXES]
    device_at = report.axes.index("device") if "device" in report.axes else None
    devices = {row.axes[device_at] for row in report.rows} if device_at is not None else set()
    kinds: dict[tuple, list[Line]] = {}
    for line in members:
        axes = report.rows[line.row].axes
        device = axes[device_at] if device_at is not None and len(devices) > 1 else ""
        with_vllm = any(axes[p] for p in vllm_positions)
        kinds.setdefault((line.backend, with_vllm, device), []).append(line)
    return kinds


def _box(report: Report, title: str, members: list[Line], best: Line | None) -> PinsBox:
    pins, python, other = [], "", []
    if best is not None:
        for axis, value in zip(report.axes, report.rows[best.row].axes):
            if not value:
                continue
            if axis in PACKAGE_AXES:
                pins.append((PACKAGE_AXES[axis], value))
            elif axis == PYTHON_AXIS:
                python = value
            else:
                other.append((axis, value))
    counts = Counter(ln.verdict.kind for ln in members)
    verdicts = [(KIND_LABELS[kind], counts[kind]) for kind in KINDS if counts[kind]]
    passing = sum(1 for ln in members if ln.verdict.kind in PASSING_KINDS)
    return PinsBox(title, best, len(members), pins, python, other, verdicts, passing=passing)


def _boxes(report: Report, members: list[Line]) -> list[PinsBox]:
    boxes = []
    for (backend, with_vllm, device), kind in sorted(_kinds(report, members).items(), key=lambda kv: (
            kv[0][0] != "fsdp", kv[0][0], kv[0][1], kv[0][2])):
        passing = [ln for ln in kind if ln.verdict.kind in PASSING_KINDS]
        best = max(passing, key=lambda ln: _newness(report, ln)) if passing else None
        boxes.append(_box(report, _title(backend, with_vllm, device), kind, best))
    return boxes


def _verl_boxes(report: Report, members: list[Line], verl_at: int | None) -> list[PinsBox]:
    """One box per verl release (value and extra) and kind of stack: newest release first, git revisions last."""
    extra_at = report.axes.index(EXTRA) if EXTRA in report.axes else None
    releases: dict[tuple[str, str], list[Line]] = {}
    for line in members:
        axes = report.rows[line.row].axes
        releases.setdefault((axes[verl_at], axes[extra_at] if extra_at is not None else ""), []).append(line)
    boxes = []
    for (value, extra), release in sorted(releases.items(), key=lambda kv: (
            kv[0][0].startswith("git+"), [-n for n in _numbers(kv[0][0])], kv[0][0], kv[0][1])):
        for (backend, with_vllm, device), kind in sorted(_kinds(report, release).items(), key=lambda kv: (
                kv[0][0] != "fsdp", kv[0][0], kv[0][1], kv[0][2])):
            passing = [ln for ln in kind if ln.verdict.kind in PASSING_KINDS]
            # inside verl's declared range first: a stack that needs an override is a finding, not a recommendation
            best = max(passing, key=lambda ln: (not report.rows[ln.row].overrides, _newness(report, ln))) \
                if passing else None
            box = _box(report, f"{verl_rows.release_label(value, extra)}: {_title(backend, with_vllm, device)}",
                       kind, best)
            if best is not None:
                row = report.rows[best.row]
                box.requirements, box.overrides = row.requirements, row.overrides
                box.outside = row.environment.get("outside_range", "")
            boxes.append(box)
    return boxes


def _numbers(value: str) -> list[int]:
    """A release's numbers for ordering (0.9.1 -> [0, 9, 1]); [] for anything else."""
    try:
        return list(Version(value).release)
    except InvalidVersion:
        return []


def known_good_stacks(lines: list[str]) -> list[tuple[str, list[str]]]:
    """Report.last_known_good ("backend/model/check: versions (cell, date, ...)") as one entry per stack with
    the columns it holds for: most columns of a run share the same pins."""
    stacks: dict[str, list[str]] = {}
    for line in lines:
        key, _, rest = line.partition(": ")
        stacks.setdefault(rest or key, []).extend([key] if rest else [])
    return list(stacks.items())
